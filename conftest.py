"""Root pytest configuration.

The solution notebooks run under nbval with TUTOR_STRICT=1: a check that does not pass raises,
so the cell fails. Unit tests in tests/ switch it off again (see tests/conftest.py).
"""

import os

os.environ["TUTOR_STRICT"] = "1"
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TUTOR_OFFLINE", "1")  # CI has no internet: never wait on a download

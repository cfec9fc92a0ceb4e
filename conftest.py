"""Root pytest configuration (the README's test command is `python -m pytest`).

- Solution notebooks run under nbval with TUTOR_STRICT=1: a check that does not pass raises, so
  its cell fails. Unit tests in tests/ switch it off again (see tests/conftest.py).
- No test waits on the internet (TUTOR_OFFLINE=1). When the seed data set is beside the
  repository (../shared/data/allnames.txt), the notebooks train on it (TUTOR_NAMES).
"""

import os
import pathlib

os.environ["TUTOR_STRICT"] = "1"
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TUTOR_OFFLINE", "1")

_seed = pathlib.Path(__file__).resolve().parent.parent / "shared" / "data" / "allnames.txt"
if _seed.exists():
    os.environ.setdefault("TUTOR_NAMES", str(_seed))

_shakespeare = _seed.parent / "tinyshakespeare.txt"
if _shakespeare.exists():
    os.environ.setdefault("TUTOR_SHAKESPEARE", str(_shakespeare))
# Checks record progress (tutor.course.progress): during tests into a throw-away file, never into the
# user's data directory. Kernels started by nbval and nbclient inherit it.
import tempfile  # noqa: E402

os.environ["TUTOR_PROGRESS_FILE"] = os.path.join(tempfile.mkdtemp(prefix="tutor-progress-"), "progress.json")

import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
ALLNAMES = SHARED / "data" / "allnames.txt"

sys.path.insert(0, str(pathlib.Path(__file__).parent))  # for `import checkkit`


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    """Unit tests look at check results; they must not raise."""
    monkeypatch.delenv("TUTOR_STRICT", raising=False)

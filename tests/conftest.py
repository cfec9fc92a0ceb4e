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


@pytest.fixture
def one_thread():
    """Tiny tensors: one thread is fastest, and far faster on a CPU shared with other jobs. Restores the count after.
    A test module asks for it with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

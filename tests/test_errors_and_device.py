"""User-facing errors are one readable line: a bad TUTOR_DEVICE, a bad names file.

In IPython/Jupyter a TutorError renders through `_render_traceback_`; in a terminal through the
excepthook that `import tutor` installs. Both are tested here for real (a kernel, a subprocess).
"""

import os
import subprocess
import sys

import nbformat
import pytest
import torch
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

import tutor
from conftest import ROOT
from tutor import device as dev
from tutor.errors import DeviceError, TutorError


def _env(**extra):
    env = {**os.environ, "PYTHONPATH": str(ROOT), **extra}
    env.pop("PYTHONSTARTUP", None)
    return env


@pytest.mark.parametrize("value, says", [
    ("gpu", "an NVIDIA GPU is 'cuda'"),
    ("CPU", "did you mean 'cpu'?"),
    ("Cuda", "did you mean 'cuda'?"),
    ("tpu", "is not a device name"),
    ("cuda:", "is not a device name"),
])
def test_a_misspelt_device_is_one_line_listing_valid_values_and_this_machine(monkeypatch, value, says):
    monkeypatch.setenv("TUTOR_DEVICE", value)
    with pytest.raises(DeviceError) as info:
        tutor.get_device()
    message = str(info.value)
    assert "\n" not in message and says in message
    assert "Valid values: cpu, cuda, cuda:N, mps" in message
    assert "this machine has: " in message and message.split("this machine has: ")[1].startswith(
        ", ".join(dev.available_devices()))
    assert isinstance(info.value, ValueError) and isinstance(info.value, TutorError)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda(monkeypatch):
    monkeypatch.setenv("TUTOR_DEVICE", "cuda")
    with pytest.raises(DeviceError, match="asks for CUDA, but this PyTorch sees no NVIDIA GPU"):
        tutor.get_device()


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has MPS")
def test_mps_where_there_is_none(monkeypatch):
    monkeypatch.setenv("TUTOR_DEVICE", "mps")
    with pytest.raises(DeviceError, match="Apple's MPS, which this machine does not have"):
        tutor.get_device()


@pytest.mark.parametrize("value", ["cpu", " cpu ", ""])
def test_valid_or_empty_values(monkeypatch, value):
    monkeypatch.setenv("TUTOR_DEVICE", value)
    device = tutor.get_device()
    assert device.type == ("cpu" if value.strip() else dev.available_devices()[0].split(":")[0])


def test_in_a_terminal_a_tutor_error_is_one_line_and_other_errors_keep_their_traceback():
    bad = subprocess.run([sys.executable, "-c", "import tutor; tutor.get_device()"], capture_output=True,
                         text=True, env=_env(TUTOR_DEVICE="gpu"), timeout=120)
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.strip().count("\n") == 0, bad.stderr
    assert bad.stderr.startswith("DeviceError: TUTOR_DEVICE='gpu' is not a device name")
    other = subprocess.run([sys.executable, "-c", "import tutor; 1 / 0"], capture_output=True, text=True,
                           env=_env(), timeout=120)
    assert "Traceback" in other.stderr and "ZeroDivisionError" in other.stderr


def test_in_a_notebook_a_tutor_error_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("TUTOR_DEVICE", "gpu")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import tutor\ndevice = tutor.get_device()")])
    client = NotebookClient(nb, timeout=120, kernel_name="python3")
    with pytest.raises(CellExecutionError):
        client.execute()
    (error,) = [o for o in nb.cells[0].outputs if o.output_type == "error"]
    assert error.ename == "DeviceError"
    assert len(error.traceback) == 1, error.traceback  # no frames from tutor or torch
    assert error.traceback[0].startswith("DeviceError: TUTOR_DEVICE='gpu' is not a device name")

"""Device selection and seeding.

``torch`` is imported inside the functions: ``import tutor`` (and so ``python -m tutor build`` or ``grade``) stays
fast and does not need it.
"""

import random
import re

from tutor import env
from tutor.errors import DeviceError

VALID_DEVICES = ("cpu", "cuda", "cuda:N", "mps")


def available_devices() -> list[str]:
    """The devices this machine can use, e.g. ``["cuda:0", "cpu"]``."""
    import torch

    found = []
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.append("mps")
    return found + ["cpu"]


def _device_error(value: str, why: str) -> DeviceError:
    valid = ", ".join(VALID_DEVICES)
    here = ", ".join(available_devices())
    return DeviceError(f"TUTOR_DEVICE={value!r} {why}. Valid values: {valid}; this machine has: {here}. "
                       "Unset TUTOR_DEVICE to pick the best one.")


def parse_device(value: str):
    """The ``torch.device`` that ``TUTOR_DEVICE=value`` asks for, or a one-line ``DeviceError``.

    Accepts ``cpu``, ``cuda``, ``cuda:N`` and ``mps`` (lowercase, as PyTorch spells them), and
    only when this machine has that device.
    """
    import torch

    text = value.strip()
    if not re.fullmatch(r"cpu|cuda(:\d+)?|mps", text):
        lower = text.lower()
        if re.fullmatch(r"cpu|cuda(:\d+)?|mps", lower):
            raise _device_error(value, f"is not a device name (did you mean {lower!r}? names are lowercase)")
        if lower in ("gpu", "nvidia", "cuda:"):
            raise _device_error(value, "is not a device name (an NVIDIA GPU is 'cuda')")
        raise _device_error(value, "is not a device name")
    device = torch.device(text)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise _device_error(value, "asks for CUDA, but this PyTorch sees no NVIDIA GPU")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise _device_error(value, f"asks for GPU {device.index}, but there are "
                                       f"{torch.cuda.device_count()}")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None) is not None
                                     and torch.backends.mps.is_available()):
        raise _device_error(value, "asks for Apple's MPS, which this machine does not have "
                                   "(it needs a Mac with Apple silicon)")
    return device


def get_device(verbose: bool = False):
    """The best device here: CUDA, then Apple MPS, then CPU.

    Set the environment variable ``TUTOR_DEVICE`` (``cpu``, ``cuda``, ``cuda:N`` or ``mps``) to
    force one; a value this machine cannot use raises a one-line ``tutor.errors.DeviceError``.
    """
    import torch

    forced = env.text(env.DEVICE)
    if forced:
        device = parse_device(forced)
    elif torch.cuda.is_available():
        device = torch.device("cuda")
    elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        device = torch.device("mps")
    else:
        device = torch.device("cpu")
    if verbose:
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
        print(f"Using device: {device} ({name})")
    return device


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy (if installed) and PyTorch on every device."""
    import torch

    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover
        pass
    torch.manual_seed(seed)  # also seeds CUDA and MPS

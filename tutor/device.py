"""Device selection and seeding."""

import os
import random


def get_device(verbose: bool = False):
    """The best device here: CUDA, then Apple MPS, then CPU.

    Set the environment variable ``TUTOR_DEVICE`` (e.g. ``cpu``) to force one.
    """
    import torch

    forced = os.environ.get("TUTOR_DEVICE")
    if forced:
        device = torch.device(forced)
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

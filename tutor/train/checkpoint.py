"""Checkpoints. ``save_checkpoint``/``load_checkpoint``: the weights and config of a finished GPT (notebook 08).
``save_training_state``/``load_training_state``: everything a run needs to go on exactly where it stopped
(notebook 10, ``python -m tutor.scale --resume``), written atomically with a checksum, and the random generators."""

import io
import random
from dataclasses import asdict
from pathlib import Path

import torch

from tutor.files import sha256, write_atomically
from tutor.train.config import TrainConfig
from tutor.train.loop import History
from tutor.train.models import make_model


def save_checkpoint(path, model, config: TrainConfig, history: History | None = None):
    """Save the weights and the configs needed to rebuild the model (a ``.pt`` file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    torch.save({"model": state, "train_config": asdict(config),
                "val_loss": history.val_loss[-1] if history and history.val_loss else None}, path)
    return path


def load_checkpoint(path, device="cpu"):
    """Rebuild the GPT saved by ``save_checkpoint``; returns ``(model, train_config)``."""
    saved = torch.load(path, map_location=device, weights_only=True)
    config = TrainConfig(**saved["train_config"])
    model = make_model(config, device)
    model.load_state_dict(saved["model"])
    return model, config


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot be used: truncated, corrupted, or not a checkpoint."""


CHECKPOINT_MAGIC = b"tutor-checkpoint v1 sha256="


def save_training_state(path, state: dict, keep_previous: bool = True):
    """Write ``state`` (any ``torch.save``-able dict) to ``path`` atomically, with a checksum.

    ``tutor.files.write_atomically`` writes it: a crash or Ctrl-C while writing leaves the
    previous checkpoint as it was. With ``keep_previous``, the checkpoint being replaced is kept
    as ``<name>.prev.pt``. Returns the path.
    """
    path = Path(path)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    header = CHECKPOINT_MAGIC + sha256(payload).encode() + b"\n"
    write_atomically(path, header + payload, keep_previous=previous_checkpoint(path) if keep_previous else None)
    return path


def previous_checkpoint(path) -> Path:
    """Where ``save_training_state`` keeps the checkpoint it replaced: ``last.pt`` -> ``last.prev.pt``."""
    path = Path(path)
    return path.with_name(path.stem + ".prev" + path.suffix)


def load_training_state(path, map_location="cpu") -> dict:
    """Read a checkpoint written by ``save_training_state``; a ``CheckpointError`` says clearly what
    is wrong with a truncated or corrupted file (and where the previous one is, if there is one)."""
    path = Path(path)
    previous = previous_checkpoint(path)
    advice = f"; the previous checkpoint {previous} is intact: resume from it" if previous.exists() else ""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"cannot read the checkpoint {path}: {e}") from None
    header, _, payload = raw.partition(b"\n")
    if not header.startswith(CHECKPOINT_MAGIC):
        raise CheckpointError(f"{path} is not a checkpoint written by tutor.scale (no header){advice}")
    expected = header[len(CHECKPOINT_MAGIC):].decode("ascii", "replace")
    if sha256(payload) != expected:
        raise CheckpointError(f"{path} is truncated or corrupted (its checksum does not match: "
                              f"{len(raw):,} bytes){advice}")
    return torch.load(io.BytesIO(payload), map_location=map_location, weights_only=False)


def rng_states() -> dict:
    """Every random number generator a training step may use (dropout, sampling)."""
    states = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict) -> None:
    """Put back the generators ``rng_states`` saved."""
    torch.set_rng_state(states["torch"])
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])

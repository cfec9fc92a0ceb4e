"""New names from a trained model (notebook 08), and ``seeded``: sampling with a fixed seed that leaves the
global random generator as it was."""

import torch

from tutor.reference.characters import PAD_X, decode
from tutor.reference.model import generate


class seeded:
    """``with seeded(seed):`` runs with a fixed torch seed (and restores the RNG); ``None`` = no-op."""

    def __init__(self, seed):
        self.seed = seed
        self._fork = None

    def __enter__(self):
        if self.seed is not None:
            self._fork = torch.random.fork_rng(devices=[])
            self._fork.__enter__()
            torch.manual_seed(self.seed)
        return self

    def __exit__(self, *exc):
        if self._fork is not None:
            return self._fork.__exit__(*exc)
        return False


def sample_names(model, n: int = 10, temperature: float = 1.0, top_k=None, seed=None, generate_fn=None):
    """``n`` new names: start from ' ', sample until the next ' ' (or ``max_len`` characters)."""
    generate_fn = generate_fn or generate
    device = next(model.parameters()).device
    start = torch.full((n, 1), PAD_X, dtype=torch.long, device=device)
    with seeded(seed):
        ids = generate_fn(model, start, model.config.max_len, temperature=temperature, top_k=top_k)
    names = []
    for row in ids[:, 1:].tolist():
        text = decode(row)
        names.append(text.split(" ")[0].replace(".", ""))
    return names

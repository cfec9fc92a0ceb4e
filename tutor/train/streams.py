"""Batches of random windows of a long text (notebook 10): an endless, resumable training stream for each rank,
and a fixed set of validation batches."""

import torch

from tutor.reference.scaling_up import get_batch


class RandomWindows:
    """An endless stream of batches of random windows of ``data`` (``get_batch``), from its own
    seeded generator: its ``state_dict()`` is the position in the stream, so a run resumed from a
    checkpoint sees exactly the batches it would have seen.

    Each rank of a data-parallel run gets a different stream (the seed is offset by the rank).
    With ``accum_steps > 1`` every item is a list of that many ``(x, y)`` micro-batches.
    """

    def __init__(self, data, block_size, batch_size, seed=0, rank=0, accum_steps=1, device="cpu"):
        self.data, self.block_size, self.batch_size = data, block_size, batch_size
        self.accum_steps, self.device = accum_steps, torch.device(device)
        self.generator = torch.Generator().manual_seed(seed + 1_000_003 * rank)

    def __iter__(self):
        return self

    def _one(self):
        x, y = get_batch(self.data, self.block_size, self.batch_size, generator=self.generator)
        if self.device.type == "cuda":
            return x.pin_memory().to(self.device, non_blocking=True), y.pin_memory().to(self.device, non_blocking=True)
        return x.to(self.device), y.to(self.device)

    def __next__(self):
        if self.accum_steps == 1:
            return self._one()
        return [self._one() for _ in range(self.accum_steps)]

    def state_dict(self):
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state):
        self.generator.set_state(state["generator"])


def fixed_batches(data, block_size, batch_size, n_batches, seed=1234):
    """``n_batches`` batches of random windows drawn once with a fixed seed: the same validation
    batches at every evaluation (and on every rank), usable as ``evaluate``'s loader."""
    generator = torch.Generator().manual_seed(seed)
    return [get_batch(data, block_size, batch_size, generator=generator) for _ in range(n_batches)]

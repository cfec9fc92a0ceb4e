"""Scaling up: random windows of a long text, the FLOPs of a training step, and averaging
gradients over processes (notebook 10)."""

import torch
import torch.distributed as dist


def get_batch(data, block_size: int, batch_size: int, generator=None):
    """``batch_size`` random windows of ``block_size`` ids from ``data`` (LongTensor ``[N]``).

    Returns ``(x, y)``, both ``[batch_size, block_size]``: ``y`` is ``x`` shifted by one, so
    ``y[b, t]`` is the id that follows ``x[b, t]`` in the text. Offsets are uniform over
    ``0 .. N - block_size - 1`` (the last window whose target still fits).
    """
    offsets = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    x = torch.stack([data[i:i + block_size] for i in offsets.tolist()])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in offsets.tolist()])
    return x, y


def flops_per_token(n_params: int, n_layers: int, d_model: int, block_size: int) -> int:
    """Training FLOPs per token: ``6 N`` for the matrix products of the forward (2 N) and backward
    (4 N) passes, plus ``12 L d T`` for attention over the context (PaLM, appendix B)."""
    return 6 * n_params + 12 * n_layers * d_model * block_size


def average_gradients(model) -> None:
    """Replace every parameter's ``.grad`` by its mean over all processes of the group."""
    world_size = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= world_size

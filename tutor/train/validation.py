"""Validation losses: by position (the loss at every position of a name, and over all but the first letter), and over
a long text read in windows (``mean_loss``, notebook 12)."""

import torch
import torch.nn.functional as F

from tutor.reference.characters import PAD_Y


@torch.no_grad()
def position_losses(model, loader, ignore_index=PAD_Y, max_batches=None):
    """Summed loss and token count at every position: two float64 tensors ``[T_max]``.

    Position 0 predicts the first letter from the start token ' ' alone.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    sums = torch.zeros(0, dtype=torch.float64)
    counts = torch.zeros(0, dtype=torch.float64)
    for i, (x, y) in enumerate(loader):
        if max_batches is not None and i >= max_batches:
            break
        x, y = x.to(device), y.to(device)
        logits = model(x).float()
        loss = F.cross_entropy(logits.transpose(1, 2), y, ignore_index=ignore_index, reduction="none")  # [B, T]
        T = y.shape[1]
        if T > len(sums):
            sums = torch.cat([sums, torch.zeros(T - len(sums), dtype=torch.float64)])
            counts = torch.cat([counts, torch.zeros(T - len(counts), dtype=torch.float64)])
        sums[:T] += loss.sum(dim=0).double().cpu()
        counts[:T] += (y != ignore_index).sum(dim=0).double().cpu()
    model.train(was_training)
    return sums, counts


def val_losses(model, loader, ignore_index=PAD_Y, max_batches=None) -> dict:
    """``{"all": ..., "excluding_first": ...}``: the mean loss over every predicted character, and
    over every one but the first letter (the model is then given the first letter, as in the
    source article)."""
    return losses_from_positions(*position_losses(model, loader, ignore_index, max_batches))


def losses_from_positions(sums, counts) -> dict:
    """``val_losses`` from the output of ``position_losses``."""
    return {
        "all": (sums.sum() / counts.sum().clamp(min=1)).item(),
        "excluding_first": (sums[1:].sum() / counts[1:].sum().clamp(min=1)).item(),
    }


@torch.no_grad()
def mean_loss(model, ids: torch.Tensor, block: int, device=None, max_tokens: int | None = None):
    """The mean cross-entropy (nats per token) of ``model`` predicting every token of ``ids`` [N] but the first,
    read in consecutive windows of ``block + 1`` tokens that share one token (each window predicts ``block``),
    and the number of tokens predicted. ``max_tokens`` stops after that many."""
    device = device or next(model.parameters()).device
    n = len(ids) - 1 if max_tokens is None else min(max_tokens, len(ids) - 1)
    total, count = 0.0, 0
    for start in range(0, n, block):
        window = ids[start:start + min(block, n - start) + 1].to(device)
        logits = model(window[None, :-1])[0].float()
        total += torch.nn.functional.cross_entropy(logits, window[1:], reduction="sum").item()
        count += len(window) - 1
    return total / count, count

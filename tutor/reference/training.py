"""The loss, the learning-rate schedule, one training step and evaluation: the four exercises of
notebook 08, as a good learner would write them. The training engine that runs them (the loop,
presets, fused kernels, checkpoints) lives in ``tutor.train``."""

import math

import torch
import torch.nn.functional as F


def lm_loss(logits, targets, ignore_index):
    """Mean cross-entropy over the targets that are not ``ignore_index``; logits [B, T, V], targets [B, T]."""
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=ignore_index)


def lr_schedule(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
    """Linear warm-up to ``max_lr``, then cosine decay to ``min_lr`` at ``total_steps``."""
    if step < warmup_steps:
        return max_lr * step / warmup_steps
    if step >= total_steps:
        return min_lr
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))


def train_step(model, batch, optimizer, ignore_index, clip=1.0):
    """One optimisation step on ``batch = (x, y)``; returns the loss as a float."""
    device = next(model.parameters()).device
    x, y = (t.to(device) for t in batch)
    optimizer.zero_grad(set_to_none=True)
    loss = lm_loss(model(x), y, ignore_index)
    loss.backward()
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return loss.item()


@torch.no_grad()
def evaluate(model, loader, ignore_index, max_batches=None):
    """Total loss over every real target token divided by their number, in eval mode."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for i, (x, y) in enumerate(loader):
        if max_batches is not None and i >= max_batches:
            break
        x, y = x.to(device), y.to(device)
        logits = model(x)
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                 ignore_index=ignore_index, reduction="sum").item()
        count += (y != ignore_index).sum().item()
    model.train(was_training)
    return total / max(count, 1)

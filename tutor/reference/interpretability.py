"""What a trained model learned (notebook 14): its attention patterns read with forward hooks, the scores that find
previous-token and induction heads (Elhage et al. 2021, Olsson et al. 2022), and one head ablated through a hook.

Every function works on any model whose layers are ``model.blocks[i].attn``, a ``MultiHeadAttention`` (``q_proj``,
``k_proj``, ``out_proj``, ``n_heads``, ``causal``): notebook 07's GPT, GPT-2 loaded by notebook 12, and notebook 14's
attention-only model. None edits the model's code or leaves anything on it.
"""

import contextlib
import math

import torch

from tutor.reference.attention import causal_mask, softmax, split_heads


def attention_pattern(attn, x: torch.Tensor) -> torch.Tensor:
    """The attention probabilities of ``attn`` on its input ``x [B, T, C]``: ``[B, H, T, T]``, row ``i`` of head
    ``h`` the softmax over the keys of ``q_i · k_j / √d_head``, the keys after ``i`` masked out when ``attn.causal``."""
    q = split_heads(attn.q_proj(x), attn.n_heads)  # [B, H, T, d_head]
    k = split_heads(attn.k_proj(x), attn.n_heads)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if attn.causal:
        scores = scores.masked_fill(~causal_mask(x.shape[1], device=x.device), float("-inf"))
    return softmax(scores, dim=-1)


def capture_patterns(model, ids: torch.Tensor, pattern_fn=attention_pattern) -> list[torch.Tensor]:
    """Run ``model(ids)`` once and return every layer's attention pattern, ``pattern_fn(attn, x)`` on the input each
    ``model.blocks[i].attn`` received (a forward pre-hook), in layer order, without gradients. The hooks are removed
    whatever happens, so the model is left as it was."""
    patterns = []

    def keep(attn, args):
        with torch.no_grad():
            patterns.append(pattern_fn(attn, args[0]).detach())

    handles = [block.attn.register_forward_pre_hook(keep) for block in model.blocks]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for handle in handles:
            handle.remove()
    return patterns


def repeated_tokens(batch: int, n: int, vocab_size: int, generator=None, device=None) -> torch.Tensor:
    """``[batch, 2n]`` token ids: ``n`` random tokens, then the same ``n`` again."""
    first = torch.randint(0, vocab_size, (batch, n), generator=generator).to(device)
    return torch.cat([first, first], dim=1)


def previous_token_scores(patterns: list[torch.Tensor]) -> torch.Tensor:
    """``[L, H]``: how much each head attends to the token just before, ``pattern[b, h, i, i - 1]`` averaged over the
    batch and the positions ``i ≥ 1``."""
    scores = []
    for pattern in patterns:
        T = pattern.shape[-1]
        i = torch.arange(1, T, device=pattern.device)
        scores.append(pattern[:, :, i, i - 1].mean(dim=(0, 2)))
    return torch.stack(scores)


def induction_scores(patterns: list[torch.Tensor], n: int) -> torch.Tensor:
    """``[L, H]``: on ``n`` tokens repeated twice, how much each head attends from a token of the second half to the
    token just after its earlier occurrence: ``pattern[b, h, i, i - n + 1]`` averaged over the batch and ``i`` in
    ``[n, 2n)``."""
    scores = []
    for pattern in patterns:
        i = torch.arange(n, 2 * n, device=pattern.device)
        scores.append(pattern[:, :, i, i - n + 1].mean(dim=(0, 2)))
    return torch.stack(scores)


@contextlib.contextmanager
def ablated(model, layer: int, head: int, how: str = "zero"):
    """Inside the block, head ``head`` of layer ``layer`` is replaced: its output (its slice of the input of
    ``out_proj``, before the output projection mixes the heads) becomes zeros (``how="zero"``) or its average over
    the batch (``how="mean"``). The hook is removed on leaving."""
    if how not in ("zero", "mean"):
        raise ValueError(f"how must be 'zero' or 'mean', not {how!r}")
    attn = model.blocks[layer].attn
    d_head = attn.out_proj.in_features // attn.n_heads
    if not 0 <= head < attn.n_heads:
        raise IndexError(f"layer {layer} has heads 0 to {attn.n_heads - 1}, not {head}")
    part = slice(head * d_head, (head + 1) * d_head)

    def replace(module, args):
        z = args[0].clone()  # [B, T, H * d_head], the heads side by side; a copy: the caller's tensor is kept
        z[..., part] = 0.0 if how == "zero" else z[..., part].mean(dim=0, keepdim=True)
        return (z, *args[1:])

    handle = attn.out_proj.register_forward_pre_hook(replace)
    try:
        yield model
    finally:
        handle.remove()


def ablate_head(model, ids: torch.Tensor, layer: int, head: int, how: str = "zero") -> torch.Tensor:
    """``model(ids)``'s logits with head ``head`` of layer ``layer`` ablated (see :func:`ablated`), without gradients;
    the model is left as it was."""
    with ablated(model, layer, head, how), torch.no_grad():
        return model(ids)

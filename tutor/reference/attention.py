"""Attention, from one-hot vectors to multi-head attention (notebooks 01-04), and rotary attention
with a key/value cache (notebook 09). ``MultiHeadAttention`` takes GPT-2's biases and a cache too (notebook 12)."""

import math

import torch
import torch.nn as nn

from tutor.reference.positional import apply_rope

# --- 01: dot-product attention on "laika" ---------------------------------------------


def similarity(x: torch.Tensor) -> torch.Tensor:
    """[..., T, C] -> [..., T, T]: the dot product of every row with every row."""
    return x @ x.transpose(-2, -1)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax along ``dim``: subtract the max before exponentiating."""
    x = x - x.max(dim=dim, keepdim=True).values
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def dot_product_attention(x: torch.Tensor) -> torch.Tensor:
    """[..., T, C] -> [..., T, C]: softmax(x xᵀ) x, each row a weighted average of the rows."""
    return softmax(similarity(x), dim=-1) @ x


# --- 02: queries, keys and values (the mask is completed in 03) -------------------------


def scaled_dot_product_attention(q, k, v, mask=None):
    """q [..., Tq, d_k], k [..., Tk, d_k], v [..., Tk, d_v] -> [..., Tq, d_v].

    ``mask`` is boolean, broadcastable to [..., Tq, Tk]; True means "may attend".
    """
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    return weights @ v


class AttentionHead(nn.Module):
    """One (non-causal) attention head: project to q, k, v, then scaled dot-product attention."""

    def __init__(self, d_model: int, d_head: int):
        super().__init__()
        self.query = nn.Linear(d_model, d_head, bias=False)
        self.key = nn.Linear(d_model, d_head, bias=False)
        self.value = nn.Linear(d_model, d_head, bias=False)

    def forward(self, x):
        q, k, v = self.query(x), self.key(x), self.value(x)
        return scaled_dot_product_attention(q, k, v)


# --- 03: masks ----------------------------------------------------------------------------


def causal_mask(T: int, device=None) -> torch.Tensor:
    """BoolTensor [T, T]: position t may attend to positions 0..t (lower triangle, diagonal included)."""
    return torch.tril(torch.ones(T, T, dtype=torch.bool, device=device))


def padding_mask(ids: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """ids [B, T] -> BoolTensor [B, 1, T]: True for keys that are real tokens, False for padding."""
    return (ids != pad_id).unsqueeze(-2)


# --- 04: multi-head attention -------------------------------------------------------------


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[B, T, C] -> [B, H, T, C/H]; head h gets columns h*d_head:(h+1)*d_head."""
    B, T, C = x.shape
    return x.view(B, T, n_heads, C // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, H, T, d_head] -> [B, T, H*d_head], the inverse of split_heads."""
    B, H, T, d_head = x.shape
    return x.transpose(1, 2).reshape(B, T, H * d_head)


class MultiHeadAttention(nn.Module):
    """H attention heads in parallel on slices of the width, then an output projection."""

    def __init__(self, d_model: int, n_heads: int, causal: bool = True, dropout: float = 0.0, bias: bool = False):
        super().__init__()
        assert d_model % n_heads == 0, "d_model must be divisible by n_heads"
        self.n_heads = n_heads
        self.causal = causal
        # bias=True: GPT-2's projections, which have biases (notebook 12); the course's have none
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.fused = False  # True: the same sums by PyTorch's fused kernel (tutor.train.use_fused_kernels)

    def forward(self, x, mask=None, cache=None, layer: int = 0):
        """``x [B, T, C] -> [B, T, C]``. With a ``KVCache`` (notebook 09's, used by notebook 12 for GPT-2) the new
        keys and values are appended to layer ``layer`` of the cache, and query ``i`` (at absolute position
        ``start + i``) attends over every key held up to its own position."""
        B, T, C = x.shape
        q = split_heads(self.q_proj(x), self.n_heads)  # [B, H, T, d_head]
        k = split_heads(self.k_proj(x), self.n_heads)
        v = split_heads(self.v_proj(x), self.n_heads)
        if cache is not None:
            return self._cached(q, k, v, mask, cache, layer)
        if self.fused:  # scores, mask, softmax and weighted sum in one call (as nanoGPT's flash attention)
            p = self.dropout.p if self.training else 0.0
            if mask is None:
                y = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=self.causal)
            else:
                mask = mask.unsqueeze(-3)  # the head axis
                if self.causal:
                    mask = mask & causal_mask(T, device=x.device)
                y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            return self.out_proj(merge_heads(y))
        if mask is not None:
            mask = mask.unsqueeze(-3)  # add the head axis: [B, 1, T, T] or [1, T, T]
        if self.causal:
            causal = causal_mask(T, device=x.device)
            mask = causal if mask is None else mask & causal
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = self.dropout(softmax(scores, dim=-1))
        return self.out_proj(merge_heads(weights @ v))

    def _cached(self, q, k, v, mask, cache, layer):
        """Attention over every key the cache holds for ``layer``, these T new ones last."""
        T = q.shape[-2]
        k, v = cache.update(layer, k, v)  # [B, H, S, d_head]
        S = k.shape[-2]
        allowed = None
        if self.causal:  # query i sits at position S - T + i and sees keys 0 .. S - T + i
            allowed = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(diagonal=S - T)
        if mask is not None:
            mask = mask.unsqueeze(-3)  # the head axis
            allowed = mask if allowed is None else mask & allowed
        p = self.dropout.p if self.training else 0.0
        if self.fused:
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p)
            return self.out_proj(merge_heads(y))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        weights = self.dropout(softmax(scores, dim=-1))
        return self.out_proj(merge_heads(weights @ v))


# --- 09: rotary attention and the key/value cache -------------------------------------------


class KVCache:
    """The rotated keys and the values every attention layer has seen so far, for fast generation.

    Layer ``l`` holds ``keys[l]`` and ``values[l]``, each ``[B, H, T_seen, d_head]`` (None before
    its first update).
    """

    def __init__(self, n_layers: int):
        self.keys = [None] * n_layers
        self.values = [None] * n_layers

    def update(self, layer: int, k, v):
        """Append k, v [B, H, T, d_head] to ``layer``'s cache; return everything it holds."""
        if self.keys[layer] is None:
            self.keys[layer], self.values[layer] = k, v
        else:
            self.keys[layer] = torch.cat([self.keys[layer], k], dim=-2)
            self.values[layer] = torch.cat([self.values[layer], v], dim=-2)
        return self.keys[layer], self.values[layer]

    @property
    def length(self) -> int:
        """Positions held by every layer: the least over layers (0 for a fresh cache)."""
        return min((0 if k is None else k.shape[-2]) for k in self.keys)


class RotaryAttention(nn.Module):
    """Causal multi-head attention with rotary positions (RoPE) on the queries and keys, no biases.

    With a ``KVCache`` the new keys and values are appended to ``cache`` (at index ``layer``) and the
    queries attend over every key held: query ``i`` (absolute position ``start + i``) sees keys
    ``0 .. start + i``.
    """

    def __init__(self, d_model: int, n_heads: int, theta: float = 10000.0):
        super().__init__()
        assert d_model % n_heads == 0, "d_model must be divisible by n_heads"
        self.n_heads = n_heads
        self.theta = theta
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, positions=None, cache=None, layer: int = 0):
        B, T, C = x.shape
        if positions is None:
            start = cache.length if cache is not None else 0
            positions = torch.arange(start, start + T, device=x.device)
        q = split_heads(self.q_proj(x), self.n_heads)  # [B, H, T, d_head]
        k = split_heads(self.k_proj(x), self.n_heads)
        v = split_heads(self.v_proj(x), self.n_heads)
        q = apply_rope(q, positions, self.theta)  # rotate every head's queries and keys,
        k = apply_rope(k, positions, self.theta)  # never the values
        if cache is not None:
            k, v = cache.update(layer, k, v)  # [B, H, S, d_head]: every key held, these T last
        S = k.shape[-2]
        # query i sits at position S - T + i and sees keys 0 .. S - T + i
        mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~mask, float("-inf"))
        return self.out_proj(merge_heads(softmax(scores, dim=-1) @ v))

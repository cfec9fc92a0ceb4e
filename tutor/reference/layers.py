"""Normalisation, feed-forward layers and the pre-norm transformer block (notebook 06), and the
modern block of notebook 09."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from tutor.reference.attention import MultiHeadAttention, RotaryAttention


class LayerNorm(nn.Module):
    """Normalise each vector to mean 0 and variance 1 (biased), then scale and shift."""

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
        self.fused = False  # True: F.layer_norm, one kernel, the same numbers (tutor.train.use_fused_kernels)

    def forward(self, x):
        dtype = x.dtype
        if self.fused:
            y = F.layer_norm(x.float(), self.weight.shape, self.weight.float(), self.bias.float(), self.eps)
            return y.to(dtype)
        x = x.float()  # half-precision input is normalised in float32
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased variance
        x = (x - mean) / torch.sqrt(var + self.eps)
        return (x * self.weight.float() + self.bias.float()).to(dtype)


class RMSNorm(nn.Module):
    """Divide each vector by its root mean square, then scale (no mean, no bias)."""

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x / rms * self.weight.float()).to(dtype)


class MLP(nn.Module):
    """The position-wise feed-forward network: proj(gelu(fc(x))), then dropout. ``approximate="tanh"`` is GPT-2's
    GELU (notebook 12); the course's is the exact one."""

    def __init__(self, d_model: int, d_hidden: int | None = None, dropout: float = 0.0, approximate: str = "none"):
        super().__init__()
        d_hidden = d_hidden or 4 * d_model
        self.fc = nn.Linear(d_model, d_hidden)
        self.act = nn.GELU(approximate=approximate)
        self.proj = nn.Linear(d_hidden, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.proj(self.act(self.fc(x))))


class SwiGLU(nn.Module):
    """A gated feed-forward network: w2(silu(w1(x)) * w3(x)), no biases."""

    def __init__(self, d_model: int, d_hidden: int):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_hidden, bias=False)
        self.w2 = nn.Linear(d_hidden, d_model, bias=False)
        self.w3 = nn.Linear(d_model, d_hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    """Pre-norm block: x + attn(ln1(x)), then x + mlp(ln2(x)). The residual stream is never normalised.

    GPT-2's differences (notebook 12) are keyword switches, off by default: ``bias`` on the attention projections,
    ``approximate="tanh"`` for the GELU, and the LayerNorms' ``eps``."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, *, bias: bool = False,
                 approximate: str = "none", eps: float = 1e-5):
        super().__init__()
        self.ln1 = LayerNorm(d_model, eps)
        self.attn = MultiHeadAttention(d_model, n_heads, causal=True, dropout=dropout, bias=bias)
        self.ln2 = LayerNorm(d_model, eps)
        self.mlp = MLP(d_model, dropout=dropout, approximate=approximate)

    def forward(self, x, mask=None, cache=None, layer: int = 0):
        if cache is None:
            x = x + self.attn(self.ln1(x), mask)
        else:  # a KVCache: this block is layer `layer` of it
            x = x + self.attn(self.ln1(x), mask, cache=cache, layer=layer)
        x = x + self.mlp(self.ln2(x))
        return x


class ModernBlock(nn.Module):
    """The pre-norm block of Llama-style models: RMSNorm, rotary attention, RMSNorm, SwiGLU."""

    def __init__(self, d_model: int, n_heads: int, d_hidden: int, theta: float = 10000.0):
        super().__init__()
        self.ln1 = RMSNorm(d_model)
        self.attn = RotaryAttention(d_model, n_heads, theta)
        self.ln2 = RMSNorm(d_model)
        self.mlp = SwiGLU(d_model, d_hidden)

    def forward(self, x, positions=None, cache=None, layer: int = 0):
        x = x + self.attn(self.ln1(x), positions, cache, layer)
        x = x + self.mlp(self.ln2(x))
        return x

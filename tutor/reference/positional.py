"""Positional information: sinusoidal, learned and rotary (RoPE) encodings (notebook 05)."""

import torch
import torch.nn as nn


def sinusoidal_encoding(max_len: int, d_model: int) -> torch.Tensor:
    """float32 [max_len, d_model]: PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(...)."""
    assert d_model % 2 == 0, "d_model must be even"
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # [max_len, 1]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)  # [d_model/2]: 0, 2, 4, ...
    angle = position / 10000 ** (two_i / d_model)  # [max_len, d_model/2]
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


class PositionalEmbedding(nn.Module):
    """A learned vector per position, added to the input."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * 0.02)

    def forward(self, x):
        T = x.shape[-2]
        return x + self.weight[:T].to(x.dtype)


def apply_rope(x: torch.Tensor, positions=None, theta: float = 10000.0) -> torch.Tensor:
    """Rotate interleaved pairs (x0, x1), (x2, x3), ... of x [..., T, d] by position * theta^(-2i/d)."""
    T, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(T, device=x.device)
    i = torch.arange(d // 2, device=x.device, dtype=torch.float32)
    freqs = theta ** (-2 * i / d)  # [d/2]
    angle = positions.to(torch.float32).unsqueeze(-1) * freqs  # [T, d/2]
    cos, sin = torch.cos(angle), torch.sin(angle)
    x0 = x[..., 0::2].float()
    x1 = x[..., 1::2].float()
    out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)  # [..., T, d/2, 2]
    return out.flatten(-2).to(x.dtype)

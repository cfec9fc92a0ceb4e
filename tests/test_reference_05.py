"""The model answers of notebook 05 agree with independent implementations and PyTorch's own modules."""

import math

import numpy as np
import pytest
import torch
import torch.nn as nn

from tutor import reference as ref

# --- sinusoidal_encoding ---------------------------------------------------------------------


def test_sinusoidal_matches_numpy_float64():
    max_len, d = 100, 32
    p = np.arange(max_len)[:, None]
    angle = p / np.power(10000.0, np.arange(0, d, 2) / d)
    expected = np.zeros((max_len, d))
    expected[:, 0::2], expected[:, 1::2] = np.sin(angle), np.cos(angle)
    got = ref.sinusoidal_encoding(max_len, d)
    assert got.dtype == torch.float32 and got.shape == (max_len, d)
    torch.testing.assert_close(got.double(), torch.from_numpy(expected), atol=1e-5, rtol=0)


def test_sinusoidal_first_rows():
    pe = ref.sinusoidal_encoding(4, 4)
    torch.testing.assert_close(pe[0], torch.tensor([0.0, 1.0, 0.0, 1.0]))
    torch.testing.assert_close(pe[1], torch.tensor([math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)]))


def test_sinusoidal_dot_product_depends_only_on_offset():
    pe = ref.sinusoidal_encoding(64, 16).double()
    for offset in (1, 5, 20):
        dots = torch.stack([pe[p] @ pe[p + offset] for p in range(0, 40, 7)])
        torch.testing.assert_close(dots, dots[:1].expand_as(dots), atol=1e-5, rtol=0)


# --- PositionalEmbedding ---------------------------------------------------------------------


def test_positional_embedding_matches_nn_embedding():
    torch.manual_seed(0)
    mine = ref.PositionalEmbedding(16, 8)
    table = nn.Embedding(16, 8)
    with torch.no_grad():
        table.weight.copy_(mine.weight)
    x = torch.randn(3, 5, 8)
    torch.testing.assert_close(mine(x), x + table(torch.arange(5)))


def test_positional_embedding_init():
    torch.manual_seed(0)
    w = ref.PositionalEmbedding(1024, 64).weight
    assert isinstance(w, nn.Parameter) and w.shape == (1024, 64)
    assert abs(w.std().item() - 0.02) < 0.001 and abs(w.mean().item()) < 0.001


# --- apply_rope ------------------------------------------------------------------------------


def rope_complex(x, positions=None, theta=10000.0):
    """RoPE as LLaMA writes it: multiply complex numbers x0 + i x1 by e^(i angle)."""
    T, d = x.shape[-2:]
    positions = torch.arange(T) if positions is None else positions
    freqs = 1.0 / theta ** (torch.arange(0, d, 2).double() / d)
    rot = torch.polar(torch.ones(T, d // 2, dtype=torch.float64), torch.outer(positions.double(), freqs))
    xc = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(xc * rot).flatten(-2)


def rope_rotate_half(x, positions, theta=10000.0):
    """The GPT-NeoX / Hugging Face layout: pairs (x[i], x[i + d/2])."""
    T, d = x.shape[-2:]
    freqs = theta ** (-torch.arange(0, d, 2).double() / d)
    angle = torch.outer(positions.double(), freqs)
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


@pytest.mark.parametrize("theta", [10000.0, 100.0])
def test_rope_matches_complex_multiplication(theta):
    x = torch.randn(2, 3, 7, 16)
    positions = torch.tensor([0, 3, 4, 9, 10, 11, 50])
    torch.testing.assert_close(ref.apply_rope(x, positions, theta).double(), rope_complex(x, positions, theta),
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ref.apply_rope(x).double(), rope_complex(x), atol=1e-5, rtol=1e-5)


def test_rope_interleaved_equals_rotate_half_after_permuting_features():
    d = 8
    x = torch.randn(2, 5, d, dtype=torch.float64)
    positions = torch.arange(5)
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # x0 x2 x4 x6 | x1 x3 x5 x7
    ours = ref.apply_rope(x.float(), positions).double()
    theirs = rope_rotate_half(x[..., perm], positions)
    torch.testing.assert_close(ours[..., perm], theirs, atol=1e-5, rtol=1e-5)


def test_rope_position_zero_is_identity_and_norm_is_kept():
    x = torch.randn(4, 1, 16)
    torch.testing.assert_close(ref.apply_rope(x), x)
    y = torch.randn(2, 9, 16)
    torch.testing.assert_close(ref.apply_rope(y, torch.arange(100, 109)).norm(dim=-1), y.norm(dim=-1))


def test_rope_scores_depend_only_on_offset():
    q, k = torch.randn(16), torch.randn(16)

    def score(m, n):
        return ref.apply_rope(q[None], torch.tensor([m])) @ ref.apply_rope(k[None], torch.tensor([n]))[0]

    base = score(3, 1)
    for shift in (1, 10, 100):
        torch.testing.assert_close(score(3 + shift, 1 + shift), base, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_rope_keeps_dtype(dtype):
    x = torch.randn(2, 6, 8).to(dtype)
    out = ref.apply_rope(x, torch.arange(40, 46))
    assert out.dtype == dtype
    expected = rope_complex(x.double(), torch.arange(40, 46))
    tol = {torch.bfloat16: 2e-2, torch.float16: 4e-3, torch.float64: 1e-5}[dtype]
    torch.testing.assert_close(out.double(), expected, atol=tol, rtol=tol)

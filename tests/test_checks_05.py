"""Checks of notebook 05: sinusoidal encodings, learned position embeddings and RoPE."""

import math
import statistics
import time

import numpy as np
import torch
import torch.nn as nn
from checkkit import not_done, passes, rejects, stub

from tutor import checks
from tutor import reference as ref

# --- sinusoidal_encoding ---------------------------------------------------------------------


def sin_exp_log(max_len, d_model):  # the "log-space" formulation, as in the PyTorch tutorial
    position = torch.arange(max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def sin_loops(max_len, d_model):  # plain Python loops, float64 math, stored in a float32 tensor
    pe = torch.zeros(max_len, d_model)
    for p in range(max_len):
        for i in range(d_model // 2):
            angle = p / 10000 ** (2 * i / d_model)
            pe[p, 2 * i] = math.sin(angle)
            pe[p, 2 * i + 1] = math.cos(angle)
    return pe


def test_sinusoidal_accepts_reference_and_variants():
    passes(checks.sinusoidal_encoding, ref.sinusoidal_encoding)
    passes(checks.sinusoidal_encoding, sin_exp_log)
    passes(checks.sinusoidal_encoding, sin_loops)


def test_sinusoidal_stub():
    not_done(checks.sinusoidal_encoding, stub)


def sin_swapped(max_len, d_model):
    p = torch.arange(max_len, dtype=torch.float32)[:, None]
    angle = p / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.cos(angle)
    pe[:, 1::2] = torch.sin(angle)
    return pe


def sin_exponent_i(max_len, d_model):
    p = torch.arange(max_len, dtype=torch.float32)[:, None]
    i = torch.arange(d_model // 2, dtype=torch.float32)
    angle = p / 10000 ** (i / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


def sin_float64(max_len, d_model):
    p = np.arange(max_len)[:, None]
    angle = p / np.power(10000, np.arange(0, d_model, 2) / d_model)
    pe = np.zeros((max_len, d_model))
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle)
    return torch.from_numpy(pe)


def sin_one_based(max_len, d_model):
    p = torch.arange(1, max_len + 1, dtype=torch.float32)[:, None]
    angle = p / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


def sin_concat(max_len, d_model):
    p = torch.arange(max_len, dtype=torch.float32)[:, None]
    angle = p / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)


def sin_column_exponent(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for j in range(d_model):
        angle = torch.arange(max_len) / 10000 ** (j / d_model)
        pe[:, j] = torch.sin(angle) if j % 2 == 0 else torch.cos(angle)
    return pe


def sin_precedence(max_len, d_model):
    p = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)
    angle = p / 10000 ** two_i / d_model  # the exponent lost its parentheses
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


def sin_nan(max_len, d_model):
    p = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    i = torch.arange(d_model // 2, dtype=torch.float32)
    angle = p / (10000 ** 2 * i / d_model)  # pair 0 divides by zero
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


def sin_transposed(max_len, d_model):
    return ref.sinusoidal_encoding(max_len, d_model).T


def test_sinusoidal_rejects():
    rejects(checks.sinusoidal_encoding, sin_swapped, "sin and cos are swapped")
    rejects(checks.sinusoidal_encoding, sin_exponent_i, "i instead of 2i")
    rejects(checks.sinusoidal_encoding, sin_float64, "float64", "float32")
    rejects(checks.sinusoidal_encoding, sin_one_based, "positions start at 1")
    rejects(checks.sinusoidal_encoding, sin_concat, "two halves", "interleave")
    rejects(checks.sinusoidal_encoding, sin_column_exponent, "own exponent")
    rejects(checks.sinusoidal_encoding, sin_transposed, "(d_model, max_len)")
    rejects(checks.sinusoidal_encoding, sin_precedence, "operator precedence", "parentheses")
    rejects(checks.sinusoidal_encoding, sin_nan, "inf or nan", "parentheses")


# --- PositionalEmbedding ---------------------------------------------------------------------


class PEWithEmbedding(nn.Module):  # subclassing nn.Embedding keeps the parameter name `weight`
    def __init__(self, max_len, d_model):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(max_len, d_model))
        nn.init.normal_(self.weight, mean=0.0, std=0.02)

    def forward(self, x):
        positions = torch.arange(x.shape[1], device=x.device)
        return x + nn.functional.embedding(positions, self.weight).to(x.dtype)


class PEPromotesHalf(PEWithEmbedding):  # float32 table + bfloat16 x gives float32
    def forward(self, x):
        return x + self.weight[: x.shape[1]]


def test_positional_embedding_accepts_reference_and_variants():
    passes(checks.PositionalEmbedding, ref.PositionalEmbedding)
    passes(checks.PositionalEmbedding, PEWithEmbedding)


def test_positional_embedding_keeps_the_input_dtype():
    rejects(checks.PositionalEmbedding, PEPromotesHalf, "bfloat16", "dtype torch.float32", ".to(x.dtype)")


def test_positional_embedding_stub():
    class PositionalEmbedding(nn.Module):
        def __init__(self, max_len, d_model):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(max_len, d_model) * 0.02)

        def forward(self, x):
            raise NotImplementedError()

    not_done(checks.PositionalEmbedding, PositionalEmbedding)

    class Blank(nn.Module):
        def __init__(self, max_len, d_model):
            super().__init__()
            raise NotImplementedError()

    not_done(checks.PositionalEmbedding, Blank)


class PEWholeTable(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * 0.02)

    def forward(self, x):
        return x + self.weight


class PEStdOne(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_len, d_model))

    def forward(self, x):
        return x + self.weight[: x.shape[1]]


class PENotAParameter(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_len, d_model)) * 0.02

    def forward(self, x):
        return x + self.weight[: x.shape[1]]


class PEInPlace(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * 0.02)

    def forward(self, x):
        x += self.weight[: x.shape[1]]
        return x


class PEOffByOne(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * 0.02)

    def forward(self, x):
        T = x.shape[1]
        return x + self.weight[1 : T + 1]


class PEDetached(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * 0.02)

    def forward(self, x):
        return x + self.weight.data[: x.shape[1]]


class PEZeros(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(max_len, d_model))

    def forward(self, x):
        return x + self.weight[: x.shape[1]]


class PEUniform(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.weight = nn.Parameter((torch.rand(max_len, d_model) - 0.5) * 0.02 * math.sqrt(12))

    def forward(self, x):
        return x + self.weight[: x.shape[1]]


class PEEmbeddingModule(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.emb = nn.Embedding(max_len, d_model)

    def forward(self, x):
        return x + self.emb(torch.arange(x.shape[1]))


class PETimes(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * 0.02)

    def forward(self, x):
        return x * self.weight[: x.shape[1]]


class PETransposed(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d_model, max_len) * 0.02)

    def forward(self, x):
        return x + self.weight[:, : x.shape[1]].T


def test_positional_embedding_rejects():
    rejects(checks.PositionalEmbedding, PEWholeTable, "T = 5 < max_len", "self.weight[:T]")
    rejects(checks.PositionalEmbedding, PEStdOne, "has standard deviation 1.0", "expected about 0.02",
            "multiply by 0.02")
    rejects(checks.PositionalEmbedding, PENotAParameter, "not an nn.Parameter", "multiply inside")
    rejects(checks.PositionalEmbedding, PEInPlace, "in place")
    rejects(checks.PositionalEmbedding, PEOffByOne, "rows 1..T", "0-based")
    rejects(checks.PositionalEmbedding, PEDetached, "no gradient reaches `weight`")
    rejects(checks.PositionalEmbedding, PEZeros, "std 0")
    rejects(checks.PositionalEmbedding, PEUniform, "uniformly distributed")
    rejects(checks.PositionalEmbedding, PEEmbeddingModule, "no parameter `weight`")
    rejects(checks.PositionalEmbedding, PETimes, "multiplied")
    rejects(checks.PositionalEmbedding, PETransposed, "(d_model, max_len)", "one row per position")


# --- apply_rope --------------------------------------------------------------------------------


def rope_complex(x, positions=None, theta=10000.0):  # the LLaMA way, with complex numbers
    T, d = x.shape[-2:]
    if positions is None:
        positions = torch.arange(T, device=x.device)
    freqs = 1.0 / theta ** (torch.arange(0, d, 2, device=x.device).float() / d)
    angles = torch.outer(positions.float(), freqs)
    rot = torch.polar(torch.ones_like(angles), angles)
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], d // 2, 2))
    return torch.view_as_real(xc * rot).flatten(-2).to(x.dtype)


def rope_assign(x, positions=None, theta=10000.0):  # writes into a new tensor
    T, d = x.shape[-2:]
    if positions is None:
        positions = torch.arange(T, device=x.device)
    i = torch.arange(d // 2, device=x.device)
    angle = positions[:, None].float() * theta ** (-2 * i / d)
    cos, sin = angle.cos(), angle.sin()
    xf = x.float()
    out = torch.empty_like(xf)
    out[..., 0::2] = xf[..., 0::2] * cos - xf[..., 1::2] * sin
    out[..., 1::2] = xf[..., 0::2] * sin + xf[..., 1::2] * cos
    return out.to(x.dtype)


def test_rope_accepts_reference_and_variants():
    passes(checks.apply_rope, ref.apply_rope)
    passes(checks.apply_rope, rope_complex)
    passes(checks.apply_rope, rope_assign)


def test_rope_stub():
    not_done(checks.apply_rope, stub)


def _angles(x, positions, theta, exponent_scale=2.0):
    T, d = x.shape[-2:]
    if positions is None:
        positions = torch.arange(T)
    i = torch.arange(d // 2).float()
    return positions[:, None].float() * theta ** (-exponent_scale * i / d)


def rope_rotate_half(x, positions=None, theta=10000.0):  # GPT-NeoX / Hugging Face layout
    d = x.shape[-1]
    angle = _angles(x, positions, theta)
    cos = torch.cat([angle.cos(), angle.cos()], dim=-1)
    sin = torch.cat([angle.sin(), angle.sin()], dim=-1)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


def rope_sign_error(x, positions=None, theta=10000.0):
    angle = _angles(x, positions, theta)
    x0, x1 = x[..., 0::2].float(), x[..., 1::2].float()
    out = torch.stack([x0 * angle.cos() + x1 * angle.sin(), -x0 * angle.sin() + x1 * angle.cos()], dim=-1)
    return out.flatten(-2).to(x.dtype)


def rope_one_based(x, positions=None, theta=10000.0):
    T = x.shape[-2]
    if positions is None:
        positions = torch.arange(1, T + 1)
    return rope_assign(x, positions, theta)


def rope_theta_ignored(x, positions=None, theta=10000.0):
    return rope_assign(x, positions, 10000.0)


def rope_positions_ignored(x, positions=None, theta=10000.0):
    return rope_assign(x, None, theta)


def rope_float32_out(x, positions=None, theta=10000.0):
    return rope_assign(x, positions, theta).float()


def rope_half_precision(x, positions=None, theta=10000.0):  # everything in x's dtype
    T, d = x.shape[-2:]
    if positions is None:
        positions = torch.arange(T)
    i = torch.arange(d // 2, dtype=x.dtype)
    angle = positions[:, None].to(x.dtype) * theta ** (-2 * i / d)
    cos, sin = angle.cos(), angle.sin()
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


def rope_relative(x, positions=None, theta=10000.0):  # positions counted from the first one
    T = x.shape[-2]
    positions = torch.arange(T) if positions is None else positions
    return rope_assign(x, positions - positions[0], theta)


def rope_bfloat16_inside(x, positions=None, theta=10000.0):  # float32 in and out, bfloat16 in between
    return rope_half_precision(x.bfloat16(), positions, theta).to(x.dtype)


def rope_exponent_i(x, positions=None, theta=10000.0):
    angle = _angles(x, positions, theta, exponent_scale=1.0)
    x0, x1 = x[..., 0::2].float(), x[..., 1::2].float()
    out = torch.stack([x0 * angle.cos() - x1 * angle.sin(), x0 * angle.sin() + x1 * angle.cos()], dim=-1)
    return out.flatten(-2).to(x.dtype)


def rope_concat(x, positions=None, theta=10000.0):
    angle = _angles(x, positions, theta)
    x0, x1 = x[..., 0::2].float(), x[..., 1::2].float()
    return torch.cat([x0 * angle.cos() - x1 * angle.sin(), x0 * angle.sin() + x1 * angle.cos()], dim=-1).to(x.dtype)


def rope_in_place(x, positions=None, theta=10000.0):
    angle = _angles(x, positions, theta)
    x0, x1 = x[..., 0::2].clone(), x[..., 1::2].clone()
    x[..., 0::2] = x0 * angle.cos() - x1 * angle.sin()
    x[..., 1::2] = x0 * angle.sin() + x1 * angle.cos()
    return x


def rope_cos_only(x, positions=None, theta=10000.0):  # not a rotation
    angle = _angles(x, positions, theta)
    x0, x1 = x[..., 0::2].float(), x[..., 1::2].float()
    out = torch.stack([x0 * angle.cos(), x1 * angle.cos()], dim=-1)
    return out.flatten(-2).to(x.dtype)


def test_rope_rejects():
    rejects(checks.apply_rope, rope_rotate_half, "rotate_half", "x[..., 0::2]")
    rejects(checks.apply_rope, rope_sign_error, "sign error")
    rejects(checks.apply_rope, rope_one_based, "shifted by one", "0-based")
    rejects(checks.apply_rope, rope_theta_ignored, "theta", "ignored")
    rejects(checks.apply_rope, rope_positions_ignored, "positions", "ignored")
    rejects(checks.apply_rope, rope_float32_out, "dtype", "x.dtype")
    rejects(checks.apply_rope, rope_half_precision, "too coarse", "float32")
    rejects(checks.apply_rope, rope_relative, "relative to the first one")
    rejects(checks.apply_rope, rope_bfloat16_inside, "16-bit float", "float32")
    rejects(checks.apply_rope, rope_exponent_i, "i instead of 2i")
    rejects(checks.apply_rope, rope_concat, "two halves")
    rejects(checks.apply_rope, rope_in_place, "in place")
    rejects(checks.apply_rope, rope_cos_only, "length of the vectors")
    rejects(checks.apply_rope, lambda x, positions=None, theta=10000.0: x.clone(), "nothing was rotated")


def test_rope_one_based_only_when_positions_default():
    """1-based positions are caught even by an implementation that honours explicit positions."""
    def rope_shift_all(x, positions=None, theta=10000.0):
        T = x.shape[-2]
        positions = torch.arange(T) if positions is None else positions
        return rope_assign(x, positions + 1, theta)

    rejects(checks.apply_rope, rope_shift_all, "shifted by one")


# --- speed ---------------------------------------------------------------------------------------


def test_checks_are_fast():
    """Each check takes well under 0.2 s on an idle laptop; 0.5 s leaves room for a busy CI machine."""
    for check, obj in [(checks.sinusoidal_encoding, ref.sinusoidal_encoding),
                       (checks.PositionalEmbedding, ref.PositionalEmbedding),
                       (checks.apply_rope, ref.apply_rope)]:
        check(obj)  # warm up
        times = []
        for _ in range(5):
            start = time.perf_counter()
            assert check(obj).passed
            times.append(time.perf_counter() - start)
        assert statistics.median(times) < 0.5, f"{check.__name__}: median {statistics.median(times):.3f} s"

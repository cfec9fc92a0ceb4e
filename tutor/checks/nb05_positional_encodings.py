"""Checks for notebook 05: sinusoidal encodings, learned position embeddings and RoPE."""

import torch
import torch.nn as nn

from tutor import reference as ref
from tutor.checks import beside
from tutor.checks.compare import expect_close, expect_tensor, kind_cases, load_reference_weights
from tutor.checks.harness import LearnerError, Mismatch, at, build, call, case, check, error_details
from tutor.course import catalog

__all__ = catalog.check_names(__name__)  # this notebook's exercises (tutor.course.catalog)


# --- sinusoidal_encoding ------------------------------------------------------------------


def _sinusoid(max_len, d_model, *, exponent="2i", swap=False, halves=False, start=0, base=10000.0):
    """Variants of the sinusoidal table, for recognising mistakes (computed in float64)."""
    p = torch.arange(start, start + max_len, dtype=torch.float64).unsqueeze(1)
    i = torch.arange(d_model // 2, dtype=torch.float64)
    if exponent == "2i":
        angle = p / base ** (2 * i / d_model)
    elif exponent == "i":
        angle = p / base ** (i / d_model)
    elif exponent == "+":
        angle = p * base ** (2 * i / d_model)
    else:  # "column": every column j gets its own exponent j / d
        j = torch.arange(d_model, dtype=torch.float64)
        angle = p / base ** (j / d_model)
        even, odd = torch.sin(angle), torch.cos(angle)
        pe = torch.where(j.remainder(2) == 0, even, odd)
        return pe.float()
    first, second = torch.sin(angle), torch.cos(angle)
    if swap:
        first, second = second, first
    if halves:
        return torch.cat([first, second], dim=-1).float()
    pe = torch.stack([first, second], dim=-1).flatten(-2)
    return pe.float()


def _sinusoid_precedence(max_len, d_model):
    """p / 10000 ** two_i / d_model, i.e. (p / 10000^(2i)) / d_model, in float32 (where 10000^(2i) overflows)."""
    p = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)
    angle = p / 10000 ** two_i / d_model
    return torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).flatten(-2)


def _sinusoid_mistakes(max_len, d_model):
    return [
        ("operator precedence: p / 10000 ** two_i / d_model computes (p / 10000^(2i)) / d_model; "
         "put the exponent in parentheses: p / 10000 ** (two_i / d_model)",
         lambda: _sinusoid_precedence(max_len, d_model)),
        ("sin and cos are swapped: even columns (0, 2, 4, ...) hold sin, odd columns hold cos",
         lambda: _sinusoid(max_len, d_model, swap=True)),
        ("the exponent uses i instead of 2i: pair i has frequency 1 / 10000^(2i/d_model), "
         "i.e. torch.arange(0, d_model, 2) / d_model",
         lambda: _sinusoid(max_len, d_model, exponent="i")),
        ("every column got its own exponent j/d_model; both columns of a pair (2i and 2i+1) share "
         "the angle p / 10000^(2i/d_model)",
         lambda: _sinusoid(max_len, d_model, exponent="column")),
        ("the angle is p * 10000^(2i/d_model); divide instead: p / 10000^(2i/d_model) (the frequencies shrink with i)",
         lambda: _sinusoid(max_len, d_model, exponent="+")),
        ("sin and cos are stored as two halves (all sines, then all cosines); interleave them: "
         "pe[:, 0::2] = sin, pe[:, 1::2] = cos",
         lambda: _sinusoid(max_len, d_model, halves=True)),
        ("the positions start at 1: row 0 is position 0 (sin 0 = 0, cos 0 = 1); use torch.arange(max_len)",
         lambda: _sinusoid(max_len, d_model, start=1)),
    ]


@check
def sinusoidal_encoding(fn):
    cases = [
        ("max_len = 8, d_model = 6", 8, 6, 1e-4),
        ("max_len = 50, d_model = 16", 50, 16, 1e-4),
        ("max_len = 1, d_model = 4", 1, 4, 1e-5),
        ("max_len = 3, d_model = 2", 3, 2, 1e-5),
        ("max_len = 300, d_model = 16 (large positions)", 300, 16, 2e-4),
    ]
    for label, max_len, d_model, atol in cases:
        with case(label):
            got = call(fn, max_len, d_model, what=f"sinusoidal_encoding({max_len}, {d_model})")
            expected = ref.sinusoidal_encoding(max_len, d_model)
            if isinstance(got, torch.Tensor) and tuple(got.shape) == (d_model, max_len) and max_len != d_model:
                raise Mismatch("the table has shape (d_model, max_len)",
                               [f"expected ({max_len}, {d_model}), got {tuple(got.shape)}"],
                               hint="one row per position: the result is [max_len, d_model]")
            if isinstance(got, torch.Tensor) and got.dtype == torch.float64:
                raise Mismatch("the table has dtype torch.float64, expected torch.float32",
                               hint="torch.arange(..., dtype=torch.float32), or math/numpy numbers crept in; "
                                    "build the table with torch in float32 (or call .float() at the end)")
            if isinstance(got, torch.Tensor) and got.is_floating_point() and not torch.isfinite(got).all():
                raise Mismatch("the encoding table contains inf or NaN",
                               hint="sin and cos of a finite angle are finite: "
                                    "look for a division by zero or a power that overflows; "
                                    "the exponent needs parentheses: 10000 ** (2 * i / d_model)")
            expect_close(got, expected, "the encoding table", atol=atol, rtol=1e-4,
                         mistakes=_sinusoid_mistakes(max_len, d_model))
    return "5 tables, up to 300 positions"


# --- PositionalEmbedding --------------------------------------------------------------------


@check
def PositionalEmbedding(cls):
    # 1. Initialisation statistics on a big table.
    with case("PositionalEmbedding(256, 64): initial values"):
        big = build(cls, 256, 64)
        weight = getattr(big, "weight", None)
        if isinstance(weight, torch.Tensor) and not isinstance(weight, nn.Parameter):
            raise Mismatch("`weight` is a plain tensor, not an nn.Parameter, so it would never be trained",
                           hint="multiply inside: self.weight = nn.Parameter(torch.randn(max_len, d_model) * 0.02) "
                                "(nn.Parameter(...) * 0.02 gives back an ordinary tensor)")
        if isinstance(weight, nn.Parameter) and tuple(weight.shape) == (64, 256):
            raise Mismatch("`weight` has shape (d_model, max_len) = (64, 256), expected (max_len, d_model) = (256, 64)",
                           hint="the table has one row per position: torch.randn(max_len, d_model)")
        if not isinstance(weight, nn.Parameter) or tuple(weight.shape) != (256, 64):
            # names the missing or misshapen parameter
            load_reference_weights(big, ref.PositionalEmbedding(256, 64), "your PositionalEmbedding")
        w = big.weight.detach().float()
        mean, std = w.mean().item(), w.std().item()
        if std == 0:
            raise Mismatch("every entry of `weight` is the same at initialisation (std 0)",
                           hint="start from small random numbers: torch.randn(max_len, d_model) * 0.02")
        if not 0.015 <= std <= 0.025:
            hint = "initialise with std 0.02: torch.randn(max_len, d_model) * 0.02 (or nn.init.normal_(w, std=0.02))"
            if 0.8 <= std <= 1.2:
                hint = "torch.randn (and nn.Embedding's default init) has std 1; multiply by 0.02"
            raise Mismatch(f"`weight` has standard deviation {std:.3f} at initialisation, expected about 0.02",
                           hint=hint)
        if abs(mean) > 0.003:
            raise Mismatch(f"`weight` has mean {mean:.4f} at initialisation, expected about 0",
                           hint="use a normal distribution centred on 0: torch.randn(...) * 0.02 "
                                "(torch.rand is uniform on [0, 1))")
        if w.abs().max().item() < 2.0 * std:
            raise Mismatch("the initial values look uniformly distributed, not normal",
                           [f"largest |value| {w.abs().max().item():.4f} is under 2 standard deviations"],
                           hint="use torch.randn (normal), not torch.rand (uniform)")

    # 2. The forward pass with the reference's weights.
    max_len, d_model = 16, 8
    with case(f"PositionalEmbedding({max_len}, {d_model}) with the reference's weights"):
        module = build(cls, max_len, d_model)
        reference = ref.PositionalEmbedding(max_len, d_model)
        with torch.no_grad():
            reference.weight.normal_()  # large, distinct values make every mistake visible
        load_reference_weights(module, reference, "your PositionalEmbedding")
    cases = [
        (f"x [3, 5, {d_model}] (T < max_len)", (3, 5, d_model)),
        (f"x [1, 1, {d_model}] (T = 1)", (1, 1, d_model)),
        (f"x [2, {max_len}, {d_model}] (T = max_len)", (2, max_len, d_model)),
        (f"x [4, 7, {d_model}]", (4, 7, d_model)),
    ]
    for label, shape in cases:
        with case(label):
            x = torch.randn(*shape)
            before = x.clone()
            T = shape[-2]
            try:
                got = call(module, x, what=f"forward(x) with x of shape {list(shape)}")
            except LearnerError as e:
                if T < max_len:
                    raise Mismatch(
                        f"your forward raised an exception for T = {T} < max_len = {max_len}",
                        error_details(e),
                        hint="add only the first T rows of the table: x + self.weight[:T] with T = x.shape[1] "
                             "(the whole table only fits when T == max_len)") from None
                raise
            w = reference.weight.detach()
            if not torch.equal(x, before):
                raise Mismatch("forward changed its input x in place",
                               hint="return x + self.weight[:T] (a new tensor) instead of x += ... or x.add_(...)")
            expected = reference(x)
            expect_close(got, expected, "the output", atol=1e-5, mistakes=[
                ("you added one row weight[T] to every position; add the first T rows: weight[:T]",
                 lambda: x + w[min(T, max_len - 1)]),
                ("you used rows 1..T; positions are 0-based, so add weight[:T]", lambda: x + w[1:T + 1]),
                ("you used the last T rows; position t uses row t: weight[:T]", lambda: x + w[-T:]),
                ("you multiplied by the position vectors; add them: x + weight[:T]", lambda: x * w[:T]),
                ("you returned only the position vectors; forward returns x + weight[:T]",
                 lambda: w[:T].expand_as(x)),
                ("you returned x unchanged; add the position vectors: x + weight[:T]", lambda: x),
            ])

    # 3. The table is trained: gradients reach `weight`.
    with case("backward through forward"):
        module.zero_grad()
        x = torch.randn(2, 5, d_model)
        _, connected = call(at(beside.sum_backward), module, x, what="forward(x), then .sum().backward()")
        grad = module.weight.grad if connected else None
        if grad is None or not torch.allclose(grad[:5], torch.full((5, d_model), 2.0)):
            raise Mismatch("no gradient reaches `weight`, so the table would never be learned",
                           hint="use self.weight directly, not self.weight.data or self.weight.detach()")

    # 4. Half precision keeps its dtype.
    with case(f"x [2, 5, {d_model}] in bfloat16"):
        x = torch.randn(2, 5, d_model).to(torch.bfloat16)
        got = call(module, x, what="forward(x) with a bfloat16 x")
        expect_close(got, reference(x), "the output for a bfloat16 input", atol=2e-2, rtol=2e-2,
                     hint="keep the input's dtype: x + self.weight[:T].to(x.dtype)")
    kind_cases(module, (torch.randn(2, 5, d_model),), reference, f"forward(x) with x of shape [2, 5, {d_model}]",
               module=True)
    return "init std 0.02, 5 inputs, gradients reach the table, bfloat16, float64 and meta"


# --- apply_rope -------------------------------------------------------------------------------


def _rope(x, positions=None, theta=10000.0, *, pairing="interleaved", sign=1.0, exponent="2i",
          layout="interleaved", dtype=torch.float32):
    """Variants of RoPE for recognising mistakes."""
    T, d = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = torch.arange(T)
    i = torch.arange(d // 2, dtype=dtype)
    if exponent == "2i":
        freqs = theta ** (-2 * i / d)
    elif exponent == "i":
        freqs = theta ** (-i / d)
    else:  # "+"
        freqs = theta ** (2 * i / d)
    angle = positions.to(dtype).unsqueeze(-1) * freqs.to(dtype)
    cos, sin = torch.cos(angle), torch.sin(angle)
    xf = x.to(dtype)
    if pairing == "interleaved":
        x0, x1 = xf[..., 0::2], xf[..., 1::2]
    else:  # halves, GPT-NeoX / rotate_half
        x0, x1 = xf[..., : d // 2], xf[..., d // 2:]
    a, b = x0 * cos - sign * x1 * sin, sign * x0 * sin + x1 * cos
    if layout == "interleaved" and pairing == "interleaved":
        out = torch.stack([a, b], dim=-1).flatten(-2)
    else:
        out = torch.cat([a, b], dim=-1)
    return out.to(x.dtype)


def _rope_mistakes(x, positions, theta):
    T = x.shape[-2]
    default = torch.arange(T)
    pos = default if positions is None else positions
    mistakes = [
        ("nothing was rotated: the output equals x", lambda: x),
        ("you paired x[..., i] with x[..., i + d/2] (the rotate_half / GPT-NeoX layout); this course rotates "
         "neighbouring pairs (x0, x1), (x2, x3), ...: x[..., 0::2] and x[..., 1::2]",
         lambda: _rope(x, pos, theta, pairing="halves")),
        ("sign error: the rotation goes the wrong way; (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos)",
         lambda: _rope(x, pos, theta, sign=-1.0)),
        ("you put the rotated pairs back as two halves (all first components, then all second ones); "
         "put each pair back in place: out[..., 0::2] = ..., out[..., 1::2] = ... "
         "(or torch.stack(..., dim=-1).flatten(-2))",
         lambda: _rope(x, pos, theta, layout="halves")),
        ("the exponent uses i instead of 2i: pair i turns at theta ** (-2i / d)",
         lambda: _rope(x, pos, theta, exponent="i")),
        ("the exponent lost its minus sign: pair i turns at theta ** (-2i / d), slower for larger i",
         lambda: _rope(x, pos, theta, exponent="+")),
        ("the positions are shifted by one: positions are 0-based, so the first token (position 0) is not rotated",
         lambda: _rope(x, pos + 1, theta)),
    ]
    if positions is not None and not torch.equal(positions, default):
        ignored = ("the `positions` argument is ignored: rotate token t by positions[t] "
                   "(use torch.arange(T) only when positions is None)")
        relative = "you made the positions relative to the first one; RoPE uses the absolute positions as given"
        if torch.equal(positions - positions[0], default):  # consecutive positions: the two mistakes look alike
            ignored = ("the result is what positions 0 … T-1 give: either the `positions` argument is ignored, or "
                       "you made the positions relative to the first one; rotate token t by positions[t], as given")
        mistakes += [
            (ignored, lambda: _rope(x, default, theta)),
            ("the `positions` argument is ignored and the positions are 1-based",
             lambda: _rope(x, default + 1, theta)),
            (relative, lambda: _rope(x, positions - positions[0], theta)),
        ]
    if theta != 10000.0:
        mistakes.append(("the `theta` argument is ignored: use theta ** (-2i / d), not 10000 ** (-2i / d)",
                         lambda: _rope(x, pos, 10000.0)))
    return mistakes


def _rope_hint(got, x, expected=None):
    """When no known mistake matches: computed in 16-bit floats? Is it a rotation at all?"""
    try:
        if isinstance(got, torch.Tensor) and got.shape == x.shape:
            if expected is not None and x.dtype in (torch.float32, torch.float64) and torch.allclose(
                    got.detach().float(), expected.float(), rtol=1 / 64, atol=1 / 64 * x.abs().max().item()):
                return ("your result is off by about the rounding of a 16-bit float: compute the angles, cos, sin "
                        "and the products in float32 (x.float(), positions.float()), then cast back with "
                        ".to(x.dtype)")
            n_got = got.detach().float().norm(dim=-1)
            n_x = x.float().norm(dim=-1)
            if not torch.allclose(n_got, n_x, rtol=1e-3, atol=1e-3):
                return ("your result changes the length of the vectors; a rotation keeps every pair's length "
                        "x0² + x1²: use cos and sin of the same angle in both components")
    except Exception:  # noqa: BLE001 - only a diagnosis: if it cannot run, give no hint
        pass
    return None


def _run_rope(fn, x, positions=None, theta=None, *, atol=1e-5, rtol=1e-4):
    given = x.clone()
    args, shown = [given], [f"x of shape {list(x.shape)}"]
    kwargs = {}
    if positions is not None:
        args.append(positions.clone())
        shown.append(f"positions={positions.tolist()}")
    if theta is not None:
        kwargs["theta"] = theta
        shown.append(f"theta={theta}")
    got = call(fn, *args, what=f"apply_rope({', '.join(shown)})", **kwargs)
    th = 10000.0 if theta is None else theta
    expected = ref.apply_rope(x, positions, th)
    if not torch.equal(given, x):
        raise Mismatch("apply_rope changed its input x in place",
                       hint="build a new tensor (torch.stack / torch.empty_like) instead of assigning into x")
    if isinstance(got, torch.Tensor) and got.dtype != x.dtype and tuple(got.shape) == tuple(x.shape):
        raise Mismatch(f"the result has dtype {got.dtype}, expected {x.dtype} (the input's dtype)",
                       hint="compute in float32 (x.float()), then convert back at the end: result.to(x.dtype)")
    expect_close(got, expected, "the rotated x", atol=atol, rtol=rtol,
                 mistakes=_rope_mistakes(x, positions, th), hint=_rope_hint(got, x, expected))
    return got


@check
def apply_rope(fn):
    with case("x [4, 2] = (1, 0) at positions 0..3 (one pair turning by 1 radian per position)"):
        x = torch.tensor([[1.0, 0.0]] * 4)
        _run_rope(fn, x)
    with case("random [2, 3, 6, 8], default positions"):
        _run_rope(fn, torch.randn(2, 3, 6, 8))
    with case("random [2, 5, 8], positions = arange(3, 8)"):
        _run_rope(fn, torch.randn(2, 5, 8), torch.arange(3, 8))
    with case("random [3, 4, 16], positions [7, 0, 2, 11]"):
        _run_rope(fn, torch.randn(3, 4, 16), torch.tensor([7, 0, 2, 11]))
    with case("random [2, 3, 6, 16], theta = 100"):
        _run_rope(fn, torch.randn(2, 3, 6, 16), theta=100.0)
    with case("random [2, 4, 8], positions = arange(5, 9), theta = 500"):
        _run_rope(fn, torch.randn(2, 4, 8), torch.arange(5, 9), theta=500.0)
    with case("T = 1 (position 0: nothing turns)"):
        _run_rope(fn, torch.randn(3, 1, 8))
    with case("T = 1 at position 5"):
        _run_rope(fn, torch.randn(2, 1, 8), torch.tensor([5]))
    with case("large positions 100..105, values of size 50"):
        _run_rope(fn, torch.randn(2, 6, 8) * 50, torch.arange(100, 106), atol=2e-3, rtol=1e-4)
    with case("norm preservation"):
        x = torch.randn(2, 3, 7, 16)
        got = call(fn, x.clone(), torch.arange(7))
        expect_tensor(got, x, "the rotated x")
        if not torch.allclose(got.norm(dim=-1), x.norm(dim=-1), atol=1e-4, rtol=1e-4):
            raise Mismatch("the rotation changes the length of the vectors", hint=_rope_hint(got, x))
    for dtype, rtol in [(torch.bfloat16, 1 / 64), (torch.float16, 1 / 256)]:
        with case(f"{dtype} input [2, 3, 5, 8], positions 40..44"):
            x = torch.randn(2, 3, 5, 8).to(dtype)
            positions = torch.arange(40, 45)
            got = call(fn, x.clone(), positions.clone(), what=f"apply_rope(x in {dtype}, positions)")
            expected = ref.apply_rope(x, positions)
            if isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(x.shape) and got.dtype == dtype:
                low = _rope(x, positions, dtype=dtype)
                close = torch.allclose(got.float(), expected.float(), atol=1e-4, rtol=rtol)
                if not close and torch.allclose(got.float(), low.float(), atol=1e-4, rtol=rtol):
                    raise Mismatch(f"the angles were computed in {dtype}, which is too coarse for position × frequency",
                                   hint="compute in float32: positions.float(), x.float(), "
                                        "then return result.to(x.dtype)")
            if isinstance(got, torch.Tensor) and got.dtype != dtype and tuple(got.shape) == tuple(x.shape):
                raise Mismatch(f"for {dtype} input the result has dtype {got.dtype}",
                               hint="compute in float32 if you like, but return the input's dtype: result.to(x.dtype)")
            expect_close(got, expected, "the rotated x", atol=1e-4, rtol=rtol,
                         mistakes=_rope_mistakes(x, positions, 10000.0), hint=_rope_hint(got, x))
    kind_cases(fn, (torch.randn(2, 3, 5, 8),), ref.apply_rope, "apply_rope(x [2, 3, 5, 8]), default positions",
               atol=1e-4)
    kind_cases(fn, (torch.randn(2, 5, 8), torch.arange(3, 8)), ref.apply_rope,
               "apply_rope(x [2, 5, 8], positions = arange(3, 8))", atol=1e-4)
    return "{cases} cases: absolute positions, theta, T = 1, bfloat16, float16, float64 and meta"

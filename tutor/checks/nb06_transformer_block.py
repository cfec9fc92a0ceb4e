"""Checks for notebook 06: LayerNorm, RMSNorm, the MLP, SwiGLU and the pre-norm transformer block."""

import copy

import torch
import torch.nn.functional as F

from tutor import reference as ref
from tutor.checks.common import rms_norm_centred, rms_norm_without_eps, swiglu_gate_on_w3
from tutor.checks.compare import expect_close, expect_tensor, kind_cases, load_reference_weights, shape_text
from tutor.checks.harness import Mismatch, at, build, call, case, check
from tutor.course import catalog

__all__ = catalog.check_names(__name__)  # this notebook's exercises (tutor.course.catalog)


# --- shared helpers ----------------------------------------------------------------------


def half_tolerance(dtype: torch.dtype) -> dict:
    """About four ulp of ``dtype`` near 1: float16 2^-10, bfloat16 2^-7."""
    eps = torch.finfo(dtype).eps
    return {"atol": 4 * eps, "rtol": 4 * eps}


def _snapshot(module) -> dict:
    return {name: p.detach().clone() for name, p in module.named_parameters()}


def _expect_init(snapshot: dict, name: str, value: float, what: str, hint: str):
    start = snapshot[name]
    if not torch.all(start == value):
        sample = ", ".join(f"{v:.3g}" for v in start.flatten()[:4].tolist())
        raise Mismatch(f"`{name}` of a new {what} should start as all {value:g}s",
                       [f"got values such as [{sample}, ...]"], hint)


def _randomise(module: torch.nn.Module) -> torch.nn.Module:
    """Give a reference module non-trivial norm weights and biases (Linear layers keep theirs)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() == 1 and name.endswith("weight"):  # a norm's scale
                p.copy_(1 + 0.5 * torch.randn_like(p))
            elif p.dim() == 1 and (name == "bias" or name.startswith("ln")):  # a norm's shift
                p.copy_(0.5 * torch.randn_like(p))
    return module


def _expect_same_dtype(got, x, what: str):
    """The output keeps the input's dtype (float16 in, float16 out)."""
    if isinstance(got, torch.Tensor) and got.dtype != x.dtype:
        hint = None
        if got.dtype == torch.float32:
            hint = ("compute in float32, then convert back: remember dtype = x.dtype at the start "
                    "and return result.to(dtype)")
        raise Mismatch(f"{what} has dtype {got.dtype}, expected {x.dtype} (the input's dtype)", hint=hint)


def _unchanged(x, before, what: str):
    if not torch.equal(x, before):
        raise Mismatch(f"{what} changed its input in place",
                       hint="use x - mean (a new tensor), not x -= mean or x.sub_(mean)")


# --- LayerNorm ---------------------------------------------------------------------------


def _ln_parts(x, eps):
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    return x - mean, var, eps


def _layer_norm_mistakes(x, w, b, eps):
    xc, var, _ = _ln_parts(x, eps)
    std = var.sqrt()
    mistakes = [
        ("eps is outside the square root: divide by torch.sqrt(var + eps), not by std + eps",
         lambda: xc / (std + eps) * w + b),
        ("the variance is unbiased (divided by n - 1, torch.var's default); LayerNorm uses the biased "
         "variance: x.var(dim=-1, keepdim=True, unbiased=False), or ((x - mean)**2).mean(dim=-1, keepdim=True)",
         lambda: xc / torch.sqrt(x.var(dim=-1, keepdim=True) + eps) * w + b),
        ("x.std() is unbiased (n - 1) and eps sits outside the square root: use torch.sqrt(var + eps) "
         "with the biased variance (unbiased=False)",
         lambda: xc / (x.std(dim=-1, keepdim=True) + eps) * w + b),
        ("eps is missing: divide by torch.sqrt(var + eps) so a nearly constant vector does not blow up",
         lambda: xc / std * w + b),
        ("the weight and bias are not applied: return x_hat * self.weight + self.bias",
         lambda: xc / torch.sqrt(var + eps)),
        ("the bias is not added: return x_hat * self.weight + self.bias",
         lambda: xc / torch.sqrt(var + eps) * w),
        ("the weight is not applied: return x_hat * self.weight + self.bias",
         lambda: xc / torch.sqrt(var + eps) + b),
        ("the mean is not subtracted: LayerNorm centres each vector (x - mean) before dividing by the "
         "standard deviation (without the mean it is RMSNorm)",
         lambda: x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w + b),
        ("the mean is subtracted but the variance is the mean of x² around 0: use ((x - mean)**2).mean(...)",
         lambda: xc / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w + b),
        ("you normalised over the whole tensor: compute the mean and variance of each vector separately, "
         "along the last axis: x.mean(dim=-1, keepdim=True)",
         lambda: (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + eps) * w + b),
    ]
    if x.dim() >= 2 and x.shape[-2] > 1:
        mistakes.append((
            "you normalised over the wrong axis: LayerNorm normalises each vector over its features, "
            "the last axis (dim=-1)",
            lambda: (x - x.mean(dim=-2, keepdim=True))
            / torch.sqrt(x.var(dim=-2, keepdim=True, unbiased=False) + eps) * w + b))
    return mistakes


def _rms_norm_mistakes(x, w, eps):
    ms = x.pow(2).mean(dim=-1, keepdim=True)
    mistakes = [
        ("the mean is subtracted: RMSNorm does not centre the vector (that is LayerNorm); divide x itself "
         "by torch.sqrt((x**2).mean(dim=-1, keepdim=True) + eps)",
         lambda: rms_norm_centred(x, w, eps)),
        ("the mean is subtracted (with torch.var's unbiased variance): RMSNorm divides x itself by its "
         "root mean square, no centring",
         lambda: rms_norm_centred(x, w, eps, unbiased=True)),
        ("eps is outside the square root: divide by torch.sqrt(mean(x²) + eps), not by rms + eps",
         lambda: x / (ms.sqrt() + eps) * w),
        ("eps is missing: divide by torch.sqrt(mean(x²) + eps)", lambda: rms_norm_without_eps(x, w, eps)),
        ("the weight is not applied: return x / rms * self.weight", lambda: x / torch.sqrt(ms + eps)),
        ("you divided by the length ‖x‖ (a sum of squares); the RMS uses the mean of the squares: "
         "(x**2).mean(dim=-1, keepdim=True)",
         lambda: x / torch.sqrt(x.pow(2).sum(dim=-1, keepdim=True) + eps) * w),
        ("you divided by the length ‖x‖ (x.norm()); the RMS is ‖x‖ / sqrt(d): use the mean of the squares",
         lambda: x / (x.norm(dim=-1, keepdim=True) + eps) * w),
        ("you divided by the mean square without the square root: rms = torch.sqrt(mean(x²) + eps)",
         lambda: x / (ms + eps) * w),
        ("you normalised over the whole tensor: take the mean of the squares of each vector, along "
         "dim=-1 with keepdim=True",
         lambda: x / torch.sqrt(x.pow(2).mean() + eps) * w),
    ]
    if x.dim() >= 2 and x.shape[-2] > 1:
        mistakes.append((
            "you normalised over the wrong axis: RMSNorm normalises each vector over its features, the last "
            "axis (dim=-1)",
            lambda: x / torch.sqrt(x.pow(2).mean(dim=-2, keepdim=True) + eps) * w))
    return mistakes


NORM_CASES = [
    ("x [2, 5, 16]", lambda: torch.randn(2, 5, 16) * 2 + 0.5),
    ("leading dims: x [2, 3, 4, 16]", lambda: torch.randn(2, 3, 4, 16) + 1),
    ("T = 1: x [1, 1, 16]", lambda: torch.randn(1, 1, 16)),
    ("small values (std 0.003), where eps matters", lambda: torch.randn(3, 4, 16) * 0.003),
    ("large values (std 1000)", lambda: torch.randn(2, 3, 16) * 1000 + 300),
]

# Half precision: values whose float16 mean or square loses precision, computed in float32 they are fine.
HALF_CASES = [
    ("float16 input near 1000 (x = 1000 + 10·noise)", torch.float16, lambda: 1000 + 10 * torch.randn(2, 4, 16)),
    ("bfloat16 input near 100 (x = 100 + 2·noise)", torch.bfloat16, lambda: 100 + 2 * torch.randn(2, 4, 16)),
]

HALF_HINT = {
    "LayerNorm": ("compute in float32: dtype = x.dtype; x = x.float() before taking the mean and variance, "
                  "use self.weight.float() and self.bias.float(), and return the result .to(dtype). In "
                  "float16 the mean of numbers near 1000 is rounded to a multiple of 0.5, which shifts every output"),
    "RMSNorm": ("compute in float32: dtype = x.dtype; x = x.float() before squaring, use self.weight.float(), "
                "and return the result .to(dtype). In float16, x**2 overflows to inf above 65504 (|x| > 256)"),
}


def _check_norm(cls, name, make_reference, mistakes_of, init):
    d = 16
    with case(f"{name}({d})"):
        reference = _randomise(make_reference(d))
        norm = build(cls, d)
        start = _snapshot(norm)
        try:
            load_reference_weights(norm, reference, f"your {name}")
        except Mismatch as m:
            if "does not ask for" in m.summary:
                m.hint = ("RMSNorm has only a weight (no bias, no mean): remove the extra parameter"
                          if name == "RMSNorm" else "LayerNorm has exactly two parameters, weight and bias")
            raise
        for param, value in init.items():
            _expect_init(start, param, value, f"{name}",
                         hint="initialise weight with torch.ones(d_model)"
                         + (" and bias with torch.zeros(d_model)" if "bias" in init else "")
                         + f", so that a new {name} only normalises")
    params = dict(reference.named_parameters())
    w, b = params["weight"].detach(), params.get("bias")
    b = b.detach() if b is not None else None

    def mistakes(x, eps):
        return mistakes_of(x, w, b, eps) if b is not None else mistakes_of(x, w, eps)

    with torch.no_grad():
        for label, make in NORM_CASES:
            with case(label):
                x = make()
                before = x.clone()
                got = call(norm, x, what=f"{name.lower()}(x) with x of shape {list(x.shape)}")
                _unchanged(x, before, f"your {name}")
                expect_close(got, reference(x), f"the output of {name}", mistakes=mistakes(x, 1e-5))

        with case(f"{name}(12, eps=0.1) on values of std 0.1"):
            reference2 = _randomise(make_reference(12, eps=0.1))
            norm2 = build(cls, 12, eps=0.1)
            load_reference_weights(norm2, reference2, f"your {name}(12, eps=0.1)")
            x = torch.randn(3, 5, 12) * 0.1
            got = call(norm2, x.clone(), what=f"{name.lower()}(x)")
            eps_ignored = ("the eps argument is ignored: store it in __init__ (self.eps = eps) and use self.eps",
                           lambda: _with_eps(reference2, 1e-5)(x))
            expect_close(got, reference2(x), f"the output of {name}(12, eps=0.1)", mistakes=[eps_ignored])

        for label, dtype, make in HALF_CASES:
            with case(label):
                x = make().to(dtype)
                got = call(norm, x.clone(), what=f"{name.lower()}(x) with a {dtype} x")
                expected = reference(x)
                _expect_same_dtype(got, x, f"the output of {name}")
                expect_tensor(got, expected, f"the output of {name}")
                expect_close(got.float(), expected.float(), f"the output of {name} for {dtype} input",
                             hint=HALF_HINT[name], **half_tolerance(dtype))

        with case("the module converted to bfloat16 (weights in bfloat16 too)"):
            reference3 = copy.deepcopy(reference).to(torch.bfloat16)
            norm3 = at(copy.deepcopy)(norm).to(torch.bfloat16)
            x = (100 + 2 * torch.randn(2, 4, 16)).to(torch.bfloat16)
            got = call(norm3, x.clone(), what=f"{name.lower()}(x) with weights and x in bfloat16")
            expected = reference3(x)
            _expect_same_dtype(got, x, f"the output of {name}")
            expect_tensor(got, expected, f"the output of {name}")
            expect_close(got.float(), expected.float(), f"the output of {name} in bfloat16",
                         hint=HALF_HINT[name] + " (convert the weights with .float() too)",
                         **half_tolerance(torch.bfloat16))
    kind_cases(norm, (torch.randn(2, 4, 16),), reference, f"{name.lower()}(x) with x of shape [2, 4, 16]", module=True)
    return "{cases} cases, including eps, float16, bfloat16, float64 and meta"


def _with_eps(module, eps):
    """A copy of a reference norm with another eps."""
    other = copy.deepcopy(module)
    other.eps = eps
    return other


@check
def LayerNorm(cls):
    return _check_norm(cls, "LayerNorm", ref.LayerNorm, _layer_norm_mistakes, {"weight": 1.0, "bias": 0.0})


@check
def RMSNorm(cls):
    return _check_norm(cls, "RMSNorm", ref.RMSNorm, _rms_norm_mistakes, {"weight": 1.0})


# --- MLP -----------------------------------------------------------------------------------


def _mlp_mistakes(mlp, x):
    fc, proj = mlp.fc, mlp.proj
    h = fc(x)
    return [
        ("the activation comes after the second linear layer: the MLP is proj(gelu(fc(x))), "
         "not gelu(proj(fc(x))); the output must be free to be negative before it joins the residual stream",
         lambda: F.gelu(proj(h))),
        ("the activation is applied twice, also after proj: the MLP is proj(gelu(fc(x)))",
         lambda: F.gelu(proj(F.gelu(h)))),
        ("the tanh approximation of GELU; this course uses the exact GELU, nn.GELU() (approximate='none')",
         lambda: proj(F.gelu(h, approximate="tanh"))),
        ("ReLU instead of GELU: use nn.GELU()", lambda: proj(F.relu(h))),
        ("SiLU instead of GELU: use nn.GELU()", lambda: proj(F.silu(h))),
        ("there is no activation between fc and proj: two linear layers in a row are just one linear layer",
         lambda: proj(h)),
        ("the activation is applied to the input, before fc: the MLP is proj(gelu(fc(x)))",
         lambda: proj(fc(F.gelu(x)))),
        ("the output is added to the input: the MLP returns proj(gelu(fc(x))) only; the residual "
         "connection belongs to the transformer block",
         lambda: x + proj(F.gelu(h))),
    ]


def _validate_mlp(mlp, d_model, d_hidden, what, explicit):
    mine = dict(mlp.named_parameters())
    for layer in ("fc", "proj"):
        if f"{layer}.weight" in mine and f"{layer}.bias" not in mine:
            raise Mismatch(f"`{layer}` in {what} has no bias",
                           hint="keep the biases: nn.Linear(in, out) has one by default (don't pass bias=False)")
    if "fc.weight" in mine and mine["fc.weight"].dim() == 2 and tuple(mine["fc.weight"].shape) != (d_hidden, d_model):
        got = tuple(mine["fc.weight"].shape)
        if got == (d_model, d_hidden):
            return  # load_reference_weights explains nn.Linear's argument order
        hint = ("d_hidden defaults to 4 * d_model: write d_hidden = d_hidden or 4 * d_model"
                if not explicit else "use the d_hidden argument as the hidden width")
        raise Mismatch(f"{what} has a hidden width of {got[0]}, expected {d_hidden}",
                       [f"`fc.weight` has shape {shape_text(got)}, expected {shape_text((d_hidden, d_model))}"], hint)


def _build_mlp(cls, reference, *args, **kwargs):
    what = "your MLP(" + ", ".join([str(a) for a in args] + [f"{k}={v}" for k, v in kwargs.items()]) + ")"
    mlp = build(cls, *args, **kwargs)
    _validate_mlp(mlp, reference.fc.in_features, reference.fc.out_features, what,
                  explicit=len(args) > 1 or "d_hidden" in kwargs)
    load_reference_weights(mlp, reference, what)
    return mlp


def _ffn_inputs():
    """The inputs both feed-forward checks use (width 16): batch, more leading dims, T = 1, large values."""
    return [("x [2, 5, 16]", torch.randn(2, 5, 16)),
            ("leading dims: x [2, 3, 4, 16]", torch.randn(2, 3, 4, 16)),
            ("T = 1: x [1, 1, 16]", torch.randn(1, 1, 16)),
            ("large values: x [2, 3, 16] * 10", torch.randn(2, 3, 16) * 10)]


FIXED_DROPOUT = ("with the default dropout=0.0 nothing may be dropped, even in train mode: build the dropout from "
                 "the argument, {ctor}, not a fixed rate")


@check
def MLP(cls):
    d = 16
    with case("MLP(16): d_hidden defaults to 4 * d_model = 64"):
        reference = ref.MLP(d).eval()
        mlp = _build_mlp(cls, reference, d)
        mlp.eval()
    with torch.no_grad():
        for label, x in _ffn_inputs():
            with case(label):
                got = call(mlp, x.clone(), what=f"mlp(x) with x of shape {list(x.shape)}")
                expect_close(got, reference(x), "the MLP's output", mistakes=_mlp_mistakes(reference, x))

        with case("MLP(16) in train mode: the default dropout=0.0 drops nothing"):
            x = torch.randn(2, 5, 16)
            mlp.train()
            got = call(mlp, x.clone(), what="mlp(x) in train mode")
            mlp.eval()
            expect_close(got, reference(x), "the MLP's output in train mode", mistakes=_mlp_mistakes(reference, x),
                         hint=FIXED_DROPOUT.format(ctor="nn.Dropout(dropout)"))

        with case("MLP(16, d_hidden=24)"):
            reference2 = ref.MLP(d, 24).eval()
            mlp2 = _build_mlp(cls, reference2, d, 24)
            mlp2.eval()
            x = torch.randn(2, 5, 16)
            got = call(mlp2, x.clone(), what="mlp(x)")
            expect_close(got, reference2(x), "the output of MLP(16, 24)", mistakes=_mlp_mistakes(reference2, x))

        with case("the activation alone: MLP(8, 8) with fc and proj set to the identity, x from -5 to 5"):
            reference3 = ref.MLP(8, 8).eval()
            torch.nn.init.eye_(reference3.fc.weight)
            torch.nn.init.eye_(reference3.proj.weight)
            torch.nn.init.zeros_(reference3.fc.bias)
            torch.nn.init.zeros_(reference3.proj.bias)
            mlp3 = _build_mlp(cls, reference3, 8, 8)
            mlp3.eval()
            x = torch.linspace(-5, 5, 64).reshape(8, 8)
            got = call(mlp3, x.clone(), what="mlp(x)")
            expect_close(got, F.gelu(x), "gelu(x)", atol=1e-6, rtol=1e-5, mistakes=[
                ("the tanh approximation of GELU (it differs from the exact GELU by up to ~5e-4); this course "
                 "uses the exact GELU, nn.GELU() or F.gelu(x) (approximate='none')",
                 lambda: F.gelu(x, approximate="tanh")),
                ("the sigmoid approximation of GELU, x * sigmoid(1.702 x); use the exact GELU, nn.GELU()",
                 lambda: x * torch.sigmoid(1.702 * x)),
                ("ReLU instead of GELU: use nn.GELU()", lambda: F.relu(x)),
                ("SiLU instead of GELU: use nn.GELU()", lambda: F.silu(x)),
            ])

        x = torch.randn(4, 6, 16)
        with case("MLP(16, dropout=0.5) in eval mode: dropout is off"):
            mlp4 = _build_mlp(cls, reference, d, dropout=0.5)
            mlp4.eval()
            expected = reference(x)
            got = call(mlp4, x.clone(), what="mlp(x) in eval mode")
            expect_close(got, expected, "the MLP's output in eval mode", hint=(
                "dropout must be off in eval mode: use self.dropout = nn.Dropout(dropout), which follows "
                "model.train() / model.eval(), or F.dropout(x, p, training=self.training)"))

        with case("MLP(16, dropout=0.5) in train mode: dropout after proj"):
            mlp4.train()
            got = call(mlp4, x.clone(), what="mlp(x) in train mode")
            expect_tensor(got, expected, "the MLP's output in train mode")
            if torch.allclose(got, expected, atol=1e-6):
                raise Mismatch("dropout=0.5 has no effect in train mode",
                               hint="create self.dropout = nn.Dropout(dropout) in __init__ "
                                    "and apply it to the output of proj")
            dropped = got == 0
            scaled = torch.isclose(got, 2 * expected, atol=1e-5, rtol=1e-4)
            unscaled = torch.isclose(got, expected, atol=1e-5, rtol=1e-4)
            if not dropped.any() or not (dropped | scaled | unscaled).all():
                raise Mismatch("dropout is not applied right after proj",
                               ["with dropout on the MLP's output, every output number is either 0 or the "
                                "eval-mode output divided by (1 - p)"],
                               hint="the order is fc → GELU → proj → dropout: "
                                    "self.dropout(self.proj(self.act(self.fc(x))))")
            if not (dropped | scaled).all():
                raise Mismatch("the numbers dropout keeps are not scaled by 1 / (1 - p)",
                               hint="use nn.Dropout(p) (it scales the kept numbers for you) "
                                    "instead of a hand-made mask")
    kind_cases(mlp, (torch.randn(2, 5, 16),), reference, "mlp(x) with x of shape [2, 5, 16]", module=True)
    return "{cases} cases: d_hidden default, exact GELU, dropout after proj, float64 and meta"


# --- SwiGLU ----------------------------------------------------------------------------------


def _swiglu_mistakes(m, x):
    a, b = m.w1(x), m.w3(x)
    mistakes = [
        ("w1 and w3 are swapped: SiLU goes on w1(x) (the gate) and w3(x) is multiplied in as it is",
         lambda: swiglu_gate_on_w3(m, x)),
        ("sigmoid instead of SiLU: silu(z) = z * sigmoid(z), use F.silu", lambda: m.w2(torch.sigmoid(a) * b)),
        ("GELU instead of SiLU: SwiGLU uses F.silu (Swish)", lambda: m.w2(F.gelu(a) * b)),
        ("ReLU instead of SiLU: SwiGLU uses F.silu (Swish)", lambda: m.w2(F.relu(a) * b)),
        ("there is no gate: w3(x) is never multiplied in; SwiGLU is w2(silu(w1(x)) * w3(x))",
         lambda: m.w2(F.silu(a))),
        ("SiLU is applied after multiplying: the gate is silu(w1(x)), multiplied by w3(x)",
         lambda: m.w2(F.silu(a * b))),
        ("SiLU is applied to both branches: only w1(x) goes through SiLU", lambda: m.w2(F.silu(a) * F.silu(b))),
        ("the branches are added: SwiGLU multiplies silu(w1(x)) * w3(x) element by element",
         lambda: m.w2(F.silu(a) + b)),
        ("the activation comes after the output projection w2: SwiGLU is w2(silu(w1(x)) * w3(x))",
         lambda: F.silu(m.w2(a * b))),
    ]
    if m.w1.out_features == m.w1.in_features:
        mistakes.insert(1, ("w2 and w3 have swapped roles: w3 is the second projection d_model → d_hidden "
                            "(multiplied with the gate); w2 is the output projection d_hidden → d_model",
                            lambda: m.w3(F.silu(a) * m.w2(x))))
    return mistakes


def _build_swiglu(cls, d_model, d_hidden):
    what = f"your SwiGLU({d_model}, {d_hidden})"
    reference = ref.SwiGLU(d_model, d_hidden)
    m = build(cls, d_model, d_hidden)
    mine = {n: tuple(p.shape) for n, p in m.named_parameters()}
    if (d_model != d_hidden and mine.get("w2.weight") == (d_hidden, d_model)
            and mine.get("w3.weight") == (d_model, d_hidden)):
        raise Mismatch(f"w2 and w3 have swapped roles in {what}",
                       [f"`w2.weight` has shape {shape_text(mine['w2.weight'])}, "
                        f"expected {shape_text((d_model, d_hidden))}",
                        f"`w3.weight` has shape {shape_text(mine['w3.weight'])}, "
                        f"expected {shape_text((d_hidden, d_model))}"],
                       hint="w1 and w3 both map d_model → d_hidden (w1 is the gate, inside SiLU); w2 maps "
                            "d_hidden → d_model: w2(silu(w1(x)) * w3(x))")
    load_reference_weights(m, reference, what)
    return m, reference


@check
def SwiGLU(cls):
    with case("SwiGLU(16, 24)"):
        m, reference = _build_swiglu(cls, 16, 24)
    with torch.no_grad():
        for label, x in _ffn_inputs():
            with case(label):
                got = call(m, x.clone(), what=f"swiglu(x) with x of shape {list(x.shape)}")
                expect_close(got, reference(x), "the SwiGLU output", mistakes=_swiglu_mistakes(reference, x))
        with case("SwiGLU(12, 12): d_hidden = d_model"):
            m2, reference2 = _build_swiglu(cls, 12, 12)
            x = torch.randn(3, 4, 12)
            got = call(m2, x.clone(), what="swiglu(x)")
            expect_close(got, reference2(x), "the SwiGLU output", mistakes=_swiglu_mistakes(reference2, x))
    kind_cases(m, (torch.randn(2, 5, 16),), reference, "swiglu(x) with x of shape [2, 5, 16]", module=True)
    return "{cases} cases, float64 and meta"


# --- TransformerBlock ----------------------------------------------------------------------


SUBMODULES = {
    "ln1": "LayerNorm(d_model)",
    "attn": "MultiHeadAttention(d_model, n_heads, causal=True, dropout=dropout)",
    "ln2": "LayerNorm(d_model)",
    "mlp": "MLP(d_model, dropout=dropout)",
}


def _build_block(cls, reference, *args, **kwargs):
    label = "your TransformerBlock(" + ", ".join([str(a) for a in args] + [f"{k}={v}" for k, v in kwargs.items()]) + ")"
    block = build(cls, *args, **kwargs)
    mine = dict(block.named_parameters())
    for prefix, ctor in SUBMODULES.items():
        if not any(n.startswith(prefix + ".") for n in mine):
            raise Mismatch(f"{label} has no sub-module `{prefix}` with parameters",
                           ["expected parameters such as "
                            f"{next(n for n, _ in reference.named_parameters() if n.startswith(prefix + '.'))}"],
                           hint=f"create it in __init__: self.{prefix} = {ctor}")
    try:
        load_reference_weights(block, reference, label)
    except Mismatch as m:
        if m.hint is None or m.summary.startswith(label + " has no parameter"):
            if "`attn." in m.summary:
                m.hint = ("self.attn should be the MultiHeadAttention of notebook 04 (or ref.MultiHeadAttention): "
                          "its parameters are q_proj, k_proj, v_proj and out_proj")
            elif "`mlp." in m.summary:
                m.hint = "self.mlp should be your MLP: its layers are called fc and proj, both with bias"
            elif "`ln" in m.summary:
                m.hint = "ln1 and ln2 are LayerNorms, each with a weight and a bias"
        raise
    return block


def _block_mistakes(block, x, mask):
    ln1, ln2, mlp = block.ln1, block.ln2, block.mlp

    def attn(z, use_mask=True):
        return block.attn(z, mask if use_mask else None)

    def normalised_stream():
        h = ln1(x)
        h = h + attn(h)
        h = ln2(h)
        return h + mlp(h)

    def normalised_stream_attention_only():
        h = ln1(x)
        h = h + attn(h)
        return h + mlp(ln2(h))

    def post_norm():
        h = ln1(x + attn(x))
        return ln2(h + mlp(h))

    def pre(first_ln, second_ln, use_mask=True, attn_residual=True, mlp_residual=True):
        a = attn(first_ln(x), use_mask)
        h = x + a if attn_residual else a
        m = mlp(second_ln(h))
        return h + m if mlp_residual else m

    def not_causal():
        block.attn.causal = False
        try:
            return pre(ln1, ln2)
        finally:
            block.attn.causal = True

    identity = torch.nn.Identity()
    mistakes = [
        ("you normalised the residual stream itself (x = ln1(x); x = x + attn(x)): normalise only the "
         "input of each sublayer, x = x + self.attn(self.ln1(x), mask), so the stream is never normalised",
         normalised_stream),
        ("you normalised the residual stream itself before attention (x = ln1(x); x = x + attn(x)): "
         "write x = x + self.attn(self.ln1(x), mask)",
         normalised_stream_attention_only),
        ("this is post-norm (the 2017 Transformer: x = ln1(x + attn(x))); the exercise asks for pre-norm: "
         "x = x + attn(ln1(x), mask); x = x + mlp(ln2(x))",
         post_norm),
        ("the residual connection around attention is missing: x = x + self.attn(self.ln1(x), mask)",
         lambda: pre(ln1, ln2, attn_residual=False)),
        ("the residual connection around the MLP is missing: x = x + self.mlp(self.ln2(x))",
         lambda: pre(ln1, ln2, mlp_residual=False)),
        ("both residual connections are missing: add each sublayer's output to x",
         lambda: pre(ln1, ln2, attn_residual=False, mlp_residual=False)),
        ("the MLP sees the block's input instead of the stream after attention: first "
         "x = x + attn(ln1(x), mask), then x = x + mlp(ln2(x)) with the updated x",
         lambda: x + attn(ln1(x)) + mlp(ln2(x))),
        ("ln1 and ln2 are swapped: ln1 goes before attention, ln2 before the MLP", lambda: pre(ln2, ln1)),
        ("ln1 is used twice: the MLP's input goes through ln2", lambda: pre(ln1, ln1)),
        ("there is no LayerNorm: x = x + attn(ln1(x), mask); x = x + mlp(ln2(x))", lambda: pre(identity, identity)),
        ("attention is not causal: build it with MultiHeadAttention(d_model, n_heads, causal=True)", not_causal),
    ]
    if mask is not None:
        mistakes.insert(0, ("the mask is not passed to attention: self.attn(self.ln1(x), mask)",
                            lambda: pre(ln1, ln2, use_mask=False)))
    return mistakes


@check
def TransformerBlock(cls):
    d, h = 16, 4
    with case("TransformerBlock(16, 4)"):
        reference = _randomise(ref.TransformerBlock(d, h)).eval()
        block = _build_block(cls, reference, d, h)
        block.eval()
    lengths = torch.tensor([6, 4, 2])
    padding = torch.arange(6)[None, :] < lengths[:, None]  # [3, 6]: True for real tokens
    cases = [
        ("x [2, 5, 16], mask=None", torch.randn(2, 5, 16), None),
        ("T = 1: x [1, 1, 16]", torch.randn(1, 1, 16), None),
        ("x [3, 6, 16] with a padding mask [3, 1, 6] (lengths 6, 4, 2)", torch.randn(3, 6, 16), padding[:, None, :]),
        ("large values: x [2, 4, 16] * 10", torch.randn(2, 4, 16) * 10, None),
    ]
    with torch.no_grad():
        for label, x, mask in cases:
            with case(label):
                args = (x.clone(),) if mask is None else (x.clone(), mask)
                got = call(block, *args, what="block(x)" if mask is None else "block(x, mask)")
                expect_close(got, reference(x, mask), "the block's output", atol=1e-5, rtol=1e-4, names="B T C",
                             mistakes=_block_mistakes(reference, x, mask))

        with case("x [2, 5, 16] in train mode: the default dropout=0.0 drops nothing"):
            x = torch.randn(2, 5, 16)
            block.train()
            got = call(block, x.clone(), what="block(x) in train mode")
            block.eval()
            expect_close(got, reference(x), "the block's output in train mode", atol=1e-5, rtol=1e-4,
                         mistakes=_block_mistakes(reference, x, None),
                         hint=FIXED_DROPOUT.format(ctor="MultiHeadAttention(..., dropout=dropout) and "
                                                        "MLP(..., dropout=dropout)"))

        with case("causality: changing the last token of x [2, 5, 16]"):
            x = torch.randn(2, 5, 16)
            x2 = x.clone()
            x2[:, -1] = torch.randn(2, 16)
            first, second = call(block, x.clone(), what="block(x)"), call(block, x2, what="block(x)")
            if not torch.allclose(first[:, :-1], second[:, :-1], atol=1e-5):
                raise Mismatch("the block is not causal: changing the last token changed earlier outputs",
                               hint="build attention with causal=True")

        x = torch.randn(2, 5, 16)
        with case("TransformerBlock(16, 4, dropout=0.5) in eval mode"):
            reference2 = _randomise(ref.TransformerBlock(d, h, dropout=0.5)).eval()
            block2 = _build_block(cls, reference2, d, h, dropout=0.5)
            block2.eval()
            expected = reference2(x)
            got = call(block2, x.clone(), what="block(x) in eval mode")
            expect_close(got, expected, "the block's output in eval mode",
                         mistakes=_block_mistakes(reference2, x, None),
                         hint="dropout must be off in eval mode: use nn.Dropout modules (they follow .eval())")

        with case("TransformerBlock(16, 4, dropout=0.5) in train mode"):
            block2.train()
            got = call(block2, x.clone(), what="block(x) in train mode")
            expect_tensor(got, expected, "the block's output in train mode")
            if torch.allclose(got, expected, atol=1e-6):
                raise Mismatch("dropout=0.5 has no effect in train mode: the dropout argument is ignored",
                               hint="pass it on: MultiHeadAttention(d_model, n_heads, causal=True, dropout=dropout) "
                                    "and MLP(d_model, dropout=dropout)")
            # each part must get it: a block that passes dropout to only one of them changes too
            for part, ctor in (("attn", "MultiHeadAttention(d_model, n_heads, causal=True, dropout=dropout)"),
                               ("mlp", "MLP(d_model, dropout=dropout)")):
                sub = getattr(block2, part, None)
                if not isinstance(sub, torch.nn.Module):
                    continue
                h_in = reference2.ln1(x) if part == "attn" else reference2.ln2(x)
                sub.eval()
                calm = call(sub, h_in.clone(), what=f"block.{part}(x) in eval mode")
                sub.train()
                noisy = call(sub, h_in.clone(), what=f"block.{part}(x) in train mode")
                if (isinstance(noisy, torch.Tensor) and isinstance(calm, torch.Tensor)
                        and torch.allclose(noisy, calm, atol=1e-6)):
                    raise Mismatch(f"TransformerBlock(16, 4, dropout=0.5): `{part}` has no dropout in train mode",
                                   ["the block's output changes in train mode, so some dropout is on, but not in "
                                    f"`{part}`"],
                                   hint=f"pass the dropout argument on to every part: self.{part} = {ctor}")

    # n_heads = 4 = d_model // n_heads above: a second shape, so n_heads and d_head cannot be swapped unseen
    d2, h2 = 16, 2
    with case(f"TransformerBlock({d2}, {h2}): 2 heads of width 8"):
        reference3 = _randomise(ref.TransformerBlock(d2, h2)).eval()
        block3 = _build_block(cls, reference3, d2, h2)
        block3.eval()
        x = torch.randn(2, 5, d2)
        swapped = ref.TransformerBlock(d2, d2 // h2).eval()
        swapped.load_state_dict(reference3.state_dict())
        with torch.no_grad():
            got = call(block3, x.clone(), what="block(x)")
            expect_close(got, reference3(x), "the block's output", atol=1e-5, rtol=1e-4, mistakes=[
                ("the attention has d_model // n_heads heads: pass n_heads itself, "
                 "MultiHeadAttention(d_model, n_heads, ...), not the width of a head", lambda: swapped(x)),
            ] + _block_mistakes(reference3, x, None))
    kind_cases(block, (torch.randn(3, 6, 16), padding[:, None, :]), reference,
               "block(x, mask) with x [3, 6, 16] and a padding mask [3, 1, 6]", module=True)
    return "{cases} cases, with and without a padding mask, causal, dropout in each part, 2 and 4 heads, float64 " \
           "and meta"

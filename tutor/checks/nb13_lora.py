"""Checks for notebook 13: adapting a pretrained model (LoRALinear, add_lora, merge_lora, sft_example).

A learner's LoRA layer is found by what it does, not by its attribute names: its trainable parameters must be the two
factors, ``A`` of shape ``[r, in_features]`` and ``B`` of shape ``[out_features, r]`` (``nn.Parameter``s, or the
weights of two bias-free ``nn.Linear``s as PEFT has them), and the base layer's weights, kept or copied, frozen. The
check copies random values into the factors to compare the forward pass with the formula.
"""

import copy
import math

import torch
import torch.nn as nn

from tutor import reference as ref
from tutor.checks import beside
from tutor.checks.compare import expect_close, shape_text
from tutor.checks.harness import (
    LearnerError,
    Mismatch,
    at,
    build,
    call,
    case,
    check,
    error_details,
    generator,
    is_signature_error,
    manual_seed,
    twin,
)
from tutor.course import catalog

__all__ = catalog.check_names(__name__)  # this notebook's exercises (tutor.course.catalog)

FORMULA = "base(x) + (alpha / r) * x @ A.T @ B.T, with A [r, in_features] and B [out_features, r]"


def _linear(d_in, d_out, bias=True, seed=0):
    with torch.random.fork_rng(devices=[]):
        manual_seed(seed)
        return nn.Linear(d_in, d_out, bias=bias)


def _factors(layer, base, r, what):
    """The learner's ``(A, B)`` and their names: its two trainable parameters, told apart by shape (``A`` and ``B``
    are copies when the learner's code runs in another process: write to them with ``beside.assign_parameters``)."""
    trainable = [(n, p) for n, p in layer.named_parameters() if p.requires_grad]
    frozen_base = [n for n, p in layer.named_parameters()
                   if p.requires_grad and tuple(p.shape) in {tuple(base.weight.shape), (base.out_features,)}]
    if frozen_base:
        raise Mismatch(f"the base layer's weights still train in {what}",
                       [f"trainable: {', '.join(n + ' ' + shape_text(p.shape) for n, p in trainable)}"],
                       hint="freeze them: base.weight.requires_grad_(False), and the bias too (for p in "
                            "base.parameters(): p.requires_grad_(False)); only A and B train")
    a_shape, b_shape = (r, base.in_features), (base.out_features, r)
    by_shape = {tuple(p.shape): p for _, p in trainable}
    names = {tuple(p.shape): n for n, p in trainable}
    if len(trainable) != 2 or a_shape not in by_shape or b_shape not in by_shape:
        transposed = {a_shape[::-1], b_shape[::-1]} <= set(by_shape)
        listed = ", ".join(n + " " + shape_text(p.shape) for n, p in trainable) or "none"
        raise Mismatch(f"{what} should train exactly two factors, A {shape_text(a_shape)} and B {shape_text(b_shape)}",
                       [f"trainable parameters: {listed}"],
                       hint="store A as [r, in_features] and B as [out_features, r] (PEFT's layout, and nn.Linear's "
                            "[out, in])" if transposed else
                       "self.A = nn.Parameter(torch.empty(r, base.in_features)), self.B = nn.Parameter(torch.zeros("
                       "base.out_features, r)); nothing else trains")
    return by_shape[a_shape], by_shape[b_shape], names[a_shape], names[b_shape]


def _lora_output(base, A, B, scale, x):
    return base(x) + scale * (x @ A.T @ B.T)


def _scale_mistakes(base, A, B, r, alpha, x):
    def out(scale):
        return lambda: _lora_output(base, A, B, scale, x)

    mistakes = [(f"the update is scaled by alpha // r = {alpha // r:g}: // rounds down; the scale is alpha / r = "
                 f"{alpha / r:g} (Python's / gives a float)", out(alpha // r)),
                (f"the update is scaled by r / alpha = {r / alpha:g}; the scale is alpha / r = {alpha / r:g}",
                 out(r / alpha)),
                (f"the update is scaled by alpha = {alpha:g} alone; the scale is alpha / r = {alpha / r:g}",
                 out(alpha)),
                (f"the update is not scaled; multiply it by alpha / r = {alpha / r:g}", out(1.0)),
                (f"the update is scaled by 1 / r; the scale is alpha / r = {alpha / r:g}", out(1 / r)),
                ("the update is added without the base layer's output: return base(x) + the update",
                 lambda: (alpha / r) * (x @ A.T @ B.T)),
                ("the update misses the base layer's bias: keep base(x) as it is (weight and bias) and add the update",
                 lambda: _lora_output(base, A, B, alpha / r, x) - (base.bias if base.bias is not None else 0))]
    if base.in_features == base.out_features:
        mistakes.append(("A and B are multiplied in the wrong order: x @ B @ A; the update is x @ A.T @ B.T (first "
                         "down to r with A, then up with B)", lambda: base(x) + (alpha / r) * (x @ B @ A)))
    return mistakes


def _forward(layer, x):
    before = x.clone()
    try:
        got = call(layer, x, what=f"layer(x) with x {shape_text(x.shape)}")
    except LearnerError as e:
        if not is_signature_error(e.error) and ("shape" in str(e.error) or "size of tensor" in str(e.error)):
            e.hint = ("A and B multiplied in the wrong order? x @ A.T takes x down to r numbers ([..., r]), then "
                      "@ B.T up to out_features: x @ A.T @ B.T")
        raise
    if x.device.type != "meta" and not torch.equal(x, before):
        raise Mismatch("your forward changed its input x in place", hint="compute base(x) + the update as new tensors")
    return got


LAYER_CASES = [  # (label, d_in, d_out, bias, r, alpha)
    ("nn.Linear(12, 20), r = 4, alpha = 8", 12, 20, True, 4, 8.0),
    ("nn.Linear(16, 16) without bias, r = 2, alpha = 16", 16, 16, False, 2, 16.0),
    ("nn.Linear(10, 6), r = 2, alpha = 5 (whole numbers, alpha / r = 2.5)", 10, 6, True, 2, 5),
    ("nn.Linear(10, 6), r = 1, alpha = 1", 10, 6, True, 1, 1.0),
]
LEADING_HINT = ("a layer gets x with any leading dimensions ([in_features], [B, T, in_features], ...): work on the "
                "last axis only, x @ A.T @ B.T, without reshaping to a fixed number of axes")
SCALE_HINT = "self.scale = alpha / r: Python's / gives a float (2.5 for alpha = 5, r = 2); // rounds down"


def _expect_scale(layer, r, alpha):
    """``layer.scale`` is the float alpha / r (merge_lora reads it)."""
    scale = getattr(layer, "scale", None)
    if scale is None:
        raise Mismatch("your LoRA layer has no `scale`", hint=SCALE_HINT + " (merge_lora reads layer.scale)")
    if isinstance(scale, bool) or not isinstance(scale, float) or not math.isclose(scale, alpha / r, rel_tol=1e-6):
        shown = f"{scale!r} ({type(scale).__name__})" if not isinstance(scale, float) else f"{scale:g}"
        hint = SCALE_HINT
        if isinstance(scale, (int, float)) and not isinstance(scale, bool) and scale == alpha // r:
            hint = "alpha // r rounds down (5 // 2 is 2): " + SCALE_HINT
        raise Mismatch(f"layer.scale is {shown}; it should be the float alpha / r = {alpha / r:g}", hint=hint)


def _x_grad_mistakes(original, A, B, scale, x):
    """The gradients with respect to x of the classic mistakes: a term whose gradient stops."""
    def grad(frozen_base, frozen_update):
        leaf = x.clone().requires_grad_(True)
        out = (original(leaf.detach()) if frozen_base else original(leaf)) + \
            scale * ((leaf.detach() if frozen_update else leaf) @ A.T @ B.T)
        out.sum().backward()
        return leaf.grad

    return [("base(x) is computed under torch.no_grad() (or from x.detach()): the gradient stops reaching x through "
             "the frozen weight, so every layer below learns from a wrong gradient. Freezing base's parameters "
             "(requires_grad_(False)) is all it takes", lambda: grad(True, False)),
            ("the update is computed from x.detach(): the gradient of the update does not reach x", lambda: grad(False,
                                                                                                              True))]


def _check_layer(cls, g, label, d_in, d_out, bias, r, alpha):
    base = _linear(d_in, d_out, bias)
    original = copy.deepcopy(base)
    layer = build(cls, twin(base, d_in, d_out, bias=bias), r, alpha,
                  what=f"LoRALinear(nn.Linear({d_in}, {d_out}), r={r}, alpha={alpha:g})")
    A, B, a_name, b_name = _factors(layer, base, r, "your LoRA layer")
    x = torch.randn(2, 5, d_in, generator=g)
    expected = original(x).detach()
    got = _forward(layer, x)
    if isinstance(got, torch.Tensor) and got.shape == expected.shape and not torch.allclose(got, expected, atol=1e-5):
        if B.abs().sum() > 0:
            raise Mismatch("the adapted layer does not start equal to the base layer: B starts random",
                           [f"largest difference from base(x) at the start: {(got - expected).abs().max().item():.3g}"],
                           hint="start B at zero (torch.zeros), A random: the update B A x is then zero, and "
                                "fine-tuning starts from the pretrained model itself")
    expect_close(got, expected, "the output at the start (B = 0: equal to base(x))",
                 hint="at the start B = 0, so the layer must give base(x) exactly",
                 mistakes=[("the base layer's bias is missing: return base(x) (weight and bias) plus the update",
                            lambda: x @ original.weight.detach().T)])
    if A.abs().sum() == 0 and B.abs().sum() > 0:
        raise Mismatch("A is zero and B random: the factors start the other way round",
                       hint="the other way round: A random (nn.init.kaiming_uniform_(A, a=math.sqrt(5)), as "
                            "PEFT) and B zero, as in the LoRA paper")
    if A.abs().sum() == 0:
        raise Mismatch("A and B both start at zero: no gradient reaches either factor, nothing trains",
                       hint="A random (nn.init.kaiming_uniform_(self.A, a=math.sqrt(5)), as PEFT), B zero")
    if A.detach().std() < 1e-3 or A.detach().std() > 10:
        raise Mismatch(f"A starts with a standard deviation of {A.detach().std().item():.3g}",
                       hint="draw A like an nn.Linear weight: nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))")
    A, B = torch.randn(A.shape, generator=g), torch.randn(B.shape, generator=g)  # to see the update
    at(beside.assign_parameters)(layer, {a_name: A, b_name: B})
    expected = _lora_output(original, A, B, alpha / r, x).detach()
    got = _forward(layer, x)
    expect_close(got, expected, f"the output with random A and B ({FORMULA})", atol=1e-4,
                 mistakes=_scale_mistakes(original, A, B, r, alpha, x))
    _expect_scale(layer, r, alpha)
    for shape in ((d_in,), (2, 3, 2, d_in)):  # any leading dimensions, none included
        with case(f"x of shape {shape_text(shape)}", hint_on_error=LEADING_HINT):
            xs = torch.randn(shape, generator=g)
            expect_close(_forward(layer, xs), _lora_output(original, A, B, alpha / r, xs).detach(),
                         f"the output for x of shape {shape_text(shape)}", atol=1e-4, hint=LEADING_HINT)
    out, x_grad = call(at(beside.input_grad), layer, x, what="layer(x).sum().backward()")
    grads = {n: p.grad for n, p in layer.named_parameters()}
    if grads.get(a_name) is None or grads.get(b_name) is None:
        raise Mismatch("no gradient reaches A or B", hint="use self.A and self.B in forward, without .detach()")
    leaf = x.clone().requires_grad_(True)
    _lora_output(original, A, B, alpha / r, leaf).sum().backward()
    if x_grad is None:
        raise Mismatch("no gradient reaches x through your layer",
                       hint="compute the output from x itself, outside torch.no_grad(): the layers below need it")
    expect_close(x_grad, leaf.grad, "the gradient of the output with respect to x", atol=1e-4,
                 mistakes=_x_grad_mistakes(original, A, B, alpha / r, x))


def _check_dtype_and_device(cls, g):
    """A and B follow base.weight: a float64 base and a base on the meta device (shapes only, no data)."""
    with case("nn.Linear(8, 4) in float64, r = 2, alpha = 4"):
        base = _linear(8, 4, True, seed=3).double()
        layer = build(cls, twin(base, 8, 4, dtype=torch.float64), 2, 4.0,
                      what="LoRALinear(nn.Linear(8, 4, dtype=torch.float64), r=2, alpha=4)")
        A, B, _, _ = _factors(layer, base, 2, "your LoRA layer")
        for name, factor in (("A", A), ("B", B)):
            if factor.dtype != torch.float64:
                raise Mismatch(f"{name} is {factor.dtype}, but base.weight is torch.float64",
                               hint=DEVICE_HINT)
        x = torch.randn(3, 8, dtype=torch.float64, generator=g)
        expect_close(_forward(layer, x), base(x).detach(), "the output for a float64 layer and x")
    with case("a base on the meta device (shapes only, no data), r = 2, alpha = 4"):
        layer = build(cls, at(nn.Linear)(8, 4, device="meta"), 2, 4.0,
                      what="LoRALinear(nn.Linear(8, 4, device='meta'), r=2, alpha=4)")
        A, B, _, _ = _factors(layer, nn.Linear(8, 4, device="meta"), 2, "your LoRA layer")
        for name, factor in (("A", A), ("B", B)):
            if factor.device.type != "meta":
                raise Mismatch(f"{name} is on {factor.device}, but base.weight is on meta (a GPU's, elsewhere)",
                               hint=DEVICE_HINT)


DEVICE_HINT = ("create A and B where base.weight is, in its dtype: torch.zeros(..., device=base.weight.device, "
               "dtype=base.weight.dtype); a model on the GPU, or in bfloat16, has its LoRA factors there too")


@check
def LoRALinear(cls):
    g = generator(0)
    for label, d_in, d_out, bias, r, alpha in LAYER_CASES:
        with case(label):
            _check_layer(cls, g, label, d_in, d_out, bias, r, alpha)
    _check_dtype_and_device(cls, g)
    return ("{cases} layers: starts equal to the base, alpha / r, only A and B train, the gradient reaches x, "
            "any leading dimensions, float64 and meta")


# --- add_lora -----------------------------------------------------------------------------------------------------

SMALL = dict(vocab_size=13, max_len=8, d_model=16, n_heads=2, n_layers=2)
Q = ["blocks.0.attn.q_proj", "blocks.1.attn.q_proj"]
ADD_CASES = [  # (label, targets as given, the names it must replace, in the model's order)
    ("targets ['q_proj', 'v_proj'] (a list)", ["q_proj", "v_proj"],
     ["blocks.0.attn.q_proj", "blocks.0.attn.v_proj", "blocks.1.attn.q_proj", "blocks.1.attn.v_proj"]),
    ("targets ('proj',) (a tuple, as ft.LORA_TARGETS): the MLP's proj, not q_proj or out_proj", ("proj",),
     ["blocks.0.mlp.proj", "blocks.1.mlp.proj"]),
    ("targets ['blocks.1.mlp.fc', 'attn.out_proj'] (a longer end, a whole name)", ["blocks.1.mlp.fc", "attn.out_proj"],
     ["blocks.0.attn.out_proj", "blocks.1.attn.out_proj", "blocks.1.mlp.fc"]),
    ("targets 'head' (one name, given as a string)", "head", ["head"]),
    ("targets ['q_proj', 'attn.q_proj'] (two names for the same layers)", ["q_proj", "attn.q_proj"], Q),
    ("targets iter(['v_proj', 'q_proj']) (an iterator: it can be read once)", "iterator",
     ["blocks.0.attn.q_proj", "blocks.0.attn.v_proj", "blocks.1.attn.q_proj", "blocks.1.attn.v_proj"]),
]
TARGETS_HINT = ("targets may be any iterable (a list, a tuple such as ft.LORA_TARGETS, an iterator) or one name as a "
                "string: read them once, targets = [targets] if isinstance(targets, str) else list(targets)")


def _gpt(seed=0):
    with torch.random.fork_rng(devices=[]):
        manual_seed(seed)
        return ref.GPT(ref.GPTConfig(**SMALL)).eval()


def _add(fn, model, targets, label, r=2, alpha=4.0):
    shown = "iter(['v_proj', 'q_proj'])" if targets == "iterator" else repr(targets)
    given = at(iter)(["v_proj", "q_proj"]) if targets == "iterator" else targets
    before = list(targets) if isinstance(targets, list) else None
    try:
        got = call(fn, model, given, r, alpha, lora_class=at(ref.LoRALinear),
                   what=f"add_lora(model, {shown}, r={r}, alpha={alpha:g}, lora_class=LoRALinear)")
    except LearnerError as e:
        if is_signature_error(e.error):
            e.hint = ("add_lora takes lora_class=LoRALinear as its last argument and builds "
                      "lora_class(linear, r, alpha) for each target")
        elif isinstance(targets, str) and isinstance(e.error, ValueError):
            raise Mismatch(f"add_lora(model, {targets!r}, ...) read the one target letter by letter",
                           error_details(e), hint=TARGETS_HINT) from None
        elif isinstance(e.error, AttributeError) and "LoRALinear" in str(e.error):
            e.hint = ("a layer that two targets name was wrapped twice (a LoRALinear around a LoRALinear, which has "
                      "no .weight): find the names first, each once, then replace them")
        elif not isinstance(targets, list) and isinstance(e.error, (TypeError, AttributeError)):
            e.hint = TARGETS_HINT
        raise
    if before is not None and targets != before:
        raise Mismatch("add_lora changed the list of targets it was given", [f"before {before}", f"after  {targets}"],
                       hint="read targets; don't append to them, sort them or remove from them in place")
    return got


def _expect_replaced(model, got, targets, names):
    wrapped = [n for n, m in model.named_modules() if isinstance(m, ref.LoRALinear)]
    if sorted(wrapped) != sorted(names):
        extra, missing = sorted(set(wrapped) - set(names)), sorted(set(names) - set(wrapped))
        hint = "match the end of a layer's name: name == target or name.endswith('.' + target)"
        if any(n.endswith(".base") for n in extra):
            hint = ("a layer that two targets name is wrapped once: find the names first (each once), then replace "
                    "them; not one pass per target")
        elif any(n.endswith("_proj") for n in extra) and "proj" in targets:
            hint = ("'proj' also matches q_proj and out_proj (as a part of the name, or as an end without the dot): "
                    + hint)
        elif isinstance(targets, str) and not wrapped:
            hint = (f"the one target {targets!r} was read letter by letter (a string is an iterable of its letters): "
                    + TARGETS_HINT)
        elif not wrapped:
            hint = ("replace each layer in its parent: parent = model.get_submodule(name.rpartition('.')[0]); "
                    "setattr(parent, child_name, lora_class(layer, r, alpha)). " + hint)
        elif targets == "iterator" and missing:
            hint = TARGETS_HINT
        raise Mismatch(f"add_lora replaced the wrong layers for {targets!r}",
                       [f"expected {names}", f"got      {sorted(wrapped)}"]
                       + ([f"not replaced: {missing}"] if missing else [])
                       + ([f"replaced but not asked for: {extra}"] if extra else []), hint)
    if not isinstance(got, (list, tuple)) or sorted(got) != sorted(names) or len(got) != len(set(got)):
        raise Mismatch("add_lora should return the names it replaced, each once",
                       [f"expected {names}", f"got      {got!r}"], hint="collect them in a list and return it")
    if list(got) != names:
        raise Mismatch("add_lora returned the names in another order than the model's",
                       [f"expected {names}", f"got      {list(got)}"],
                       hint="keep the model's order: the order of model.named_modules(), not the targets' order")


@check
def add_lora(fn):
    r, alpha = 2, 4.0
    ids = torch.randint(0, SMALL["vocab_size"], (2, 6), generator=generator(0))
    for label, targets, names in ADD_CASES:
        with case(label):
            model = twin(_gpt(), ref.GPTConfig(**SMALL))
            before = model(ids).detach()
            got = _add(fn, model, targets, label, r, alpha)
            _expect_replaced(model, got, targets, names)
            trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
            factors = sorted(f"{n}.{f}" for n in names for f in ("A", "B"))
            if trainable != factors:
                rest = [n for n in trainable if n not in factors]
                if not trainable:
                    raise Mismatch("nothing in the model trains: the LoRA factors were frozen too",
                                   hint="freeze the model's parameters first, then add the LoRA layers (their A and "
                                        "B are created trainable)")
                raise Mismatch(f"{len(rest)} parameters that are not LoRA factors still train",
                               [f"for example {rest[:4]}"],
                               hint="freeze every parameter of the model first: for p in model.parameters(): "
                                    "p.requires_grad_(False); then add the LoRA layers")
            expect_close(model(ids).detach(), before, "the model's logits right after add_lora (B = 0)",
                         hint="a LoRA layer starts equal to the layer it wraps: did a layer lose its weights?")
    for targets, why in ((["qproj"], "names no layer"), (["q_proj", "qproj"], "names no layer, though 'q_proj' does"),
                         (["attn"], "names an attention block, not an nn.Linear")):
        bad = targets[-1]
        with case(f"targets {targets}: {bad!r} {why}"):
            model = twin(_gpt(), ref.GPTConfig(**SMALL))
            try:
                got = call(fn, model, list(targets), r, alpha, lora_class=at(ref.LoRALinear),
                           what=f"add_lora(model, {targets}, ...)")
            except LearnerError as e:
                if not isinstance(e.error, ValueError):
                    raise
                if bad not in str(e.error):
                    raise Mismatch(f"the ValueError does not name the target {bad!r}", error_details(e)[:1],
                                   hint="say which target matched nothing: a typo is then found at once") from None
            else:
                raise Mismatch(f"add_lora(model, {targets}, ...) returned without an error, though {bad!r} {why}",
                               [f"it returned {got!r}"],
                               hint="check every target: raise ValueError naming each one that matches no nn.Linear "
                                    "(a typo would otherwise train nothing silently), even when others match")
    return "{cases} cases: by the end of the name, any iterable or one string, once each, in the model's order, " \
           "the rest frozen, a typo is an error that names it"


# --- merge_lora ---------------------------------------------------------------------------------------------------


def _lora_layer(d_in, d_out, bias, r, alpha, seed):
    layer = ref.LoRALinear(_linear(d_in, d_out, bias, seed), r, alpha)
    g = generator(seed + 1)
    with torch.no_grad():
        layer.A.copy_(torch.randn(layer.A.shape, generator=g))
        layer.B.copy_(torch.randn(layer.B.shape, generator=g) * 0.1)
    return layer


def _merge_mistakes(layer, x):
    W, A, B, s = layer.base.weight.detach(), layer.A.detach(), layer.B.detach(), layer.scale
    bias = layer.base.bias.detach() if layer.base.bias is not None else 0

    def out(weight, b=bias):
        return lambda: x @ weight.T + b

    mistakes = [(f"the scale is missing: the merged weight is W + (alpha / r) * B @ A, alpha / r = {s:g}",
                 out(W + B @ A)),
                (f"the scale is r / alpha; it is alpha / r = {s:g}", out(W + (1 / s) * (B @ A))),
                ("the update was added twice: merge it once, W + (alpha / r) * B @ A", out(W + 2 * s * (B @ A))),
                ("the bias was lost: copy base.bias into the merged layer", out(W + s * (B @ A), 0)),
                ("the merged weight is the update alone: add it to the base weight W", out(s * (B @ A)))]
    if W.shape[0] == W.shape[1]:
        mistakes.append(("the update is transposed: nn.Linear stores its weight [out, in], and B @ A is [out, in]; "
                         "A.T @ B.T is its transpose", out(W + s * (A.T @ B.T))))
    return mistakes


MERGE_CASES = [  # (label, d_in, d_out, bias, r, alpha, dtype, scale set by hand)
    ("nn.Linear(12, 20) with bias, r = 4, alpha = 8", 12, 20, True, 4, 8.0, torch.float32, None),
    ("nn.Linear(16, 16) without bias, r = 2, alpha = 16", 16, 16, False, 2, 16.0, torch.float32, None),
    ("nn.Linear(8, 8) with bias, r = 8, alpha = 2", 8, 8, True, 8, 2.0, torch.float32, None),
    ("nn.Linear(6, 10) in float64, r = 2, alpha = 5", 6, 10, True, 2, 5, torch.float64, None),
    ("nn.Linear(12, 20), r = 4, alpha = 8, then layer.scale = 0.37 (merge reads layer.scale)", 12, 20, True, 4, 8.0,
     torch.float32, 0.37),
]


def _merge_case(fn, g, d_in, d_out, bias, r, alpha, dtype, scale):
    reference = _lora_layer(d_in, d_out, bias, r, alpha, seed=d_in + r).to(dtype)
    if scale is not None:
        reference.scale = scale
    layer = twin(reference, twin(reference.base, d_in, d_out, bias=bias, dtype=dtype), r, alpha)
    if scale is not None:
        layer.scale = scale
    x = torch.randn(3, 4, d_in, generator=g).to(dtype)
    expected = reference(x).detach()
    state = {k: v.clone() for k, v in reference.state_dict().items()}
    try:
        merged = call(fn, layer, what="merge_lora(layer)")
    except LearnerError as e:
        if "size of tensor" in str(e.error) or "shape" in str(e.error):
            e.hint = ("the update is B @ A, of shape [out_features, in_features] like nn.Linear's weight; "
                      "A.T @ B.T is the update transposed, [in_features, out_features]")
        raise
    if isinstance(merged, ref.LoRALinear) or not isinstance(merged, nn.Linear):
        raise Mismatch(f"merge_lora returned {type(merged).__name__}, not a plain nn.Linear",
                       hint="build nn.Linear(base.in_features, base.out_features, bias=base.bias is not None) "
                            "and copy the merged weight (and the bias) into it under torch.no_grad()")
    changed = [k for k, v in layer.state_dict().items() if not torch.equal(v, state[k])]
    if changed:
        raise Mismatch(f"merge_lora changed the LoRA layer it was given ({', '.join(changed)})",
                       hint="merging in place into layer.base.weight makes the LoRA layer add B A twice (its "
                            "base now holds it, and it adds it again): build a new nn.Linear")
    if (merged.bias is None) != (layer.base.bias is None):
        raise Mismatch("the merged layer's bias does not match the base layer's",
                       [f"base bias: {'none' if layer.base.bias is None else 'yes'}; merged bias: "
                        f"{'none' if merged.bias is None else 'yes'}"],
                       hint="nn.Linear(..., bias=base.bias is not None), then copy base.bias into it")
    weight = merged.weight
    if weight.dtype != dtype or weight.device != reference.base.weight.device:
        raise Mismatch(f"the merged layer's weight is {weight.dtype} on {weight.device}; the base's is {dtype} on "
                       f"{reference.base.weight.device}",
                       hint="nn.Linear(..., device=base.weight.device, dtype=base.weight.dtype)")
    if merged.bias is not None and not torch.equal(merged.bias.detach(), reference.base.bias.detach()):
        raise Mismatch("the merged layer's bias is not the base layer's",
                       ["nn.Linear draws a bias of its own; it must be replaced by base.bias"],
                       hint="copy it: merged.bias.copy_(base.bias) under torch.no_grad()")
    got = call(merged, x, what="merged(x)")
    own = torch.nn.functional.linear(x, merged.weight.detach(), None if merged.bias is None else merged.bias.detach())
    if not torch.allclose(own, got, atol=1e-4):  # a forward of its own that does not read its weight
        raise Mismatch("the merged layer's output is not x Wᵀ + b with its own weight and bias",
                       hint="merge into the weight: a plain nn.Linear whose weight is W + scale * B @ A, and no "
                            "forward of your own")
    mistakes = _merge_mistakes(reference, x)
    if scale is not None:
        mistakes.insert(0, ("the scale is recomputed from alpha and r; read layer.scale, which may have been set "
                            "since (PEFT's scaling can be changed too)", _merge_with_scale(reference, x, alpha / r)))
    expect_close(got, expected, "the merged layer's output (it must equal the LoRA layer's)", atol=1e-4,
                 mistakes=mistakes)


def _merge_with_scale(layer, x, scale):
    W, A, B = layer.base.weight.detach(), layer.A.detach(), layer.B.detach()
    bias = layer.base.bias.detach() if layer.base.bias is not None else 0
    return x @ (W + scale * (B @ A)).T + bias


@check
def merge_lora(fn):
    g = generator(2)
    for label, *rest in MERGE_CASES:
        with case(label):
            _merge_case(fn, g, *rest)
    return "{cases} layers: the same outputs as the LoRA layer (float64 too, layer.scale read), which is left as it was"


# --- sft_example --------------------------------------------------------------------------------------------------


def _ids(text):
    return ref.encode(text)


SFT_CASES = [  # (label, prompt ids, response ids, block_size)
    ("prompt ' five ', response 'laika ', block 15", _ids(" five "), _ids("laika "), 15),
    ("a prompt of one token (the start ' '), response 'ann ', block 6", _ids(" "), _ids("ann "), 6),
    ("an exact fit: ' seven ' + 'kimberly ', block 15", _ids(" seven "), _ids("kimberly "), 15),
    ("a response of one token, block 10", _ids(" six "), _ids(" "), 10),
    ("a response that does not end with ' ' (PAD_X's character): ' four ' + 'anna', block 12", _ids(" four "),
     _ids("anna"), 12),
]


def _sft_mistakes(prompt, response, block):
    ids = prompt + response
    n = len(ids) - 1
    pad = block - n
    P, Y = ref.PAD_X, ref.PAD_Y

    def targets(kept_from, fill=Y, shift=1):
        seq = ids[shift:shift + n] if shift else ids[:n]
        return torch.tensor([t if i >= kept_from else Y for i, t in enumerate(seq)] + [fill] * pad)

    return [
        ("the first response token is ignored: target i is token i + 1, so the first target of the response is at "
         "index len(prompt) - 1 (the shift moves the boundary one to the left)", lambda: targets(len(prompt))),
        ("the last token of the prompt is counted as a target: ignore the targets at indices 0 .. len(prompt) - 2; "
         "index len(prompt) - 1 is the response's first token", lambda: targets(len(prompt) - 2)),
        ("the prompt is counted: its targets must be ignore_index (PAD_Y), so that the loss counts the response "
         "alone", lambda: targets(0)),
        ("the padding is counted: pad the targets with PAD_Y (the loss's ignore_index), not PAD_X",
         lambda: targets(len(prompt) - 1, fill=P)),
        ("the targets are not shifted: y is the sequence from its second token (y[i] = ids[i + 1])",
         lambda: targets(len(prompt) - 1, shift=0)),
    ]


def _sft_call(fn, prompt, response, block):
    """The learner's sft_example on copies of ``prompt`` and ``response``, which must be left as they were."""
    given_prompt, given_response = list(prompt), list(response)
    what = f"sft_example({ref.decode(prompt)!r} ids, {ref.decode(response)!r} ids, {block})"
    got = call(fn, given_prompt, given_response, block, what=what)
    for name, given, original in (("prompt", given_prompt, prompt), ("response", given_response, response)):
        if given != list(original):
            raise Mismatch(f"sft_example changed the {name} it was given",
                           [f"before {list(original)}", f"after  {given}"],
                           hint="build a new list, ids = prompt + response; prompt += response or .append changes "
                                "the caller's list (and the next example built from it)")
    return got


@check
def sft_example(fn):
    g = generator(11)  # and one pair drawn at random: the same in a notebook, new for every graded run
    n_prompt, n_response, extra = (int(v) for v in torch.randint(1, 7, (3,), generator=g))
    prompt = [0] + torch.randint(1, 27, (n_prompt,), generator=g).tolist()
    response = torch.randint(1, 27, (n_response,), generator=g).tolist() + [0]
    block = len(prompt) + len(response) - 2 + extra
    drawn = (f"a prompt of {len(prompt)} and a response of {len(response)} tokens drawn at random, block {block}",
             prompt, response, block)
    for label, prompt, response, block in SFT_CASES + [drawn]:
        with case(label):
            x_ref, y_ref = ref.sft_example(prompt, response, block)
            try:
                got = _sft_call(fn, prompt, response, block)
            except LearnerError as e:
                if isinstance(e.error, ValueError) and len(prompt) + len(response) - 1 == block:
                    raise Mismatch(f"sft_example refused {len(prompt) + len(response)} tokens in a block of {block},"
                                   f" which fit: x and y hold {block} each (the shift drops one)", error_details(e),
                                   hint="too long means len(prompt) + len(response) - 1 > block_size") from None
                raise
            if not isinstance(got, (tuple, list)) or len(got) != 2:
                raise Mismatch(f"sft_example should return (x, y), got {type(got).__name__}",
                               hint="return two LongTensors of length block_size: x, y")
            x, y = got
            for what, tensor, want in (("x", x, x_ref), ("y", y, y_ref)):
                if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.long:
                    raise Mismatch(f"{what} should be a LongTensor",
                                   [f"got {type(tensor).__name__}" + (f" of {tensor.dtype}"
                                                                       if isinstance(tensor, torch.Tensor) else "")],
                                   hint="torch.tensor(list_of_ids) gives a LongTensor")
                if tuple(tensor.shape) != tuple(want.shape):
                    raise Mismatch(f"{what} has shape {shape_text(tensor.shape)}, expected {shape_text(want.shape)}",
                                   hint="len(prompt) + len(response) - 1 tokens, padded to block_size")
            if not torch.equal(x, x_ref):
                n = len(prompt) + len(response) - 1
                hint = ("pad x with PAD_X (' ', the start token), not PAD_Y" if torch.equal(x[:n], x_ref[:n])
                        and bool((x[n:] == ref.PAD_Y).all()) else
                        "x is every token but the last, prompt and response together, then padding")
                raise Mismatch("x is wrong", [f"expected {x_ref.tolist()}", f"got      {x.tolist()}"], hint)
            if not torch.equal(y, y_ref):
                cause = next((text for text, make in _sft_mistakes(prompt, response, block)
                              if not torch.equal(make(), y_ref) and torch.equal(make(), y)), None)
                raise Mismatch("y (the targets) is wrong", [f"expected {y_ref.tolist()}", f"got      {y.tolist()}",
                                                            f"(PAD_Y = {ref.PAD_Y} is the ignore_index)"], cause)
    for label, prompt, response, block, hint in [
            ("' seven ' + 'kimberly ' in a block of 14: one token too many", _ids(" seven "), _ids("kimberly "), 14,
             "a sequence of more than block_size + 1 tokens does not fit: raise ValueError rather than cut off the "
             "end of the response"),
            ("an empty prompt", [], _ids("ann "), 8, "a prompt has at least its start token: raise ValueError for an "
             "empty one (its targets would be one more than its inputs)"),
            ("an empty response", _ids(" five "), [], 8, "with no response there is nothing to learn: raise "
             "ValueError")]:
        with case(label):
            try:
                got = _sft_call(fn, prompt, response, block)
            except LearnerError as e:
                if not isinstance(e.error, ValueError):
                    raise
            else:
                shown = ("a cut example" if len(prompt) + len(response) - 1 > block else
                         f"{type(got).__name__}")
                raise Mismatch(f"sft_example returned {shown} for {label} instead of raising ValueError",
                               hint=hint)
    return "{cases} cases: the prompt and the padding ignored, the response counted from its first token"

"""Comparing the learner's results with the reference: tensors, known mistakes, parameters.

A comparison that finds a difference raises ``Mismatch`` (see ``tutor.checks.harness``) whose
message names what differs and, when a known mistake gives the learner's result, its likely cause.
A wrong shape is described in the words of ``tutor.shapes``.
"""

from __future__ import annotations

import copy

import torch

from tutor.checks import beside
from tutor.checks.harness import LearnerError, Mismatch, NotDone, at, call, case
from tutor.shapes import explain

# --------------------------------------------------------------------------------------
# Tensors


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def shape_text(shape) -> str:
    """(2, 5, 8) or torch.Size([2, 5, 8]) -> '(2, 5, 8)', as the messages write a shape."""
    return "(" + ", ".join(str(s) for s in shape) + ")"


def expect_tensor(got, expected: torch.Tensor, what: str, *, check_dtype: bool = True,
                  names: str | None = None) -> torch.Tensor:
    """``got`` is a tensor with the type, shape, device and dtype of ``expected``, and is finite where it is."""
    if not isinstance(got, torch.Tensor):
        hint = None
        if got is None:
            hint = "your function returns nothing: did you forget `return`?"
        elif isinstance(got, tuple):
            hint = "return a single tensor, not a tuple (e.g. not (output, weights) or (logits, loss))"
        elif isinstance(got, list):
            hint = "build the result with torch operations, not a Python list"
        elif type(got).__module__.startswith("numpy"):
            hint = "stay in torch: use torch functions instead of numpy ones"
        raise Mismatch(f"{what} should be a torch.Tensor, got {type(got).__name__}", hint=hint)
    if tuple(got.shape) != tuple(expected.shape):
        raise shape_mismatch(got.shape, expected.shape, what, names)
    if got.device != expected.device:
        raise Mismatch(
            f"{what} is on device {got.device}, expected {expected.device}",
            [META_NOTE] if expected.device.type == "meta" else [],
            hint="create new tensors on the input's device, e.g. torch.zeros(..., device=x.device)",
        )
    if check_dtype and got.dtype != expected.dtype:
        hint = None
        if expected.dtype == torch.float64 and got.dtype in (torch.float32, torch.float16, torch.bfloat16):
            hint = FLOAT64_HINT
        elif got.dtype == torch.float64 and expected.dtype == torch.float32:
            hint = "a float64 tensor crept in; pass dtype=torch.float32 or use torch functions on the input"
        elif got.dtype == torch.float32 and expected.dtype in (torch.float16, torch.bfloat16):
            hint = "keep the input's dtype: compute in float32 if you like, then convert back with .to(x.dtype)"
        elif not got.dtype.is_floating_point and expected.dtype.is_floating_point:
            hint = "the result should be floating point; convert with .float()"
        raise Mismatch(f"{what} has dtype {got.dtype}, expected {expected.dtype}", hint=hint)
    if (got.dtype.is_floating_point or got.is_complex()) and got.device.type != "meta":  # meta: no values
        bad = ~torch.isfinite(got) & torch.isfinite(expected)
        if bad.any():
            index = tuple(int(i) for i in bad.nonzero()[0])
            raise Mismatch(
                f"{what} contains {_fmt(got[index].item())} where a finite number is expected",
                [f"first at index {list(index)}: expected {_fmt(expected[index].item())}, "
                 f"got {_fmt(got[index].item())}"],
                hint="NaN or inf usually comes from exp() of a large number (subtract the maximum first), "
                     "a division by zero, or a row whose scores are all -inf",
            )
    return got


def shape_mismatch(got_shape, expected_shape, what: str, names: str | None = None) -> Mismatch:
    """A wrong shape, in the words of ``tutor.shapes`` (the axis, expected vs got, the likely fix).

    ``names`` (e.g. ``"B H T d_head"``) names the expected axes in the message.
    """
    got_shape, expected_shape = tuple(got_shape), tuple(expected_shape)
    if not expected_shape:  # a single number (a loss, a count) came back as a tensor of values
        return Mismatch(f"{what} has the wrong shape",
                        [f"expected a single number (a 0-d tensor, shape ()), got shape {got_shape}"],
                        "reduce it to one number: average (or sum) over every element, e.g. .mean() or "
                        "reduction='mean'")
    lines = explain(got_shape, expected_shape, names, var="out", output=True)
    hint = lines[-1][len("Hint: "):] if lines and lines[-1].startswith("Hint: ") else None
    details = lines[:-1] if hint else lines
    if hint is None and sorted(got_shape) == sorted(expected_shape):
        hint = "the sizes are right but in the wrong order: check which axes you transpose or permute"
    return Mismatch(f"{what} has the wrong shape", details, hint)


def first_difference(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> str:
    g, e = got.detach().double().cpu(), expected.detach().double().cpu()
    close = torch.isclose(g, e, atol=atol, rtol=rtol, equal_nan=True)
    index = tuple(int(i) for i in (~close).nonzero()[0])
    worst = (g - e).abs().nan_to_num(nan=float("inf")).max().item()
    where = list(index) if index else "[] (a scalar)"
    return (f"first difference at index {where}: expected {_fmt(e[index].item())}, "
            f"got {_fmt(g[index].item())} (largest difference {_fmt(worst)})")


def matches(got, candidate: torch.Tensor, atol: float = 1e-4, rtol: float = 1e-3) -> bool:
    """Whether ``got`` equals ``candidate`` (used to recognise known mistakes)."""
    try:
        return (
            isinstance(got, torch.Tensor)
            and tuple(got.shape) == tuple(candidate.shape)
            and torch.allclose(got.detach().double().cpu(), candidate.detach().double().cpu(),
                               atol=atol, rtol=rtol, equal_nan=True)
        )
    except Exception:  # noqa: BLE001 - a mistake's output that cannot be compared is not this mistake
        return False


def expect_close(
    got,
    expected: torch.Tensor,
    what: str,
    *,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    mistakes=(),
    hint: str | None = None,
    check_dtype: bool = True,
    names: str | None = None,
) -> torch.Tensor:
    """``got`` equals ``expected`` within tolerance.

    ``mistakes`` is a sequence of ``(description, make_wrong_output)`` pairs: when the values
    differ, each known-wrong output is computed and, if the learner's result equals it, its
    description becomes the likely cause. Shape mistakes are recognised the same way.
    ``names`` (e.g. ``"B H T d_head"``) names the expected axes when the shape is wrong.
    """
    try:
        expect_tensor(got, expected, what, check_dtype=check_dtype, names=names)
    except Mismatch as m:
        if matches(got, expected, atol=atol, rtol=rtol):  # the right values, in the wrong dtype or place
            m.hint = m.hint or hint
        else:
            m.hint = diagnose(got, mistakes, expected) or hint or m.hint
        raise
    if torch.allclose(got.detach().to(expected.dtype), expected, atol=atol, rtol=rtol, equal_nan=True):
        return got
    cause = diagnose(got, mistakes, expected)
    raise Mismatch(f"wrong values in {what}", first_difference(got, expected, atol, rtol), cause or hint)


def diagnose(got, mistakes, expected: torch.Tensor | None = None) -> str | None:
    """The description of the first known mistake whose output equals ``got``.

    A mistake that gives the right answer on this input (e.g. "always dim=-1" when dim=-1) is skipped.
    """
    for description, make in mistakes:
        try:
            candidate = make() if callable(make) else make
        except Exception:  # noqa: BLE001 - a known mistake that fails on this input is skipped
            continue
        if not isinstance(candidate, torch.Tensor):
            continue
        if expected is not None and matches(expected, candidate, atol=1e-6, rtol=1e-5):
            continue  # this mistake changes nothing on this input
        if matches(got, candidate):
            return description
    return None


def expect_equal(got, expected, what: str, hint: str | None = None):
    """Exact equality for Python values (lists, strings, ints)."""
    if got != expected:
        raise Mismatch(f"{what} is wrong", [f"expected {expected!r}", f"got      {got!r}"], hint)
    return got


# --------------------------------------------------------------------------------------
# Following the input's dtype and device: float64 and meta

KINDS = ("float64", "meta")
KIND_LABELS = {"float64": "in float64", "meta": "on the meta device"}
META_NOTE = ("'meta' is PyTorch's device for tensors that have a shape and a dtype but no values: the check runs "
             "your code on it to see that every tensor it creates goes to the input's device, as it must on a GPU")
FLOAT64_HINT = ("the input is float64: a tensor your code creates (torch.zeros, torch.ones, torch.tensor, "
                "torch.arange, ...) is float32 unless you pass dtype=x.dtype (or use torch.zeros_like(x), "
                "x.new_zeros(...)), and a product with it comes out float32 or fails")


def as_kind(obj, kind: str):
    """The check's own ``obj`` (a tensor, a module, or a tuple or list of them) in float64 (floating tensors only)
    or on the meta device; anything else as it is. A module is copied first."""
    if isinstance(obj, torch.Tensor):
        if kind == "meta":
            return obj.detach().to("meta")
        return obj.double() if obj.is_floating_point() else obj
    if isinstance(obj, torch.nn.Module):
        copied = copy.deepcopy(obj)
        return copied.double() if kind == "float64" else copied.to("meta")
    if isinstance(obj, (list, tuple)):
        return type(obj)(as_kind(o, kind) for o in obj)
    return obj


def learner_as_kind(module, kind: str):
    """A copy of the learner's module, made where it lives, in float64 or on the meta device."""
    copied = at(copy.deepcopy)(module)
    return copied.double() if kind == "float64" else copied.to("meta")


def expect_kind(got, expected: torch.Tensor, what: str, kind: str, **tolerance) -> torch.Tensor:
    """In float64, ``got`` equals ``expected`` and is float64; on the meta device, where there are no values, it has
    ``expected``'s shape, dtype and device."""
    if kind == "meta":
        return expect_tensor(got, expected, what, names=tolerance.get("names"))
    return expect_close(got, expected, what, **tolerance)


def kind_cases(learner, inputs, reference, what: str, *, module: bool = False, convert=None, kinds=KINDS,
               **tolerance) -> None:
    """Two cases of one call, so that a check can tell whether the learner's code follows its input: every input
    in float64, then every input on the meta device (shapes, no values), held to a GPU's rule that a tensor on the
    CPU does not meet one on the device (``beside.LikeAGPU``): what a GPU would catch, without one.

    ``inputs`` are the positional arguments (converted with ``as_kind``), or ``inputs(kind)`` makes them fresh for
    each kind, as a pair (the learner's, the reference's): a cache, say; ``reference`` is the model answer, a
    function or, with ``module=True``, a module with the reference weights (``learner`` is then the learner's
    module, loaded with them); ``convert(got)``, if given, picks the tensor to compare from what both return;
    ``kinds`` leaves one out where it means nothing (float64 for integer inputs)."""
    for kind in kinds:
        label = f"{what} {KIND_LABELS[kind]}"
        with case(label):
            if callable(inputs):
                args, theirs_args = inputs(kind)
            else:
                args = theirs_args = as_kind(tuple(inputs), kind)
            mine = learner_as_kind(learner, kind) if module else learner
            theirs = as_kind(reference, kind) if module else reference
            try:
                got = call(at(beside.like_a_gpu), mine, *args, what=label)
            except (NotDone, LearnerError) as failure:
                if kind == "meta" and reads_values(failure.error):
                    continue  # code that reads a value (.item(), if tensor: ...) cannot run on meta: no verdict
                raise
            expected = beside.like_a_gpu(theirs, *theirs_args)
            if convert is not None:
                got, expected = convert(got), convert(expected)
            expect_kind(got, expected, f"the output of {what}", kind, **tolerance)


def reads_values(error) -> bool:
    """Whether ``error`` is a meta tensor asked for its values (``.item()``, ``.tolist()``, ``if t:``, a boolean
    index): correct code may do that, and it cannot run on the meta device, so such a case says nothing."""
    text = str(error)
    return any(s in text for s in ("cannot be called on meta tensors", "Cannot copy out of meta tensor",
                                   "register_meta function", "meta device type tensor"))


# --------------------------------------------------------------------------------------
# Modules


def load_reference_weights(learner: torch.nn.Module, reference: torch.nn.Module, what: str) -> None:
    """Copy every parameter of ``reference`` into the parameter of the same name in ``learner``.

    Extra buffers are allowed; a missing parameter, an extra parameter or a wrong shape is a
    mismatch that names the attribute.
    """
    mine = dict(learner.named_parameters())
    theirs = dict(reference.named_parameters())
    for name, param in theirs.items():
        if name not in mine:
            owner = name.rsplit(".", 1)[0]
            hint = (f"create it in __init__ as self.{owner} = ..." if "." in name
                    else f"create self.{name} = nn.Parameter(...) in __init__")
            raise Mismatch(f"{what} has no parameter `{name}`",
                           [f"expected a parameter of shape {shape_text(param.shape)}"], hint)
        if tuple(mine[name].shape) != tuple(param.shape):
            hint = None
            if mine[name].dim() == 2 and tuple(mine[name].shape) == tuple(param.shape)[::-1]:
                owner = learner.get_submodule(name.rsplit(".", 1)[0]) if "." in name else learner
                hint = ("nn.Linear(in_features, out_features) takes the input width first"
                        if isinstance(owner, torch.nn.Linear) else "the two axes are swapped")
            raise Mismatch(f"`{name}` in {what} has shape {shape_text(mine[name].shape)}, "
                           f"expected {shape_text(param.shape)}", hint=hint)
    extra = [n for n in mine if n not in theirs]
    if extra:
        biased = any(n.endswith("bias") for n in extra)
        hint = "the exercise asks for layers without bias: pass bias=False" if biased else None
        raise Mismatch(f"{what} has parameters the exercise does not ask for: {', '.join(extra[:4])}", hint=hint)
    at(beside.assign_parameters)(learner, {name: param.detach() for name, param in theirs.items()})

"""``typed``: a function's jaxtyping annotations checked every time it runs, with the messages of
``expect_shape`` (see ``tutor.shapes``)."""

import functools
import inspect

from beartype import beartype
from jaxtyping import TypeCheckError, jaxtyped

from tutor.shapes.asserts import Dims, ShapeError


def typed(fn):
    """Check a function's jaxtyping annotations every time it runs, with the messages of ``expect_shape``.

        >>> import torch
        >>> from torch import Tensor
        >>> from jaxtyping import Float
        >>> @typed
        ... def scores(q: Float[Tensor, "B T d"], k: Float[Tensor, "B S d"]) -> Float[Tensor, "B T S"]:
        ...     return q @ k.transpose(-2, -1)
        >>> scores(torch.zeros(2, 5, 8), torch.zeros(2, 6, 8)).shape
        torch.Size([2, 5, 6])
        >>> scores(torch.zeros(2, 5, 8), torch.zeros(2, 6, 4))
        Traceback (most recent call last):
        tutor.shapes.ShapeError: k: axis 2 ('d') has size 4, but d = 8 (bound by `q`, axis 2).
          shape (2, 6, 4), pattern 'B S d', expected (2, 6, 8).
          (checked against the annotation of `k` in scores: Float[Tensor, 'B S d'])

    The checking is jaxtyping's (with beartype), so every jaxtyping annotation works, ``forward``
    methods included; one name means one size across all arguments and the return value of a call.
    When it fails, the argument is checked again with ``Dims.expect`` to name the axis and the
    likely fix; what only jaxtyping can say (a wrong dtype, a symbolic size such as ``"T+1"``)
    keeps jaxtyping's own message.
    """
    calls = []  # one box per call in progress, for the return value (a typed function may call itself)

    @functools.wraps(fn)
    def keep_result(*args, **kwargs):
        result = fn(*args, **kwargs)
        if calls:
            calls[-1].append(result)
        return result

    checked = jaxtyped(typechecker=beartype)(keep_result)
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        box = []
        calls.append(box)
        try:
            return checked(*args, **kwargs)
        except TypeCheckError as error:
            values = signature.bind(*args, **kwargs)
            values.apply_defaults()
            values = dict(values.arguments)
            if box:
                values["return"] = box[-1]
            raise _explain_annotation(fn, values, error) from None
        finally:
            calls.pop()  # never keep a result (and its autograd graph) alive after the call

    return wrapper


def _jaxtyping_pattern(annotation):
    """The tutor.shapes pattern of a jaxtyping annotation ('*batch T C' -> '... T C'), or None."""
    dims = getattr(annotation, "dim_str", None)
    if not isinstance(dims, str):
        return None
    out = []
    for token in dims.split():
        token = token.lstrip("#")  # '#T' may broadcast (size 1): checked by jaxtyping only
        if token.startswith("*") or token == "...":
            out.append("...")
        elif token.startswith("_"):
            out.append("_")
        elif token.isidentifier() or token.isdigit():
            out.append(token)
        else:
            return None  # a symbolic size such as 'T+1': jaxtyping's message stays
    if out.count("...") > 1:
        return None
    return " ".join(out)


def _explain_annotation(fn, values, error):
    """The ShapeError for a failed jaxtyping check, or the original error when its cause is not a shape."""
    hints = dict(getattr(fn, "__annotations__", {}))
    where = getattr(fn, "__qualname__", getattr(fn, "__name__", "the function"))
    dims = Dims()
    for name, annotation in hints.items():
        if name not in values:
            continue
        value, label = values[name], ("the return value" if name == "return" else name)
        pattern = _jaxtyping_pattern(annotation)
        shown = f"{getattr(annotation, '__name__', annotation)}".replace('"', "'")
        source = (f"  (checked against the return annotation of {where}: {shown})" if name == "return" else
                  f"  (checked against the annotation of `{label}` in {where}: {shown})")
        if pattern is None:
            continue
        try:
            dims.expect(value, pattern, name=label)
        except ShapeError as e:
            return ShapeError(f"{e}\n{source}")
        dtypes = getattr(annotation, "dtypes", None)
        dtype = str(getattr(value, "dtype", "")).replace("torch.", "")
        if dtype and dtypes and dtype not in dtypes:
            kind = getattr(getattr(annotation, "dtype", None), "__name__", "another")
            fix = {"Float": " Convert it with .float().", "Int": " Convert it with .long().",
                   "Bool": " Make it with a comparison, or .bool()."}.get(kind, "")
            return TypeError(f"{label}: has dtype {value.dtype}, but its annotation asks for a {kind} tensor.{fix}\n"
                             f"{source}")
    return error

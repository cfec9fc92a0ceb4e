"""Checks for notebook 03: causal masks, padding masks and masked attention."""

import math

import torch

from tutor import reference as ref
from tutor.checks import beside
from tutor.checks.common import laika_one_hot, sdpa_mistakes
from tutor.checks.compare import diagnose, expect_close, expect_tensor, kind_cases, shape_mismatch
from tutor.checks.harness import LearnerError, Mismatch, at, call, case, check, error_details, is_signature_error
from tutor.course import catalog

__all__ = catalog.check_names(__name__)  # this notebook's exercises (tutor.course.catalog)

CONVENTION = "True means \"may attend\" (the convention of torch.nn.functional.scaled_dot_product_attention)"


# --- comparing masks -------------------------------------------------------------------------


def _as_bool(got: torch.Tensor) -> torch.Tensor:
    return got if got.dtype == torch.bool else got != 0


def _mask_pattern(m: torch.Tensor) -> list[str]:
    """A small mask drawn as rows of 1s and 0s (the last matrix of a batch)."""
    m = m.detach().cpu()
    while m.dim() > 2 and 1 in m.shape:
        m = m.squeeze(list(m.shape).index(1))  # [B, 1, T] is shown as B rows
    while m.dim() > 2:
        m = m[0]
    if m.dim() == 1:
        m = m.unsqueeze(0)
    return ["  " + " ".join("1" if bool(v) else "0" for v in row) for row in m[:8]]


def _first_mask_difference(got: torch.Tensor, expected: torch.Tensor) -> str:
    index = [int(i) for i in (got != expected).nonzero()[0]]
    return (f"first difference at index {index}: expected {bool(expected[tuple(index)])}, "
            f"got {bool(got[tuple(index)])} ({int((got != expected).sum())} of {expected.numel()} entries differ)")


def expect_mask(got, expected: torch.Tensor, what: str, mistakes=(),
                dtype_hint: str = "create it with dtype=torch.bool, or convert with .bool()") -> torch.Tensor:
    """``got`` is a boolean mask equal to ``expected``; ``mistakes`` are (description, bool tensor)."""
    if isinstance(got, torch.Tensor) and got.dtype.is_floating_point and bool(torch.isinf(got).any()):
        raise Mismatch(
            f"{what} is an additive float mask (0 and -inf), not a boolean mask",
            [f"got dtype {got.dtype}; in this course masks are boolean and {CONVENTION}"],
            hint="return the boolean pattern (e.g. torch.tril(torch.ones(T, T, dtype=torch.bool))); "
                 "the -inf is put in later by masked_fill inside attention",
        )
    try:
        expect_tensor(got, expected, what, check_dtype=False)
    except Mismatch as m:
        cause = diagnose(got, mistakes)
        if cause:
            m.hint = cause
        raise
    values = _as_bool(got.detach())
    if not torch.equal(values, expected):
        details = [_first_mask_difference(values, expected)]
        if expected.numel() <= 64:
            details += ["expected (1 = may attend):"] + _mask_pattern(expected) + ["got:"] + _mask_pattern(values)
        raise Mismatch(f"wrong values in {what}", details, diagnose(values, mistakes))
    if got.dtype != torch.bool:
        raise Mismatch(
            f"{what} has dtype {got.dtype}, expected torch.bool",
            ["the pattern is right, but a mask must be boolean: `~mask` and `masked_fill(~mask, ...)` need bool, "
             "and F.scaled_dot_product_attention treats a float attn_mask as numbers to add to the scores"],
            hint=dtype_hint,
        )
    return got


# --- causal_mask ---------------------------------------------------------------------------------

BOOL_HINT = ("create it with dtype=torch.bool, e.g. torch.tril(torch.ones(T, T, dtype=torch.bool, device=device)), "
             "or convert with .bool()")


def _causal_mistakes(T):
    ones = torch.ones(T, T, dtype=torch.bool)
    return [
        ("the mask is inverted: True marks the future here, but " + CONVENTION +
         "; keep the lower triangle (torch.tril), not what lies above it", torch.triu(ones, diagonal=1)),
        ("you kept the upper triangle (torch.triu): row t must allow the keys 0..t, the past, which is the lower "
         "triangle: use torch.tril", torch.triu(ones)),
        ("the diagonal is excluded (diagonal=-1): a position must be allowed to attend to itself; "
         "use torch.tril(..., diagonal=0), the default", torch.tril(ones, diagonal=-1)),
        ("off by one: with diagonal=1 position t also sees position t+1, the very token it must predict; "
         "use torch.tril(...) with the default diagonal=0", torch.tril(ones, diagonal=1)),
        ("the mask allows everything: nothing is masked; keep only the lower triangle with torch.tril", ones),
        ("the mask allows only the diagonal: position t must see every earlier position too",
         torch.eye(T, dtype=torch.bool)),
    ]


@check
def causal_mask(fn):
    for T in (5, 1, 2, 9):
        with case(f"T = {T}"):
            got = call(fn, T, what=f"causal_mask({T})")
            expect_mask(got, ref.causal_mask(T), f"causal_mask({T})", _causal_mistakes(T), dtype_hint=BOOL_HINT)
    with case("T = 6, device='cpu'"):
        got = call(fn, 6, device="cpu", what="causal_mask(6, device='cpu')")
        expect_mask(got, ref.causal_mask(6), "causal_mask(6, device='cpu')", _causal_mistakes(6))
    with case("T = 4, device=torch.device('cpu')"):
        got = call(fn, 4, device=torch.device("cpu"), what="causal_mask(4, device=torch.device('cpu'))")
        expect_mask(got, ref.causal_mask(4), "causal_mask(4, device=torch.device('cpu'))", _causal_mistakes(4))
    with case("T = 3, device='meta'"):
        # A meta tensor has a shape, a dtype and a device but no data: only those can be compared.
        got = call(at(beside.fast_meta_triangles), fn, 3, device="meta", what="causal_mask(3, device='meta')")
        what = "causal_mask(3, device='meta')"
        if not isinstance(got, torch.Tensor):
            raise Mismatch(f"{what} should be a torch.Tensor, got {type(got).__name__}")
        if got.device.type != "meta":
            raise Mismatch(
                f"{what} is on device {got.device}, expected the device it was asked for (meta)",
                ["causal_mask(T, device=...) must create the mask on `device`, e.g. on the GPU the scores live on",
                 "'meta' is PyTorch's device for tensors that have a shape and a dtype but no data: the check "
                 "uses it to see whether your mask goes to the device it is asked for, without needing a GPU"],
                hint="pass device=device to the function that creates the tensor, "
                     "e.g. torch.ones(T, T, dtype=torch.bool, device=device)",
            )
        if tuple(got.shape) != (3, 3):
            raise shape_mismatch(got.shape, (3, 3), what, "T T")
        if got.dtype != torch.bool:
            raise Mismatch(f"{what} has dtype {got.dtype}, expected torch.bool", hint=BOOL_HINT)
    return "T = 1, 2, 5, 9 and the device argument (cpu, meta)"


# --- padding_mask -------------------------------------------------------------------------------


def _pad(names, pad_id=0):
    T = max(len(n) for n in names)
    return torch.tensor([ref.encode(n) + [pad_id] * (T - len(n)) for n in names])


def _padding_mistakes(ids, pad_id):
    real = ids != pad_id
    mistakes = [
        ("the mask hides the queries instead of the keys: shape [B, T, 1] masks whole rows of the scores; "
         "padding_mask must be [B, 1, T] so that it hides key *columns* (unsqueeze(1), not unsqueeze(-1))",
         real.unsqueeze(-1)),
        ("the polarity is wrong: your mask is True at the padding, but " + CONVENTION +
         ", so real tokens are True and padding is False (ids != pad_id)", (ids == pad_id).unsqueeze(-2)),
        ("the polarity is wrong and the axis too: True must mark real tokens (ids != pad_id), with shape [B, 1, T]",
         (ids == pad_id).unsqueeze(-1)),
        ("the mask has no query axis: return [B, 1, T] (mask.unsqueeze(1)) "
         "so it broadcasts against the [B, T, T] scores",
         real),
    ]
    if pad_id != 0:
        mistakes.insert(0, ("the pad_id argument is ignored: you always compare with 0; compare with pad_id",
                            (ids != 0).unsqueeze(-2)))
        mistakes.insert(1, ("the pad_id argument is ignored and the polarity wrong: "
                            "True must mark real tokens, ids != pad_id",
                            (ids == 0).unsqueeze(-2)))
    return mistakes


@check
def padding_mask(fn):
    names = ["laika", "bo", "anna"]
    cases = [
        (f"names {names} padded with ' ' (id 0)", _pad(names), None),
        ("random ids [4, 7] with padding at the end", _pad(["maximilian", "zoe", "x", "ada"]), None),
        ("pad_id=27 ('.')", _pad(["eve", "jo", "kim", "laika"], pad_id=27), 27),
        ("no padding, T = 1", torch.tensor([[5], [12]]), None),
        ("B = 1", _pad(["laika"]), 0),
    ]
    for label, ids, pad_id in cases:
        with case(label):
            before = ids.clone()
            kwargs = {} if pad_id is None else {"pad_id": pad_id}
            shown = "" if pad_id is None else f", pad_id={pad_id}"
            expected = ref.padding_mask(before, 0 if pad_id is None else pad_id)
            got = call(fn, ids, **kwargs, what=f"padding_mask(ids of shape {list(ids.shape)}{shown})")
            if not torch.equal(ids, before):
                raise Mismatch("padding_mask changed its input ids in place",
                               hint="compare (ids != pad_id) into a new tensor")
            expect_mask(got, expected, "the padding mask", _padding_mistakes(before, 0 if pad_id is None else pad_id),
                        dtype_hint="a comparison such as ids != pad_id is already boolean: "
                                   "don't convert it with .int() or .float()")
    kind_cases(fn, (_pad(names),), ref.padding_mask, "padding_mask(ids of shape [3, 5])", kinds=("meta",))
    return "{cases} cases, including pad_id=27, T = 1 and the meta device"


# --- masked_attention ----------------------------------------------------------------------------


def _masked_mistakes(q, k, v, mask):
    """Outputs of the classic ways to get masking wrong in attention."""
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    mistakes = [
        ("the mask is ignored: apply scores.masked_fill(~mask, float('-inf')) before the softmax",
         lambda: ref.softmax(scores) @ v),
        ("the mask is inverted: masked_fill(mask, ...) hides the keys that may be attended; " + CONVENTION +
         ", so fill where the mask is False: masked_fill(~mask, float('-inf'))",
         lambda: ref.softmax(scores.masked_fill(mask, float("-inf"))) @ v),
        ("the masked scores are set to 0 (or multiplied by the mask) instead of -inf: a score of 0 still gets "
         "weight exp(0) after the softmax; fill with float('-inf')",
         lambda: ref.softmax(scores.masked_fill(~mask, 0.0)) @ v),
        ("the mask multiplies the weights after the softmax, so the rows no longer sum to 1: mask the scores "
         "with -inf *before* the softmax instead",
         lambda: (ref.softmax(scores) * mask) @ v),
        ("the mask is added to the scores (True counts as +1): mask with scores.masked_fill(~mask, float('-inf'))",
         lambda: ref.softmax(scores + mask) @ v),
    ]
    if q.shape[-2] == k.shape[-2]:
        causal = ref.causal_mask(q.shape[-2])
        if not torch.equal(torch.broadcast_to(mask, scores.shape), torch.broadcast_to(causal, scores.shape)):
            mistakes.append(("you build your own causal mask inside the function: use the `mask` argument as given",
                             lambda: ref.softmax(scores.masked_fill(~causal, float("-inf"))) @ v))
    return mistakes


def _run_masked_case(fn, q, k, v, mask, *, keyword=False):
    mask_before = mask
    if mask is not None:
        mask = mask.clone()  # the learner gets a copy; the original stays for comparison
    shapes = ", ".join(f"{n} {list(t.shape)}" for n, t in zip("qkv", (q, k, v)))
    if mask is None:
        what = f"scaled_dot_product_attention({shapes}, mask=None)"
    else:
        what = f"scaled_dot_product_attention({shapes}, mask {list(mask.shape)})"
    args = (q.clone(), k.clone(), v.clone())
    got = call(fn, *args, mask=mask, what=what) if keyword else call(fn, *args, mask, what=what)
    if mask is not None and not torch.equal(mask, mask_before):
        raise Mismatch("your function changed the mask it was given, in place",
                       hint="use ~mask (a new tensor), not mask.logical_not_(), "
                            "mask[...] = ... or masked_fill_ on the mask")
    mask = mask_before
    expected = ref.scaled_dot_product_attention(q, k, v, mask)
    mistakes = [] if mask is None else _masked_mistakes(q, k, v, mask)
    mistakes += sdpa_mistakes(q, k, v, mask)
    if mask is None and q.shape[-2] > 1:
        causal = torch.tril(torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool))
        mistakes.insert(0, ("with mask=None nothing is masked: "
                            "apply a mask only when one is given (if mask is not None: ...)",
                            lambda: ref.scaled_dot_product_attention(q, k, v, causal)))
    hint = None
    if isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(expected.shape[:-1]) + (k.shape[-2],):
        hint = "you returned the attention weights: multiply them by V"
    elif isinstance(got, torch.Tensor) and got.dtype.is_floating_point and bool(torch.isnan(got).any()):
        hint = ("NaN usually means 0/0 in a row of weights. Either a row of scores is entirely -inf "
                "(did you fill where the mask is True? masked_fill(~mask, float('-inf')) fills where it is False), "
                "or you renormalise the weights after the softmax and every allowed weight underflowed to 0: "
                "mask the scores before the softmax")
    expect_close(got, expected, "the attention output", atol=1e-5, mistakes=mistakes, hint=hint)
    return got


@check
def masked_attention(fn):
    x = laika_one_hot()
    with case("no mask (mask=None), q [2, 3, 4, 8], k [2, 3, 6, 8], v [2, 3, 6, 5]"):
        q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 5)
        try:
            _run_masked_case(fn, q, k, v, None)
        except LearnerError as e:
            if is_signature_error(e.error):
                raise Mismatch("scaled_dot_product_attention must take a fourth argument",
                               error_details(e), hint="def scaled_dot_product_attention(q, k, v, mask=None):") from None
            try:  # the same without batch axes: if that works, the batch axes are the trouble, not the None
                call(fn, q[0, 0], k[0, 0], v[0, 0], None, what="scaled_dot_product_attention(q [4, 8], k [6, 8], "
                                                                "v [6, 5], mask=None)")
                unbatched = True
            except LearnerError:
                unbatched = False
            if unbatched:
                raise Mismatch("your code raised an exception on batched q, k, v [2, 3, T, d] with mask=None, "
                               "though not without the batch axes",
                               error_details(e),
                               hint="transpose only the last two axes of K with k.transpose(-2, -1): k.T "
                                    "reverses every axis of a 4-D tensor, batch axes included") from None
            raise Mismatch("your code raised an exception when mask=None",
                           error_details(e),
                           hint="mask=None means attend everywhere: apply the mask only "
                                "`if mask is not None:`") from None
    with case("one-hot 'laika' as q, k and v, causal mask [5, 5]"):
        _run_masked_case(fn, x, x, x, ref.causal_mask(5))
    with case("batch [2, 3], T = 6, d_k = 8, d_v = 5, causal mask [6, 6] (passed as mask=...)"):
        q, k, v = torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 5)
        _run_masked_case(fn, q, k, v, ref.causal_mask(6), keyword=True)
    with case("padding mask [3, 1, 5] for 'laika', 'bo', 'anna', and causal & padding [3, 5, 5]"):
        ids = _pad(["laika", "bo", "anna"])
        q, k, v = torch.randn(3, 5, 16), torch.randn(3, 5, 16), torch.randn(3, 5, 4)
        pad = ref.padding_mask(ids)
        _run_masked_case(fn, q, k, v, pad)
        _run_masked_case(fn, q, k, v, pad & ref.causal_mask(5))
    with case("Tq = 4 queries, Tk = 7 keys, a random mask [2, 4, 7]"):
        q, k, v = torch.randn(2, 4, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 3)
        mask = torch.rand(2, 4, 7) < 0.5
        mask[..., 0] = True  # every query may attend to at least one key
        _run_masked_case(fn, q, k, v, mask)
    with case("T = 1, mask [[True]]"):
        q, k, v = torch.randn(2, 1, 4), torch.randn(2, 1, 4), torch.randn(2, 1, 3)
        _run_masked_case(fn, q, k, v, ref.causal_mask(1))
    with case("large scores (q, k of size 30), causal mask"):
        q, k, v = torch.randn(2, 5, 64) * 30, torch.randn(2, 5, 64) * 30, torch.randn(2, 5, 3)
        _run_masked_case(fn, q, k, v, ref.causal_mask(5))
    kind_cases(fn, (torch.randn(2, 5, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 3), ref.causal_mask(5)),
               ref.scaled_dot_product_attention, "scaled_dot_product_attention(q, k [2, 5, 8], v [2, 5, 3], "
               "causal mask [5, 5])")
    return "{cases} cases: causal, padding, both, rectangular, T = 1, mask=None, float64 and meta"

"""Checks for notebook 04: multi-head attention."""

import math

import torch

from tutor import reference as ref
from tutor.checks.compare import expect_close, expect_tensor, kind_cases, load_reference_weights
from tutor.checks.harness import (
    LearnerError,
    Mismatch,
    build,
    call,
    case,
    check,
    error_details,
    is_signature_error,
    seed,
)
from tutor.course import catalog

__all__ = catalog.check_names(__name__)  # this notebook's exercises (tutor.course.catalog)

VIEW_HINT = ("x.view(B, H, T, d_head) has the right shape but the wrong contents: view only re-reads "
             "memory row by row, so a head gets a chunk of consecutive numbers that mixes positions. "
             "View as (B, T, H, d_head) first, then .transpose(1, 2)")
INTERLEAVED_HINT = ("the heads take interleaved columns (head 0 gets columns 0, H, 2H, ...): head h must get the "
                    "contiguous slice h*d_head:(h+1)*d_head, so view as (B, T, H, d_head), not (B, T, d_head, H)")


# --- split_heads / merge_heads ------------------------------------------------------------


def _split_mistakes(x, n_heads):
    B, T, C = x.shape
    d = C // n_heads
    return [
        ("`view` without `transpose`: " + VIEW_HINT, lambda: x.reshape(B, n_heads, T, d)),
        (INTERLEAVED_HINT, lambda: x.reshape(B, T, d, n_heads).permute(0, 3, 1, 2)),
        ("the transpose is missing: after x.view(B, T, H, d_head), swap the T and H axes with .transpose(1, 2)",
         lambda: x.reshape(B, T, n_heads, d)),
        ("you transposed the wrong axes: after x.view(B, T, H, d_head) use .transpose(1, 2), which puts H before T",
         lambda: x.reshape(B, T, n_heads, d).transpose(2, 3)),
        (f"the number of heads is wrong: you made {d} heads of width {n_heads}; there must be n_heads = {n_heads} "
         f"heads of width C // n_heads = {d} "
         "(use the n_heads argument; don't fix the number of heads or swap the two sizes)",
         lambda: x.reshape(B, T, d, n_heads).transpose(1, 2)),
    ]


@check
def split_heads(fn):
    cases = [
        ("arange [1, 4, 8], 2 heads", torch.arange(32.0).reshape(1, 4, 8), 2),
        ("random [2, 5, 12], 3 heads", torch.randn(2, 5, 12), 3),
        ("random [3, 4, 16], 4 heads (T = H)", torch.randn(3, 4, 16), 4),
        ("random [2, 6, 8], 1 head", torch.randn(2, 6, 8), 1),
        ("T = 1: [2, 1, 8], 4 heads", torch.randn(2, 1, 8), 4),
        ("random [2, 3, 24], 2 heads", torch.randn(2, 3, 24), 2),
    ]
    for label, x, n_heads in cases:
        with case(label):
            before = x.clone()
            got = call(fn, x, n_heads, what=f"split_heads(x of shape {list(x.shape)}, n_heads={n_heads})")
            if not torch.equal(x, before):
                raise Mismatch("split_heads changed its input in place", hint="return a new view; don't write into x")
            expected = ref.split_heads(x, n_heads)
            expect_close(got, expected, f"split_heads(x, {n_heads})", atol=0, rtol=0, names="B H T d_head",
                         mistakes=_split_mistakes(x, n_heads))
    return "{cases} cases; head h gets columns h*d_head:(h+1)*d_head"


def _merge_mistakes(x):
    B, H, T, d = x.shape
    return [
        ("the merge does not transpose back: x.reshape(B, T, H*d_head) mixes positions; "
         "do x.transpose(1, 2) first, then reshape", lambda: x.reshape(B, T, H * d)),
        ("the heads are interleaved in the output (column j*H + h instead of h*d_head + j): "
         "transpose(1, 2) and reshape; don't move d_head in front of H",
         lambda: x.permute(0, 2, 3, 1).reshape(B, T, H * d)),
        ("the heads are transposed back but not merged: reshape the last two axes into one of size H*d_head",
         lambda: x.transpose(1, 2)),
        ("the heads are stacked along the positions: concatenate them along the last axis, the width, "
         "so that position t keeps one row of width H*d_head", lambda: torch.cat(list(x.unbind(1)), dim=1)),
    ]


@check
def merge_heads(fn):
    cases = [
        ("split_heads of arange [1, 4, 8], 2 heads", ref.split_heads(torch.arange(32.0).reshape(1, 4, 8), 2)),
        ("random [2, 3, 5, 4] (B, H, T, d_head)", torch.randn(2, 3, 5, 4)),
        ("random [3, 4, 4, 2] (T = H)", torch.randn(3, 4, 4, 2)),
        ("one head: [2, 1, 6, 8]", torch.randn(2, 1, 6, 8)),
        ("T = 1: [2, 4, 1, 3]", torch.randn(2, 4, 1, 3)),
        ("the output of a batched matmul [2, 2, 5, 6]", torch.randn(2, 2, 5, 7) @ torch.randn(2, 2, 7, 6)),
    ]
    for label, x in cases:
        with case(label):
            before = x.clone()
            try:
                got = call(fn, x, what=f"merge_heads(x of shape {list(x.shape)})")
            except LearnerError as e:
                text = str(e.error)
                hint = None
                if "view" in text and ("stride" in text or "contiguous" in text):
                    hint = ("after transpose the tensor is not contiguous in memory, so .view cannot merge axes: "
                            "use .reshape(B, T, H * d_head), or .contiguous().view(...)")
                if hint is None:
                    raise
                raise Mismatch("your code raised an exception",
                               error_details(e),
                               hint=hint) from None
            if not torch.equal(x, before):
                raise Mismatch("merge_heads changed its input in place", hint="return a new tensor; don't write into x")
            expected = ref.merge_heads(x)
            expect_close(got, expected, "merge_heads(x)", atol=0, rtol=0, mistakes=_merge_mistakes(x), names="B T C")
    with case("round trip merge_heads(split_heads(x, 4)) == x"):
        x = torch.randn(2, 5, 16)
        got = call(fn, ref.split_heads(x, 4), what="merge_heads(split_heads(x, 4))")
        expect_close(got, x, "merge_heads(split_heads(x, 4))", atol=0, rtol=0)
    return "{cases} cases, including the round trip"


# --- MultiHeadAttention ----------------------------------------------------------------------


def _attend(m, x, mask, causal, *, scale="d_head", split=None, merge=None, out_proj=True,
            head_axis=True, combine="and", causal_fn=None, fill="-inf", dim=-1, swap_qk=False,
            v_from_k=False, invert=False, dropout_at=None, p=0.0):
    """The reference multi-head attention with one thing changed: a known mistake's output.

    ``m`` is the reference module (its weights are the learner's).
    """
    H = m.n_heads
    split = split or ref.split_heads
    merge = merge or ref.merge_heads
    B, T, C = x.shape
    q, k, v = m.q_proj(x), m.k_proj(x), m.v_proj(x)
    if swap_qk:
        q, k = k, q
    if v_from_k:
        v = k
    if dropout_at == "v":
        v = torch.nn.functional.dropout(v, p)
    q, k, v = split(q, H), split(k, H), split(v, H)
    if mask is not None:
        if invert:
            mask = ~mask
        if head_axis:
            mask = mask.unsqueeze(-3)
    if causal:
        c = (causal_fn or ref.causal_mask)(T)
        if mask is None:
            mask = c
        elif combine == "and":
            mask = mask & c
        else:
            mask = mask | c
    d = {"d_head": C // H, "d_model": C, "none": 1.0, "n_heads": H}[scale]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    if dropout_at == "scores":
        scores = torch.nn.functional.dropout(scores, p)
    if mask is not None:
        if fill == "zero":
            scores = scores.masked_fill(~mask, 0.0)
        else:
            scores = scores.masked_fill(~mask, float("-inf"))
    weights = ref.softmax(scores, dim=dim)
    if dropout_at == "weights":
        weights = torch.nn.functional.dropout(weights, p)
    y = merge(weights @ v)
    if dropout_at == "merged":
        y = torch.nn.functional.dropout(y, p)
    if out_proj:
        y = m.out_proj(y)
    if dropout_at == "output":
        y = torch.nn.functional.dropout(y, p)
    return y


def _interleaved_split(x, H):
    B, T, C = x.shape
    return x.reshape(B, T, C // H, H).permute(0, 3, 1, 2)


def _interleaved_merge(x):
    B, H, T, d = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, T, H * d)


def _view_split(x, H):
    B, T, C = x.shape
    return x.reshape(B, H, T, C // H)


def _bad_merge(x):
    B, H, T, d = x.shape
    return x.reshape(B, T, H * d)


def _mha_mistakes(m, x, mask, causal):
    def variant(**kw):
        return lambda: _attend(m, x, mask, causal, **kw)

    mistakes = []
    if causal:
        mistakes.append(("the output is not causal although causal=True: combine the causal mask "
                         "(tril of ones, see causal_mask) with the scores", lambda: _attend(m, x, mask, False)))
    else:
        mistakes.append(("the causal mask is applied although causal=False: "
                         "only mask the future when self.causal is True",
                         lambda: _attend(m, x, mask, True)))
    if mask is not None:
        mistakes += [
            ("the `mask` argument is ignored: apply it to the scores (masked_fill where mask is False)",
             lambda: _attend(m, x, None, causal)),
            ("the mask has no head axis: a [B, 1, T] mask lines up with [H, T, T] instead of [B, ·, T, T]. "
             "Add the head axis with mask.unsqueeze(-3) (dim 1 of [B, 1, 1, T]) before masking the [B, H, T, T] scores",
             variant(head_axis=False)),
            ("the mask is inverted: True means 'may attend' (the convention of F.scaled_dot_product_attention); "
             "fill the scores where the mask is False, i.e. masked_fill(~mask, -inf)", variant(invert=True)),
        ]
        if causal:
            mistakes.append(("the mask and the causal mask are combined with OR; a key must be allowed by both: use &",
                             variant(combine="or")))
    mistakes += [
        ("there is no output projection: apply self.out_proj to the merged heads", variant(out_proj=False)),
        ("the scores are scaled by sqrt(d_model); each head's scale is sqrt(d_head) = sqrt(d_model // n_heads)",
         variant(scale="d_model")),
        ("the scores are not scaled: divide q kᵀ by sqrt(d_head)", variant(scale="none")),
        ("the scores are scaled by sqrt(n_heads); each head's scale is sqrt(d_head) = sqrt(d_model // n_heads)",
         variant(scale="n_heads")),
        ("`view` without `transpose` when splitting heads: " + VIEW_HINT, variant(split=_view_split)),
        ("the heads are merged without transposing back: do .transpose(1, 2) before the reshape to [B, T, C]",
         variant(merge=_bad_merge)),
        (INTERLEAVED_HINT, variant(split=_interleaved_split, merge=_interleaved_merge)),
        (INTERLEAVED_HINT, variant(split=_interleaved_split)),
        ("softmax over the wrong axis: normalise over the keys, the last axis (dim=-1)", variant(dim=-2)),
        ("masked scores are set to 0 instead of -inf: exp(0) = 1 still gives them weight; use float('-inf')",
         variant(fill="zero")),
        ("queries and keys are swapped: the scores are q_proj(x) @ k_proj(x)ᵀ", variant(swap_qk=True)),
        ("the values come from k_proj: use v_proj(x)", variant(v_from_k=True)),
    ]
    if causal:
        mistakes.append(("the causal mask is upside down: "
                         "position t may attend to 0..t, the lower triangle (torch.tril)",
                         variant(causal_fn=lambda T: torch.triu(torch.ones(T, T, dtype=torch.bool)))))
    return mistakes


def _run_mha(mine, theirs, x, mask, causal, what):
    args = (x.clone(),) if mask is None else (x.clone(), mask)
    mask_before = None if mask is None else mask.clone()
    try:
        got = call(mine, *args, what=what)
    except LearnerError as e:
        if is_signature_error(e.error):
            raise
        if mask is None:
            if causal and "must match the size" in str(e.error):
                raise Mismatch(
                    "your code raised an exception with no mask given, only the causal one",
                    error_details(e),
                    hint=("the causal mask is [T, T] and the scores [B, H, T, T]: its head axis goes third from "
                          "the right, mask.unsqueeze(-3) → [1, T, T]; mask.unsqueeze(1) turns [T, T] into "
                          "[T, 1, T], which lines T up with the heads"),
                ) from None
            raise
        raise Mismatch(
            f"your code raised an exception with a mask of shape {list(mask.shape)}",
            error_details(e),
            hint=("the scores are [B, H, T, T]: give the mask a head axis with mask.unsqueeze(-3), which turns "
                  "[B, 1, T] into [B, 1, 1, T] and [T, T] into [1, T, T] (mask.unsqueeze(1) breaks a [T, T] mask); "
                  "then combine it with the causal mask using &"),
        ) from None
    with torch.no_grad():
        expected = theirs(x, mask)
    if mask is not None and not torch.equal(mask, mask_before):
        raise Mismatch("your forward changed the mask it was given",
                       hint="build a new mask (mask = mask & causal) instead of changing it in place (mask &= causal)")
    hint = None
    if isinstance(got, tuple):
        hint = "forward should return only the output tensor, not (output, weights)"
    try:
        expect_close(got, expected, "the attention output", atol=1e-5, rtol=1e-4,
                     mistakes=_mha_mistakes(theirs, x, mask, causal), hint=hint, names="B T C")
    except Mismatch as m:
        p = theirs.dropout.p
        if m.hint is None and mine.training and p == 0 and _right_in_eval_mode(mine, args, expected):
            m.hint = (f"it is right in eval mode but not in train mode although dropout={p}: build the dropout "
                      f"from the argument, nn.Dropout(dropout), not a fixed rate")
        raise
    return got


def _right_in_eval_mode(module, args, expected):
    module.eval()
    try:
        with torch.no_grad():
            again = module(*args)
        return isinstance(again, torch.Tensor) and again.shape == expected.shape and torch.allclose(
            again, expected, atol=1e-5, rtol=1e-4)
    except Exception:  # noqa: BLE001 - learner code: anything it raises means no
        return False
    finally:
        module.train()


def _rand_mask(*shape):
    """A random boolean mask whose diagonal is True, so no row is fully masked (even with the causal mask)."""
    T = shape[-1]
    m = torch.rand(*shape) < 0.6
    return m | torch.eye(T, dtype=torch.bool)


def _pad_mask(B, T):
    """padding_mask of names of different lengths; position 0 is always real."""
    lengths = torch.randint(1, T + 1, (B,))
    lengths[0] = T
    ids = torch.randint(1, 27, (B, T))
    ids[torch.arange(T) >= lengths[:, None]] = 0
    return ref.padding_mask(ids)


@check
def MultiHeadAttention(cls):
    n = 0
    configs = [
        # (args, kwargs, causal, [(label, x, mask), ...])
        ((16, 4), {}, True, [
            ("x [2, 6, 16], no mask", torch.randn(2, 6, 16) * 2, None),
            ("x [3, 6, 16], a [T, T] mask", torch.randn(3, 6, 16) * 2, _rand_mask(6, 6)),
            ("x [3, 6, 16], a padding mask [B, 1, T]", torch.randn(3, 6, 16) * 2, _pad_mask(3, 6)),
            ("x [4, 6, 16], a padding mask [B, 1, T] with B = H", torch.randn(4, 6, 16) * 2, _pad_mask(4, 6)),
            ("x [2, 5, 16], a [B, T, T] mask", torch.randn(2, 5, 16) * 2, _rand_mask(2, 5, 5)),
            ("T = 1: x [2, 1, 16]", torch.randn(2, 1, 16), None),
            ("large inputs: x [2, 5, 16] * 30", torch.randn(2, 5, 16) * 30, None),
        ]),
        ((16, 4), {"causal": False}, False, [
            ("x [2, 6, 16], no mask", torch.randn(2, 6, 16) * 2, None),
            ("x [4, 5, 16], a padding mask [B, 1, T] with B = H", torch.randn(4, 5, 16) * 2, _pad_mask(4, 5)),
            ("x [3, 6, 16], a padding mask [B, 1, T]", torch.randn(3, 6, 16) * 2, _pad_mask(3, 6)),
            ("x [2, 6, 16], a [T, T] mask", torch.randn(2, 6, 16) * 2, _rand_mask(6, 6)),
            ("T = 1: x [3, 1, 16]", torch.randn(3, 1, 16), None),
        ]),
        ((24, 2), {"causal": True}, True, [  # n_heads ≠ d_head: before any case where they can be confused
            ("x [3, 7, 24], a padding mask [B, 1, T]", torch.randn(3, 7, 24) * 2, _pad_mask(3, 7)),
        ]),
        ((16, 1), {}, True, [
            ("x [2, 5, 16], no mask", torch.randn(2, 5, 16) * 2, None),
        ]),
    ]
    built = []
    for args, kwargs, causal, cases in configs:
        label = f"MultiHeadAttention({', '.join(map(str, args))}{''.join(f', {k}={v}' for k, v in kwargs.items())})"
        with case(label):
            mine = build(cls, *args, **kwargs)
            theirs = ref.MultiHeadAttention(*args, **kwargs)
            load_reference_weights(mine, theirs, "your MultiHeadAttention")
            built.append((mine, theirs))
        for case_label, x, mask in cases:
            with case(f"{label}, {case_label}"):
                _run_mha(mine, theirs, x, mask, causal, what=f"{label}(x{', mask' if mask is not None else ''})")
                n += 1
    _check_dropout(cls)
    mine, theirs = built[0]  # causal: the mask it makes must follow x too
    kind_cases(mine, (torch.randn(3, 6, 16), _pad_mask(3, 6)), theirs,
               "MultiHeadAttention(16, 4)(x [3, 6, 16], a padding mask)", module=True)
    return f"{n + 2} cases: causal and not, 1, 2 and 4 heads, [T, T], [B, T, T] and padding masks, dropout, " \
           "float64 and meta"


def _check_dropout(cls):
    label = "MultiHeadAttention(16, 4, causal=False, dropout=0.1)"
    with case(label):
        mine = build(cls, 16, 4, causal=False, dropout=0.1)
        theirs = ref.MultiHeadAttention(16, 4, causal=False, dropout=0.1)
        load_reference_weights(mine, theirs, "your MultiHeadAttention")
    x = torch.randn(2, 8, 16) * 2
    with case(f"{label} in eval mode"):
        mine.eval()
        theirs.eval()
        got = call(mine, x.clone(), what="model.eval(); model(x)")
        with torch.no_grad():
            expected = theirs(x)
        if isinstance(got, torch.Tensor) and not torch.allclose(got.detach(), expected, atol=1e-5, rtol=1e-4):
            again = call(mine, x.clone(), what="model.eval(); model(x)")
            if isinstance(again, torch.Tensor) and not torch.equal(got, again):
                raise Mismatch("in eval mode the output is random: dropout must be off after model.eval()",
                               hint="use nn.Dropout (it knows the mode), or pass training=self.training to F.dropout")
        expect_close(got, expected, "the attention output in eval mode", atol=1e-5, rtol=1e-4,
                     mistakes=_mha_mistakes(theirs, x, None, False))
    with case(f"{label} in train mode"):
        mine.train()
        theirs.train()
        seed(1234)
        got = call(mine, x.clone(), what="model.train(); model(x)")
        expect_tensor(got, expected, "the attention output in train mode")
        got = got.detach()
        seed(1234)
        with torch.no_grad():
            same_seed = theirs(x)
        if torch.allclose(got, same_seed, atol=1e-5, rtol=1e-4):
            return  # the same random numbers, used on the attention weights
        if torch.allclose(got, expected, atol=1e-5, rtol=1e-4):
            raise Mismatch("dropout does nothing in train mode",
                           hint="create self.dropout = nn.Dropout(dropout) in __init__ "
                                "and apply it to the attention weights (after the softmax, before multiplying by V)")
        with torch.no_grad():
            for where, text in [
                ("output", "dropout is applied to the output; "
                           "it belongs on the attention weights (after the softmax, before @ V)"),
                ("merged", "dropout is applied to the merged heads; "
                           "it belongs on the attention weights (after the softmax, before @ V)"),
                ("scores", "dropout is applied to the scores before the softmax; "
                           "it belongs on the attention weights after the softmax"),
                ("v", "dropout is applied to V; it belongs on the attention weights (after the softmax, before @ V)"),
            ]:
                seed(1234)
                if torch.allclose(got, _attend(theirs, x, None, False, dropout_at=where, p=0.1), atol=1e-5, rtol=1e-4):
                    raise Mismatch("dropout is in the wrong place", hint=text)
        # Different random numbers (e.g. a hand-written dropout): judge by behaviour instead.
        zeros = (got == 0).float().mean().item()
        if zeros > 0.03:
            raise Mismatch("dropout is in the wrong place",
                           [f"{zeros:.0%} of the output entries are exactly 0"],
                           hint="dropout is applied to the output; "
                                "it belongs on the attention weights (after the softmax, before @ V)")
        seed(4321)
        again = call(mine, x.clone(), what="model.train(); model(x)").detach()
        if torch.equal(got, again):
            raise Mismatch("in train mode the output is the same on every call: dropout should be random",
                           hint="use nn.Dropout(dropout) on the attention weights")

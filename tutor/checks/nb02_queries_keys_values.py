"""Checks for notebook 02: queries, keys and values."""

import math

import torch

from tutor import reference as ref
from tutor.checks.common import sdpa_mistakes
from tutor.checks.compare import expect_close, kind_cases, load_reference_weights
from tutor.checks.harness import build, call, case, check
from tutor.course import catalog

__all__ = catalog.check_names(__name__)  # this notebook's exercises (tutor.course.catalog)

BATCH_HINT = ("it works without batch dimensions but not with them: transpose only the last two axes "
              "of K with k.transpose(-2, -1) (k.T and k.transpose(0, 1) move the batch axes too)")


def run_sdpa_case(fn, q, k, v, mask=None, what="the attention output"):
    args = (q.clone(), k.clone(), v.clone()) + ((mask,) if mask is not None else ())
    shapes = ", ".join(f"{n} {list(t.shape)}" for n, t in zip("qkv", (q, k, v)))
    got = call(fn, *args, what=f"scaled_dot_product_attention({shapes}{', mask' if mask is not None else ''})")
    expected = ref.scaled_dot_product_attention(q, k, v, mask)
    hint = None
    if isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(q.shape[:-1]) + (k.shape[-2],):
        hint = "you returned the attention weights: multiply them by V"
    expect_close(got, expected, what, atol=1e-5, mistakes=sdpa_mistakes(q, k, v, mask), hint=hint)
    return got


@check
def scaled_dot_product_attention(fn):
    with case("no batch: q [4, 8], k [6, 8], v [6, 5]"):
        q, k, v = torch.randn(4, 8), torch.randn(6, 8), torch.randn(6, 5)
        run_sdpa_case(fn, q, k, v)
    for label, (lead, tq, tk, dk, dv) in {
        "batch [2, 3]: q [2, 3, 4, 8], k [2, 3, 6, 8], v [2, 3, 6, 5]": ((2, 3), 4, 6, 8, 5),
        "batch [2]: d_k = d_v = 16": ((2,), 5, 5, 16, 16),
        "T = 1": ((1,), 1, 1, 4, 3),
    }.items():
        with case(label, hint_on_error=BATCH_HINT):
            q, k, v = torch.randn(*lead, tq, dk), torch.randn(*lead, tk, dk), torch.randn(*lead, tk, dv)
            run_sdpa_case(fn, q, k, v)
    with case("large scores (q, k of size 30)"):
        q, k, v = torch.randn(2, 5, 64) * 30, torch.randn(2, 5, 64) * 30, torch.randn(2, 5, 3)
        run_sdpa_case(fn, q, k, v)
    kind_cases(fn, (torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 5)), ref.scaled_dot_product_attention,
               "scaled_dot_product_attention(q [2, 4, 8], k [2, 6, 8], v [2, 6, 5])")
    return "{cases} cases, d_k ≠ d_v, batch dimensions, float64 and meta"


@check
def AttentionHead(cls):
    d_model, d_head = 16, 8
    with case(f"AttentionHead({d_model}, {d_head})"):
        head = build(cls, d_model, d_head)
        reference = ref.AttentionHead(d_model, d_head)
        load_reference_weights(head, reference, "your AttentionHead")
    for label, shape in [("x [2, 5, 16]", (2, 5, 16)), ("x [1, 1, 16]", (1, 1, 16)), ("x [3, 7, 16]", (3, 7, 16))]:
        with case(label):
            x = torch.randn(*shape)
            got = call(head, x.clone(), what=f"head(x) with x of shape {list(shape)}")
            expected = reference(x)
            expect_close(got, expected, "the head's output", atol=1e-5, mistakes=_head_mistakes(reference, x),
                         names="B T d_head")
    kind_cases(head, (torch.randn(2, 5, 16),), reference, "head(x) with x of shape [2, 5, 16]", module=True)
    return "{cases} cases, float64 and meta"


def _head_mistakes(head, x):
    q, k, v = head.query(x), head.key(x), head.value(x)
    d_head, d_model = q.shape[-1], x.shape[-1]
    T = x.shape[-2]
    causal = ref.causal_mask(T)
    return [
        ("the scores are scaled by sqrt(d_model); the scale is sqrt(d_head), the width of q and k",
         lambda: ref.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_model)) @ v),
        ("the scores are not scaled: divide by sqrt(d_head)", lambda: ref.softmax(q @ k.transpose(-2, -1)) @ v),
        ("this head is causal; in notebook 02 every position attends to every position (masks come in 03)",
         lambda: ref.scaled_dot_product_attention(q, k, v, causal)),
        ("queries and keys are swapped: the scores are query(x) @ key(x)ᵀ",
         lambda: ref.scaled_dot_product_attention(k, q, v)),
        ("the values are wrong: multiply the weights by value(x)",
         lambda: ref.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head)) @ k),
    ]

"""Checks of notebook 03 (masking): they accept the reference, report a stub as not done,
and reject wrong implementations written the way a learner would write them."""

import math

import torch
from checkkit import not_done, passes, rejects, stub

from tutor import checks
from tutor import reference as ref

# --- causal_mask ---------------------------------------------------------------------------


def test_causal_mask_passes_reference():
    passes(checks.causal_mask, ref.causal_mask)


def test_causal_mask_accepts_other_correct_versions():
    def with_arange(T, device=None):
        i = torch.arange(T, device=device)
        return i[:, None] >= i[None, :]

    def with_comparison(T, device=None):
        return torch.tril(torch.ones(T, T, device=device)) == 1

    def with_triu_inverted(T, device=None):
        return ~torch.triu(torch.ones(T, T, dtype=torch.bool, device=device), diagonal=1)

    for fn in (with_arange, with_comparison, with_triu_inverted):
        passes(checks.causal_mask, fn)


def test_causal_mask_stub_is_not_done():
    not_done(checks.causal_mask, stub)


def test_causal_mask_rejects_triu():
    def causal_mask(T, device=None):
        return torch.triu(torch.ones(T, T, dtype=torch.bool, device=device))

    rejects(checks.causal_mask, causal_mask, "wrong values", "torch.triu", "use torch.tril")


def test_causal_mask_rejects_diagonal_excluded():
    def causal_mask(T, device=None):
        return torch.tril(torch.ones(T, T, dtype=torch.bool, device=device), diagonal=-1)

    rejects(checks.causal_mask, causal_mask, "the diagonal is excluded", "attend to itself")


def test_causal_mask_rejects_off_by_one():
    def causal_mask(T, device=None):
        return torch.tril(torch.ones(T, T, dtype=torch.bool, device=device), diagonal=1)

    rejects(checks.causal_mask, causal_mask, "off by one", "t+1")


def test_causal_mask_rejects_inverted_mask():
    def causal_mask(T, device=None):
        # "mask out the future": True where a position must be hidden
        return torch.triu(torch.ones(T, T, device=device), diagonal=1).bool()

    rejects(checks.causal_mask, causal_mask, "inverted", "may attend")


def test_causal_mask_rejects_float_mask():
    def causal_mask(T, device=None):
        return torch.tril(torch.ones(T, T, device=device))

    rejects(checks.causal_mask, causal_mask, "dtype torch.float32, expected torch.bool", ".bool()")


def test_causal_mask_rejects_int_mask():
    def causal_mask(T, device=None):
        return torch.tril(torch.ones(T, T, dtype=torch.long, device=device))

    rejects(checks.causal_mask, causal_mask, "dtype torch.int64, expected torch.bool")


def test_causal_mask_rejects_additive_float_mask():
    def causal_mask(T, device=None):
        future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=device), diagonal=1)
        return torch.zeros(T, T, device=device).masked_fill(future, float("-inf"))

    rejects(checks.causal_mask, causal_mask, "additive float mask", "boolean")


def test_causal_mask_rejects_ignored_device():
    def causal_mask(T, device=None):
        return torch.tril(torch.ones(T, T, dtype=torch.bool))

    rejects(checks.causal_mask, causal_mask, "device='meta'", "on device cpu", "device=device")


def test_causal_mask_rejects_nothing_masked():
    def causal_mask(T, device=None):
        return torch.ones(T, T, dtype=torch.bool, device=device)

    rejects(checks.causal_mask, causal_mask, "allows everything")


def test_causal_mask_reports_exceptions_and_wrong_types():
    def raises(T, device=None):
        return torch.tril(torch.ones(T, T, dtype=torch.bool, device=device)).view(T)

    rejects(checks.causal_mask, raises, "raised an exception", "RuntimeError")

    def a_list(T, device=None):
        return [[s <= t for s in range(T)] for t in range(T)]

    rejects(checks.causal_mask, a_list, "should be a torch.Tensor", "list")


# --- padding_mask ---------------------------------------------------------------------------


def test_padding_mask_passes_reference():
    passes(checks.padding_mask, ref.padding_mask)


def test_padding_mask_accepts_other_correct_versions():
    def with_ne(ids, pad_id=0):
        return ids.ne(pad_id)[:, None, :]

    def with_logical_not(ids, pad_id=0):
        return torch.logical_not(ids == pad_id).unsqueeze(1)

    for fn in (with_ne, with_logical_not):
        passes(checks.padding_mask, fn)


def test_padding_mask_stub_is_not_done():
    not_done(checks.padding_mask, stub)


def test_padding_mask_rejects_mask_on_queries():
    def padding_mask(ids, pad_id=0):
        return (ids != pad_id).unsqueeze(-1)  # [B, T, 1]

    rejects(checks.padding_mask, padding_mask, "wrong shape", "queries instead of the keys", "[B, 1, T]")


def test_padding_mask_rejects_wrong_polarity():
    def padding_mask(ids, pad_id=0):
        is_pad = ids == pad_id
        return is_pad.unsqueeze(1)

    rejects(checks.padding_mask, padding_mask, "wrong values", "polarity is wrong", "ids != pad_id")


def test_padding_mask_rejects_missing_query_axis():
    def padding_mask(ids, pad_id=0):
        return ids != pad_id  # [B, T]

    rejects(checks.padding_mask, padding_mask, "wrong shape", "no query axis", "unsqueeze(1)")


def test_padding_mask_rejects_ignored_pad_id():
    def padding_mask(ids, pad_id=0):
        return (ids != 0).unsqueeze(1)

    rejects(checks.padding_mask, padding_mask, "pad_id=27", "pad_id argument is ignored")


def test_padding_mask_rejects_int_and_float_masks():
    def as_int(ids, pad_id=0):
        return (ids != pad_id).unsqueeze(1).int()

    rejects(checks.padding_mask, as_int, "dtype torch.int32, expected torch.bool")

    def as_float(ids, pad_id=0):
        mask = torch.ones(ids.shape[0], 1, ids.shape[1])
        mask[ids.unsqueeze(1) == pad_id] = 0.0
        return mask

    rejects(checks.padding_mask, as_float, "dtype torch.float32, expected torch.bool")


def test_padding_mask_rejects_in_place_change_of_ids():
    def padding_mask(ids, pad_id=0):
        ids[ids == pad_id] = -1
        return (ids != -1).unsqueeze(1)

    rejects(checks.padding_mask, padding_mask, "changed its input ids in place")


# --- masked_attention -----------------------------------------------------------------------


def test_masked_attention_passes_reference():
    passes(checks.masked_attention, ref.scaled_dot_product_attention)


def test_masked_attention_accepts_other_correct_versions():
    def with_large_negative(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        return torch.softmax(scores, dim=-1) @ v

    def with_where(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if mask is not None:
            scores = torch.where(mask, scores, torch.tensor(float("-inf")))
        return scores.softmax(-1) @ v

    def pytorch(q, k, v, mask=None):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    for fn in (with_large_negative, with_where, pytorch):
        passes(checks.masked_attention, fn)


def test_masked_attention_stub_is_not_done():
    not_done(checks.masked_attention, stub)


def _scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def test_masked_attention_rejects_ignored_mask():
    def scaled_dot_product_attention(q, k, v, mask=None):
        return torch.softmax(_scores(q, k), dim=-1) @ v

    rejects(checks.masked_attention, scaled_dot_product_attention, "the mask is ignored", "masked_fill")


def test_masked_attention_rejects_inverted_mask():
    def scaled_dot_product_attention(q, k, v, mask=None):
        scores = _scores(q, k)
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    rejects(checks.masked_attention, scaled_dot_product_attention, "the mask is inverted", "~mask")


def test_masked_attention_rejects_fill_with_zero():
    def scaled_dot_product_attention(q, k, v, mask=None):
        scores = _scores(q, k)
        if mask is not None:
            scores = scores.masked_fill(~mask, 0)
        return torch.softmax(scores, dim=-1) @ v

    rejects(checks.masked_attention, scaled_dot_product_attention, "set to 0", "-inf")


def test_masked_attention_rejects_scores_times_mask():
    def scaled_dot_product_attention(q, k, v, mask=None):
        scores = _scores(q, k)
        if mask is not None:
            scores = scores * mask
        return torch.softmax(scores, dim=-1) @ v

    rejects(checks.masked_attention, scaled_dot_product_attention, "multiplied by the mask", "-inf")


def test_masked_attention_rejects_mask_after_softmax_without_renormalising():
    def scaled_dot_product_attention(q, k, v, mask=None):
        weights = torch.softmax(_scores(q, k), dim=-1)
        if mask is not None:
            weights = weights * mask.float()
        return weights @ v

    rejects(checks.masked_attention, scaled_dot_product_attention, "after the softmax", "no longer sum to 1")


def test_masked_attention_rejects_renormalising_after_softmax():
    # right on paper, but with large scores every allowed weight can underflow to 0: 0 / 0 = NaN
    def scaled_dot_product_attention(q, k, v, mask=None):
        weights = torch.softmax(_scores(q, k), dim=-1)
        if mask is not None:
            weights = weights * mask
            weights = weights / weights.sum(-1, keepdim=True)
        return weights @ v

    rejects(checks.masked_attention, scaled_dot_product_attention, "large scores", "nan", "before the softmax")


def test_masked_attention_rejects_unguarded_none_mask():
    def scaled_dot_product_attention(q, k, v, mask=None):
        scores = _scores(q, k).masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    rejects(checks.masked_attention, scaled_dot_product_attention, "mask=None", "if mask is not None")


def test_masked_attention_rejects_own_causal_mask():
    def scaled_dot_product_attention(q, k, v, mask=None):
        scores = _scores(q, k)
        if mask is not None:
            T = q.shape[-2]
            causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
            scores = scores.masked_fill(~causal, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    rejects(checks.masked_attention, scaled_dot_product_attention, "own causal mask", "`mask` argument")


def test_masked_attention_rejects_always_causal():
    def scaled_dot_product_attention(q, k, v, mask=None):
        scores = _scores(q, k)
        T = q.shape[-2]
        causal = torch.tril(torch.ones(T, k.shape[-2], dtype=torch.bool))
        scores = scores.masked_fill(~causal, float("-inf"))
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    rejects(checks.masked_attention, scaled_dot_product_attention, "mask=None", "nothing is masked")


def test_masked_attention_rejects_missing_scale():
    def scaled_dot_product_attention(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    rejects(checks.masked_attention, scaled_dot_product_attention, "not scaled", "sqrt(d_k)")


def test_masked_attention_rejects_in_place_change_of_mask():
    def scaled_dot_product_attention(q, k, v, mask=None):
        scores = _scores(q, k)
        if mask is not None:
            mask = mask.logical_not_()  # "the positions to hide"
            scores = scores.masked_fill(mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    rejects(checks.masked_attention, scaled_dot_product_attention, "changed the mask", "in place")


def test_masked_attention_explains_nan():
    def scaled_dot_product_attention(q, k, v, mask=None):
        scores = _scores(q, k)
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))
        weights = torch.exp(scores) / torch.exp(scores).sum(-1, keepdim=True)
        return weights @ v

    rejects(checks.masked_attention, scaled_dot_product_attention, "nan")


def test_checks_leave_the_learners_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    checks.masked_attention(ref.scaled_dot_product_attention)
    checks.padding_mask(ref.padding_mask)
    checks.causal_mask(ref.causal_mask)
    assert torch.equal(torch.rand(3), expected)


def test_causal_mask_on_the_wrong_device_explains_the_meta_device():
    def mask_ignores_device(T, device=None):
        return torch.tril(torch.ones(T, T, dtype=torch.bool))

    rejects(checks.causal_mask, mask_ignores_device, "device=device",
            "'meta' is PyTorch's device for tensors that have a shape and a dtype but no data")


def test_masked_attention_names_k_T_not_the_missing_mask():
    """A learner's: k.T works on [T, d] but not on batched inputs, whose first case has mask=None; the message must
    name the transpose, not tell them to guard a `None` they already guard."""
    def scaled_dot_product_attention(q, k, v, mask=None):
        scores = q @ k.T / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    rejects(checks.masked_attention, scaled_dot_product_attention, "though not without the batch axes",
            "k.transpose(-2, -1)")


def test_masked_attention_still_names_the_missing_guard():
    def scaled_dot_product_attention(q, k, v, mask=None):
        scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    rejects(checks.masked_attention, scaled_dot_product_attention, "when mask=none", "if mask is not none")

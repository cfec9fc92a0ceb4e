"""Checks of notebook 02: scaled dot-product attention and one attention head."""

import math

import pytest
import torch
import torch.nn as nn
from checkkit import not_done, passes, rejects, stub

from tutor import checks
from tutor import reference as ref


def test_sdpa_accepts_reference_and_builtin():
    passes(checks.scaled_dot_product_attention, ref.scaled_dot_product_attention)

    def builtin(q, k, v, mask=None):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    passes(checks.scaled_dot_product_attention, builtin)


def test_sdpa_stub():
    not_done(checks.scaled_dot_product_attention, stub)


def sdpa_unscaled(q, k, v, mask=None):
    return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v


def sdpa_scaled_by_dv(q, k, v, mask=None):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(v.shape[-1]), dim=-1) @ v


def sdpa_scaled_by_dk_not_sqrt(q, k, v, mask=None):
    return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1], dim=-1) @ v


def sdpa_scaled_by_keys(q, k, v, mask=None):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(k.shape[-2]), dim=-1) @ v


def sdpa_transpose_01(q, k, v, mask=None):  # fine for 2-D tensors, wrong with batch dimensions
    return torch.softmax(q @ k.transpose(0, 1) / math.sqrt(q.shape[-1]), dim=-1) @ v


def sdpa_transpose_12(q, k, v, mask=None):  # written for [B, T, d], breaks with [B, H, T, d]
    kt = k.transpose(1, 2) if k.dim() == 3 else k.transpose(-2, -1)
    if k.dim() == 4:
        kt = k.transpose(1, 3)
    return torch.softmax(q @ kt / math.sqrt(q.shape[-1]), dim=-1) @ v


def sdpa_wrong_axis(q, k, v, mask=None):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-2) @ v


def sdpa_weights_only(q, k, v, mask=None):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)


def test_sdpa_rejects():
    rejects(checks.scaled_dot_product_attention, sdpa_unscaled, "not scaled", "sqrt(d_k)")
    rejects(checks.scaled_dot_product_attention, sdpa_scaled_by_dv, "sqrt(d_v)", "width of q and k")
    rejects(checks.scaled_dot_product_attention, sdpa_scaled_by_dk_not_sqrt, "divided by d_k")
    rejects(checks.scaled_dot_product_attention, sdpa_scaled_by_keys, "number of keys", "q.shape[-1]")
    rejects(checks.scaled_dot_product_attention, sdpa_transpose_01, "batch", "k.transpose(-2, -1)")
    rejects(checks.scaled_dot_product_attention, sdpa_transpose_12, "batch", "k.transpose(-2, -1)")
    rejects(checks.scaled_dot_product_attention, sdpa_wrong_axis, "wrong axis", "dim=-1")
    rejects(checks.scaled_dot_product_attention, sdpa_weights_only, "wrong shape", "attention weights")


# --- AttentionHead -----------------------------------------------------------------------


def test_head_accepts_reference_and_stub():
    passes(checks.AttentionHead, ref.AttentionHead)

    class AttentionHead(nn.Module):
        def __init__(self, d_model, d_head):
            super().__init__()
            raise NotImplementedError()

    not_done(checks.AttentionHead, AttentionHead)

    class HalfDone(nn.Module):
        def __init__(self, d_model, d_head):
            super().__init__()
            self.query = nn.Linear(d_model, d_head, bias=False)
            self.key = nn.Linear(d_model, d_head, bias=False)
            self.value = nn.Linear(d_model, d_head, bias=False)

        def forward(self, x):
            raise NotImplementedError()

    not_done(checks.AttentionHead, HalfDone)


class Head(nn.Module):
    """A correct head; the wrong ones below change one thing."""

    def __init__(self, d_model, d_head, bias=False):
        super().__init__()
        self.query = nn.Linear(d_model, d_head, bias=bias)
        self.key = nn.Linear(d_model, d_head, bias=bias)
        self.value = nn.Linear(d_model, d_head, bias=bias)
        self.d_model = d_model

    def forward(self, x):
        q, k, v = self.query(x), self.key(x), self.value(x)
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


class HeadScaledByDModel(Head):
    def forward(self, x):
        q, k, v = self.query(x), self.key(x), self.value(x)
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.d_model), dim=-1) @ v


class HeadCausal(Head):
    def forward(self, x):
        q, k, v = self.query(x), self.key(x), self.value(x)
        T = x.shape[1]
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(torch.tril(torch.ones(T, T)) == 0, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


class HeadWithBias(Head):
    def __init__(self, d_model, d_head):
        super().__init__(d_model, d_head, bias=True)


class HeadSwappedQK(Head):
    def forward(self, x):
        q, k, v = self.query(x), self.key(x), self.value(x)
        return torch.softmax(k @ q.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


class HeadLinearArgsSwapped(nn.Module):
    def __init__(self, d_model, d_head):
        super().__init__()
        self.query = nn.Linear(d_head, d_model, bias=False)
        self.key = nn.Linear(d_head, d_model, bias=False)
        self.value = nn.Linear(d_head, d_model, bias=False)


class HeadNamedDifferently(nn.Module):
    def __init__(self, d_model, d_head):
        super().__init__()
        self.W_q = nn.Linear(d_model, d_head, bias=False)
        self.W_k = nn.Linear(d_model, d_head, bias=False)
        self.W_v = nn.Linear(d_model, d_head, bias=False)


class HeadNoSuperInit(nn.Module):
    def __init__(self, d_model, d_head):
        self.query = nn.Linear(d_model, d_head, bias=False)


def test_head_rejects():
    rejects(checks.AttentionHead, HeadScaledByDModel, "sqrt(d_model)", "sqrt(d_head)")
    rejects(checks.AttentionHead, HeadCausal, "causal", "masks come in 03")
    rejects(checks.AttentionHead, HeadWithBias, "bias=False")
    rejects(checks.AttentionHead, HeadSwappedQK, "swapped")
    rejects(checks.AttentionHead, HeadLinearArgsSwapped, "shape (16, 8)", "input width first")
    rejects(checks.AttentionHead, HeadNamedDifferently, "no parameter `query.weight`")
    rejects(checks.AttentionHead, HeadNoSuperInit, "super().__init__()")


@pytest.mark.parametrize("name", ["scaled_dot_product_attention", "AttentionHead"])
def test_catalog_knows_the_check(name):
    assert getattr(checks, name).exercise.notebook == 2


def test_sdpa_softmax_over_dim_1_is_named():
    # right without batch axes (dim=1 is the last axis of [Tq, Tk]), wrong with them
    def sdpa_dim1(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return torch.softmax(scores, dim=1) @ v

    result = rejects(checks.scaled_dot_product_attention, sdpa_dim1, "softmax over dim=1", "use dim=-1")
    assert "batch [2, 3]" in str(result)  # the first case with batch axes shows it

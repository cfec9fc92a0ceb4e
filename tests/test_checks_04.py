"""Checks of notebook 04: splitting and merging heads, multi-head attention."""

import math

import einops
import torch
import torch.nn as nn
import torch.nn.functional as F
from checkkit import not_done, passes, rejects, stub

from tutor import checks
from tutor import reference as ref

# --- split_heads -----------------------------------------------------------------------------


def test_split_heads_accepts_reference_and_einops():
    passes(checks.split_heads, ref.split_heads)

    def split_heads(x, n_heads):
        return einops.rearrange(x, "b t (h d) -> b h t d", h=n_heads)

    passes(checks.split_heads, split_heads)

    def split_heads_reshape_permute(x, n_heads):
        B, T, C = x.shape
        return x.reshape(B, T, n_heads, -1).permute(0, 2, 1, 3)

    passes(checks.split_heads, split_heads_reshape_permute)


def test_split_heads_stub():
    not_done(checks.split_heads, stub)


def split_view_only(x, n_heads):
    B, T, C = x.shape
    return x.view(B, n_heads, T, C // n_heads)


def split_interleaved(x, n_heads):
    B, T, C = x.shape
    return x.view(B, T, C // n_heads, n_heads).permute(0, 3, 1, 2)


def split_no_transpose(x, n_heads):
    B, T, C = x.shape
    return x.view(B, T, n_heads, C // n_heads)


def split_wrong_transpose(x, n_heads):
    B, T, C = x.shape
    return x.view(B, T, n_heads, C // n_heads).transpose(2, 3)


def split_einops_wrong_order(x, n_heads):
    return einops.rearrange(x, "b t (d h) -> b h t d", h=n_heads)


def split_hardcoded_heads(x, n_heads):
    B, T, C = x.shape
    return x.view(B, T, 4, C // 4).transpose(1, 2)


def test_split_heads_rejects():
    rejects(checks.split_heads, split_view_only, "`view` without `transpose`", "(B, T, H, d_head)")
    rejects(checks.split_heads, split_interleaved, "interleaved", "contiguous slice")
    rejects(checks.split_heads, split_einops_wrong_order, "interleaved")
    rejects(checks.split_heads, split_no_transpose, "wrong shape", "transpose is missing")
    rejects(checks.split_heads, split_wrong_transpose, "wrong shape", "transposed the wrong axes")
    rejects(checks.split_heads, split_hardcoded_heads, "number of heads is wrong", "use the n_heads argument")


def test_split_heads_rejects_in_place_change():
    def split_scaling_in_place(x, n_heads):
        B, T, C = x.shape
        x /= math.sqrt(C // n_heads)  # "pre-scale the queries"
        return x.view(B, T, n_heads, C // n_heads).transpose(1, 2)

    rejects(checks.split_heads, split_scaling_in_place, "changed its input in place")


# --- merge_heads -----------------------------------------------------------------------------


def test_merge_heads_accepts_reference_and_einops():
    passes(checks.merge_heads, ref.merge_heads)

    def merge_heads(x):
        return einops.rearrange(x, "b h t d -> b t (h d)")

    passes(checks.merge_heads, merge_heads)

    def merge_heads_contiguous_view(x):
        B, H, T, d = x.shape
        return x.transpose(1, 2).contiguous().view(B, T, H * d)

    passes(checks.merge_heads, merge_heads_contiguous_view)


def test_merge_heads_stub():
    not_done(checks.merge_heads, stub)


def merge_no_transpose(x):
    B, H, T, d = x.shape
    return x.reshape(B, T, H * d)


def merge_view_after_transpose(x):
    B, H, T, d = x.shape
    return x.transpose(1, 2).view(B, T, H * d)


def merge_interleaved(x):
    B, H, T, d = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, T, H * d)


def merge_transpose_only(x):
    return x.transpose(1, 2)


def merge_einops_wrong_order(x):
    return einops.rearrange(x, "b h t d -> b t (d h)")


def merge_cat_wrong_dim(x):
    return torch.cat([x[:, h] for h in range(x.shape[1])], dim=1)  # stacks along T


def test_merge_heads_rejects():
    rejects(checks.merge_heads, merge_no_transpose, "does not transpose back", "transpose(1, 2)")
    rejects(checks.merge_heads, merge_view_after_transpose, "not contiguous", ".reshape")
    rejects(checks.merge_heads, merge_interleaved, "interleaved")
    rejects(checks.merge_heads, merge_einops_wrong_order, "interleaved")
    rejects(checks.merge_heads, merge_transpose_only, "wrong shape", "not merged")
    rejects(checks.merge_heads, merge_cat_wrong_dim, "wrong shape", "stacked along the positions")


# --- MultiHeadAttention -------------------------------------------------------------------------


class MHA(nn.Module):
    """A correct implementation, written the way a learner would (with F.softmax and nn.Dropout)."""

    def __init__(self, d_model, n_heads, causal=True, dropout=0.0):
        super().__init__()
        self.n_heads, self.d_head, self.causal = n_heads, d_model // n_heads, causal
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.attn_dropout = nn.Dropout(dropout)

    def heads(self, x):
        B, T, C = x.shape
        return (self.q_proj(x).view(B, T, self.n_heads, self.d_head).transpose(1, 2),
                self.k_proj(x).view(B, T, self.n_heads, self.d_head).transpose(1, 2),
                self.v_proj(x).view(B, T, self.n_heads, self.d_head).transpose(1, 2))

    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.heads(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            mask = mask.unsqueeze(-3)
        if self.causal:
            causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
            mask = causal if mask is None else mask & causal
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = self.attn_dropout(F.softmax(scores, dim=-1))
        out = (weights @ v).transpose(1, 2).reshape(B, T, C)
        return self.out_proj(out)


class MHAFunctionalDropout(MHA):
    """Uses F.dropout with training=self.training (same random numbers as nn.Dropout)."""

    def __init__(self, d_model, n_heads, causal=True, dropout=0.0):
        super().__init__(d_model, n_heads, causal, dropout)
        self.p = dropout

    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.heads(x)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(self.d_head)
        if mask is not None:
            mask = mask.unsqueeze(-3)
        if self.causal:
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            mask = causal if mask is None else mask & causal
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        weights = F.dropout(torch.softmax(scores, -1), self.p, training=self.training)
        return self.out_proj(einops.rearrange(weights @ v, "b h t d -> b t (h d)"))


class MHAHandWrittenDropout(MHA):
    """Its own dropout on the weights: other random numbers, right behaviour."""

    def __init__(self, d_model, n_heads, causal=True, dropout=0.0):
        super().__init__(d_model, n_heads, causal, dropout)
        self.p = dropout

    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.heads(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            mask = mask.unsqueeze(-3)
        if self.causal:
            causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
            mask = causal if mask is None else mask & causal
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(-1)
        if self.training and self.p > 0:
            keep = (torch.rand(weights.shape, device=weights.device) > self.p).float()
            weights = weights * keep / (1 - self.p)
        return self.out_proj((weights @ v).transpose(1, 2).reshape(B, T, C))


class MHAWithBuiltinSDPA(MHA):
    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.heads(x)
        if mask is not None:
            mask = mask.unsqueeze(-3)
        if self.causal:
            causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
            mask = causal if mask is None else mask & causal
        p = self.attn_dropout.p if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return self.out_proj(out.transpose(1, 2).reshape(B, T, C))


def test_mha_accepts_reference_and_learner_versions():
    passes(checks.MultiHeadAttention, ref.MultiHeadAttention)
    passes(checks.MultiHeadAttention, MHA)
    passes(checks.MultiHeadAttention, MHAFunctionalDropout)
    passes(checks.MultiHeadAttention, MHAHandWrittenDropout)
    passes(checks.MultiHeadAttention, MHAWithBuiltinSDPA)


def test_mha_stub():
    class MultiHeadAttention(nn.Module):
        def __init__(self, d_model, n_heads, causal=True, dropout=0.0):
            super().__init__()
            raise NotImplementedError()

    not_done(checks.MultiHeadAttention, MultiHeadAttention)

    class MultiHeadAttentionForwardStub(MHA):
        def forward(self, x, mask=None):
            raise NotImplementedError()

    not_done(checks.MultiHeadAttention, MultiHeadAttentionForwardStub)


class ViewWithoutTranspose(MHA):
    def forward(self, x, mask=None):
        B, T, C = x.shape
        q = self.q_proj(x).view(B, self.n_heads, T, self.d_head)
        k = self.k_proj(x).view(B, self.n_heads, T, self.d_head)
        v = self.v_proj(x).view(B, self.n_heads, T, self.d_head)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            mask = mask.unsqueeze(-3)
        if self.causal:
            causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
            mask = causal if mask is None else mask & causal
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        return self.out_proj(out.transpose(1, 2).reshape(B, T, C))


class MergeWithoutTransposeBack(MHA):
    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.heads(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            mask = mask.unsqueeze(-3)
        if self.causal:
            causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
            mask = causal if mask is None else mask & causal
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        return self.out_proj(out.reshape(B, T, C))


class NoOutputProjection(MHA):
    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.heads(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            mask = mask.unsqueeze(-3)
        if self.causal:
            causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
            mask = causal if mask is None else mask & causal
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)


class ScaledByDModel(MHA):
    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.heads(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(C)
        if mask is not None:
            mask = mask.unsqueeze(-3)
        if self.causal:
            causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
            mask = causal if mask is None else mask & causal
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return self.out_proj((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C))


class NeverCausal(MHA):
    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.heads(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        return self.out_proj((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C))


class AlwaysCausal(MHA):
    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.heads(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        allowed = torch.tril(torch.ones(T, T, dtype=torch.bool))
        if mask is not None:
            allowed = allowed & mask.unsqueeze(-3)
        scores = scores.masked_fill(~allowed, float("-inf"))
        return self.out_proj((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C))


class MaskIgnored(MHA):
    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.heads(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if self.causal:
            scores = scores.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf"))
        return self.out_proj((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C))


class MaskWithoutHeadAxis(MHA):
    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.heads(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if self.causal:
            causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
            mask = causal if mask is None else mask & causal
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return self.out_proj((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C))


class MaskUnsqueeze1(MHA):
    """unsqueeze(1) works for [B, 1, T] but turns a [T, T] mask into [T, 1, T]."""

    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.heads(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            mask = mask.unsqueeze(1)
        if self.causal:
            causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
            mask = causal if mask is None else mask & causal
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return self.out_proj((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C))


class CausalMaskUnsqueeze1(MHA):
    """A learner's: the head axis added after combining, with unsqueeze(1), so even the causal mask alone breaks."""

    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.heads(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if self.causal:
            causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
            mask = causal if mask is None else mask & causal
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
        return self.out_proj((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C))


class InterleavedHeads(MHA):
    def forward(self, x, mask=None):
        B, T, C = x.shape
        H, d = self.n_heads, self.d_head
        q = self.q_proj(x).view(B, T, d, H).permute(0, 3, 1, 2)
        k = self.k_proj(x).view(B, T, d, H).permute(0, 3, 1, 2)
        v = self.v_proj(x).view(B, T, d, H).permute(0, 3, 1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)
        if mask is not None:
            mask = mask.unsqueeze(-3)
        if self.causal:
            causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
            mask = causal if mask is None else mask & causal
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v  # [B, H, T, d]
        return self.out_proj(out.permute(0, 2, 3, 1).reshape(B, T, C))


class InvertedMask(MHA):
    """Uses nn.MultiheadAttention's convention (True = blocked) for the mask argument."""

    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.heads(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(mask.unsqueeze(-3), float("-inf"))
        if self.causal:
            scores = scores.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf"))
        return self.out_proj((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C))


class MasksCombinedWithOr(MHA):
    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.heads(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            mask = mask.unsqueeze(-3)
        if self.causal:
            causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
            mask = causal if mask is None else mask | causal
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return self.out_proj((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C))


class MaskedToZero(MHA):
    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.heads(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if self.causal:
            scores = torch.tril(scores)
        if mask is not None:
            scores = scores * mask.unsqueeze(-3)
        return self.out_proj((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C))


class MaskChangedInPlace(MHA):
    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.heads(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if self.causal:
            if mask is None:
                mask = torch.ones(T, T, dtype=torch.bool)
            if mask.shape == (T, T):
                mask &= torch.tril(torch.ones(T, T, dtype=torch.bool))
            else:
                mask = mask & torch.tril(torch.ones(T, T, dtype=torch.bool))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        return self.out_proj((torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C))


class DropoutOnOutput(MHA):
    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.heads(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            mask = mask.unsqueeze(-3)
        if self.causal:
            causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
            mask = causal if mask is None else mask & causal
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        return self.attn_dropout(self.out_proj(out))


class HandWrittenDropoutOnOutput(MHA):
    def forward(self, x, mask=None):
        out = MHA.forward(self, x, mask)
        p = self.attn_dropout.p
        if self.training and p > 0:
            out = out * (torch.rand_like(out) >= p) / (1 - p)
        return out


class DropoutNeverApplied(MHA):
    def forward(self, x, mask=None):
        was = self.training
        self.attn_dropout.eval()  # forgot to use dropout: behaves as if p = 0
        out = MHA.forward(self, x, mask)
        self.attn_dropout.train(was)
        return out


class DropoutAlwaysOn(MHAFunctionalDropout):
    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = self.heads(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if self.causal:
            scores = scores.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf"))
        if mask is not None:
            scores = scores.masked_fill(~mask.unsqueeze(-3), float("-inf"))
        weights = F.dropout(torch.softmax(scores, -1), self.p)  # training defaults to True
        return self.out_proj((weights @ v).transpose(1, 2).reshape(B, T, C))


class WithBiases(MHA):
    def __init__(self, d_model, n_heads, causal=True, dropout=0.0):
        super().__init__(d_model, n_heads, causal, dropout)
        self.q_proj = nn.Linear(d_model, d_model)


class ReturnsWeightsToo(MHA):
    def forward(self, x, mask=None):
        return MHA.forward(self, x, mask), None


def test_mha_rejects_head_mistakes():
    rejects(checks.MultiHeadAttention, ViewWithoutTranspose, "`view` without `transpose`", "(B, T, H, d_head)")
    rejects(checks.MultiHeadAttention, MergeWithoutTransposeBack, "without transposing back")
    rejects(checks.MultiHeadAttention, InterleavedHeads, "interleaved", "contiguous slice")
    rejects(checks.MultiHeadAttention, NoOutputProjection, "no output projection", "out_proj")
    rejects(checks.MultiHeadAttention, ScaledByDModel, "sqrt(d_model)", "sqrt(d_head)")


def test_mha_rejects_mask_mistakes():
    rejects(checks.MultiHeadAttention, NeverCausal, "not causal although causal=true")
    rejects(checks.MultiHeadAttention, AlwaysCausal, "causal mask is applied although causal=false")
    rejects(checks.MultiHeadAttention, MaskIgnored, "`mask` argument is ignored")
    rejects(checks.MultiHeadAttention, MaskWithoutHeadAxis, "[b, 1, t]", "unsqueeze(-3)")
    rejects(checks.MultiHeadAttention, MaskUnsqueeze1, "[t, t]", "unsqueeze(-3)")
    rejects(checks.MultiHeadAttention, CausalMaskUnsqueeze1, "only the causal one", "[t, 1, t]", "unsqueeze(-3)")
    rejects(checks.MultiHeadAttention, InvertedMask, "mask is inverted")
    rejects(checks.MultiHeadAttention, MasksCombinedWithOr, "combined with or")
    rejects(checks.MultiHeadAttention, MaskedToZero, "instead of -inf")
    rejects(checks.MultiHeadAttention, MaskChangedInPlace, "changed the mask")


def test_mha_rejects_dropout_mistakes():
    rejects(checks.MultiHeadAttention, DropoutOnOutput, "dropout is applied to the output")
    rejects(checks.MultiHeadAttention, HandWrittenDropoutOnOutput, "dropout is applied to the output", "exactly 0")
    rejects(checks.MultiHeadAttention, DropoutNeverApplied, "dropout does nothing in train mode")
    rejects(checks.MultiHeadAttention, DropoutAlwaysOn, "eval mode", "training=self.training")


def test_mha_rejects_module_mistakes():
    rejects(checks.MultiHeadAttention, WithBiases, "q_proj.bias", "bias=false")
    rejects(checks.MultiHeadAttention, ReturnsWeightsToo, "only the output tensor")
    rejects(checks.MultiHeadAttention, lambda d_model, n_heads, **kw: None, "not a torch.nn.module")


def test_checks_do_not_touch_the_learners_rng():
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    checks.MultiHeadAttention(MHA)
    assert torch.equal(torch.rand(3), expected)


def test_mha_names_a_forward_without_mask_argument():
    class NoMaskArgument(ref.MultiHeadAttention):
        def forward(self, x):
            return super().forward(x)

    result = rejects(checks.MultiHeadAttention, NoMaskArgument, "takes 2 positional arguments",
                     "forward(self, x, mask=None)")
    assert "unsqueeze" not in str(result)


def test_a_returned_tuple_is_named():
    class ReturnsWeightsToo(ref.MultiHeadAttention):
        def forward(self, x, mask=None):
            return super().forward(x, mask), None

    rejects(checks.MultiHeadAttention, ReturnsWeightsToo, "got tuple", "only the output tensor")


def test_mha_rejects_scaling_by_sqrt_n_heads():
    # MultiHeadAttention(16, 4) has n_heads = d_head = 4: this passed there, and (16, 1) made it look unscaled
    import math

    class MHA(ref.MultiHeadAttention):
        def forward(self, x, mask=None):
            B, T, C = x.shape
            q, k, v = (ref.split_heads(p(x), self.n_heads) for p in (self.q_proj, self.k_proj, self.v_proj))
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.n_heads)
            allowed = torch.ones(T, T, dtype=torch.bool, device=x.device).tril() if self.causal else None
            if mask is not None:
                allowed = mask.unsqueeze(-3) if allowed is None else allowed & mask.unsqueeze(-3)
            if allowed is not None:
                scores = scores.masked_fill(~allowed, float("-inf"))
            return self.out_proj(ref.merge_heads(torch.softmax(scores, dim=-1) @ v))

    rejects(checks.MultiHeadAttention, MHA, "scaled by sqrt(n_heads)", "sqrt(d_head)")


def test_mha_with_a_fixed_dropout_rate_names_it():
    class MHA(ref.MultiHeadAttention):
        def __init__(self, d_model, n_heads, causal=True, dropout=0.0):
            super().__init__(d_model, n_heads, causal, dropout=0.1)

    rejects(checks.MultiHeadAttention, MHA, "right in eval mode but not in train mode", "not a fixed rate")


# --- issue 13: shape messages in tutor.shapes' words, with a likely cause --------------------------


def test_split_heads_without_a_head_axis_says_where_the_heads_went():
    rejects(checks.split_heads, lambda x, n_heads: x, "wrong shape",
            "axis 'H' (size 2) looks merged into axis 'd_head'", ".unflatten(2, (2, 4)).transpose(1, 2)")


def test_split_heads_that_drops_the_batch_axis_is_named():
    def split_first_only(x, n_heads):
        B, T, C = x.shape
        return x.view(B, T, n_heads, C // n_heads).transpose(1, 2)[0]

    rejects(checks.split_heads, split_first_only, "wrong shape", "the first axis 'B' looks missing")


def test_mha_returning_unmerged_heads_is_named():
    class MHA(ref.MultiHeadAttention):
        def forward(self, x, mask=None):
            return ref.split_heads(super().forward(x, mask), self.n_heads)

    rejects(checks.MultiHeadAttention, MHA, "wrong shape", "looks split off axis 3", ".transpose(1, 2).flatten(2, 3)")

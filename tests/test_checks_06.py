"""Tests of the checks of notebook 06: each passes the reference, reports a stub as not done, and
rejects wrong implementations written the way a learner would write them, naming the mistake."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from checkkit import StubInit, not_done, passes, rejects, stub

from tutor import checks
from tutor import reference as ref
from tutor.course import catalog

ALL = [e.name for e in catalog.exercises(6)]  # an exercise added to the catalog is tested here too
CLASSES = [name for name in ALL if isinstance(getattr(ref, name), type)]


# --- every check ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_reference_passes(name):
    passes(getattr(checks, name), getattr(ref, name))


@pytest.mark.parametrize("name", ALL)
def test_stub_is_not_done(name):
    not_done(getattr(checks, name), StubInit if name in CLASSES else stub)


@pytest.mark.parametrize("name", CLASSES)
def test_forward_stub_is_not_done(name):
    class StubForward(getattr(ref, name)):
        def forward(self, *args, **kwargs):
            raise NotImplementedError()

    not_done(getattr(checks, name), StubForward)


@pytest.mark.parametrize("name", ALL)
def test_not_a_class_or_a_function(name):
    result = getattr(checks, name)(None)
    kind = "class" if name in CLASSES else "function"
    assert not result.passed and f"pass your {kind} itself" in str(result)


@pytest.mark.parametrize("name", ALL)
def test_checks_leave_the_global_rng_alone(name):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    getattr(checks, name)(getattr(ref, name))
    assert torch.equal(torch.rand(3), expected)


# --- LayerNorm --------------------------------------------------------------------------------


class LNBase(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))


class LNUnbiased(LNBase):
    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True)  # torch's default: unbiased
        return ((x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias).to(dtype)


class LNEpsOutside(LNBase):
    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        mean = x.mean(dim=-1, keepdim=True)
        std = ((x - mean) ** 2).mean(dim=-1, keepdim=True).sqrt()
        return ((x - mean) / (std + self.eps) * self.weight + self.bias).to(dtype)


class LNNoAffine(LNBase):
    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return ((x - mean) / torch.sqrt(var + self.eps)).to(dtype)


class LNNoBiasApplied(LNBase):
    def forward(self, x):
        mean = x.float().mean(dim=-1, keepdim=True)
        var = x.float().var(dim=-1, keepdim=True, unbiased=False)
        return ((x.float() - mean) / torch.sqrt(var + self.eps) * self.weight).to(x.dtype)


class LNInHalf(LNBase):
    """Correct in float32, but computes float16 input in float16."""

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        x_hat = (x - mean) / torch.sqrt(var + self.eps)
        return (x_hat * self.weight + self.bias).to(x.dtype)


class LNNoCastBack(LNBase):
    def forward(self, x):
        x = x.float()
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class LNRandomInit(ref.LayerNorm):
    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps)
        self.weight = nn.Parameter(torch.randn(d_model))


class LNIgnoresEps(ref.LayerNorm):
    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model)  # eps forgotten: always 1e-5


class LNNoMean(LNBase):
    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x_hat = x / torch.sqrt((x ** 2).mean(dim=-1, keepdim=True) + self.eps)
        return (x_hat * self.weight + self.bias).to(dtype)


class LNNoBiasParam(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(x.var(dim=-1, keepdim=True, unbiased=False) + self.eps) * self.weight


class LNInPlace(LNBase):
    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x -= x.mean(dim=-1, keepdim=True)  # for float32 input, x.float() is x itself
        var = (x ** 2).mean(dim=-1, keepdim=True)
        return (x / torch.sqrt(var + self.eps) * self.weight + self.bias).to(dtype)


class LNWrongAxis(LNBase):
    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        mean = x.mean(dim=-2, keepdim=True)
        var = x.var(dim=-2, keepdim=True, unbiased=False)
        return ((x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias).to(dtype)


@pytest.mark.parametrize("wrong, needles", [
    (LNUnbiased, ["unbiased", "unbiased=False"]),
    (LNEpsOutside, ["outside the square root"]),
    (LNNoAffine, ["weight and bias are not applied"]),
    (LNNoBiasApplied, ["bias is not added"]),
    (LNInHalf, ["float16", "compute in float32"]),
    (LNNoCastBack, ["dtype", ".to(dtype)"]),
    (LNRandomInit, ["should start as all 1s", "torch.ones"]),
    (LNIgnoresEps, ["eps argument is ignored"]),
    (LNNoMean, ["mean is not subtracted"]),
    (LNNoBiasParam, ["no parameter `bias`"]),
    (LNInPlace, ["in place"]),
    (LNWrongAxis, ["wrong axis", "dim=-1"]),
])
def test_layer_norm_rejects(wrong, needles):
    rejects(checks.LayerNorm, wrong, *needles)


def test_layer_norm_accepts_other_correct_formulas():
    class OnePass(LNBase):  # E[x²] - E[x]², in float32; fair on the check's inputs
        def forward(self, x):
            dtype = x.dtype
            x = x.float()
            mean = x.mean(-1, keepdim=True)
            var = (x * x).mean(-1, keepdim=True) - mean * mean
            return ((x - mean) * torch.rsqrt(var + self.eps) * self.weight.float() + self.bias.float()).to(dtype)

    class LlamaStyle(LNBase):  # normalise in float32, apply weight and bias in the input dtype
        def forward(self, x):
            dtype = x.dtype
            xf = x.float()
            mean = xf.mean(-1, keepdim=True)
            x_hat = ((xf - mean) / torch.sqrt(((xf - mean) ** 2).mean(-1, keepdim=True) + self.eps)).to(dtype)
            return x_hat * self.weight.to(dtype) + self.bias.to(dtype)

    class TorchLN(nn.LayerNorm):  # torch's own, with float32 compute for half input
        def __init__(self, d_model, eps=1e-5):
            super().__init__(d_model, eps=eps)

        def forward(self, x):
            y = F.layer_norm(x.float(), self.normalized_shape, self.weight.float(), self.bias.float(), self.eps)
            return y.to(x.dtype)

    for cls in (OnePass, LlamaStyle, TorchLN):
        passes(checks.LayerNorm, cls)


# --- RMSNorm -------------------------------------------------------------------------------------


class RMSBase(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))


class RMSSubtractsMean(RMSBase):
    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x - x.mean(dim=-1, keepdim=True)
        rms = torch.sqrt((x ** 2).mean(dim=-1, keepdim=True) + self.eps)
        return (x / rms * self.weight).to(dtype)


class RMSEpsOutside(RMSBase):
    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        rms = x.pow(2).mean(-1, keepdim=True).sqrt()
        return (x / (rms + self.eps) * self.weight).to(dtype)


class RMSInHalf(RMSBase):
    def forward(self, x):
        rms = torch.sqrt((x * x).mean(dim=-1, keepdim=True) + self.eps)
        return (x / rms * self.weight).to(x.dtype)


class RMSNormL2(RMSBase):
    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        return (x / (x.norm(dim=-1, keepdim=True) + self.eps) * self.weight).to(dtype)


class RMSNoWeight(RMSBase):
    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).to(dtype)


class RMSWithBias(ref.RMSNorm):
    def __init__(self, d_model, eps=1e-5):
        super().__init__(d_model, eps)
        self.bias = nn.Parameter(torch.zeros(d_model))


class RMSNoSqrt(RMSBase):
    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        return (x / (x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(dtype)


@pytest.mark.parametrize("wrong, needles", [
    (RMSSubtractsMean, ["mean is subtracted"]),
    (RMSEpsOutside, ["outside the square root"]),
    (RMSInHalf, ["float16", "overflows"]),
    (RMSNormL2, ["length", "mean of the squares"]),
    (RMSNoWeight, ["weight is not applied"]),
    (RMSWithBias, ["does not ask for: bias", "only a weight"]),
    (RMSNoSqrt, ["without the square root"]),
])
def test_rms_norm_rejects(wrong, needles):
    rejects(checks.RMSNorm, wrong, *needles)


def test_rms_norm_accepts_llama_style():
    class LlamaRMSNorm(RMSBase):
        def forward(self, x):
            dtype = x.dtype
            h = x.to(torch.float32)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            return self.weight.to(dtype) * h.to(dtype)

    passes(checks.RMSNorm, LlamaRMSNorm)


# --- MLP -------------------------------------------------------------------------------------------


class MLPBase(nn.Module):
    def __init__(self, d_model, d_hidden=None, dropout=0.0):
        super().__init__()
        d_hidden = d_hidden or 4 * d_model
        self.fc = nn.Linear(d_model, d_hidden)
        self.proj = nn.Linear(d_hidden, d_model)
        self.dropout = nn.Dropout(dropout)


class MLPActAfterProj(MLPBase):
    """The trap from the source article: the non-linearity after the second linear layer."""

    def forward(self, x):
        return self.dropout(F.gelu(self.proj(self.fc(x))))


class MLPRelu(MLPBase):
    def forward(self, x):
        return self.dropout(self.proj(torch.relu(self.fc(x))))


class MLPTanhGelu(MLPBase):
    def __init__(self, d_model, d_hidden=None, dropout=0.0):
        super().__init__(d_model, d_hidden, dropout)
        self.act = nn.GELU(approximate="tanh")

    def forward(self, x):
        return self.dropout(self.proj(self.act(self.fc(x))))


class MLPHiddenDefault(nn.Module):
    def __init__(self, d_model, d_hidden=None, dropout=0.0):
        super().__init__()
        d_hidden = d_hidden or d_model  # forgot the 4x expansion
        self.fc = nn.Linear(d_model, d_hidden)
        self.proj = nn.Linear(d_hidden, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.proj(F.gelu(self.fc(x))))


class MLPDropoutBeforeProj(MLPBase):
    def forward(self, x):
        return self.proj(self.dropout(F.gelu(self.fc(x))))


class MLPNoBias(nn.Module):
    def __init__(self, d_model, d_hidden=None, dropout=0.0):
        super().__init__()
        d_hidden = d_hidden or 4 * d_model
        self.fc = nn.Linear(d_model, d_hidden, bias=False)
        self.proj = nn.Linear(d_hidden, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.proj(F.gelu(self.fc(x))))


class MLPDropoutAlwaysOn(MLPBase):
    def __init__(self, d_model, d_hidden=None, dropout=0.0):
        super().__init__(d_model, d_hidden, dropout)
        self.p = dropout

    def forward(self, x):
        return F.dropout(self.proj(F.gelu(self.fc(x))), self.p)  # training=True by default


class MLPIgnoresDropout(MLPBase):
    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class MLPUnscaledDropout(MLPBase):
    def __init__(self, d_model, d_hidden=None, dropout=0.0):
        super().__init__(d_model, d_hidden, dropout)
        self.p = dropout

    def forward(self, x):
        out = self.proj(F.gelu(self.fc(x)))
        if self.training and self.p > 0:
            out = out * (torch.rand_like(out) > self.p)
        return out


class MLPIgnoresHidden(nn.Module):
    def __init__(self, d_model, d_hidden=None, dropout=0.0):
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


@pytest.mark.parametrize("wrong, needles", [
    (MLPActAfterProj, ["after the second linear layer"]),
    (MLPRelu, ["relu instead of gelu"]),
    (MLPTanhGelu, ["tanh approximation"]),
    (MLPHiddenDefault, ["hidden width of 16", "4 * d_model"]),
    (MLPDropoutBeforeProj, ["dropout is not applied right after proj"]),
    (MLPNoBias, ["no bias", "bias=False"]),
    (MLPDropoutAlwaysOn, ["eval mode", "training=self.training"]),
    (MLPIgnoresDropout, ["no effect in train mode"]),
    (MLPUnscaledDropout, ["scaled by 1 / (1 - p)"]),
    (MLPIgnoresHidden, ["hidden width of 64", "d_hidden argument"]),
])
def test_mlp_rejects(wrong, needles):
    rejects(checks.MLP, wrong, *needles)


def test_mlp_accepts_sequential_style():
    class SeqMLP(nn.Module):
        def __init__(self, d_model, d_hidden=None, dropout=0.0):
            super().__init__()
            d_hidden = d_hidden or 4 * d_model
            self.fc = nn.Linear(d_model, d_hidden)
            self.proj = nn.Linear(d_hidden, d_model)
            self.p = dropout

        def forward(self, x):
            h = 0.5 * self.fc(x) * (1 + torch.erf(self.fc(x) / math.sqrt(2)))  # exact GELU by hand
            return F.dropout(self.proj(h), self.p, training=self.training)

    passes(checks.MLP, SeqMLP)


# --- SwiGLU -------------------------------------------------------------------------------------------


class SwiGLUSwappedRoles(nn.Module):
    def __init__(self, d_model, d_hidden):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_hidden, bias=False)
        self.w2 = nn.Linear(d_model, d_hidden, bias=False)  # w2 used as the "up" branch
        self.w3 = nn.Linear(d_hidden, d_model, bias=False)  # w3 used as the output

    def forward(self, x):
        return self.w3(F.silu(self.w1(x)) * self.w2(x))


class SwiGLUGateOnW3(ref.SwiGLU):
    def forward(self, x):
        return self.w2(self.w1(x) * F.silu(self.w3(x)))


class SwiGLUSigmoid(ref.SwiGLU):
    def forward(self, x):
        return self.w2(torch.sigmoid(self.w1(x)) * self.w3(x))


class SwiGLUWithBias(nn.Module):
    def __init__(self, d_model, d_hidden):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_hidden)
        self.w2 = nn.Linear(d_hidden, d_model)
        self.w3 = nn.Linear(d_model, d_hidden)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class SwiGLUNoGate(ref.SwiGLU):
    def forward(self, x):
        return self.w2(F.silu(self.w1(x)))


class SwiGLUSiluAfterProduct(ref.SwiGLU):
    def forward(self, x):
        return self.w2(F.silu(self.w1(x) * self.w3(x)))


@pytest.mark.parametrize("wrong, needles", [
    (SwiGLUSwappedRoles, ["w2 and w3 have swapped roles"]),
    (SwiGLUGateOnW3, ["w1 and w3 are swapped"]),
    (SwiGLUSigmoid, ["sigmoid instead of silu"]),
    (SwiGLUWithBias, ["does not ask for", "bias=False"]),
    (SwiGLUNoGate, ["no gate"]),
    (SwiGLUSiluAfterProduct, ["silu is applied after multiplying"]),
])
def test_swiglu_rejects(wrong, needles):
    rejects(checks.SwiGLU, wrong, *needles)


def test_swiglu_swapped_roles_in_forward_only_when_square():
    class Square(ref.SwiGLU):  # shapes fit only when d_hidden == d_model
        def forward(self, x):
            return self.w3(F.silu(self.w1(x)) * self.w2(x))

    # with d_hidden != d_model this raises a shape error; the check must report it, not crash
    result = checks.SwiGLU(Square)
    assert result.status == "failed"


# --- TransformerBlock ------------------------------------------------------------------------------------


class BlockBase(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.ln1 = ref.LayerNorm(d_model)
        self.attn = ref.MultiHeadAttention(d_model, n_heads, causal=True, dropout=dropout)
        self.ln2 = ref.LayerNorm(d_model)
        self.mlp = ref.MLP(d_model, dropout=dropout)


class BlockNormalisesStream(BlockBase):
    """The trap from the source article."""

    def forward(self, x, mask=None):
        x = self.ln1(x)
        x = x + self.attn(x, mask)
        x = self.ln2(x)
        x = x + self.mlp(x)
        return x


class BlockPostNorm(BlockBase):
    def forward(self, x, mask=None):
        x = self.ln1(x + self.attn(x, mask))
        x = self.ln2(x + self.mlp(x))
        return x


class BlockNoMLPResidual(BlockBase):
    def forward(self, x, mask=None):
        x = x + self.attn(self.ln1(x), mask)
        return self.mlp(self.ln2(x))


class BlockNoAttnResidual(BlockBase):
    def forward(self, x, mask=None):
        x = self.attn(self.ln1(x), mask)
        x = x + self.mlp(self.ln2(x))
        return x


class BlockIgnoresMask(BlockBase):
    def forward(self, x, mask=None):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class BlockNotCausal(BlockBase):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__(d_model, n_heads, dropout)
        self.attn = ref.MultiHeadAttention(d_model, n_heads, causal=False, dropout=dropout)

    def forward(self, x, mask=None):
        x = x + self.attn(self.ln1(x), mask)
        return x + self.mlp(self.ln2(x))


class BlockIgnoresDropout(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.ln1 = ref.LayerNorm(d_model)
        self.attn = ref.MultiHeadAttention(d_model, n_heads)
        self.ln2 = ref.LayerNorm(d_model)
        self.mlp = ref.MLP(d_model)

    def forward(self, x, mask=None):
        x = x + self.attn(self.ln1(x), mask)
        return x + self.mlp(self.ln2(x))


class BlockOtherNames(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.norm1 = ref.LayerNorm(d_model)
        self.attn = ref.MultiHeadAttention(d_model, n_heads)
        self.norm2 = ref.LayerNorm(d_model)
        self.mlp = ref.MLP(d_model)

    def forward(self, x, mask=None):
        x = x + self.attn(self.norm1(x), mask)
        return x + self.mlp(self.norm2(x))


class BlockParallel(BlockBase):
    def forward(self, x, mask=None):
        return x + self.attn(self.ln1(x), mask) + self.mlp(self.ln2(x))


class BlockSwappedNorms(BlockBase):
    def forward(self, x, mask=None):
        x = x + self.attn(self.ln2(x), mask)
        return x + self.mlp(self.ln1(x))


@pytest.mark.parametrize("wrong, needles", [
    (BlockNormalisesStream, ["normalised the residual stream itself"]),
    (BlockPostNorm, ["post-norm"]),
    (BlockNoMLPResidual, ["residual connection around the mlp is missing"]),
    (BlockNoAttnResidual, ["residual connection around attention is missing"]),
    (BlockIgnoresMask, ["mask is not passed"]),
    (BlockNotCausal, ["not causal"]),
    (BlockIgnoresDropout, ["dropout argument is ignored"]),
    (BlockOtherNames, ["no sub-module `ln1`", "self.ln1 = LayerNorm(d_model)"]),
    (BlockParallel, ["block's input instead of the stream after attention"]),
    (BlockSwappedNorms, ["ln1 and ln2 are swapped"]),
])
def test_block_rejects(wrong, needles):
    rejects(checks.TransformerBlock, wrong, *needles)


def test_block_accepts_torch_layer_norm_and_own_parts():
    class Block(nn.Module):
        def __init__(self, d_model, n_heads, dropout=0.0):
            super().__init__()
            self.ln1 = nn.LayerNorm(d_model)
            self.attn = ref.MultiHeadAttention(d_model, n_heads, causal=True, dropout=dropout)
            self.ln2 = nn.LayerNorm(d_model)
            self.mlp = ref.MLP(d_model, dropout=dropout)

        def forward(self, x, mask=None):
            h = self.ln1(x)
            x = x + self.attn(h, mask=mask)
            return x + self.mlp(self.ln2(x))

    passes(checks.TransformerBlock, Block)



# --- issue 7: blind spots (an argument that a wrong derivation also produces) ------------------


class _Block(torch.nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0, attn_heads=None, attn_dropout=None):
        super().__init__()
        self.ln1 = ref.LayerNorm(d_model)
        self.attn = ref.MultiHeadAttention(d_model, attn_heads(d_model, n_heads) if attn_heads else n_heads,
                                           dropout=dropout if attn_dropout is None else attn_dropout)
        self.ln2 = ref.LayerNorm(d_model)
        self.mlp = ref.MLP(d_model, dropout=dropout)

    def forward(self, x, mask=None):
        x = x + self.attn(self.ln1(x), mask)
        return x + self.mlp(self.ln2(x))


def test_block_rejects_n_heads_and_d_head_swapped():
    # TransformerBlock(16, 4) has d_head = 4 = n_heads, so this passed while that was the only shape
    class Block(_Block):
        def __init__(self, d_model, n_heads, dropout=0.0):
            super().__init__(d_model, n_heads, dropout, attn_heads=lambda d, h: d // h)

    rejects(checks.TransformerBlock, Block, "d_model // n_heads heads", "pass n_heads itself")


def test_block_rejects_dropout_given_to_the_mlp_only():
    class Block(_Block):
        def __init__(self, d_model, n_heads, dropout=0.0):
            super().__init__(d_model, n_heads, dropout, attn_dropout=0.0)

    rejects(checks.TransformerBlock, Block, "`attn` has no dropout in train mode", "dropout=dropout")


def test_mlp_rejects_a_fixed_dropout_rate():
    # the only dropout the check used to try was 0.5, and every other case ran in eval mode
    class MLP(ref.MLP):
        def __init__(self, d_model, d_hidden=None, dropout=0.0):
            super().__init__(d_model, d_hidden, dropout=0.5)

    rejects(checks.MLP, MLP, "default dropout=0.0 nothing may be dropped", "not a fixed rate")


def test_block_rejects_a_fixed_dropout_rate():
    class Block(_Block):
        def __init__(self, d_model, n_heads, dropout=0.0):
            super().__init__(d_model, n_heads, 0.5)

    rejects(checks.TransformerBlock, Block, "default dropout=0.0 nothing may be dropped", "not a fixed rate")

"""Every check of an exercise that takes tensors runs it once in float64 and once on the meta device (issue 43,
item 3): code that does not follow its input's dtype, or makes a tensor on the CPU while its input is on a GPU, is
rejected with a message that says so, and correct code that reads a value (which meta tensors do not have) is not.

The meta device is held to a GPU's rule there (``tutor.checks.beside.LikeAGPU``): on its own it lets a CPU index
into an embedding, or a CPU mask, through."""

import functools
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from checkkit import passes, rejects

from tutor import checks
from tutor import reference as ref
from tutor.checks import beside

# exercises whose learner writes a function of tensors, and the kinds its check runs (catalog name, reference name)
FUNCTIONS = [  # (check, reference, whether its check runs it in float64)
    ("similarity", "similarity", True),
    ("softmax", "softmax", True),
    ("dot_product_attention", "dot_product_attention", True),
    ("scaled_dot_product_attention", "scaled_dot_product_attention", True),
    ("masked_attention", "scaled_dot_product_attention", True),
    ("apply_rope", "apply_rope", True),
    ("lm_loss", "lm_loss", True),
    ("one_hot", "one_hot", False),  # ids in, float32 out whatever: the meta case only
    ("padding_mask", "padding_mask", False),
    ("generate", "generate", True),  # a GPT in float64, greedy: the same ids
    ("generate_cached", "generate_cached", True),
]
FLOAT_OUTPUT = [(n, r) for n, r, floating in FUNCTIONS if floating and not n.startswith("generate")]
# their checks already hold a float16 or bfloat16 input to its dtype, which a float32 output fails first
HALF_CHECKED = {"apply_rope", "PositionalEmbedding", "LayerNorm", "RMSNorm"}
MODULES = ["AttentionHead", "MultiHeadAttention", "PositionalEmbedding", "LayerNorm", "RMSNorm", "MLP", "SwiGLU",
           "TransformerBlock", "GPT", "RotaryAttention", "ModernBlock", "ModernGPT"]


def _function(reference, change):
    @functools.wraps(reference)
    def learner(*args, **kwargs):
        return change(reference(*args, **kwargs))
    return learner


def _module(reference_class, change):
    class Learner(reference_class):
        def forward(self, *args, **kwargs):
            return change(super().forward(*args, **kwargs))
    Learner.__name__ = Learner.__qualname__ = reference_class.__name__
    return Learner


def float32_always(out):  # e.g. a constant made with torch.tensor(...) or a computation in float32 never undone
    return out.float()


def a_cpu_tensor_added(out):  # e.g. torch.zeros(d) made without device=x.device (0-d outputs too: a loss)
    return (out.unsqueeze(-1) + torch.zeros(1, dtype=out.dtype)).squeeze(-1)


@pytest.mark.parametrize("name, reference, floating", FUNCTIONS)
def test_function_checks_accept_the_reference_in_float64_and_on_meta(name, reference, floating):
    result = passes(getattr(checks, name), getattr(ref, reference))
    assert "meta" in str(result)
    assert ("float64" in str(result)) == floating


@pytest.mark.parametrize("name, reference, floating", FUNCTIONS)
def test_function_checks_reject_an_output_made_on_the_cpu(name, reference, floating):
    rejects(getattr(checks, name), _function(getattr(ref, reference), a_cpu_tensor_added),
            "on the meta device", "meta and cpu", "device=x.device")


@pytest.mark.parametrize("name, reference", FLOAT_OUTPUT)
def test_function_checks_reject_float32_for_a_float64_input(name, reference):
    needles = ["has dtype torch.float32"]
    if name not in HALF_CHECKED:
        needles += ["in float64", "expected torch.float64", "dtype=x.dtype"]
    rejects(getattr(checks, name), _function(getattr(ref, reference), float32_always), *needles)


@pytest.mark.parametrize("name", MODULES)
def test_module_checks_accept_the_reference_in_float64_and_on_meta(name):
    result = passes(getattr(checks, name), getattr(ref, name))
    assert "float64 and meta" in str(result)


@pytest.mark.parametrize("name", MODULES)
def test_module_checks_reject_an_output_made_on_the_cpu(name):
    rejects(getattr(checks, name), _module(getattr(ref, name), a_cpu_tensor_added),
            "on the meta device", "meta and cpu", "device=x.device")


@pytest.mark.parametrize("name", MODULES)
def test_module_checks_reject_float32_for_a_float64_input(name):
    needles = ["has dtype torch.float32"]
    if name not in HALF_CHECKED:
        needles += ["in float64", "expected torch.float64", "dtype=x.dtype"]
    rejects(getattr(checks, name), _module(getattr(ref, name), float32_always), *needles)


# --- the classic slips, as learners write them ---------------------------------------------------------------------


class GPTWithCPUPositions(ref.GPT):
    def forward(self, ids, mask=None):
        x = self.tok_emb(ids) + self.pos_emb(torch.arange(ids.shape[1]))  # the most common GPU crash of all
        x = self.drop(x)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))


GPTWithCPUPositions.__name__ = "GPT"


def test_gpt_with_positions_made_on_the_cpu_is_rejected_though_meta_alone_lets_it_through():
    model = ref.GPT(ref.GPTConfig(vocab_size=13, max_len=8, d_model=16, n_heads=2, n_layers=1)).to("meta")
    assert model.pos_emb(torch.arange(3)).device.type == "meta"  # plain meta: no error, which is why LikeAGPU
    rejects(checks.GPT, GPTWithCPUPositions, "embedding got a tensor of shape [5] on the cpu",
            "torch.arange(T, device=x.device)")


class MHAWithCPUCausalMask(ref.MultiHeadAttention):
    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = (p(x).view(B, T, self.n_heads, -1).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        mask = None if mask is None else mask.unsqueeze(-3)
        if self.causal:
            causal = torch.tril(torch.ones(T, T, dtype=torch.bool))  # on the CPU whatever x is on
            mask = causal if mask is None else mask & causal
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout.p if self.training else 0)
        return self.out_proj(out.transpose(1, 2).reshape(B, T, C))


MHAWithCPUCausalMask.__name__ = "MultiHeadAttention"


def test_attention_with_a_causal_mask_made_on_the_cpu_is_rejected():
    rejects(checks.MultiHeadAttention, MHAWithCPUCausalMask, "on the meta device", "on the cpu", "device=x.device")


def rope_with_cpu_positions(x, positions=None, theta=10000.0):
    T, d = x.shape[-2:]
    positions = torch.arange(T) if positions is None else positions
    angle = positions[:, None].float() * theta ** (-torch.arange(0, d, 2).float() / d)
    cos, sin = angle.cos(), angle.sin()
    x0, x1 = x[..., 0::2].float(), x[..., 1::2].float()
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2).to(x.dtype)


def test_rope_with_default_positions_on_the_cpu_is_rejected():
    rejects(checks.apply_rope, rope_with_cpu_positions, "default positions on the meta device", "on the cpu")


class KVCacheWithCPUBuffers(ref.KVCache):
    def update(self, layer, k, v):
        if self.keys[layer] is None:  # an empty start, made on the CPU in float32
            self.keys[layer] = torch.zeros(*k.shape[:-2], 0, k.shape[-1])
            self.values[layer] = torch.zeros(*v.shape[:-2], 0, v.shape[-1])
        self.keys[layer] = torch.cat([self.keys[layer], k], dim=-2)
        self.values[layer] = torch.cat([self.values[layer], v], dim=-2)
        return self.keys[layer], self.values[layer]


KVCacheWithCPUBuffers.__name__ = "KVCache"


def test_a_cache_that_starts_from_a_cpu_tensor_is_rejected():
    rejects(checks.KVCache, KVCacheWithCPUBuffers, "on the meta device", "cat got a tensor", "on the cpu")


def test_kv_cache_check_accepts_the_reference_in_float64_and_on_meta():
    assert "float64 and meta" in str(passes(checks.KVCache, ref.KVCache))


class LayerNormInFloat32(ref.LayerNorm):  # the float16 recipe without the conversion back
    def forward(self, x):
        return F.layer_norm(x.float(), (x.shape[-1],), self.weight.float(), self.bias.float(), self.eps)


LayerNormInFloat32.__name__ = "LayerNorm"


def test_a_norm_that_returns_float32_whatever_its_input_is_rejected():
    rejects(checks.LayerNorm, LayerNormInFloat32, "has dtype torch.float32", "result.to(dtype)")


# --- what is not a mistake ---------------------------------------------------------------------------------------


def softmax_that_checks_its_input(x, dim=-1):
    assert torch.isfinite(x).all(), "softmax of a non-finite input"  # reads a value: cannot run on meta
    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    return e / e.sum(dim=dim, keepdim=True)


def test_code_that_reads_a_value_is_not_refused_for_the_meta_device():
    passes(checks.softmax, softmax_that_checks_its_input)


def sdpa_scaled_by_a_cpu_scalar(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / torch.sqrt(torch.tensor(q.shape[-1]))  # a 0-d CPU tensor: fine on a GPU
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def test_a_zero_dimensional_cpu_tensor_is_allowed_as_on_a_gpu():
    passes(checks.scaled_dot_product_attention, sdpa_scaled_by_a_cpu_scalar)


# --- LikeAGPU itself ------------------------------------------------------------------------------------------------


def test_like_a_gpu_refuses_what_cuda_refuses_and_allows_what_it_allows():
    x = torch.randn(2, 3, 4, device="meta")
    embedding = nn.Embedding(8, 4).to("meta")
    refused = [lambda: embedding(torch.arange(3)), lambda: x.masked_fill(torch.ones(3, 4, dtype=torch.bool), 0.0),
               lambda: x + torch.zeros(4), lambda: torch.cat([x, torch.zeros(2, 3, 4)])]
    for make in refused:
        with pytest.raises(RuntimeError, match="meta and cpu"):
            beside.like_a_gpu(make)
    allowed = [lambda: x / torch.tensor(2.0), lambda: x[:, torch.arange(2)], lambda: torch.zeros(4).to(x.device),
               lambda: x.tril(), lambda: x * math.pi]
    for make in allowed:
        assert beside.like_a_gpu(make).device.type == "meta"

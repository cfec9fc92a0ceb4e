"""Checks of notebook 09 (RotaryAttention, KVCache, ModernBlock, ModernGPT, generate_cached): they pass
the reference and learner versions, report a stub as "not done yet", and reject realistic wrong
implementations, naming the mistake."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from checkkit import not_done, passes, rejects, stub

from tutor import checks
from tutor import reference as ref
from tutor.reference import MLP, KVCache, LayerNorm, ModernBlock, RMSNorm, SwiGLU, apply_rope

# --- RotaryAttention, written the way a learner would, and its mistakes -----------------------


class LearnerRotary(nn.Module):
    """Correct: uses F.scaled_dot_product_attention with an explicit mask, einops-free."""

    def __init__(self, d_model, n_heads, theta=10000.0):
        super().__init__()
        self.n_heads, self.theta = n_heads, theta
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    def split(self, t):
        B, T, C = t.shape
        return t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)

    def positions_for(self, T, positions, cache, device):
        if positions is not None:
            return positions
        start = cache.length if cache is not None else 0
        return torch.arange(start, start + T, device=device)

    def rotate(self, q, k, v, positions):
        return apply_rope(q, positions, self.theta), apply_rope(k, positions, self.theta), v

    def mask(self, T, S, cache):
        return torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)

    def store(self, cache, layer, k, v, positions):
        return cache.update(layer, k, v)

    def attend(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def forward(self, x, positions=None, cache=None, layer=0):
        B, T, C = x.shape
        positions = self.positions_for(T, positions, cache, x.device)
        q, k, v = self.split(self.q_proj(x)), self.split(self.k_proj(x)), self.split(self.v_proj(x))
        q, k, v = self.rotate(q, k, v, positions)
        if cache is not None:
            k, v = self.store(cache, layer, k, v, positions)
        y = self.attend(q, k, v, self.mask(T, k.shape[-2], cache).to(x.device))
        return self.out_proj(y.transpose(1, 2).reshape(B, T, C))


def test_rotary_attention_passes_the_reference_and_a_learner_version():
    passes(checks.RotaryAttention, ref.RotaryAttention)
    passes(checks.RotaryAttention, LearnerRotary)


def test_rotary_attention_stub_is_not_done():
    class StubForward(LearnerRotary):
        def forward(self, x, positions=None, cache=None, layer=0):
            raise NotImplementedError()

    not_done(checks.RotaryAttention, stub)
    not_done(checks.RotaryAttention, StubForward)


def test_rope_on_the_values_too():
    class OnValues(LearnerRotary):
        def rotate(self, q, k, v, positions):
            return (apply_rope(q, positions, self.theta), apply_rope(k, positions, self.theta),
                    apply_rope(v, positions, self.theta))

    rejects(checks.RotaryAttention, OnValues, "applied to the values too")


def test_rope_on_the_queries_only():
    class QueriesOnly(LearnerRotary):
        def rotate(self, q, k, v, positions):
            return apply_rope(q, positions, self.theta), k, v

    rejects(checks.RotaryAttention, QueriesOnly, "queries only", "rotate the keys as well")


def test_rope_before_splitting_heads():
    class WholeWidth(LearnerRotary):
        def forward(self, x, positions=None, cache=None, layer=0):
            B, T, C = x.shape
            positions = self.positions_for(T, positions, cache, x.device)
            q = self.split(apply_rope(self.q_proj(x), positions, self.theta))
            k = self.split(apply_rope(self.k_proj(x), positions, self.theta))
            v = self.split(self.v_proj(x))
            if cache is not None:
                k, v = cache.update(layer, k, v)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask(T, k.shape[-2], cache).to(x.device))
            return self.out_proj(y.transpose(1, 2).reshape(B, T, C))

    rejects(checks.RotaryAttention, WholeWidth, "before splitting heads", "d_head axis")


def test_rope_on_halves_as_in_hugging_face():
    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([-x2, x1], dim=-1)

    class Halves(LearnerRotary):
        def rotate(self, q, k, v, positions):
            d = q.shape[-1]
            freqs = self.theta ** (-torch.arange(0, d, 2).float() / d)
            angle = positions.float()[:, None] * freqs
            cos, sin = torch.cat([angle, angle], -1).cos(), torch.cat([angle, angle], -1).sin()
            return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v

    rejects(checks.RotaryAttention, Halves, "two halves", "pairs neighbours")


class OwnRope(LearnerRotary):
    """Correct, with its own RoPE on neighbouring pairs: pair i turns at theta ** exponent(i, d)."""

    exponent = staticmethod(lambda i, d: -2 * i / d)

    def rope(self, x, positions):
        d = x.shape[-1]
        pairs = torch.arange(d // 2, device=x.device).float()
        angle = positions.float()[:, None] * self.theta ** self.exponent(pairs, d)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x0 * angle.cos() - x1 * angle.sin(), x0 * angle.sin() + x1 * angle.cos()], -1).flatten(-2)

    def rotate(self, q, k, v, positions):
        return self.rope(q, positions), self.rope(k, positions), v


def test_own_rope_is_accepted():
    passes(checks.RotaryAttention, OwnRope)


def test_own_rope_with_exponent_i_over_d():
    class ExponentI(OwnRope):
        exponent = staticmethod(lambda i, d: -i / d)

    rejects(checks.RotaryAttention, ExponentI, "theta ** (-i / d)", "theta ** (-2i / d)")


def test_own_rope_without_the_minus_sign():
    class ExponentPlus(OwnRope):
        exponent = staticmethod(lambda i, d: 2 * i / d)

    rejects(checks.RotaryAttention, ExponentPlus, "lost its minus sign")


def test_positions_not_offset_by_the_cache_length():
    class NoOffset(LearnerRotary):
        def positions_for(self, T, positions, cache, device):
            return torch.arange(T, device=device) if positions is None else positions

    rejects(checks.RotaryAttention, NoOffset, "do not start at the cache's length", "cache.length")


def test_causal_mask_without_offset_for_a_cached_query():
    class PlainTril(LearnerRotary):
        def mask(self, T, S, cache):
            return torch.ones(T, S, dtype=torch.bool).tril()

    rejects(checks.RotaryAttention, PlainTril, "causal mask ignores the keys already in the cache", "diagonal=S - T")


def test_is_causal_with_a_cache():
    class IsCausal(LearnerRotary):
        def attend(self, q, k, v, mask):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # aligned top-left: wrong when S > T

    rejects(checks.RotaryAttention, IsCausal, "is_causal=True", "aligns it top-left", "diagonal=S - T")


def test_no_mask_when_a_cache_is_given():
    class NoMaskWithCache(LearnerRotary):
        def mask(self, T, S, cache):
            if cache is not None:  # "a cached query is the newest token: it may see everything"
                return torch.ones(T, S, dtype=torch.bool)
            return torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)

    rejects(checks.RotaryAttention, NoMaskWithCache, "no causal mask when a cache is given")


def test_causal_mask_of_the_query_length_crashes_with_a_cache():
    class SquareMask(LearnerRotary):
        def mask(self, T, S, cache):
            return ref.causal_mask(T)

    rejects(checks.RotaryAttention, SquareMask, "raised an exception", "tril(diagonal=S - T)")


def test_the_cache_stores_unrotated_keys():
    class StoresUnrotated(LearnerRotary):
        def forward(self, x, positions=None, cache=None, layer=0):
            B, T, C = x.shape
            positions = self.positions_for(T, positions, cache, x.device)
            q, k, v = self.split(self.q_proj(x)), self.split(self.k_proj(x)), self.split(self.v_proj(x))
            if cache is not None:
                k, v = cache.update(layer, k, v)
            S = k.shape[-2]
            q = apply_rope(q, positions, self.theta)
            # right outputs, but the cache holds raw keys (rotated again at every step)
            k = apply_rope(k, torch.arange(S) if cache is not None else positions, self.theta)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask(T, S, cache))
            return self.out_proj(y.transpose(1, 2).reshape(B, T, C))

    rejects(checks.RotaryAttention, StoresUnrotated, "keys before RoPE (unrotated)")


def test_the_cache_is_ignored():
    class IgnoresCache(LearnerRotary):
        def store(self, cache, layer, k, v, positions):
            cache.update(layer, k, v)
            return k, v

    rejects(checks.RotaryAttention, IgnoresCache, "the cache is not used")


def test_theta_is_ignored():
    class NoTheta(LearnerRotary):
        def rotate(self, q, k, v, positions):
            return apply_rope(q, positions), apply_rope(k, positions), v

    rejects(checks.RotaryAttention, NoTheta, "theta is ignored")


def test_scaled_by_d_model():
    class ByDModel(LearnerRotary):
        def attend(self, q, k, v, mask):
            d_model = q.shape[1] * q.shape[-1]
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1 / math.sqrt(d_model))

    rejects(checks.RotaryAttention, ByDModel, "sqrt(d_head)")


def test_layer_is_ignored():
    class AlwaysLayerZero(LearnerRotary):
        def store(self, cache, layer, k, v, positions):
            return cache.update(0, k, v)

    rejects(checks.RotaryAttention, AlwaysLayerZero, "layer 0 of the cache although layer=1")


# --- KVCache ---------------------------------------------------------------------------------


class LearnerCache:
    """Correct: lists of chunks, concatenated on demand."""

    def __init__(self, n_layers):
        self.k = [[] for _ in range(n_layers)]
        self.v = [[] for _ in range(n_layers)]

    def update(self, layer, k, v):
        self.k[layer].append(k)
        self.v[layer].append(v)
        return torch.cat(self.k[layer], dim=2), torch.cat(self.v[layer], dim=2)

    @property
    def length(self):
        return min(sum(t.shape[2] for t in chunks) for chunks in self.k)


def test_kv_cache_passes_the_reference_and_a_learner_version():
    passes(checks.KVCache, ref.KVCache)
    passes(checks.KVCache, LearnerCache)


def test_kv_cache_stub_is_not_done():
    class StubUpdate(LearnerCache):
        def update(self, layer, k, v):
            raise NotImplementedError()

    not_done(checks.KVCache, stub)
    not_done(checks.KVCache, StubUpdate)


def test_kv_cache_shared_list_between_layers():
    class Shared(LearnerCache):
        def __init__(self, n_layers):
            self.k = [[]] * n_layers
            self.v = [[]] * n_layers

    rejects(checks.KVCache, Shared, "the layers share one list", "[[] for _ in range(n_layers)]")


def test_kv_cache_returns_only_the_new_keys():
    class OnlyNew(LearnerCache):
        def update(self, layer, k, v):
            super().update(layer, k, v)
            return k, v

    rejects(checks.KVCache, OnlyNew, "returns only the new keys")


def test_kv_cache_prepends():
    class Prepends(ref.KVCache):
        def update(self, layer, k, v):
            if self.keys[layer] is not None:
                k, v = torch.cat([k, self.keys[layer]], 2), torch.cat([v, self.values[layer]], 2)
            self.keys[layer], self.values[layer] = k, v
            return k, v

    rejects(checks.KVCache, Prepends, "put in front")


def test_kv_cache_length_of_layer_zero():
    class FirstLayerLength(ref.KVCache):
        @property
        def length(self):
            return 0 if self.keys[0] is None else self.keys[0].shape[-2]

    rejects(checks.KVCache, FirstLayerLength, "the least over layers")


def test_kv_cache_length_counts_calls():
    class CountsCalls(ref.KVCache):
        def __init__(self, n_layers):
            super().__init__(n_layers)
            self.calls = [0] * n_layers

        def update(self, layer, k, v):
            self.calls[layer] += 1
            return super().update(layer, k, v)

        @property
        def length(self):
            return min(self.calls)

    rejects(checks.KVCache, CountsCalls, "counts calls to update")


def test_kv_cache_length_is_a_method():
    class MethodLength(ref.KVCache):
        def length(self):
            return min(0 if k is None else k.shape[-2] for k in self.keys)

    rejects(checks.KVCache, MethodLength, "a method", "@property")


def test_kv_cache_storage_in_the_class_body():
    class ClassStorage:
        store = {}

        def __init__(self, n_layers):
            self.n_layers = n_layers

        def update(self, layer, k, v):
            if layer in self.store:
                k = torch.cat([self.store[layer][0], k], 2)
                v = torch.cat([self.store[layer][1], v], 2)
            self.store[layer] = (k, v)
            return k, v

        @property
        def length(self):
            return min(self.store[layer][0].shape[2] if layer in self.store else 0 for layer in range(self.n_layers))

    rejects(checks.KVCache, ClassStorage, "shares its storage", "__init__")


def test_kv_cache_concatenates_along_the_wrong_axis():
    class WrongAxis(LearnerCache):
        def update(self, layer, k, v):
            self.k[layer].append(k)
            self.v[layer].append(v)
            return torch.cat(self.k[layer], dim=1), torch.cat(self.v[layer], dim=1)  # the heads, not the time

    rejects(checks.KVCache, WrongAxis, "Sizes of tensors must match", "along the wrong axis", "dim=-2")


def test_kv_cache_overwrites():
    class Overwrites(ref.KVCache):
        def update(self, layer, k, v):
            self.keys[layer], self.values[layer] = k, v
            return k, v

    rejects(checks.KVCache, Overwrites, "k_all of layer 0", "only the new keys")


# --- ModernBlock ------------------------------------------------------------------------------


class LearnerBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_hidden, theta=10000.0):
        super().__init__()
        self.ln1 = RMSNorm(d_model)
        self.attn = LearnerRotary(d_model, n_heads, theta)
        self.ln2 = RMSNorm(d_model)
        self.mlp = SwiGLU(d_model, d_hidden)

    def forward(self, x, positions=None, cache=None, layer=0):
        h = x + self.attn(self.ln1(x), positions=positions, cache=cache, layer=layer)
        return h + self.mlp(self.ln2(h))


def test_modern_block_passes_the_reference_and_a_learner_version():
    passes(checks.ModernBlock, ref.ModernBlock)
    passes(checks.ModernBlock, LearnerBlock)


def test_modern_block_stub_is_not_done():
    class StubForward(LearnerBlock):
        def forward(self, x, positions=None, cache=None, layer=0):
            raise NotImplementedError()

    not_done(checks.ModernBlock, stub)
    not_done(checks.ModernBlock, StubForward)


def test_modern_block_normalises_the_residual_stream():
    class NormalisedStream(LearnerBlock):
        def forward(self, x, positions=None, cache=None, layer=0):
            x = self.ln1(x)
            x = x + self.attn(x, positions, cache, layer)
            x = self.ln2(x)
            return x + self.mlp(x)

    rejects(checks.ModernBlock, NormalisedStream, "residual stream itself is normalised")


def test_modern_block_post_norm():
    class PostNorm(LearnerBlock):
        def forward(self, x, positions=None, cache=None, layer=0):
            x = self.ln1(x + self.attn(x, positions, cache, layer))
            return self.ln2(x + self.mlp(x))

    rejects(checks.ModernBlock, PostNorm, "post-norm")


def test_modern_block_with_layernorm():
    class WithLayerNorm(LearnerBlock):
        def __init__(self, d_model, n_heads, d_hidden, theta=10000.0):
            super().__init__(d_model, n_heads, d_hidden, theta)
            self.ln1, self.ln2 = LayerNorm(d_model), LayerNorm(d_model)

    rejects(checks.ModernBlock, WithLayerNorm, "is a LayerNorm", "RMSNorm")


def test_modern_block_with_the_gelu_mlp():
    class WithMLP(LearnerBlock):
        def __init__(self, d_model, n_heads, d_hidden, theta=10000.0):
            super().__init__(d_model, n_heads, d_hidden, theta)
            self.mlp = MLP(d_model, d_hidden)

    rejects(checks.ModernBlock, WithMLP, "not a SwiGLU")


def test_modern_block_forgets_positions():
    class NoPositions(LearnerBlock):
        def forward(self, x, positions=None, cache=None, layer=0):
            h = x + self.attn(self.ln1(x))
            return h + self.mlp(self.ln2(h))

    rejects(checks.ModernBlock, NoPositions, "not passed on to attn")


def test_modern_block_forgets_the_layer():
    class NoLayer(LearnerBlock):
        def forward(self, x, positions=None, cache=None, layer=0):
            h = x + self.attn(self.ln1(x), positions, cache)
            return h + self.mlp(self.ln2(h))

    rejects(checks.ModernBlock, NoLayer, "layer 0 of the cache although layer=1", "pass `layer` on")


def test_modern_block_without_ln2():
    class NoLn2(LearnerBlock):
        def forward(self, x, positions=None, cache=None, layer=0):
            h = x + self.attn(self.ln1(x), positions, cache, layer)
            return h + self.mlp(h)

    rejects(checks.ModernBlock, NoLn2, "ln2 is missing")


class RMSNormNoEps(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True)) * self.weight


class RMSNormCentred(RMSNormNoEps):
    def forward(self, x):
        x = x - x.mean(dim=-1, keepdim=True)
        return x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-5) * self.weight


class SwiGLUGateOnW3(SwiGLU):
    def forward(self, x):
        return self.w2(F.silu(self.w3(x)) * self.w1(x))


class BlockWith(LearnerBlock):
    """A LearnerBlock with the learner's own ``norm`` and ``mlp`` classes."""

    norm, mlp_class = RMSNorm, SwiGLU

    def __init__(self, d_model, n_heads, d_hidden, theta=10000.0):
        super().__init__(d_model, n_heads, d_hidden, theta)
        self.ln1, self.ln2 = self.norm(d_model), self.norm(d_model)
        self.mlp = self.mlp_class(d_model, d_hidden)


def test_modern_block_own_rms_norm_without_eps():
    class NoEps(BlockWith):
        norm = RMSNormNoEps

    rejects(checks.ModernBlock, NoEps, "your RMSNorm has no eps", "+ self.eps")


def test_modern_block_own_rms_norm_subtracts_the_mean():
    class Centred(BlockWith):
        norm = RMSNormCentred

    rejects(checks.ModernBlock, Centred, "your RMSNorm subtracts the mean", "root mean square")


def test_modern_block_own_swiglu_gates_the_wrong_branch():
    class GateOnW3(BlockWith):
        mlp_class = SwiGLUGateOnW3

    rejects(checks.ModernBlock, GateOnW3, "gates the wrong branch", "w2(silu(w1(x)) * w3(x))")


def test_modern_block_parallel():
    class Parallel(LearnerBlock):
        def forward(self, x, positions=None, cache=None, layer=0):
            return x + self.attn(self.ln1(x), positions, cache, layer) + self.mlp(self.ln2(x))

    rejects(checks.ModernBlock, Parallel, "in parallel")


# --- ModernGPT ----------------------------------------------------------------------------------


class LearnerModernGPT(nn.Module):
    w2_divisor = staticmethod(lambda n_layers: math.sqrt(2 * n_layers))

    def __init__(self, config):
        super().__init__()
        self.config = config
        d_hidden = config.d_hidden or 8 * math.ceil(8 / 3 * config.d_model / 8)
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList([ModernBlock(config.d_model, config.n_heads, d_hidden, config.theta)
                                     for _ in range(config.n_layers)])
        self.ln_f = RMSNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.init_weights()

    def init_weights(self):
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
        for block in self.blocks:
            nn.init.normal_(block.attn.out_proj.weight, std=0.02 / math.sqrt(2 * self.config.n_layers))
            nn.init.normal_(block.mlp.w2.weight, std=0.02 / self.w2_divisor(self.config.n_layers))

    def start(self, cache):
        return cache.length if cache is not None else 0

    def forward(self, ids, positions=None, cache=None):
        if positions is None:
            start = self.start(cache)
            positions = torch.arange(start, start + ids.shape[1], device=ids.device)
        x = self.tok_emb(ids)
        for i, block in enumerate(self.blocks):
            x = block(x, positions, cache, i)
        return self.head(self.ln_f(x))


def test_modern_gpt_passes_the_reference_and_a_learner_version():
    passes(checks.ModernGPT, ref.ModernGPT)
    passes(checks.ModernGPT, LearnerModernGPT)


def test_modern_gpt_stub_is_not_done():
    class StubForward(LearnerModernGPT):
        def forward(self, ids, positions=None, cache=None):
            raise NotImplementedError()

    not_done(checks.ModernGPT, stub)
    not_done(checks.ModernGPT, StubForward)


def test_modern_gpt_without_ln_f_in_forward():
    class NoFinalNorm(LearnerModernGPT):
        def forward(self, ids, positions=None, cache=None):
            if positions is None:
                start = self.start(cache)
                positions = torch.arange(start, start + ids.shape[1])
            x = self.tok_emb(ids)
            for i, block in enumerate(self.blocks):
                x = block(x, positions, cache, i)
            return self.head(x)

    rejects(checks.ModernGPT, NoFinalNorm, "final RMSNorm is missing")


def test_modern_gpt_without_ln_f_at_all():
    class NoLnF(NoFinalNormBase):
        pass

    rejects(checks.ModernGPT, NoLnF, "has no `ln_f`")


class NoFinalNormBase(LearnerModernGPT):
    def __init__(self, config):
        super().__init__(config)
        del self.ln_f

    def forward(self, ids, positions=None, cache=None):
        x = self.tok_emb(ids)
        for i, block in enumerate(self.blocks):
            x = block(x, positions, cache, i)
        return self.head(x)


def test_modern_gpt_keeps_a_learned_position_table():
    class WithPositions(LearnerModernGPT):
        def __init__(self, config):
            super().__init__(config)
            self.pos_emb = nn.Embedding(config.max_len, config.d_model)

        def forward(self, ids, positions=None, cache=None):
            start = self.start(cache)
            pos = torch.arange(start, start + ids.shape[1])
            x = self.tok_emb(ids) + self.pos_emb(pos)
            for i, block in enumerate(self.blocks):
                x = block(x, pos, cache, i)
            return self.head(self.ln_f(x))

    rejects(checks.ModernGPT, WithPositions, "learned position table", "RoPE")


def test_modern_gpt_w2_not_scaled():
    class W2Unscaled(LearnerModernGPT):
        w2_divisor = staticmethod(lambda n_layers: 1.0)

    rejects(checks.ModernGPT, W2Unscaled, "mlp.w2", "writes into the residual stream")


def test_modern_gpt_positions_not_offset_by_the_cache():
    class NoOffset(LearnerModernGPT):
        def start(self, cache):
            return 0

    rejects(checks.ModernGPT, NoOffset, "do not start at the cache's length")


def test_modern_gpt_every_block_writes_to_layer_zero():
    class SameLayer(LearnerModernGPT):
        def forward(self, ids, positions=None, cache=None):
            if positions is None:
                start = self.start(cache)
                positions = torch.arange(start, start + ids.shape[1])
            x = self.tok_emb(ids)
            for block in self.blocks:
                x = block(x, positions, cache)
            return self.head(self.ln_f(x))

    rejects(checks.ModernGPT, SameLayer, "every block writes to layer 0")


def test_modern_gpt_hidden_width_truncated():
    class Truncated(LearnerModernGPT):
        def __init__(self, config):
            nn.Module.__init__(self)
            self.config = config
            d_hidden = config.d_hidden or int(8 / 3 * config.d_model)
            self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
            self.blocks = nn.ModuleList([ModernBlock(config.d_model, config.n_heads, d_hidden, config.theta)
                                         for _ in range(config.n_layers)])
            self.ln_f = RMSNorm(config.d_model)
            self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
            self.init_weights()

    rejects(checks.ModernGPT, Truncated, "hidden units, expected 48", "rounded UP to a multiple of 8")


def test_modern_gpt_ignores_config_d_hidden():
    class Ignores(LearnerModernGPT):
        def __init__(self, config):
            from dataclasses import replace
            super().__init__(replace(config, d_hidden=None))
            self.config = config

    rejects(checks.ModernGPT, Ignores, "expected 40", "config.d_hidden")


def test_modern_gpt_writes_into_its_config():
    class WritesD(LearnerModernGPT):
        def __init__(self, config):
            config.d_hidden = config.d_hidden or 8 * math.ceil(8 / 3 * config.d_model / 8)  # the caller's config
            super().__init__(config)

    rejects(checks.ModernGPT, WritesD, "changed the config it was given", "config.d_hidden was None, is now 48",
            "store it unchanged")


def test_modern_gpt_own_final_norm_subtracts_the_mean():
    class CentredFinal(LearnerModernGPT):
        def __init__(self, config):
            super().__init__(config)
            self.ln_f = RMSNormCentred(config.d_model)

    rejects(checks.ModernGPT, CentredFinal, "your RMSNorm subtracts the mean")


def test_modern_gpt_tied_head():
    class Tied(LearnerModernGPT):
        def __init__(self, config):
            super().__init__(config)
            self.head.weight = self.tok_emb.weight

    rejects(checks.ModernGPT, Tied, "weight tying")


def test_modern_gpt_redraws_the_norm_weights():
    class NormsRedrawn(LearnerModernGPT):
        def init_weights(self):
            super().init_weights()
            for name, p in self.named_parameters():
                if p.dim() == 1:
                    nn.init.normal_(p, std=0.02)

    rejects(checks.ModernGPT, NormsRedrawn, "should start at 1")


# --- generate_cached -------------------------------------------------------------------------


def make_cached(*, prompt="once", feed="new", new_cache=False, check_len=">", sample="multinomial",
                restore=True, temperature="logits", use_top_k=True):
    """A learner's generate_cached with one thing changed."""

    def generate_cached(model, ids, max_new_tokens, temperature_=1.0, top_k=None):
        T0 = ids.shape[1]
        too_long = T0 + max_new_tokens > model.config.max_len if check_len == ">" else (
            T0 + max_new_tokens >= model.config.max_len if check_len == ">=" else False)
        if too_long:
            raise ValueError("too long")
        was_training = model.training
        model.eval()
        cache = KVCache(model.config.n_layers)
        with torch.no_grad():
            if prompt == "once":
                logits = model(ids, cache=cache)[:, -1, :]
            else:  # token by token
                for t in range(T0):
                    logits = model(ids[:, t:t + 1], cache=cache)[:, -1, :]
            for step in range(max_new_tokens):
                if feed == "last_prompt_again" and step == 0:
                    logits = model(ids[:, -1:], cache=cache)[:, -1, :]
                z = logits / temperature_ if temperature == "logits" else logits
                if top_k is not None and use_top_k:
                    kth = torch.topk(z, min(top_k, z.shape[-1])).values[:, -1:]
                    z = z.masked_fill(z < kth, float("-inf"))
                probs = F.softmax(z, dim=-1)
                next_id = probs.argmax(-1, keepdim=True) if sample == "argmax" else torch.multinomial(probs, 1)
                ids = torch.cat([ids, next_id], dim=1)
                if new_cache:
                    cache = KVCache(model.config.n_layers)
                if feed == "whole_no_cache":
                    logits = model(ids)[:, -1, :]
                elif feed == "whole_same_cache":
                    logits = model(ids, cache=cache)[:, -1, :]
                else:
                    logits = model(next_id, cache=cache)[:, -1, :]
        if restore:
            model.train(was_training)
        return ids

    def wrapper(model, ids, max_new_tokens, temperature=1.0, top_k=None):
        return generate_cached(model, ids, max_new_tokens, temperature, top_k)

    return wrapper


def test_generate_cached_passes_the_reference_and_a_learner_version():
    passes(checks.generate_cached, ref.generate_cached)
    result = passes(checks.generate_cached, make_cached())  # one harmless extra call at the end
    assert "note" not in str(result)


def test_generate_cached_stub_is_not_done():
    not_done(checks.generate_cached, stub)


def test_generate_cached_prompt_token_by_token_is_accepted_with_a_note():
    result = passes(checks.generate_cached, make_cached(prompt="token_by_token"))
    assert "one token at a time" in str(result) and "faster" in str(result)


def test_generate_cached_reruns_the_whole_context_without_cache():
    rejects(checks.generate_cached, make_cached(feed="whole_no_cache"), "without the cache")


def test_generate_cached_reruns_the_whole_context_with_the_cache():
    rejects(checks.generate_cached, make_cached(feed="whole_same_cache"), "positions for a prompt of 4",
            "re-run the whole context")


def test_generate_cached_is_plain_generate():
    def plain(model, ids, max_new_tokens, temperature=1.0, top_k=None):
        if ids.shape[1] + max_new_tokens > model.config.max_len:
            raise ValueError("too long")
        return ref.generate(model, ids, max_new_tokens, temperature, top_k)

    rejects(checks.generate_cached, plain, "without the cache")


def test_generate_cached_new_cache_every_step():
    rejects(checks.generate_cached, make_cached(new_cache=True), "do not share one cache", "before the loop")


def test_generate_cached_feeds_the_last_prompt_token_twice():
    rejects(checks.generate_cached, make_cached(feed="last_prompt_again"), "went through the model twice")


def test_generate_cached_without_the_max_len_check():
    rejects(checks.generate_cached, make_cached(check_len="none"), "accepted 10 + 7 tokens", "ValueError")


def test_generate_cached_refuses_exactly_max_len():
    rejects(checks.generate_cached, make_cached(check_len=">="), "refused T0 + max_new_tokens = max_len", "not >=")


def test_generate_cached_argmax():
    rejects(checks.generate_cached, make_cached(sample="argmax"), "argmax")


def test_generate_cached_ignores_the_temperature():
    rejects(checks.generate_cached, make_cached(temperature="ignored"), "temperature has no effect")


def test_generate_cached_ignores_top_k():
    result = rejects(checks.generate_cached, make_cached(use_top_k=False), "top_k is ignored",
                     "different tokens, expected 1")
    assert "feed each sampled token once" not in str(result)


def test_generate_cached_does_not_restore_the_mode():
    rejects(checks.generate_cached, make_cached(restore=False), "left the model in eval mode")


def test_checks_leave_the_learner_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    for name in ("RotaryAttention", "KVCache", "ModernBlock", "ModernGPT", "generate_cached"):
        getattr(checks, name)(getattr(ref, name))
    assert torch.equal(torch.rand(3), expected)


# --- theta reaches the attention (ModernBlock and ModernGPT) ------------------------------------


class RotaryBase(LearnerRotary):
    """Correct, but keeps theta under another name (`base`), so only the outputs can show it."""

    def __init__(self, d_model, n_heads, theta=10000.0):
        super().__init__(d_model, n_heads, theta)
        self.base = self.__dict__.pop("theta")

    def rotate(self, q, k, v, positions):
        return apply_rope(q, positions, self.base), apply_rope(k, positions, self.base), v


class BlockOf(LearnerBlock):
    """A LearnerBlock whose attention is ``attention`` and gets ``theta`` only when ``passes_theta``."""

    attention, passes_theta = LearnerRotary, True

    def __init__(self, d_model, n_heads, d_hidden, theta=10000.0):
        super().__init__(d_model, n_heads, d_hidden, theta)
        self.attn = self.attention(d_model, n_heads, *([theta] if self.passes_theta else []))


def test_modern_block_passes_with_theta_under_another_name():
    class Base(BlockOf):
        attention = RotaryBase

    passes(checks.ModernBlock, Base)


def test_modern_block_does_not_pass_theta_to_the_attention():
    class NoTheta(BlockOf):
        passes_theta = False

    rejects(checks.ModernBlock, NoTheta, "attn.theta is 10000, expected 100", "theta is not passed on",
            "RotaryAttention(d_model, n_heads, theta)")


def test_modern_block_hard_codes_theta_10000():
    class HardCoded(BlockOf):
        def __init__(self, d_model, n_heads, d_hidden, theta=10000.0):
            super().__init__(d_model, n_heads, d_hidden, theta)
            self.attn = LearnerRotary(d_model, n_heads, 10000.0)

    rejects(checks.ModernBlock, HardCoded, "theta is not passed on")


def test_modern_block_ignores_theta_where_only_the_outputs_show_it():
    class NoTheta(BlockOf):
        attention, passes_theta = RotaryBase, False

    rejects(checks.ModernBlock, NoTheta, "theta is ignored", "theta = 10000, not 100",
            "RotaryAttention(d_model, n_heads, theta)")


def test_modern_gpt_does_not_pass_config_theta_to_the_blocks():
    class NoTheta(LearnerModernGPT):
        def __init__(self, config):
            from dataclasses import replace
            super().__init__(replace(config, theta=10000.0))
            self.config = config

    rejects(checks.ModernGPT, NoTheta, "blocks[0].attn.theta is 10000, expected 100", "config.theta")


def test_modern_gpt_ignores_config_theta_where_only_the_outputs_show_it():
    class BaseBlock(BlockOf):
        attention, passes_theta = RotaryBase, False

    class NoTheta(LearnerModernGPT):
        def __init__(self, config):
            nn.Module.__init__(self)
            self.config = config
            d_hidden = config.d_hidden or 8 * math.ceil(8 / 3 * config.d_model / 8)
            self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
            self.blocks = nn.ModuleList([BaseBlock(config.d_model, config.n_heads, d_hidden, config.theta)
                                         for _ in range(config.n_layers)])
            self.ln_f = RMSNorm(config.d_model)
            self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
            self.init_weights()

    rejects(checks.ModernGPT, NoTheta, "config.theta is ignored", "theta = 10000, not 100")

"""The modern GPT of notebook 09 against PyTorch built-ins, the course's own 05/06 pieces, and itself
with and without the key/value cache."""

import math

import pytest
import torch
import torch.nn.functional as F

from tutor import reference as ref


def _randomise(model, seed=0):
    """Weights of a trained-looking size, so that every part of the model visibly matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                scale = 1.0 if name.endswith("emb.weight") else 1.0 / math.sqrt(p.shape[1])
                p.copy_(torch.randn(p.shape, generator=g) * scale)
            else:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
    return model


def test_modern_config_fields_and_defaults():
    from dataclasses import fields

    assert [f.name for f in fields(ref.ModernConfig)] == [
        "vocab_size", "max_len", "d_model", "n_heads", "n_layers", "d_hidden", "theta"]
    c = ref.ModernConfig()
    assert (c.vocab_size, c.max_len, c.d_model, c.n_heads, c.n_layers, c.d_hidden, c.theta) == (
        28, 16, 64, 4, 4, None, 10000.0)


@pytest.mark.parametrize("d_model, expected", [(64, 176), (16, 48), (24, 64), (768, 2048), (4096, 10928)])
def test_swiglu_hidden_is_eight_thirds_rounded_up_to_a_multiple_of_8(d_model, expected):
    assert ref.swiglu_hidden(d_model) == expected
    assert expected % 8 == 0 and expected >= 8 * d_model / 3 > expected - 8


def test_rotary_attention_matches_sdpa_on_rotated_queries_and_keys():
    torch.manual_seed(0)
    attn = _randomise(ref.RotaryAttention(32, 4))
    x = torch.randn(3, 7, 32)
    q = ref.apply_rope(ref.split_heads(attn.q_proj(x), 4))
    k = ref.apply_rope(ref.split_heads(attn.k_proj(x), 4))
    v = ref.split_heads(attn.v_proj(x), 4)
    expected = attn.out_proj(ref.merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True)))
    torch.testing.assert_close(attn(x), expected, atol=1e-5, rtol=1e-4)


def test_rotary_attention_with_zero_positions_is_multi_head_attention():
    """At position 0 RoPE is the identity: with every position 0 there is no rotation."""
    torch.manual_seed(0)
    attn = _randomise(ref.RotaryAttention(16, 2))
    mha = ref.MultiHeadAttention(16, 2, causal=True)
    mha.load_state_dict(attn.state_dict())
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(attn(x, positions=torch.zeros(5, dtype=torch.long)), mha(x), atol=1e-5, rtol=1e-4)


def test_rotary_attention_depends_on_relative_positions_only():
    torch.manual_seed(0)
    attn = _randomise(ref.RotaryAttention(16, 2))
    x = torch.randn(2, 6, 16)
    a = attn(x)
    b = attn(x, positions=torch.arange(100, 106))
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)
    assert not torch.allclose(attn(x, positions=torch.arange(6) * 2), a, atol=1e-3)


def test_rotary_attention_uses_theta():
    torch.manual_seed(0)
    a, b = ref.RotaryAttention(16, 2), ref.RotaryAttention(16, 2, theta=100.0)
    _randomise(a)
    b.load_state_dict(a.state_dict())
    x = torch.randn(1, 6, 16)
    assert not torch.allclose(a(x), b(x), atol=1e-4)


def test_kv_cache_appends_per_layer_and_reports_the_least_length():
    cache = ref.KVCache(2)
    assert cache.length == 0
    k1, v1 = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    k_all, v_all = cache.update(0, k1, v1)
    assert torch.equal(k_all, k1) and torch.equal(v_all, v1)
    assert cache.length == 0  # layer 1 holds nothing yet
    cache.update(1, k1, v1)
    assert cache.length == 4
    k2, v2 = torch.randn(2, 3, 1, 5), torch.randn(2, 3, 1, 5)
    k_all, v_all = cache.update(0, k2, v2)
    assert torch.equal(k_all, torch.cat([k1, k2], dim=2)) and torch.equal(v_all, torch.cat([v1, v2], dim=2))
    assert cache.length == 4
    cache.update(1, k2, v2)
    assert cache.length == 5
    assert ref.KVCache(2).length == 0  # a new cache shares nothing


def test_modern_block_is_the_composition_of_the_06_pieces():
    torch.manual_seed(0)
    block = _randomise(ref.ModernBlock(32, 4, 48))
    x = torch.randn(2, 6, 32)
    # straightforward composition: notebook 06's RMSNorm and SwiGLU, and attention from 04 + 05's apply_rope
    rms1, rms2 = ref.RMSNorm(32), ref.RMSNorm(32)
    rms1.load_state_dict(block.ln1.state_dict())
    rms2.load_state_dict(block.ln2.state_dict())
    swiglu = ref.SwiGLU(32, 48)
    swiglu.load_state_dict(block.mlp.state_dict())
    mha = ref.MultiHeadAttention(32, 4)
    mha.load_state_dict(block.attn.state_dict())

    def rotary(h):
        q = ref.apply_rope(ref.split_heads(mha.q_proj(h), 4))
        k = ref.apply_rope(ref.split_heads(mha.k_proj(h), 4))
        v = ref.split_heads(mha.v_proj(h), 4)
        y = ref.scaled_dot_product_attention(q, k, v, ref.causal_mask(h.shape[1]))
        return mha.out_proj(ref.merge_heads(y))

    h = x + rotary(rms1(x))
    expected = h + swiglu(rms2(h))
    torch.testing.assert_close(block(x), expected, atol=1e-5, rtol=1e-4)


def test_modern_block_norms_and_mlp_match_pytorch_built_ins():
    torch.manual_seed(0)
    block = _randomise(ref.ModernBlock(32, 4, 48))
    x = torch.randn(2, 6, 32)
    torch.testing.assert_close(block.ln1(x), F.rms_norm(x, (32,), block.ln1.weight, eps=1e-5), atol=1e-5, rtol=1e-4)
    m = block.mlp
    torch.testing.assert_close(m(x), F.silu(x @ m.w1.weight.T) * (x @ m.w3.weight.T) @ m.w2.weight.T,
                               atol=1e-5, rtol=1e-4)


def test_modern_gpt_structure_and_parameter_count_is_close_to_the_gpt():
    model, gpt = ref.ModernGPT(ref.ModernConfig()), ref.GPT(ref.GPTConfig())
    names = dict(model.named_parameters())
    assert "pos_emb.weight" not in names and not any(n.endswith("bias") for n in names)
    assert names["blocks.0.mlp.w1.weight"].shape == (176, 64)
    assert model.head.weight is not model.tok_emb.weight
    n_modern, n_gpt = (sum(p.numel() for p in m.parameters()) for m in (model, gpt))
    assert abs(n_modern / n_gpt - 1) < 0.02


def test_modern_gpt_initialisation():
    torch.manual_seed(0)
    config = ref.ModernConfig(vocab_size=64, d_model=128, n_layers=6)
    model = ref.ModernGPT(config)
    scaled = 0.02 / math.sqrt(2 * config.n_layers)
    for name, p in model.named_parameters():
        if p.dim() == 1:
            assert torch.all(p == 1), name
        elif name.endswith(("attn.out_proj.weight", "mlp.w2.weight")):
            assert abs(p.std().item() / scaled - 1) < 0.1, name
        else:
            assert abs(p.std().item() / 0.02 - 1) < 0.1, name


def test_modern_gpt_is_the_composition_of_its_parts():
    torch.manual_seed(0)
    config = ref.ModernConfig(vocab_size=13, max_len=8, d_model=16, n_heads=2, n_layers=2)
    model = _randomise(ref.ModernGPT(config))
    ids = torch.randint(0, 13, (3, 8))
    x = model.tok_emb(ids)
    for block in model.blocks:
        x = block(x)
    expected = model.head(F.rms_norm(x, (16,), model.ln_f.weight, eps=1e-5))
    torch.testing.assert_close(model(ids), expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("prompt_len", [1, 5])
def test_the_cache_is_exact(prompt_len):
    """Token by token with a cache (after a prompt of several tokens) = one full forward pass."""
    torch.manual_seed(0)
    config = ref.ModernConfig(vocab_size=13, max_len=32, d_model=32, n_heads=4, n_layers=3)
    model = _randomise(ref.ModernGPT(config)).eval()
    ids = torch.randint(0, 13, (2, 20))
    with torch.no_grad():
        full = model(ids)
        cache = ref.KVCache(config.n_layers)
        pieces = [model(ids[:, :prompt_len], cache=cache)]
        for t in range(prompt_len, ids.shape[1]):
            assert cache.length == t
            pieces.append(model(ids[:, t:t + 1], cache=cache))
        cached = torch.cat(pieces, dim=1)
    torch.testing.assert_close(cached, full, atol=1e-4, rtol=1e-4)
    assert cache.length == ids.shape[1]
    assert cache.keys[0].shape == (2, 4, 20, 8)


def test_the_cache_holds_rotated_keys():
    torch.manual_seed(0)
    attn = _randomise(ref.RotaryAttention(16, 2))
    x = torch.randn(1, 5, 16)
    cache = ref.KVCache(1)
    attn(x, cache=cache)
    expected = ref.apply_rope(ref.split_heads(attn.k_proj(x), 2))
    torch.testing.assert_close(cache.keys[0], expected)


def test_the_cache_works_in_chunks():
    torch.manual_seed(0)
    attn = _randomise(ref.RotaryAttention(16, 2))
    x = torch.randn(2, 9, 16)
    cache = ref.KVCache(1)
    chunks = [attn(x[:, a:b], cache=cache) for a, b in [(0, 4), (4, 5), (5, 9)]]
    torch.testing.assert_close(torch.cat(chunks, 1), attn(x), atol=1e-5, rtol=1e-4)


def _peaked_model(config, seed=0):
    """A model whose two largest logits are far apart, so greedy decoding is the same with and without a cache."""
    torch.manual_seed(seed)
    model = ref.ModernGPT(config)
    with torch.no_grad():
        model.head.weight.mul_(200)
    return model


def test_generate_cached_equals_generate_with_top_k_1():
    config = ref.ModernConfig(vocab_size=13, max_len=24, d_model=32, n_heads=4, n_layers=2)
    model = _peaked_model(config)
    ids = torch.randint(0, 13, (3, 4))
    torch.manual_seed(1)
    a = ref.generate(model, ids, 20, top_k=1)
    b = ref.generate_cached(model, ids, 20, top_k=1)
    assert torch.equal(a, b)


def test_generate_cached_samples_like_generate():
    config = ref.ModernConfig(vocab_size=7, max_len=8, d_model=16, n_heads=2, n_layers=1)
    torch.manual_seed(0)
    model = _randomise(ref.ModernGPT(config)).eval()
    with torch.no_grad():
        model.head.weight.mul_(0.3)
    prompt = torch.tensor([[1, 2, 3]]).repeat(6000, 1)
    with torch.no_grad():
        p = torch.softmax(model(prompt[:1])[0, -1] / 0.7, -1)
    torch.manual_seed(0)
    out = ref.generate_cached(model, prompt, 1, temperature=0.7)
    freq = torch.bincount(out[:, -1], minlength=7).float() / 6000
    assert torch.all((freq - p).abs() < 5 * torch.sqrt(p * (1 - p) / 6000) + 2e-3)


def test_generate_cached_refuses_more_than_max_len_and_restores_mode():
    config = ref.ModernConfig(vocab_size=13, max_len=8, d_model=16, n_heads=2, n_layers=1)
    model = ref.ModernGPT(config).train()
    with pytest.raises(ValueError, match="max_len"):
        ref.generate_cached(model, torch.zeros(1, 3, dtype=torch.long), 6)
    out = ref.generate_cached(model, torch.zeros(2, 3, dtype=torch.long), 5)
    assert out.shape == (2, 8) and model.training
    assert ref.generate_cached(model, torch.zeros(2, 3, dtype=torch.long), 0).shape == (2, 3)


def test_generate_cached_feeds_each_position_once():
    config = ref.ModernConfig(vocab_size=13, max_len=16, d_model=16, n_heads=2, n_layers=1)
    model = ref.ModernGPT(config)
    fed = []
    model.register_forward_pre_hook(lambda m, args, kwargs: fed.append(args[0].shape[1]), with_kwargs=True)
    ref.generate_cached(model, torch.zeros(2, 4, dtype=torch.long), 6)
    assert fed == [4, 1, 1, 1, 1, 1]


def test_half_precision_keeps_the_dtype():
    torch.manual_seed(0)
    attn = ref.RotaryAttention(16, 2).to(torch.bfloat16)
    x = torch.randn(2, 5, 16, dtype=torch.bfloat16)
    assert attn(x).dtype == torch.bfloat16

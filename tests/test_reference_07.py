"""tutor.reference.GPT and generate against PyTorch's own building blocks, and their contract."""

import math

import pytest
import torch
import torch.nn as nn

from tutor import reference as ref
from tutor.reference import GPT, GPTConfig, generate


def small_config(**kw):
    return GPTConfig(**{**dict(vocab_size=13, max_len=8, d_model=16, n_heads=2, n_layers=3, dropout=0.0), **kw})


def test_gpt_config_fields_and_defaults():
    import dataclasses

    fields = [(f.name, f.default) for f in dataclasses.fields(GPTConfig)]
    assert fields[:6] == [("vocab_size", 28), ("max_len", 16), ("d_model", 64), ("n_heads", 4), ("n_layers", 4),
                          ("dropout", 0.0)]
    # then GPT-2's switches (notebook 12), whose defaults keep this GPT
    assert fields[6:] == [("attn_bias", False), ("tie_head", False), ("gelu_approximate", "none"), ("ln_eps", 1e-5)]


def test_gpt_matches_torch_transformer_encoder_layers():
    """Each pre-norm block equals nn.TransformerEncoderLayer(norm_first=True, gelu) with a causal mask."""
    torch.manual_seed(0)
    c = small_config()
    model = GPT(c).eval()
    with torch.no_grad():  # non-trivial norms and biases
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    layers = []
    for block in model.blocks:
        layer = nn.TransformerEncoderLayer(c.d_model, c.n_heads, dim_feedforward=4 * c.d_model, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True, layer_norm_eps=1e-5)
        with torch.no_grad():
            a = block.attn
            layer.self_attn.in_proj_weight.copy_(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]))
            layer.self_attn.in_proj_bias.zero_()
            layer.self_attn.out_proj.weight.copy_(a.out_proj.weight)
            layer.self_attn.out_proj.bias.zero_()
            layer.linear1.weight.copy_(block.mlp.fc.weight)
            layer.linear1.bias.copy_(block.mlp.fc.bias)
            layer.linear2.weight.copy_(block.mlp.proj.weight)
            layer.linear2.bias.copy_(block.mlp.proj.bias)
            for mine, theirs in [(block.ln1, layer.norm1), (block.ln2, layer.norm2)]:
                theirs.weight.copy_(mine.weight)
                theirs.bias.copy_(mine.bias)
        layers.append(layer.eval())
    ln_f = nn.LayerNorm(c.d_model, eps=1e-5)
    with torch.no_grad():
        ln_f.weight.copy_(model.ln_f.weight)
        ln_f.bias.copy_(model.ln_f.bias)

    for T in (c.max_len, 5, 1):
        ids = torch.randint(0, c.vocab_size, (3, T))
        causal = nn.Transformer.generate_square_subsequent_mask(T)
        with torch.no_grad():
            x = model.tok_emb(ids) + model.pos_emb.weight[:T]
            for layer in layers:
                x = layer(x, src_mask=causal)
            expected = ln_f(x) @ model.head.weight.T
            got = model(ids)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_gpt_padding_mask_matches_torch_key_padding_mask():
    torch.manual_seed(1)
    c = small_config(n_layers=1)
    model = GPT(c).eval()
    block = model.blocks[0]
    mha = nn.MultiheadAttention(c.d_model, c.n_heads, bias=False, batch_first=True)
    with torch.no_grad():
        a = block.attn
        mha.in_proj_weight.copy_(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]))
        mha.out_proj.weight.copy_(a.out_proj.weight)
    ids = torch.randint(1, c.vocab_size, (2, 6))
    ids[1, 4:] = 0
    mask = ref.padding_mask(ids)  # [2, 1, 6]
    with torch.no_grad():
        x = model.tok_emb(ids) + model.pos_emb.weight[:6]
        h = block.ln1(x)
        causal = torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)
        attn, _ = mha(h, h, h, attn_mask=causal, key_padding_mask=~mask[:, 0], need_weights=False)
        x = x + attn
        x = x + block.mlp(block.ln2(x))
        expected = model.head(model.ln_f(x))
        got = model(ids, mask)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_gpt_init_statistics():
    torch.manual_seed(0)
    c = GPTConfig(vocab_size=64, max_len=64, d_model=128, n_heads=4, n_layers=8)
    model = GPT(c)
    scaled = 0.02 / math.sqrt(2 * c.n_layers)
    for name, p in model.named_parameters():
        if "ln" in name:
            expected = torch.ones_like(p) if name.endswith("weight") else torch.zeros_like(p)
            assert torch.equal(p, expected), name
        elif name.endswith("bias"):
            assert torch.all(p == 0), name
        else:
            std = scaled if ("out_proj" in name or "mlp.proj" in name) else 0.02
            assert abs(p.std().item() / std - 1) < 0.05, (name, p.std().item(), std)
            assert abs(p.mean().item()) < 5 * std / math.sqrt(p.numel()), name


def test_gpt_head_is_not_tied_and_parameter_count():
    c = GPTConfig()
    model = GPT(c)
    assert model.head.weight is not model.tok_emb.weight
    assert model.head.bias is None
    V, M, d, L = c.vocab_size, c.max_len, c.d_model, c.n_layers
    per_block = 4 * d * d + (d * 4 * d + 4 * d + 4 * d * d + d) + 2 * 2 * d
    expected = V * d + M * d + L * per_block + 2 * d + V * d
    assert sum(p.numel() for p in model.parameters()) == expected == 203_648


def test_gpt_embedding_dropout_only_in_train_mode():
    torch.manual_seed(0)
    model = GPT(small_config(dropout=0.5))
    ids = torch.randint(0, 13, (2, 8))
    model.eval()
    a, b = model(ids), model(ids)
    torch.testing.assert_close(a, b)
    model.train()
    assert not torch.allclose(model(ids), a)


# --- generate ----------------------------------------------------------------------------


class Bigram(nn.Module):
    """logits[b, t] = table[ids[b, t]]: the next-token distribution is known exactly."""

    def __init__(self, table, max_len=8):
        super().__init__()
        self.config = GPTConfig(vocab_size=table.shape[0], max_len=max_len)
        self.table = nn.Parameter(table)
        self.lengths = []

    def forward(self, ids, mask=None):
        self.lengths.append(ids.shape[1])
        assert ids.shape[1] <= self.config.max_len
        return self.table[ids]


@pytest.mark.parametrize("temperature,top_k", [(1.0, None), (0.5, None), (2.0, 3), (1.0, 100)])
def test_generate_samples_softmax_of_logits_over_temperature(temperature, top_k):
    torch.manual_seed(0)
    table = torch.randn(6, 6) * 1.5
    model = Bigram(table)
    N = 20000
    out = generate(model, torch.full((N, 1), 2), 1, temperature=temperature, top_k=top_k)
    freq = torch.bincount(out[:, 1], minlength=6).double() / N
    logits = table[2].double() / temperature
    if top_k is not None and top_k < 6:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    expected = torch.softmax(logits, -1)  # PyTorch's softmax
    assert torch.all((freq - expected).abs() < 5 * (expected * (1 - expected) / N).sqrt() + 1e-3)
    assert torch.all(freq[expected == 0] == 0)


def test_generate_top_k_keeps_ties():
    torch.manual_seed(0)
    table = torch.zeros(4, 4)
    table[0] = torch.tensor([2.0, 1.0, 1.0, 0.0])
    out = generate(Bigram(table), torch.zeros(3000, 1, dtype=torch.long), 1, top_k=2)
    assert set(out[:, 1].tolist()) == {0, 1, 2}


def test_generate_top_k_one_is_greedy_and_crops_the_context():
    torch.manual_seed(0)
    c = small_config()
    model = GPT(c)
    ids = torch.randint(0, c.vocab_size, (2, 11))
    out = generate(model, ids, 6, top_k=1)
    expected = ids
    model.eval()
    with torch.no_grad():
        for _ in range(6):
            next_id = model(expected[:, -c.max_len:])[:, -1].argmax(-1, keepdim=True)
            expected = torch.cat([expected, next_id], 1)
    assert torch.equal(out, expected)


def test_generate_restores_mode_and_uses_no_grad():
    model = Bigram(torch.randn(5, 5), max_len=4)
    seen = []
    model.register_forward_hook(lambda m, i, o: seen.append((m.training, torch.is_grad_enabled())))
    model.train()
    out = generate(model, torch.tensor([[1, 2, 3]]), 5)
    assert model.training and out.shape == (1, 8) and out.dtype == torch.long
    assert all(not training and not grad for training, grad in seen)
    assert max(model.lengths) == 4
    model.eval()
    generate(model, torch.tensor([[1]]), 2)
    assert not model.training


def test_viz_model_functions_draw():
    import matplotlib

    matplotlib.use("Agg")
    from tutor.viz import model as vm

    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0])
    fig = vm.sampling_distribution(logits, temperature=0.5, top_k=3, tokens=list("abcde"))
    assert fig.axes[0].get_title() and fig.axes[0].get_xlabel() and fig.axes[0].get_ylabel()
    assert vm.temperature_bars(logits, tokens=list("abcde")).axes
    assert vm.residual_growth({"a": [1.0, 2.0], "b": [1.0, 1.1]}).axes
    assert vm.architecture_diagram(GPTConfig()).axes
    widget = vm.sampling_explorer(logits, tokens=list("abcde"))
    assert "image/png" in widget._repr_mimebundle_()

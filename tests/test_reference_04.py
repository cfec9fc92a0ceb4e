"""The model answers of notebook 04 agree with PyTorch's own multi-head attention."""

import einops
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tutor import reference as ref


def to_torch_mha(mha: ref.MultiHeadAttention, d_model: int, n_heads: int) -> nn.MultiheadAttention:
    torch_mha = nn.MultiheadAttention(d_model, n_heads, bias=False, batch_first=True)
    with torch.no_grad():
        torch_mha.in_proj_weight.copy_(torch.cat([mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight]))
        torch_mha.out_proj.weight.copy_(mha.out_proj.weight)
    return torch_mha.eval()


def test_split_and_merge_match_einops():
    x = torch.randn(2, 5, 12)
    assert torch.equal(ref.split_heads(x, 3), einops.rearrange(x, "b t (h d) -> b h t d", h=3))
    y = torch.randn(2, 3, 5, 4)
    assert torch.equal(ref.merge_heads(y), einops.rearrange(y, "b h t d -> b t (h d)"))
    assert torch.equal(ref.merge_heads(ref.split_heads(x, 3)), x)


def test_head_h_gets_a_contiguous_slice():
    x = torch.randn(2, 5, 12)
    heads = ref.split_heads(x, 3)
    for h in range(3):
        assert torch.equal(heads[:, h], x[..., 4 * h:4 * (h + 1)])


@pytest.mark.parametrize("n_heads", [1, 2, 4])
@pytest.mark.parametrize("causal", [True, False])
def test_mha_matches_torch(n_heads, causal):
    torch.manual_seed(0)
    mha = ref.MultiHeadAttention(16, n_heads, causal=causal).eval()
    x = torch.randn(3, 6, 16)
    # nn.MultiheadAttention's boolean attn_mask is True where attention is NOT allowed.
    blocked = ~ref.causal_mask(6) if causal else None
    expected, _ = to_torch_mha(mha, 16, n_heads)(x, x, x, attn_mask=blocked, need_weights=False)
    torch.testing.assert_close(mha(x), expected, atol=1e-5, rtol=1e-4)


def test_mha_padding_mask_matches_torch_key_padding_mask():
    torch.manual_seed(0)
    mha = ref.MultiHeadAttention(16, 4, causal=True).eval()
    ids = torch.tensor([[0, 3, 4, 5, 6], [0, 7, 8, 0, 0], [0, 9, 0, 0, 0]])
    ids[:, 0] = 1  # position 0 is a real token in every row
    x = torch.randn(3, 5, 16)
    mask = ref.padding_mask(ids)
    expected, _ = to_torch_mha(mha, 16, 4)(x, x, x, attn_mask=~ref.causal_mask(5),
                                            key_padding_mask=~mask.squeeze(1), need_weights=False)
    torch.testing.assert_close(mha(x, mask), expected, atol=1e-5, rtol=1e-4)


def test_mha_matches_functional_sdpa():
    torch.manual_seed(0)
    mha = ref.MultiHeadAttention(16, 4, causal=True).eval()
    x = torch.randn(2, 5, 16)
    q, k, v = (ref.split_heads(p(x), 4) for p in (mha.q_proj, mha.k_proj, mha.v_proj))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(mha(x), mha.out_proj(ref.merge_heads(out)), atol=1e-5, rtol=1e-4)


def test_mha_is_a_loop_over_attention_heads():
    torch.manual_seed(0)
    d_model, n_heads = 12, 3
    d_head = d_model // n_heads
    mha = ref.MultiHeadAttention(d_model, n_heads, causal=False)
    x = torch.randn(2, 5, d_model)
    outs = []
    for h in range(n_heads):
        head = ref.AttentionHead(d_model, d_head)
        rows = slice(h * d_head, (h + 1) * d_head)
        with torch.no_grad():
            head.query.weight.copy_(mha.q_proj.weight[rows])
            head.key.weight.copy_(mha.k_proj.weight[rows])
            head.value.weight.copy_(mha.v_proj.weight[rows])
        outs.append(head(x))
    torch.testing.assert_close(mha(x), mha.out_proj(torch.cat(outs, dim=-1)), atol=1e-5, rtol=1e-4)


def test_mha_parameter_count():
    for n_heads in (1, 2, 4, 8):
        mha = ref.MultiHeadAttention(32, n_heads)
        assert sum(p.numel() for p in mha.parameters()) == 4 * 32 * 32


def test_mha_dropout_eval_and_train():
    torch.manual_seed(0)
    mha = ref.MultiHeadAttention(16, 4, causal=False, dropout=0.5)
    x = torch.randn(2, 6, 16)
    plain = ref.MultiHeadAttention(16, 4, causal=False)
    plain.load_state_dict(mha.state_dict())
    torch.testing.assert_close(mha.eval()(x), plain(x))
    mha.train()
    assert not torch.allclose(mha(x), plain(x))
    assert not torch.allclose(mha(x), mha(x))

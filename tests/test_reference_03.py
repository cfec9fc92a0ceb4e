"""tutor.reference's masks and masked attention agree with PyTorch and with the source article."""

import torch
import torch.nn.functional as F

from tutor import reference as ref


def test_causal_mask_is_lower_triangular_bool():
    m = ref.causal_mask(4)
    assert m.dtype == torch.bool and m.shape == (4, 4)
    assert m.tolist() == [[True, False, False, False], [True, True, False, False],
                          [True, True, True, False], [True, True, True, True]]


def test_causal_mask_honours_device():
    assert ref.causal_mask(3, device="cpu").device.type == "cpu"
    m = ref.causal_mask(3, device="meta")
    assert m.device.type == "meta" and m.shape == (3, 3) and m.dtype == torch.bool


def test_causal_mask_matches_pytorchs_square_subsequent_mask():
    # PyTorch's version is additive: 0 where attending is allowed, -inf above the diagonal.
    additive = torch.nn.Transformer.generate_square_subsequent_mask(6)
    assert torch.equal(ref.causal_mask(6), additive == 0)


def test_padding_mask_matches_key_padding_convention():
    ids = torch.tensor([ref.encode("laika"), ref.encode("bo") + [0, 0, 0]])
    m = ref.padding_mask(ids)
    assert m.shape == (2, 1, 5) and m.dtype == torch.bool
    # nn.MultiheadAttention's key_padding_mask uses the opposite polarity: True = ignore.
    assert torch.equal(m.squeeze(1), ~(ids == 0))
    assert ref.padding_mask(torch.tensor([[3, 27]]), pad_id=27).tolist() == [[[True, False]]]


def test_masked_attention_matches_pytorch_is_causal():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 5)
    ours = ref.scaled_dot_product_attention(q, k, v, ref.causal_mask(7))
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-4)


def test_masked_attention_matches_pytorch_bool_attn_mask():
    torch.manual_seed(1)
    ids = torch.tensor([ref.encode("laika"), ref.encode("bo") + [0, 0, 0], ref.encode("anna") + [0]])
    mask = ref.padding_mask(ids) & ref.causal_mask(5)  # [3, 5, 5]
    q, k, v = torch.randn(3, 5, 16), torch.randn(3, 5, 16), torch.randn(3, 5, 4)
    ours = ref.scaled_dot_product_attention(q, k, v, mask)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-4)
    # a padding mask alone hides the padded keys from every query
    ours = ref.scaled_dot_product_attention(q, k, v, ref.padding_mask(ids))
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=ref.padding_mask(ids))
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-4)


def test_masked_attention_matches_multihead_attention_key_padding_mask():
    torch.manual_seed(2)
    ids = torch.tensor([ref.encode("laika"), ref.encode("bo") + [0, 0, 0]])
    x = torch.randn(2, 5, 8)
    mha = torch.nn.MultiheadAttention(8, 1, bias=False, batch_first=True)
    theirs, _ = mha(x, x, x, key_padding_mask=ids == 0, need_weights=False)
    wq, wk, wv = mha.in_proj_weight.chunk(3)
    out = ref.scaled_dot_product_attention(x @ wq.T, x @ wk.T, x @ wv.T, ref.padding_mask(ids))
    ours = mha.out_proj(out)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-4)


def test_article_masked_laika_matrix():
    x = ref.one_hot(torch.tensor(ref.encode("laika")), ref.vocab_size)
    scores = ref.similarity(x).masked_fill(~ref.causal_mask(5), float("-inf"))
    w = ref.softmax(scores, dim=-1)
    expected = torch.tensor([
        [1, 0, 0, 0, 0],
        [0.2689, 0.7311, 0, 0, 0],
        [0.2119, 0.2119, 0.5761, 0, 0],
        [0.1749, 0.1749, 0.1749, 0.4754, 0],
        [0.1185, 0.3222, 0.1185, 0.1185, 0.3222],
    ])
    torch.testing.assert_close(w, expected, atol=6e-5, rtol=0)


def test_fully_masked_row_is_nan_with_our_softmax():
    scores = torch.zeros(2, 3).masked_fill(torch.tensor([[True, True, False], [False, False, False]]).logical_not(),
                                            float("-inf"))
    w = ref.softmax(scores)
    assert torch.isnan(w[1]).all() and not torch.isnan(w[0]).any()

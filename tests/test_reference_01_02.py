"""The model answers of notebooks 01-02 agree with PyTorch's own functions."""

import math

import pytest
import torch
import torch.nn.functional as F

from tutor import reference as ref


def test_alphabet_and_laika():
    assert ref.alphabet[0] == " " and ref.alphabet[-1] == "." and ref.vocab_size == 28
    assert ref.encode("laika") == [12, 1, 9, 11, 1]
    assert ref.encode("Laika") == [12, 1, 9, 11, 1]
    assert ref.decode([0, 12, 1, 9, 11, 1, 27]) == " laika."
    assert ref.decode(torch.tensor([12, 1, 9, 11, 1])) == "laika"


def test_one_hot_matches_builtin():
    ids = torch.randint(0, 28, (2, 3, 7))
    assert torch.equal(ref.one_hot(ids, 28), F.one_hot(ids, 28).float())
    assert ref.one_hot(ids, 28).dtype == torch.float32


@pytest.mark.parametrize("dim", [-1, 0, 1, 2])
def test_softmax_matches_builtin(dim):
    x = torch.randn(3, 4, 5) * 10
    torch.testing.assert_close(ref.softmax(x, dim=dim), F.softmax(x, dim=dim))


def test_softmax_is_stable():
    x = torch.tensor([1000.0, 999.0, -1000.0])
    torch.testing.assert_close(ref.softmax(x), F.softmax(x, dim=-1))
    assert torch.isfinite(ref.softmax(x)).all()


def test_softmax_keeps_dtype():
    x = torch.randn(4, 5, dtype=torch.float64)
    assert ref.softmax(x).dtype == torch.float64


def test_laika_figures():
    x = ref.one_hot(torch.tensor(ref.encode("laika")), 28)
    w = ref.softmax(ref.similarity(x))
    torch.testing.assert_close(w[0], torch.tensor([0.4046, 0.1488, 0.1488, 0.1488, 0.1488]), atol=1e-4, rtol=0)
    torch.testing.assert_close(w[1], torch.tensor([0.1185, 0.3222, 0.1185, 0.1185, 0.3222]), atol=1e-4, rtol=0)
    assert ref.decode(ref.dot_product_attention(x).argmax(-1)) == "laika"


def test_sdpa_matches_builtin_with_batch_and_dk_ne_dv():
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 5)
    torch.testing.assert_close(ref.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v))


def test_sdpa_with_mask_matches_builtin():
    q, k, v = torch.randn(2, 5, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 3)
    mask = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    torch.testing.assert_close(ref.scaled_dot_product_attention(q, k, v, mask),
                               F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    torch.testing.assert_close(ref.scaled_dot_product_attention(q, k, v, mask),
                               F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_attention_head_matches_builtin():
    head = ref.AttentionHead(16, 8)
    x = torch.randn(2, 5, 16)
    expected = F.scaled_dot_product_attention(head.query(x), head.key(x), head.value(x))
    torch.testing.assert_close(head(x), expected)
    assert sum(p.numel() for p in head.parameters()) == 3 * 16 * 8
    # the scale is 1/sqrt(d_head)
    q, k = head.query(x), head.key(x)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), -1)
    torch.testing.assert_close(head(x), w @ head.value(x))

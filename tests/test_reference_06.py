"""The reference answers of notebook 06 agree with PyTorch's own layers."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tutor import reference as ref


def _random_affine(module):
    with torch.no_grad():
        module.weight.copy_(1 + 0.5 * torch.randn_like(module.weight))
        if getattr(module, "bias", None) is not None:
            module.bias.copy_(0.5 * torch.randn_like(module.bias))
    return module


@pytest.mark.parametrize("shape", [(5, 16), (2, 3, 4, 16), (1, 1, 16)])
@pytest.mark.parametrize("eps", [1e-5, 0.1])
def test_layer_norm_matches_torch(shape, eps):
    torch.manual_seed(0)
    ln = _random_affine(ref.LayerNorm(16, eps=eps))
    x = torch.randn(*shape) * 3 + 1
    expected = F.layer_norm(x, (16,), ln.weight, ln.bias, eps)
    torch.testing.assert_close(ln(x), expected, atol=1e-5, rtol=1e-5)
    torch_ln = nn.LayerNorm(16, eps=eps)
    torch_ln.load_state_dict(ln.state_dict())
    torch.testing.assert_close(ln(x), torch_ln(x), atol=1e-5, rtol=1e-5)


def test_layer_norm_starts_as_pure_normalisation():
    ln = ref.LayerNorm(8)
    assert torch.equal(ln.weight, torch.ones(8)) and torch.equal(ln.bias, torch.zeros(8))
    y = ln(torch.randn(4, 8) * 5 + 3)
    torch.testing.assert_close(y.mean(-1), torch.zeros(4), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(4), atol=1e-3, rtol=0)


@pytest.mark.skipif(not hasattr(F, "rms_norm"), reason="F.rms_norm needs torch >= 2.4")
@pytest.mark.parametrize("shape", [(5, 16), (2, 3, 4, 16), (1, 1, 16)])
@pytest.mark.parametrize("eps", [1e-5, 0.1])
def test_rms_norm_matches_torch(shape, eps):
    torch.manual_seed(0)
    rms = _random_affine(ref.RMSNorm(16, eps=eps))
    x = torch.randn(*shape) * 3 + 1
    torch.testing.assert_close(rms(x), F.rms_norm(x, (16,), rms.weight, eps), atol=1e-5, rtol=1e-5)
    torch_rms = nn.RMSNorm(16, eps=eps)
    torch_rms.load_state_dict(rms.state_dict())
    torch.testing.assert_close(rms(x), torch_rms(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_norms_compute_half_precision_in_float32(dtype):
    torch.manual_seed(0)
    ln = _random_affine(ref.LayerNorm(16))
    rms = _random_affine(ref.RMSNorm(16))
    x = (1000 + 10 * torch.randn(3, 16)).to(dtype)
    y = ln(x)
    assert y.dtype == dtype
    expected = F.layer_norm(x.float(), (16,), ln.weight, ln.bias, 1e-5).to(dtype)
    one_ulp = torch.finfo(dtype).eps  # float32 orders of operations may round differently, by one ulp
    torch.testing.assert_close(y, expected, atol=one_ulp, rtol=one_ulp)
    z = rms(x)
    assert z.dtype == dtype and torch.isfinite(z).all()  # x**2 would overflow in float16
    manual = (x.float() / torch.sqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5) * rms.weight).to(dtype)
    torch.testing.assert_close(z, manual, atol=one_ulp, rtol=one_ulp)


def test_mlp_matches_sequential():
    torch.manual_seed(0)
    mlp = ref.MLP(16).eval()
    assert mlp.fc.weight.shape == (64, 16) and mlp.proj.weight.shape == (16, 64)
    assert mlp.fc.bias is not None and mlp.proj.bias is not None
    seq = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16))
    seq[0].load_state_dict(mlp.fc.state_dict())
    seq[2].load_state_dict(mlp.proj.state_dict())
    x = torch.randn(2, 3, 5, 16)
    torch.testing.assert_close(mlp(x), seq(x))
    assert ref.MLP(16, 24).fc.weight.shape == (24, 16)


def test_mlp_dropout_after_proj():
    torch.manual_seed(0)
    mlp = ref.MLP(8, dropout=0.5)
    x = torch.randn(4, 5, 8)
    expected = mlp.eval()(x)
    got = mlp.train()(x)
    kept = got != 0
    assert (~kept).any() and kept.any()
    torch.testing.assert_close(got[kept], 2 * expected[kept])


def test_swiglu_formula():
    torch.manual_seed(0)
    m = ref.SwiGLU(16, 24)
    assert all(getattr(m, w).bias is None for w in ("w1", "w2", "w3"))
    assert m.w2.weight.shape == (16, 24)
    x = torch.randn(2, 5, 16)
    h = F.silu(x @ m.w1.weight.T) * (x @ m.w3.weight.T)
    torch.testing.assert_close(m(x), h @ m.w2.weight.T)


def _torch_layer(block, d_model, n_heads):
    """nn.TransformerEncoderLayer (pre-norm, GELU) with the weights of a reference block."""
    layer = nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=4 * d_model, dropout=0.0,
                                       activation="gelu", batch_first=True, norm_first=True)
    with torch.no_grad():
        attn = block.attn
        layer.self_attn.in_proj_weight.copy_(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))
        layer.self_attn.in_proj_bias.zero_()
        layer.self_attn.out_proj.weight.copy_(attn.out_proj.weight)
        layer.self_attn.out_proj.bias.zero_()
        layer.linear1.load_state_dict(block.mlp.fc.state_dict())
        layer.linear2.load_state_dict(block.mlp.proj.state_dict())
        layer.norm1.load_state_dict(block.ln1.state_dict())
        layer.norm2.load_state_dict(block.ln2.state_dict())
    return layer.eval()


def test_block_matches_torch_encoder_layer():
    torch.manual_seed(0)
    d, h, T = 16, 4, 6
    block = ref.TransformerBlock(d, h).eval()
    for ln in (block.ln1, block.ln2):
        _random_affine(ln)
    layer = _torch_layer(block, d, h)
    x = torch.randn(3, T, d)
    causal = ref.causal_mask(T)
    with torch.no_grad():
        # torch's masks mean "may NOT attend" where ours mean "may attend"
        expected = layer(x, src_mask=~causal)
        torch.testing.assert_close(block(x), expected, atol=1e-5, rtol=1e-4)
        lengths = torch.tensor([6, 4, 2])
        real = torch.arange(T)[None, :] < lengths[:, None]
        expected = layer(x, src_mask=~causal, src_key_padding_mask=~real)
        got = block(x, ref.padding_mask(torch.where(real, 1, 0)))
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_block_is_causal_and_residual():
    torch.manual_seed(0)
    block = ref.TransformerBlock(16, 4).eval()
    x = torch.randn(2, 5, 16)
    x2 = x.clone()
    x2[:, -1] += 1
    with torch.no_grad():
        torch.testing.assert_close(block(x)[:, :-1], block(x2)[:, :-1])
        # with the output projections zeroed, each sublayer adds nothing: the block is the identity
        block.attn.out_proj.weight.zero_()
        block.mlp.proj.weight.zero_()
        block.mlp.proj.bias.zero_()
        torch.testing.assert_close(block(x), x)

"""The models a training run builds: the bigram baseline, the GPT of a config (with fused kernels), and the two
wrappers ``fit`` puts around it (``PackedNames`` for packed batches, ``AutocastBF16`` for bf16 autocast)."""

import importlib
from dataclasses import asdict

import torch
import torch.nn as nn

from tutor.data import name_positions, same_name_mask
from tutor.reference.attention import MultiHeadAttention
from tutor.reference.characters import PAD_X, PAD_Y, encode, vocab_size
from tutor.reference.layers import LayerNorm
from tutor.reference.model import GPT, GPTConfig, ModernConfig, ModernGPT
from tutor.train.precision import Autocast


class BigramModel(nn.Module):
    """The baseline to beat: P(next | current) from counts over the training names, with add-``smoothing`` counts.

    ``forward(ids [B, T]) -> logits [B, T, V]`` are log-probabilities, so ``evaluate`` and
    ``generate`` work on it unchanged. ``'.'`` (the target padding) gets probability 0.
    """

    def __init__(self, names, smoothing: float = 1.0):
        super().__init__()
        V = vocab_size
        firsts, seconds = [], []
        for name in names:
            ids = [PAD_X] + encode(name) + [PAD_X]
            firsts += ids[:-1]
            seconds += ids[1:]
        pairs = torch.tensor(firsts, dtype=torch.long) * V + torch.tensor(seconds, dtype=torch.long)
        counts = torch.bincount(pairs, minlength=V * V).view(V, V).float()
        self.register_buffer("counts", counts)  # [V, V]: counts[a, b] = how often b follows a
        smoothed = counts + smoothing
        smoothed[:, PAD_Y] = 0.0  # '.' never follows anything: it is padding
        probs = smoothed / smoothed.sum(dim=1, keepdim=True)
        # a parameter (frozen) rather than a buffer, so `next(model.parameters())` gives its device
        self.log_probs = nn.Parameter(probs.log(), requires_grad=False)
        self.config = GPTConfig(vocab_size=V, max_len=16, d_model=0, n_heads=1, n_layers=0)

    def forward(self, ids, mask=None):
        return self.log_probs[ids]


def model_class(config):
    """The model class a config asks for: ``GPT`` unless it has a ``model`` field naming another
    (``"gpt"``, ``"modern"`` for notebook 09's ``ModernGPT``, or ``"package.module:Class"``)."""
    name = getattr(config, "model", "gpt") or "gpt"
    if name == "gpt":
        return GPT
    if name == "modern":
        return ModernGPT
    module, _, attribute = name.partition(":")
    if not attribute:
        raise ValueError(f"unknown model {name!r}: use 'gpt', 'modern' or 'package.module:Class'")
    return getattr(importlib.import_module(module), attribute)


def make_model(config, device="cpu"):
    """A fresh GPT for ``config`` on ``device``, seeded with ``config.seed``, with fused kernels if asked
    (``fused_kernels``; the hand-written attention kept when ``fused_attention`` is False)."""
    torch.manual_seed(config.seed)
    cls, gpt_config = model_class(config), config.model_config()
    if cls.__name__ == "ModernGPT":  # notebook 09's model takes a ModernConfig (no position table, SwiGLU, RoPE)
        fields = ModernConfig.__dataclass_fields__  # (not dropout, nor GPT-2's switches)
        gpt_config = ModernConfig(**{k: v for k, v in asdict(gpt_config).items() if k in fields})
    model = cls(gpt_config).to(device)
    if config.fused_kernels:
        use_fused_kernels(model)
        if not getattr(config, "fused_attention", True):
            use_fused_attention(model, False)
    return model


def use_fused_attention(model, fused: bool = True):
    """Switch every ``MultiHeadAttention`` in ``model`` to one call of ``F.scaled_dot_product_attention`` (or back),
    in place: the weights are untouched, only the ``forward`` branch taken changes. Returns ``model``."""
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            module.fused = fused
    return model


def use_fused_kernels(model, fused: bool = True):
    """``use_fused_attention``, and ``F.layer_norm`` for every ``LayerNorm``: in place, same weights."""
    use_fused_attention(model, fused)
    for module in model.modules():
        if isinstance(module, LayerNorm):
            module.fused = fused
    return model


class PackedNames(nn.Module):
    """A GPT for packed batches (``tutor.data.make_packed_loader``): ``forward(ids)`` gives the GPT, found from the
    ``' '`` that starts each name, a mask that keeps attention inside each name (``data.same_name_mask``) and
    positions that restart at 0 with every name (``data.name_positions``).

    On an ordinary padded batch (one name per row) it gives the same logits as the GPT at every real position, so
    evaluation may use either. The weights are the GPT's own: save and load ``model``, not the wrapper.
    """

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids, mask=same_name_mask(ids), positions=name_positions(ids))


class AutocastBF16(Autocast):
    """``Autocast`` in bfloat16 (on CUDA, or on a CPU: ``device_type``): the parameters stay float32, matrix products
    run in bfloat16, the logits come back in float32. ``fit`` picks the half type by device (``tutor.train.precision``);
    this is the wrapper notebook 10 times by hand."""

    def __init__(self, model, device_type: str = "cuda"):
        super().__init__(model, device_type, torch.bfloat16)

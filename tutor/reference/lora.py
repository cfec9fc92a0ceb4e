"""Adapting a pretrained model (notebook 13): LoRA, a low-rank update beside a frozen ``nn.Linear`` (Hu et al. 2021),
put into a model by name and merged back; and the example of supervised fine-tuning, whose loss counts the response
and ignores the prompt and the padding.

The layout is PEFT's: ``A`` is ``[r, in_features]`` (PEFT's ``lora_A.weight``), ``B`` is ``[out_features, r]``
(``lora_B.weight``), and the layer computes ``base(x) + (alpha / r) · x Aᵀ Bᵀ``.
"""

import math

import torch
import torch.nn as nn

from tutor.reference.characters import PAD_X, PAD_Y


class LoRALinear(nn.Module):
    """A frozen ``base`` linear layer plus a trainable rank-``r`` update: ``base(x) + (alpha / r) · B (A x)``.

    ``A`` starts random (PEFT's Kaiming-uniform), ``B`` at zero, so the adapted layer starts equal to ``base``
    while the gradient of ``B`` is not zero. Only ``A`` and ``B`` train."""

    def __init__(self, base: nn.Linear, r: int, alpha: float):
        super().__init__()
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.r, self.alpha, self.scale = r, alpha, alpha / r
        weight = base.weight
        self.A = nn.Parameter(torch.empty(r, base.in_features, device=weight.device, dtype=weight.dtype))
        self.B = nn.Parameter(torch.zeros(base.out_features, r, device=weight.device, dtype=weight.dtype))
        nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))  # as nn.Linear's own weight, and PEFT's lora_A

    def forward(self, x):
        return self.base(x) + self.scale * (x @ self.A.T @ self.B.T)


def add_lora(model: nn.Module, targets, r: int, alpha: float, lora_class=LoRALinear) -> list[str]:
    """Freeze every parameter of ``model``, then replace each ``nn.Linear`` whose name is one of ``targets`` or ends
    with ``"." + target`` (``"q_proj"`` is every block's ``attn.q_proj``) by ``lora_class(linear, r, alpha)``, in
    place. Returns the names replaced, in the model's order; a target that names no ``nn.Linear`` is a ValueError."""
    for p in model.parameters():
        p.requires_grad_(False)
    targets = [targets] if isinstance(targets, str) else list(targets)
    names = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)
             and any(name == t or name.endswith("." + t) for t in targets)]
    missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]
    if missing:
        raise ValueError(f"no nn.Linear in the model is called {', '.join(map(repr, missing))}")
    for name in names:
        parent, _, child = name.rpartition(".")
        owner = model.get_submodule(parent) if parent else model
        setattr(owner, child, lora_class(getattr(owner, child), r, alpha))
    return names


def merge_lora(layer: LoRALinear) -> nn.Linear:
    """A plain ``nn.Linear`` that computes what ``layer`` computes: weight ``W + (alpha / r) · B A``, the same bias.
    ``layer`` is left as it was."""
    base = layer.base
    merged = nn.Linear(base.in_features, base.out_features, bias=base.bias is not None,
                       device=base.weight.device, dtype=base.weight.dtype)
    with torch.no_grad():
        merged.weight.copy_(base.weight + layer.scale * (layer.B @ layer.A))
        if base.bias is not None:
            merged.bias.copy_(base.bias)
    return merged


def sft_example(prompt: list[int], response: list[int], block_size: int):
    """One supervised fine-tuning example: the inputs ``x`` and targets ``y`` (two LongTensors ``[block_size]``) of
    the sequence ``prompt + response``, shifted by one as every language-model example is, where a target that is
    part of the prompt, and the padding after the end, are ``PAD_Y`` (the loss's ``ignore_index``): the loss counts
    the response only, its first token included. ``x`` is padded with ``PAD_X``. A sequence longer than
    ``block_size + 1`` tokens is a ValueError."""
    if not prompt or not response:
        raise ValueError("a prompt (at least its start token) and a response of at least one token are needed")
    ids = list(prompt) + list(response)
    if len(ids) - 1 > block_size:
        raise ValueError(f"{len(ids)} tokens do not fit a block of {block_size} (+1 for the shift)")
    x, y = ids[:-1], ids[1:]
    y = [PAD_Y] * (len(prompt) - 1) + y[len(prompt) - 1:]  # target i is token i + 1: the prompt's own are ignored
    pad = block_size - len(x)
    return torch.tensor(x + [PAD_X] * pad), torch.tensor(y + [PAD_Y] * pad)

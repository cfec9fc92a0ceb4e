"""The optimizers: AdamW with weight decay on the matrices only (GPT-2), and Muon + AdamW (the CPU preset)."""

import warnings

import torch
import torch.nn as nn


def _adamw(params, config):
    """AdamW with weight decay on the matrices (Linear and Embedding weights) only, as in GPT-2."""
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config.max_lr, betas=(0.9, 0.99))


class MuonAdamW:
    """Two optimizers stepped as one: ``torch.optim.Muon`` for the weight matrices inside the blocks, AdamW for
    everything else (the embeddings, the head, LayerNorms and biases, which Muon is not made for).

    Muon keeps a momentum of the gradient, as SGD does, but replaces each matrix's update by the nearest
    orthogonal matrix (a few Newton-Schulz iterations): every direction of the matrix moves by the same amount, so
    the rare directions learn as fast as the common ones. ``adjust_lr_fn="match_rms_adamw"`` scales the update to
    the size of an AdamW update, so one learning rate (set through ``param_groups``, as ``fit`` does) suits both.
    """

    def __init__(self, muon, adamw):
        self.muon, self.adamw = muon, adamw

    @property
    def param_groups(self):
        return self.muon.param_groups + self.adamw.param_groups

    def zero_grad(self, set_to_none: bool = True):
        self.muon.zero_grad(set_to_none=set_to_none)
        self.adamw.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        loss = self.muon.step(closure)
        self.adamw.step()
        return loss

    def state_dict(self):
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state):
        self.muon.load_state_dict(state["muon"])
        self.adamw.load_state_dict(state["adamw"])


def block_matrices(model) -> list:
    """The weights of every ``nn.Linear`` inside ``model.blocks``: the matrices Muon trains."""
    return [m.weight for m in model.blocks.modules() if isinstance(m, nn.Linear) and m.weight.requires_grad]


def make_optimizer(model, config):
    """``config.optimizer``: ``"adamw"`` (AdamW, weight decay on the matrices only, as in GPT-2) or ``"muon"``
    (``MuonAdamW``; AdamW alone, with a warning, on a PyTorch older than 2.9, which has no ``torch.optim.Muon``)."""
    params = [p for p in model.parameters() if p.requires_grad]
    kind = getattr(config, "optimizer", "adamw")
    if kind == "adamw":
        return _adamw(params, config)
    if kind != "muon":
        raise ValueError(f"unknown optimizer {kind!r}: use 'adamw' or 'muon'")
    if not hasattr(torch.optim, "Muon"):
        warnings.warn(f"PyTorch {torch.__version__} has no torch.optim.Muon (new in 2.9): training with AdamW "
                      "alone, so the validation loss will be a little higher than the figures quoted", stacklevel=2)
        return _adamw(params, config)
    matrices = block_matrices(model)
    chosen = {id(p) for p in matrices}
    muon = torch.optim.Muon(matrices, lr=config.max_lr, weight_decay=config.weight_decay,
                            ns_steps=getattr(config, "muon_ns_steps", 5), adjust_lr_fn="match_rms_adamw")
    return MuonAdamW(muon, _adamw([p for p in params if id(p) not in chosen], config))

"""The GPT: embeddings, a stack of blocks, a final norm and a language-model head (notebook 07)."""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from tutor.reference.attention import softmax
from tutor.reference.layers import LayerNorm, TransformerBlock


@dataclass
class GPTConfig:
    vocab_size: int = 28
    max_len: int = 16
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 4
    dropout: float = 0.0


class GPT(nn.Module):
    """A decoder-only transformer that predicts the next character at every position."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.max_len, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(
            [TransformerBlock(config.d_model, config.n_heads, config.dropout) for _ in range(config.n_layers)]
        )
        self.ln_f = LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.apply(self._init_weights)
        # GPT-2: the projections that write into the residual stream get a smaller std, so the
        # stream's variance does not grow with depth.
        for block in self.blocks:
            for weight in (block.attn.out_proj.weight, block.mlp.proj.weight):
                nn.init.normal_(weight, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layers))

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(self, ids, mask=None):
        B, T = ids.shape
        positions = torch.arange(T, device=ids.device)
        x = self.drop(self.tok_emb(ids) + self.pos_emb(positions))
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))


@torch.no_grad()
def generate(model, ids, max_new_tokens: int, temperature: float = 1.0, top_k=None):
    """Append ``max_new_tokens`` sampled tokens to ids [B, T0]; returns [B, T0 + max_new_tokens]."""
    was_training = model.training
    model.eval()
    for _ in range(max_new_tokens):
        context = ids[:, -model.config.max_len:]
        logits = model(context)[:, -1, :] / temperature  # [B, V]
        if top_k is not None and top_k < logits.shape[-1]:
            kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # the k-th largest logit
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = softmax(logits, dim=-1)
        next_id = torch.multinomial(probs, num_samples=1)
        ids = torch.cat([ids, next_id], dim=1)
    model.train(was_training)
    return ids

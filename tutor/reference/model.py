"""The GPT: embeddings, a stack of blocks, a final norm and a language-model head (notebook 07), and the
modern GPT with cached generation (notebook 09)."""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from tutor.reference.attention import KVCache, softmax
from tutor.reference.layers import LayerNorm, ModernBlock, RMSNorm, TransformerBlock


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

    def forward(self, ids, mask=None, positions=None):
        """``ids [B, T] -> logits [B, T, V]``. ``positions`` (``[T]`` or ``[B, T]``, default ``arange(T)``) picks the
        rows of the position table: notebook 08's packed batches restart them at every name."""
        B, T = ids.shape
        if positions is None:
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


# --- 09: a modern GPT (RoPE, RMSNorm, SwiGLU) and cached generation ------------------------


@dataclass
class ModernConfig:
    vocab_size: int = 28
    max_len: int = 16
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 4
    d_hidden: int | None = None  # None: 8/3 * d_model rounded up to a multiple of 8 (176 for 64)
    theta: float = 10000.0


def swiglu_hidden(d_model: int) -> int:
    """8/3 * d_model rounded up to a multiple of 8: SwiGLU's three matrices then hold about as many
    parameters as the GPT's two 4 * d_model ones."""
    return 8 * math.ceil(8 * d_model / 3 / 8)


class ModernGPT(nn.Module):
    """The GPT with today's parts: no position table (RoPE in every attention), RMSNorm, SwiGLU, no biases."""

    def __init__(self, config: ModernConfig):
        super().__init__()
        self.config = config
        d_hidden = config.d_hidden or swiglu_hidden(config.d_model)
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(
            [ModernBlock(config.d_model, config.n_heads, d_hidden, config.theta) for _ in range(config.n_layers)]
        )
        self.ln_f = RMSNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.apply(self._init_weights)
        for block in self.blocks:  # the projections that write into the residual stream
            for weight in (block.attn.out_proj.weight, block.mlp.w2.weight):
                nn.init.normal_(weight, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layers))

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, RMSNorm):
            nn.init.ones_(module.weight)

    def forward(self, ids, positions=None, cache=None):
        B, T = ids.shape
        if positions is None:  # read the cache's length once: every block gets the same positions
            start = cache.length if cache is not None else 0
            positions = torch.arange(start, start + T, device=ids.device)
        x = self.tok_emb(ids)
        for layer, block in enumerate(self.blocks):
            x = block(x, positions, cache, layer)
        return self.head(self.ln_f(x))


@torch.no_grad()
def generate_cached(model, ids, max_new_tokens: int, temperature: float = 1.0, top_k=None):
    """``generate`` with a KVCache: the prompt runs once, then each step feeds only the newest token."""
    T0 = ids.shape[1]
    if T0 + max_new_tokens > model.config.max_len:
        raise ValueError(f"{T0} prompt tokens + {max_new_tokens} new ones exceed max_len = {model.config.max_len}")
    was_training = model.training
    model.eval()
    cache = KVCache(model.config.n_layers)
    logits = model(ids, cache=cache)[:, -1, :]  # the whole prompt in one pass
    for step in range(max_new_tokens):
        logits = logits / temperature
        if top_k is not None and top_k < logits.shape[-1]:
            kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        next_id = torch.multinomial(softmax(logits, dim=-1), num_samples=1)
        ids = torch.cat([ids, next_id], dim=1)
        if step < max_new_tokens - 1:
            logits = model(next_id, cache=cache)[:, -1, :]  # one new position
    model.train(was_training)
    return ids

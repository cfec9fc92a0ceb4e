"""The GPT: embeddings, a stack of blocks, a final norm and a language-model head (notebook 07), and the
modern GPT with cached generation (notebook 09). ``GPTConfig``'s last four fields are the switches that make the
GPT into OpenAI's GPT-2 (``GPTConfig.gpt2()``, notebook 12); by default they keep the course's GPT."""

import math
from dataclasses import dataclass, replace

import torch
import torch.nn as nn

from tutor.reference.attention import KVCache, softmax
from tutor.reference.layers import LayerNorm, ModernBlock, RMSNorm, TransformerBlock

# GPT-2's four sizes (Radford et al. 2019, table 2; Hugging Face's openai-community/gpt2, -medium, -large, -xl):
# all with d_head = 64, a vocabulary of 50,257 tokens and a context of 1,024.
GPT2_SIZES = {
    "small": dict(d_model=768, n_layers=12, n_heads=12),  # 124M parameters
    "medium": dict(d_model=1024, n_layers=24, n_heads=16),  # 355M
    "large": dict(d_model=1280, n_layers=36, n_heads=20),  # 774M
    "xl": dict(d_model=1600, n_layers=48, n_heads=25),  # 1,558M
}


@dataclass
class GPTConfig:
    vocab_size: int = 28
    max_len: int = 16
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 4
    dropout: float = 0.0
    # GPT-2's switches (notebook 12); the defaults are the course's GPT of notebook 07
    attn_bias: bool = False  # biases on the q, k, v and out projections (the MLP has biases either way)
    tie_head: bool = False  # the head shares its weight with tok_emb (one [V, d_model] matrix, used twice)
    gelu_approximate: str = "none"  # "tanh": GPT-2's GELU, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    ln_eps: float = 1e-5  # inside the LayerNorms' square root

    @classmethod
    def gpt2(cls, size: str = "small", **changes) -> "GPTConfig":
        """OpenAI's GPT-2 of ``size`` (``"small"`` is the 124M model; ``"medium"``, ``"large"``, ``"xl"``): its
        sizes from ``GPT2_SIZES``, a vocabulary of 50,257, a context of 1,024, biases in attention, a tied head,
        the tanh GELU and LayerNorm eps 1e-5, no dropout. ``changes`` replace any field (a tiny GPT-2-shaped
        model: ``GPTConfig.gpt2(d_model=64, n_layers=2, n_heads=2)``)."""
        if size not in GPT2_SIZES:
            raise ValueError(f"unknown GPT-2 size {size!r}: one of {', '.join(GPT2_SIZES)}")
        config = cls(vocab_size=50257, max_len=1024, dropout=0.0, attn_bias=True, tie_head=True,
                     gelu_approximate="tanh", ln_eps=1e-5, **GPT2_SIZES[size])
        return replace(config, **changes)


class GPT(nn.Module):
    """A decoder-only transformer that predicts the next character at every position."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        bias, tie = getattr(config, "attn_bias", False), getattr(config, "tie_head", False)
        approximate, eps = getattr(config, "gelu_approximate", "none"), getattr(config, "ln_eps", 1e-5)
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.max_len, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(
            [TransformerBlock(config.d_model, config.n_heads, config.dropout, bias=bias, approximate=approximate,
                              eps=eps) for _ in range(config.n_layers)]
        )
        self.ln_f = LayerNorm(config.d_model, eps)
        # tied, the head's own weight would be thrown away: on the meta device it takes no memory (154 MB for GPT-2)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False, device="meta" if tie else None)
        self.apply(self._init_weights)
        # GPT-2: the projections that write into the residual stream get a smaller std, so the
        # stream's variance does not grow with depth.
        for block in self.blocks:
            for weight in (block.attn.out_proj.weight, block.mlp.proj.weight):
                nn.init.normal_(weight, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layers))
        if tie:  # GPT-2: one matrix embeds the tokens and scores them (named tok_emb.weight, and head.weight)
            self.head.weight = self.tok_emb.weight

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(self, ids, mask=None, positions=None, cache=None):
        """``ids [B, T] -> logits [B, T, V]``. ``positions`` (``[T]`` or ``[B, T]``, default ``arange(T)``) picks the
        rows of the position table: notebook 08's packed batches restart them at every name. With a ``KVCache``
        (notebook 12), ``ids`` continue what the cache holds: positions start at ``cache.length``."""
        B, T = ids.shape
        if positions is None:
            start = cache.length if cache is not None else 0  # read once: every block gets the same positions
            positions = torch.arange(start, start + T, device=ids.device)
        x = self.drop(self.tok_emb(ids) + self.pos_emb(positions))
        for layer, block in enumerate(self.blocks):
            x = block(x, mask) if cache is None else block(x, mask, cache=cache, layer=layer)
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

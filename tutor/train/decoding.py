"""Generation that a GPU is not kept waiting for: a key/value cache of fixed size and one compiled decoding step.

Notebook 09's ``KVCache`` grows by ``torch.cat`` at every token, so every step has new shapes: ``torch.compile`` would
compile again and again, and the step stays hundreds of small kernel launches, each waiting for Python (GPT-2
small's shape, batch 1: 13 ms a token of which 1.3 ms is GPU work, ``benchmarks/gpu_runs``). Here, as in
pytorch-labs/gpt-fast, the cache's buffers are made once at their full length (``max_len`` positions); each step
writes its keys and values at its position (``index_copy_``) and attends over the whole buffer with a mask that
hides the positions not written yet. Every step then has the same shapes, so it compiles once, and
``mode="reduce-overhead"`` records it as a CUDA graph: one launch a token.

It drives the course's ``GPT`` unchanged (notebook 07's model with GPT-2's weights, notebook 12): the model's own
cached attention takes this cache, and the mask passed to the model narrows its causal mask to the positions held.
Greedy decoding gives the tokens of ``generate_cached``; ``tests/test_decoding.py`` checks it.
"""

from __future__ import annotations

import torch


class StaticKVCache:
    """``KVCache``'s interface (``update(layer, k, v)``) over buffers of ``max_len`` positions made once. Before each
    call of the model, ``pos`` (a LongTensor of the positions the new tokens take) says where they are written;
    ``update`` returns the whole buffers, and the mask of ``decode`` hides the positions not yet written."""

    def __init__(self, n_layers: int, batch: int, n_heads: int, max_len: int, d_head: int, *, device, dtype):
        shape = (batch, n_heads, max_len, d_head)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        for buffer in self.keys + self.values:  # a CUDA graph may write them in place: their address never changes
            torch._dynamo.mark_static_address(buffer)
        self.pos = None

    @classmethod
    def for_model(cls, model, batch: int) -> StaticKVCache:
        config, weight = model.config, model.tok_emb.weight
        return cls(config.n_layers, batch, config.n_heads, config.max_len, config.d_model // config.n_heads,
                   device=weight.device, dtype=weight.dtype)

    def update(self, layer: int, k, v):
        self.keys[layer].index_copy_(2, self.pos, k)
        self.values[layer].index_copy_(2, self.pos, v)
        return self.keys[layer], self.values[layer]


def decode(model, cache: StaticKVCache, ids, pos):
    """The logits of the last of ``ids [B, T]``, which take positions ``pos [T]``: written into ``cache``, attending
    over the positions held up to their own."""
    cache.pos = pos
    held = torch.arange(cache.keys[0].shape[-2], device=ids.device)
    mask = (held[None, :] <= pos[:, None])[None]  # [1, T, max_len]: key j is held and not in query i's future
    return model(ids, mask=mask, positions=pos, cache=cache)[:, -1, :]


@torch.no_grad()
def generate_static(model, ids, max_new_tokens: int, *, compile: bool = True, step=None, cache=None):
    """Greedy decoding of ``max_new_tokens`` after ``ids [B, T0]`` with a ``StaticKVCache``: the prompt in one call,
    then one token a call, through ``torch.compile(decode, mode="reduce-overhead", fullgraph=True)`` with ``compile``
    (or ``step``, a compiled ``decode`` kept from an earlier call, with its ``cache``: what was written past the
    prompt is masked until written again). Returns ``[B, T0 + max_new_tokens]``, which must fit ``max_len``."""
    B, T0 = ids.shape
    if T0 + max_new_tokens > model.config.max_len:
        raise ValueError(f"{T0} + {max_new_tokens} tokens do not fit the model's {model.config.max_len} positions")
    was_training = model.training
    model.eval()
    cache = cache if cache is not None else StaticKVCache.for_model(model, B)
    if step is None:
        step = torch.compile(decode, mode="reduce-overhead", fullgraph=True) if compile else decode
    logits = decode(model, cache, ids, torch.arange(T0, device=ids.device))  # the prompt: its own shapes, once
    out = [ids]
    for i in range(max_new_tokens):
        token = logits.argmax(dim=-1, keepdim=True)
        out.append(token)
        if i + 1 < max_new_tokens:
            logits = step(model, cache, token, torch.tensor([T0 + i], device=ids.device)).clone()
    model.train(was_training)
    return torch.cat(out, dim=1)

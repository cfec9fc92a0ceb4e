"""Checks for notebook 09: rotary attention, the key/value cache, the modern block and GPT, and
cached generation."""

import copy
import dataclasses
import functools
import math

import torch
import torch.nn as nn

from tutor import reference as ref
from tutor.checks import beside
from tutor.checks.common import (
    frequencies_close,
    rms_norm_centred,
    rms_norm_without_eps,
    swiglu_gate_on_w3,
    top_k_probs,
)
from tutor.checks.compare import (
    KIND_LABELS,
    KINDS,
    as_kind,
    expect_close,
    expect_kind,
    kind_cases,
    learner_as_kind,
    load_reference_weights,
    reads_values,
)
from tutor.checks.harness import LearnerError, Mismatch, at, build, call, case, check, error_details, salted, seed
from tutor.course import catalog

__all__ = catalog.check_names(__name__)  # this notebook's exercises (tutor.course.catalog)

D, H = 16, 2  # width and heads of the small modules the checks build (d_head = 8)
SMALL = dict(vocab_size=13, max_len=8, d_model=16, n_heads=2, n_layers=2)
LARGE = dict(vocab_size=64, max_len=64, d_model=64, n_heads=4, n_layers=6)

CACHE_HINT = ("with a cache: rotate q and k at `positions` first, then k, v = cache.update(layer, k, v), and let "
              "query i (absolute position start + i) see keys 0 .. start + i: the mask is "
              "torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T), with S = k.shape[-2]")


_randomise = beside.randomise


# --- rotary attention and its classic mistakes ------------------------------------------------


def _rope_halves(x, positions=None, theta=10000.0):
    """RoPE on the two halves (x[:d/2], x[d/2:]) instead of interleaved pairs (GPT-NeoX / Hugging Face Llama)."""
    d = x.shape[-1]
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # interleaved position of each half entry
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(d)
    # pair i of the halves layout is (x[i], x[i + d/2]): move it to (2i, 2i+1), rotate, move back
    return ref.apply_rope(x[..., inverse], positions, theta)[..., perm]


def _rope_exponent_i(x, positions=None, theta=10000.0):
    """A learner's own RoPE whose pair i turns at theta ** (-i / d), i.e. at (sqrt theta) ** (-2i / d)."""
    return ref.apply_rope(x, positions, math.sqrt(theta))


def _rope_exponent_plus(x, positions=None, theta=10000.0):
    """A learner's own RoPE whose pair i turns at theta ** (+2i / d), i.e. at (1 / theta) ** (-2i / d)."""
    return ref.apply_rope(x, positions, 1 / theta)


def _attend(attn, x, positions=None, cache=None, layer=0, *, rope="qk", whole_width=False, rotate=ref.apply_rope,
            offset=True, mask="right", store="rotated", use_cache=True, scale="head"):
    """The reference RotaryAttention forward, or one of the classic mistakes."""
    B, T, C = x.shape
    n_heads = attn.n_heads
    if positions is None:
        start = cache.length if (cache is not None and offset) else 0
        positions = torch.arange(start, start + T)
    q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
    if whole_width:  # rotated across the whole width, before splitting heads
        q, k = rotate(q, positions, attn.theta), rotate(k, positions, attn.theta)
        q, k, v = (ref.split_heads(t, n_heads) for t in (q, k, v))
    else:
        q, k, v = (ref.split_heads(t, n_heads) for t in (q, k, v))
        k_plain = k
        if "q" in rope:
            q = rotate(q, positions, attn.theta)
        if "k" in rope:
            k = rotate(k, positions, attn.theta)
        if "v" in rope:
            v = rotate(v, positions, attn.theta)
        if store == "unrotated":
            k = k_plain
    if cache is not None and use_cache:
        k, v = cache.update(layer, k, v)
        if store == "unrotated":  # rotates what the cache returns with the positions of the new queries
            k = rotate(k, positions, attn.theta)
    S = k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(C if scale == "model" else q.shape[-1])
    if mask == "right" or (mask == "none_with_cache" and cache is None):
        m = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)
    elif mask == "no_offset":
        m = torch.ones(T, S, dtype=torch.bool).tril()
    else:
        m = None
    if m is not None:
        scores = scores.masked_fill(~m, float("-inf"))
    return attn.out_proj(ref.merge_heads(torch.softmax(scores, dim=-1) @ v))


ROTARY_MISTAKES = [
    ("RoPE is applied to the values too; rotate only the queries and the keys (the values carry content, "
     "not position)", dict(rope="qkv")),
    ("RoPE is applied to the queries only; rotate the keys as well, so that q·k depends on the offset",
     dict(rope="q")),
    ("RoPE is applied to the keys only; rotate the queries as well", dict(rope="k")),
    ("RoPE is applied before splitting heads, across the whole width; split first, then rotate each head's "
     "d_head axis: apply_rope(split_heads(q, H), positions)", dict(whole_width=True)),
    ("you rotate the two halves (x[:d/2], x[d/2:]) as in Hugging Face's Llama; this course pairs neighbours "
     "(x0, x1), (x2, x3), ...: use apply_rope from notebook 05", dict(rotate=_rope_halves)),
    ("your RoPE frequencies are theta ** (-i / d); pair i (i = 0 .. d/2 - 1) turns at theta ** (-2i / d), "
     "with d = d_head: use apply_rope from notebook 05 (imported above)", dict(rotate=_rope_exponent_i)),
    ("your RoPE frequencies are theta ** (+2i / d): the exponent lost its minus sign; pair i turns at "
     "theta ** (-2i / d): use apply_rope from notebook 05 (imported above)", dict(rotate=_rope_exponent_plus)),
    ("there is no RoPE: rotate q and k with apply_rope(q, positions, self.theta)", dict(rope="")),
    ("the attention is not causal: mask the keys after each query", dict(mask="none")),
    ("the scores are divided by sqrt(d_model); divide by sqrt(d_head), the width of one head",
     dict(scale="model")),
]


def _rotary_mistakes(attn, x, positions):
    mistakes = [(text, (lambda kw=kw: _attend(attn, x, positions, **kw))) for text, kw in ROTARY_MISTAKES]
    if positions is not None:
        mistakes.append(("the `positions` argument is ignored: rotate at the positions you are given "
                         "(torch.arange(T) only when positions is None)", lambda: _attend(attn, x, None)))
    return mistakes


def _structure_linear(module, names, what):
    for name in names:
        sub = getattr(module, name, None)
        if not isinstance(sub, nn.Linear):
            raise Mismatch(f"your {what} has no nn.Linear `{name}`",
                           hint=f"self.{name} = nn.Linear(d_model, d_model, bias=False)")


def _run_chunks(fn, ref_fn, x, chunks, cache, ref_cache, what, **kw):
    """Feed x chunk by chunk through the learner's and the reference's attention with a cache."""
    got, expected = [], []
    for a, b in chunks:
        out = call(fn, x[:, a:b], cache=cache, what=f"{what}(x[:, {a}:{b}], cache=cache{_kw(kw)})", **kw)
        if not isinstance(out, torch.Tensor) or out.shape != (x.shape[0], b - a, x.shape[2]):
            expect_close(out, torch.zeros(x.shape[0], b - a, x.shape[2]), f"the output for x[:, {a}:{b}]")
        got.append(out)
        with torch.no_grad():
            expected.append(ref_fn(x[:, a:b], cache=ref_cache, **kw))
    return torch.cat(got, dim=1), torch.cat(expected, dim=1)


def _kw(kw):
    return "".join(f", {k}={v}" for k, v in kw.items())


def _expect_rotated_in_cache(held, attn, x, positions, layer):
    """The cache of layer ``layer`` holds the rotated keys of x (at ``positions``)."""
    k_plain = ref.split_heads(attn.k_proj(x), attn.n_heads)
    k_rot = ref.apply_rope(k_plain, positions, attn.theta)
    if held is None:
        raise Mismatch(f"the cache holds nothing for layer {layer} after the calls",
                       hint="call k, v = cache.update(layer, k, v) in forward, with the `layer` you were given")
    if isinstance(held, torch.Tensor) and held.shape == k_rot.shape:
        if torch.allclose(held, k_rot, atol=1e-5, rtol=1e-4):
            return
        if torch.allclose(held, k_plain, atol=1e-5, rtol=1e-4):
            raise Mismatch("the cache holds the keys before RoPE (unrotated)",
                           ["the cache should hold each key rotated at its own position, once: rotating the whole "
                            "cache again at every step repeats work, and rotating it at the new positions is wrong"],
                           hint="rotate k first, then store it: k = apply_rope(k, positions, theta); "
                                "k, v = cache.update(layer, k, v)")
    raise Mismatch("the cache does not hold the rotated keys of every position seen",
                   [f"expected keys of shape {tuple(k_rot.shape)}, got "
                    f"{tuple(held.shape) if isinstance(held, torch.Tensor) else type(held).__name__}"],
                   hint="update the cache once per call with this call's rotated keys and values")


def _position_cases():
    """(label, x, positions) of the forward cases of RotaryAttention and ModernBlock: default positions, T = 1, and
    positions that are not 0..T-1."""
    return [("x [2, 6, 16]", torch.randn(2, 6, D), None),
            ("x [3, 1, 16] (T = 1)", torch.randn(3, 1, D), None),
            ("x [2, 6, 16], positions = [0, 2, 4, 6, 8, 10]", torch.randn(2, 6, D), torch.arange(0, 12, 2))]


def _forward_at(module, name, x, positions):
    """``({"positions": positions} or {}, module(x, **that))``, the call labelled as the learner would write it."""
    kw = {} if positions is None else {"positions": positions}
    return kw, call(module, x, what=f"{name}(x{', positions' if kw else ''})", **kw)


@check
def RotaryAttention(cls):
    seed(0)
    with case(f"RotaryAttention({D}, {H})"):
        attn = build(cls, D, H, what=f"RotaryAttention({D}, {H})")
        _structure_linear(attn, ["q_proj", "k_proj", "v_proj", "out_proj"], "RotaryAttention")
        reference = _randomise(ref.RotaryAttention(D, H))
        load_reference_weights(attn, reference, "your RotaryAttention")
    for label, x, positions in _position_cases():
        with case(label):
            kw, got = _forward_at(attn, "attn", x, positions)
            with torch.no_grad():
                expect_close(got, reference(x, **kw), "the output of forward", atol=1e-5, rtol=1e-4,
                             mistakes=_rotary_mistakes(reference, x, positions))
    with case(f"RotaryAttention({D}, {H}, theta=100.0)"):
        attn100 = build(cls, D, H, theta=100.0, what=f"RotaryAttention({D}, {H}, theta=100.0)")
        reference100 = _randomise(ref.RotaryAttention(D, H, theta=100.0))
        load_reference_weights(attn100, reference100, "your RotaryAttention")
        x = torch.randn(2, 6, D)
        default_theta = ref.RotaryAttention(D, H)
        default_theta.load_state_dict(reference100.state_dict())
        with torch.no_grad():
            expect_close(call(attn100, x, what="attn(x)"), reference100(x), "the output of forward", atol=1e-5,
                         rtol=1e-4, mistakes=[("theta is ignored: store it (self.theta = theta) and pass it to "
                                               "apply_rope(q, positions, self.theta)", lambda: default_theta(x))])
    x = torch.randn(2, 7, D)
    chunks = [(0, 4), (4, 5), (5, 7)]
    label = "a KVCache(1): attn(x[:, 0:4], cache=cache), then x[:, 4:5], then x[:, 5:7]"
    with case(label, hint_on_error=CACHE_HINT):
        cache, ref_cache = at(ref.KVCache)(1), ref.KVCache(1)
        with torch.no_grad():
            got, expected = _run_chunks(attn, reference, x, chunks, cache, ref_cache, "attn")
            full = reference(x)

            def chunked(**kw):
                c = ref.KVCache(1)
                return torch.cat([_attend(reference, x[:, a:b], cache=c, **kw) for a, b in chunks], dim=1)

            mistakes = [
                ("the positions do not start at the cache's length: with a cache holding `start` positions, the "
                 "new ones are torch.arange(start, start + T) with start = cache.length",
                 lambda: chunked(offset=False)),
                ("the causal mask ignores the keys already in the cache: F.scaled_dot_product_attention's "
                 "is_causal=True (like a plain tril(ones(T, S))) aligns it top-left, so query i sees keys 0 .. i, "
                 "right only when S = T; with a cache query i sits at position start + i and sees keys "
                 "0 .. start + i: pass attn_mask=torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T) instead",
                 lambda: chunked(mask="no_offset")),
                ("there is no causal mask when a cache is given; a call with several new tokens (the prompt) still "
                 "needs it: mask = torch.ones(T, S).tril(diagonal=S - T)", lambda: chunked(mask="none_with_cache")),
                ("the cache is not used: attend over k, v = cache.update(layer, k, v), every key held",
                 lambda: chunked(use_cache=False)),
            ] + [(text, (lambda kw=kw: chunked(**kw))) for text, kw in ROTARY_MISTAKES]
            expect_close(got, expected, "the outputs of the three calls, concatenated along T", atol=1e-5,
                         rtol=1e-4, mistakes=mistakes, hint=CACHE_HINT)
            expect_close(got, full, "the cached outputs compared with one call on all of x", atol=1e-5, rtol=1e-4)
            _expect_rotated_in_cache(cache.keys[0], reference, x, torch.arange(7), 0)
    label = "a KVCache(2), layer=1, explicit positions: x[:, 0:3], then x[:, 3:4]"
    with case(label, hint_on_error=CACHE_HINT):
        cache, ref_cache = at(ref.KVCache)(2), ref.KVCache(2)
        x = torch.randn(1, 4, D)
        with torch.no_grad():
            got = []
            for a, b in [(0, 3), (3, 4)]:
                got.append(call(attn, x[:, a:b], positions=torch.arange(a, b), cache=cache, layer=1,
                                what=f"attn(x[:, {a}:{b}], positions=torch.arange({a}, {b}), cache=cache, layer=1)"))
            if cache.keys[1] is None and cache.keys[0] is not None:
                raise Mismatch("the keys went to layer 0 of the cache although layer=1",
                               hint="pass the layer you are given: cache.update(layer, k, v)")
            _expect_rotated_in_cache(cache.keys[1], reference, x, torch.arange(4), 1)
            if not isinstance(got[0], torch.Tensor) or not isinstance(got[1], torch.Tensor):
                expect_close(got[0], reference(x[:, :3]), "the output of forward")
            expect_close(torch.cat(got, 1), reference(x), "the outputs with layer=1, concatenated along T",
                         atol=1e-5, rtol=1e-4, hint=CACHE_HINT)
    with torch.no_grad():
        kind_cases(attn, (torch.randn(2, 6, D),), reference, "attn(x) with x [2, 6, 16]", module=True)
        kind_cases(attn, _with_cache(torch.randn(2, 6, D), 1, 0), reference,
                   "attn(x, None, cache, 0) with x [2, 6, 16] and an empty KVCache(1)", module=True)
    return "3 inputs, theta, a cache fed in 3 chunks, layer=1, float64 and meta"


def _with_cache(x, n_layers, *rest):
    """``kind_cases``' inputs for ``forward(x, None, cache, *rest)``: x in the kind, a fresh cache on each side."""
    return lambda kind: ((as_kind(x, kind), None, at(ref.KVCache)(n_layers), *rest),
                         (as_kind(x, kind), None, ref.KVCache(n_layers), *rest))


# --- the cache ------------------------------------------------------------------------------


def _length(cache, what):
    value = getattr(cache, "length", None)
    if callable(value):
        raise Mismatch("`length` is a method; it should be a property",
                       hint="decorate it with @property, so that cache.length (no parentheses) is the number")
    if value is None:
        raise Mismatch("your KVCache has no `length`",
                       hint="add a property: @property def length(self): return the positions held by every layer")
    try:
        return int(value)
    except Exception:  # noqa: BLE001 - learner's length: whatever int() raises, the message is the same
        raise Mismatch(f"cache.length should be an int, got {type(value).__name__}") from None


def _update(cache, layer, k, v):
    try:
        out = call(cache.update, layer, k, v, what=f"cache.update({layer}, k [{', '.join(map(str, k.shape))}], v)")
    except LearnerError as e:
        if "Sizes of tensors must match" in str(e.error):
            e.hint = ("torch.cat joins the old and the new keys along the wrong axis: k and v are [B, H, T, d_head], "
                      "and the new positions go along the time axis: torch.cat([old, new], dim=-2)")
        raise
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise Mismatch("update should return a pair (k_all, v_all)",
                       [f"got {type(out).__name__}"], hint="return self.keys[layer], self.values[layer]")
    return out


@check
def KVCache(cls):
    seed(0)
    k1, v1 = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    k1b, v1b = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    k2, v2 = torch.randn(2, 3, 1, 5), torch.randn(2, 3, 1, 5)
    with case("a fresh KVCache(2)"):
        cache = build_cache(cls, 2)
        n = _length(cache, "a fresh cache")
        if n != 0:
            raise Mismatch(f"a fresh cache has length {n}, expected 0")
    with case("update(0, k, v) with 4 positions [2, 3, 4, 5]"):
        k_all, v_all = _update(cache, 0, k1, v1)
        expect_close(k_all, k1, "k_all", atol=0, rtol=0)
        expect_close(v_all, v1, "v_all", atol=0, rtol=0,
                     mistakes=[("update returns the keys twice: return (keys, values)", lambda: k1)])
    with case("then update(1, k, v) with 4 other positions"):
        k_all, v_all = _update(cache, 1, k1b, v1b)
        expect_close(k_all, k1b, "k_all of layer 1", atol=0, rtol=0, mistakes=[
            ("the layers share one list: [[]] * n_layers (or [x] * n) repeats the *same* list; build one per "
             "layer: [[] for _ in range(n_layers)]", lambda: torch.cat([k1, k1b], dim=-2)),
            ("layer 1 returns layer 0's keys: index the storage with `layer`", lambda: k1)])
        n = _length(cache, "")
        if n != 4:
            hint = ("length counts calls to update; count positions: keys[layer].shape[-2]" if n in (1, 2) else
                    "length is the number of positions held by every layer: the least over layers of keys.shape[-2]")
            raise Mismatch(f"cache.length is {n} with 4 positions in both layers, expected 4", hint=hint)
    with case("then update(0, k, v) with 1 new position"):
        k_all, v_all = _update(cache, 0, k2, v2)
        expect_close(k_all, torch.cat([k1, k2], dim=-2), "k_all of layer 0", atol=0, rtol=0, mistakes=[
            ("update returns only the new keys (or keeps only them): append them to the old ones and return "
             "everything held for the layer, torch.cat([old, new], dim=-2)", lambda: k2),
            ("the new keys are put in front; append them at the end: torch.cat([old, new], dim=-2)",
             lambda: torch.cat([k2, k1], dim=-2)),
            ("the layers share one list: build one list per layer, [[] for _ in range(n_layers)]",
             lambda: torch.cat([k1, k1b, k2], dim=-2)),
        ])
        expect_close(v_all, torch.cat([v1, v2], dim=-2), "v_all of layer 0", atol=0, rtol=0)
        n = _length(cache, "")
        if n != 4:
            raise Mismatch(f"cache.length is {n} with 5 positions in layer 0 and 4 in layer 1, expected 4",
                           hint="length is the least over layers (layer 1 has not been updated yet in this "
                                "forward pass)" if n == 5 else "length counts positions, the least over layers")
        _update(cache, 1, k2, v2)
        if _length(cache, "") != 5:
            raise Mismatch(f"cache.length is {_length(cache, '')} with 5 positions in every layer, expected 5")
    with case("a second KVCache(2), created after the first"):
        other = build_cache(cls, 2)
        n = _length(other, "")
        if n != 0:
            raise Mismatch(f"a new cache already has length {n}: it shares its storage with the first",
                           hint="create the lists in __init__ (self.keys = [None] * n_layers); a list written in "
                                "the class body is shared by every instance")
        k_all, _ = _update(other, 0, k2, v2)
        expect_close(k_all, k2, "k_all of a new cache", atol=0, rtol=0,
                     hint="create the storage in __init__, so that every cache has its own")
    with case("a third KVCache(2): update(0, k, v) with 4 positions, layer 1 not yet"):
        third = build_cache(cls, 2)
        _update(third, 0, k1, v1)
        n = _length(third, "")
        if n != 0:
            raise Mismatch(f"cache.length is {n} after updating layer 0 only; expected 0",
                           ["layer 1 holds nothing yet, and length is the number of positions held by *every* "
                            "layer: the least over layers"],
                           hint="return min(the length of each layer's keys, 0 for a layer with none); "
                                "ModernGPT reads it before its blocks run")
    for kind in KINDS:  # the stored keys follow the new ones: a buffer made on the CPU in float32 does not
        with case(f"a KVCache(1) fed k, v of 4 then 1 positions {KIND_LABELS[kind]}"):
            kinded = build_cache(cls, 1)
            for k, v in ((k1, v1), (k2, v2)):
                k, v = as_kind(k, kind), as_kind(v, kind)
                try:
                    out = call(at(beside.like_a_gpu), kinded.update, 0, k, v,
                               what=f"cache.update(0, k, v) with k, v {KIND_LABELS[kind]}")
                except LearnerError as e:
                    if kind == "meta" and reads_values(e.error):
                        break
                    raise
                if not isinstance(out, (tuple, list)) or len(out) != 2:
                    raise Mismatch("update should return a pair (k_all, v_all)", [f"got {type(out).__name__}"])
            else:
                held = torch.cat([as_kind(k1, kind), as_kind(k2, kind)], dim=-2)
                expect_kind(out[0], held, f"k_all {KIND_LABELS[kind]}", kind)
                expect_kind(out[1], torch.cat([as_kind(v1, kind), as_kind(v2, kind)], dim=-2),
                            f"v_all {KIND_LABELS[kind]}", kind)
    return "appending, per-layer storage, length as the least over layers, independent caches, float64 and meta"


def build_cache(cls, n_layers):
    cache = call(cls, n_layers, what=f"KVCache({n_layers})")
    if not hasattr(cache, "update"):
        raise Mismatch("your KVCache has no `update` method", hint="def update(self, layer, k, v): ...")
    return cache


# --- the modern block -------------------------------------------------------------------------


def _block_forward(block, x, positions=None, cache=None, layer=0, *, variant="right"):
    """The reference ModernBlock, or one of the classic mistakes."""
    attn = lambda h: block.attn(h, positions, cache, layer)  # noqa: E731
    if variant == "normalised_stream":
        x = block.ln1(x)
        x = x + block.attn(x, positions, cache, layer)
        x = block.ln2(x)
        return x + block.mlp(x)
    if variant == "post_norm":
        x = block.ln1(x + attn(x))
        return block.ln2(x + block.mlp(x))
    if variant == "no_ln2":
        x = x + attn(block.ln1(x))
        return x + block.mlp(x)
    if variant == "ln1_twice":
        x = x + attn(block.ln1(x))
        return x + block.mlp(block.ln1(x))
    if variant == "parallel":
        h = block.ln1(x)
        return x + attn(h) + block.mlp(block.ln2(x))
    if variant == "no_positions":
        x = x + block.attn(block.ln1(x))
        return x + block.mlp(block.ln2(x))
    x = x + attn(block.ln1(x))
    return x + block.mlp(block.ln2(x))


BLOCK_MISTAKES = [
    ("the residual stream itself is normalised (x = ln1(x); x = x + attn(x)); normalise only the input of each "
     "branch: x = x + attn(ln1(x))", "normalised_stream"),
    ("this is a post-norm block (ln(x + attn(x))); the modern block is pre-norm: x = x + attn(ln1(x))", "post_norm"),
    ("ln2 is missing: x = x + mlp(ln2(x))", "no_ln2"),
    ("ln1 is used twice; the MLP branch has its own norm: x = x + mlp(ln2(x))", "ln1_twice"),
    ("attention and MLP run in parallel on the same x; apply them one after the other", "parallel"),
    ("`positions` (and the cache) are not passed on to attn: self.attn(self.ln1(x), positions, cache, layer)",
     "no_positions"),
]


def _norm_forward(wrong, **kw):
    """A forward ``(norm, x)`` for an RMSNorm module from a wrong formula of ``checks.common`` on (x, weight, eps)."""
    return lambda norm, x: wrong(x, norm.weight, norm.eps, **kw)


OWN_NORM = " (or use RMSNorm from tutor.reference, imported above)"
OWN_PARTS = [  # a learner's own RMSNorm or SwiGLU with a classic mistake: (cause, part, its forward)
    ("your RMSNorm has no eps: divide by torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps), "
     "eps = 1e-5" + OWN_NORM, ref.RMSNorm, _norm_forward(rms_norm_without_eps)),
    ("your RMSNorm subtracts the mean (that is LayerNorm): RMSNorm divides x itself by its root mean square, "
     "torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)" + OWN_NORM, ref.RMSNorm, _norm_forward(rms_norm_centred)),
    ("your RMSNorm subtracts the mean (that is LayerNorm, here with torch.var's unbiased variance): RMSNorm "
     "divides x itself by its root mean square" + OWN_NORM, ref.RMSNorm,
     _norm_forward(rms_norm_centred, unbiased=True)),
    ("your SwiGLU gates the wrong branch: SiLU goes on w1(x), the gate, and w3(x) is multiplied in as it is: "
     "w2(silu(w1(x)) * w3(x)) (or use SwiGLU from tutor.reference, imported above)", ref.SwiGLU,
     swiglu_gate_on_w3),
]


def _with_own(module, part, forward, only=None):
    """A copy of the reference ``module`` whose every ``part`` submodule (or only the one named ``only``)
    runs ``forward`` instead of its own."""
    other = copy.deepcopy(module)
    for name, sub in other.named_modules():
        if isinstance(sub, part) and only in (None, name):
            sub.forward = functools.partial(forward, sub)
    return other


def _own_part_mistakes(reference, run, only=(None,)):
    """The classic mistakes of a learner's own RMSNorm and SwiGLU in ``reference``, as ``run(variant)`` gives them;
    ``only`` also tries each norm mistake in one named part alone (e.g. "ln_f")."""
    return [(text, (lambda p=part, f=forward, o=o: run(_with_own(reference, p, f, o))))
            for text, part, forward in OWN_PARTS for o in (only if part is ref.RMSNorm else (None,))]




THETA = 100.0  # a theta far from the default 10000, so that a block or model that drops it is seen at once
BLOCK_THETA_HINT = ("pass theta on to the attention: self.attn = RotaryAttention(d_model, n_heads, theta) "
                    "(not the default 10000)")
GPT_THETA_HINT = ("pass config.theta on to every block: ModernBlock(config.d_model, config.n_heads, d_hidden, "
                  "config.theta), and the block passes it to RotaryAttention")


def _expect_theta(module, expected, what, hint):
    """A stored ``theta`` (``attn.theta``) that is a number and not ``expected`` is named before any comparison."""
    got = getattr(getattr(module, "attn", None), "theta", None)
    if isinstance(got, (int, float)) and not isinstance(got, bool) and float(got) != expected:
        raise Mismatch(f"{what}.attn.theta is {got:g}, expected {expected:g}: theta is not passed on",
                       hint=hint)


def _block_theta(cls):
    label = f"ModernBlock({D}, {H}, 24, theta={THETA:g})"
    with case(label):
        block = build(cls, D, H, 24, theta=THETA, what=label)
        _expect_theta(block, THETA, "block", BLOCK_THETA_HINT)
        reference = _randomise(ref.ModernBlock(D, H, 24, theta=THETA), seed=1)
        load_reference_weights(block, reference, "your ModernBlock")
        default_theta = ref.ModernBlock(D, H, 24)
        default_theta.load_state_dict(reference.state_dict())
        x = torch.randn(2, 6, D)
        got = call(block, x, what="block(x)")
        with torch.no_grad():
            expect_close(got, reference(x), "the output of forward", atol=1e-5, rtol=1e-4, mistakes=[
                (f"theta is ignored: the attention rotates with theta = 10000, not {THETA:g}; " + BLOCK_THETA_HINT,
                 lambda: default_theta(x))])


@check
def ModernBlock(cls):
    seed(0)
    label = f"ModernBlock({D}, {H}, 24)"
    with case(label):
        block = build(cls, D, H, 24, what=label)
        for name, want in [("ln1", f"RMSNorm({D})"), ("attn", f"RotaryAttention({D}, {H}, theta)"),
                           ("ln2", f"RMSNorm({D})"), ("mlp", f"SwiGLU({D}, d_hidden)")]:
            if getattr(block, name, None) is None:
                raise Mismatch(f"your ModernBlock has no attribute `{name}`", hint=f"self.{name} = {want}")
        for name in ("ln1", "ln2"):
            if isinstance(getattr(block, name), (ref.LayerNorm, nn.LayerNorm)) or hasattr(getattr(block, name), "bias"):
                raise Mismatch(f"`{name}` is a LayerNorm; the modern block uses RMSNorm",
                               ["RMSNorm divides by the root mean square only: no mean, no bias"],
                               hint=f"self.{name} = RMSNorm(d_model)")
        if hasattr(block.mlp, "fc") or not hasattr(block.mlp, "w1"):
            raise Mismatch("`mlp` is not a SwiGLU", ["the modern block's feed-forward is w2(silu(w1 x) * w3 x)"],
                           hint="self.mlp = SwiGLU(d_model, d_hidden)")
        reference = _randomise(ref.ModernBlock(D, H, 24))
        load_reference_weights(block, reference, "your ModernBlock")
    for label, x, positions in _position_cases():
        with case(label):
            kw, got = _forward_at(block, "block", x, positions)
            with torch.no_grad():
                mistakes = [(text, (lambda v=v: _block_forward(reference, x, positions, variant=v)))
                            for text, v in BLOCK_MISTAKES]
                mistakes += _own_part_mistakes(reference, lambda variant: variant(x, **kw))
                expect_close(got, reference(x, **kw), "the output of forward", atol=1e-5, rtol=1e-4,
                             mistakes=mistakes)
    _block_theta(cls)
    with case("a KVCache(2), layer=1: x[:, 0:4] at positions 0..3, then x[:, 4:5] at position 4"):
        cache, ref_cache = at(ref.KVCache)(2), ref.KVCache(2)
        x = torch.randn(2, 5, D)
        with torch.no_grad():
            got = [call(block, x[:, a:b], positions=torch.arange(a, b), cache=cache, layer=1,
                        what=f"block(x[:, {a}:{b}], positions=torch.arange({a}, {b}), cache=cache, layer=1)")
                   for a, b in [(0, 4), (4, 5)]]
            if cache.keys[1] is None:
                if cache.keys[0] is not None:
                    raise Mismatch("the keys went to layer 0 of the cache although layer=1",
                                   hint="pass `layer` on: self.attn(self.ln1(x), positions, cache, layer)")
                raise Mismatch("the cache is empty after the calls: it does not reach the attention",
                               hint="pass everything on: self.attn(self.ln1(x), positions, cache, layer)")
            expected = [reference(x[:, a:b], torch.arange(a, b), ref_cache, 1) for a, b in [(0, 4), (4, 5)]]
            for (a, b), g, e in zip([(0, 4), (4, 5)], got, expected):
                expect_close(g, e, f"the output for x[:, {a}:{b}]", atol=1e-5, rtol=1e-4,
                             hint="pass positions, cache and layer on to attn unchanged")
    with torch.no_grad():
        kind_cases(block, (torch.randn(2, 6, D),), reference, "block(x) with x [2, 6, 16]", module=True)
    return "3 inputs, theta, a cache at layer 1, float64 and meta"


# --- the modern GPT -----------------------------------------------------------------------------


def _gpt_forward(model, ids, positions=None, cache=None, *, final_norm=True, scale_emb=False, offset=True,
                 same_layer=False):
    """The reference ModernGPT forward pass, or one of the classic mistakes."""
    T = ids.shape[-1]
    if positions is None:
        start = cache.length if (cache is not None and offset) else 0
        positions = torch.arange(start, start + T)
    x = model.tok_emb(ids)
    if scale_emb:
        x = x * math.sqrt(x.shape[-1])
    for i, block in enumerate(model.blocks):
        x = block(x, positions, cache, 0 if same_layer else i)
    if final_norm:
        x = model.ln_f(x)
    return model.head(x)


GPT_MISTAKES = [
    ("the final RMSNorm is missing: apply self.ln_f to the output of the last block, before the head",
     dict(final_norm=False)),
    ("the token embeddings are multiplied by sqrt(d_model); add nothing, scale nothing: x = self.tok_emb(ids)",
     dict(scale_emb=True)),
]


def _build_gpt(cls, config, what):
    """The learner's ModernGPT(config), checked to leave ``config`` as it was and to have the asked structure."""
    before = dataclasses.replace(config)
    model = build(cls, config, what=what)
    changed = [f"config.{f.name} was {getattr(before, f.name)!r}, is now {getattr(config, f.name)!r}"
               for f in dataclasses.fields(config) if getattr(config, f.name) != getattr(before, f.name)]
    if changed:
        raise Mismatch(f"{what} changed the config it was given", changed,
                       hint="do not write into it (the caller may build other models from it): store it unchanged, "
                            "self.config = config, and resolve d_hidden in a local variable, "
                            "d_hidden = config.d_hidden or ...")
    _modern_structure(model, config)
    return model


def _modern_structure(model, config):
    stored = getattr(model, "config", None)
    if stored is None:
        raise Mismatch("your ModernGPT does not store its config",
                       hint="self.config = config (generate_cached reads it)")
    if stored is not config and stored != config:
        raise Mismatch("model.config is not the config you were given", [f"expected {config}", f"got      {stored}"],
                       hint="store it unchanged: self.config = config (resolve d_hidden in a local variable)")
    for name in ("pos_emb", "wpe", "position_embedding", "pos"):
        if isinstance(getattr(model, name, None), (nn.Embedding, nn.Parameter, nn.Module)):
            raise Mismatch(f"your ModernGPT still has a learned position table (`{name}`)",
                           ["RoPE puts the positions inside every attention: the model needs no position table"],
                           hint=f"remove self.{name}; forward starts with x = self.tok_emb(ids)")
    if any("pos" in n for n, _ in model.named_parameters()):
        name = next(n for n, _ in model.named_parameters() if "pos" in n)
        raise Mismatch(f"your ModernGPT still has a learned position table (`{name}`)",
                       hint="remove it: RoPE inside the attention replaces it")
    if not isinstance(getattr(model, "tok_emb", None), nn.Embedding):
        raise Mismatch("your ModernGPT has no nn.Embedding `tok_emb`",
                       hint="self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)")
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList):
        raise Mismatch("`blocks` should be an nn.ModuleList of ModernBlock",
                       hint="self.blocks = nn.ModuleList([ModernBlock(...) for _ in range(config.n_layers)]); "
                            "nn.Sequential cannot pass positions and the cache")
    if len(blocks) != config.n_layers:
        raise Mismatch(f"your ModernGPT has {len(blocks)} blocks, expected config.n_layers = {config.n_layers}")
    if getattr(model, "ln_f", None) is None:
        raise Mismatch("your ModernGPT has no `ln_f`",
                       hint="self.ln_f = RMSNorm(config.d_model), applied after the last block")
    if isinstance(model.ln_f, (ref.LayerNorm, nn.LayerNorm)) or hasattr(model.ln_f, "bias"):
        raise Mismatch("`ln_f` is a LayerNorm; the modern GPT uses RMSNorm", hint="self.ln_f = RMSNorm(config.d_model)")
    head = getattr(model, "head", None)
    if not isinstance(head, nn.Linear):
        raise Mismatch("your ModernGPT has no nn.Linear `head`",
                       hint="self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)")
    if at(beside.is_tied)(model):
        raise Mismatch("the head shares its weight with tok_emb (weight tying)",
                       hint="keep self.head = nn.Linear(d_model, vocab_size, bias=False) separate")
    expected = config.d_hidden or ref.swiglu_hidden(config.d_model)
    w1 = getattr(getattr(blocks[0], "mlp", None), "w1", None)
    if isinstance(w1, nn.Linear) and w1.out_features != expected:
        if config.d_hidden is None:
            hint = (f"d_hidden=None means 8/3 * d_model rounded UP to a multiple of 8: "
                    f"8 * math.ceil(8 * {config.d_model} / 3 / 8) = {expected}")
            if w1.out_features == 4 * config.d_model:
                hint = f"SwiGLU does not use the MLP's 4 * d_model; {hint}"
        else:
            hint = f"use config.d_hidden = {config.d_hidden} when it is given"
        raise Mismatch(f"the SwiGLU has {w1.out_features} hidden units, expected {expected}", hint=hint)


@check
def ModernGPT(cls):
    seed(0)
    config = ref.ModernConfig(**SMALL)
    with case("ModernGPT(ModernConfig(vocab_size=13, max_len=8, d_model=16, n_heads=2, n_layers=2))"):
        model = _build_gpt(cls, config, "ModernGPT(config)")
        reference = _randomise(ref.ModernGPT(config))
        load_reference_weights(model, reference, "your ModernGPT")
    V, M = config.vocab_size, config.max_len
    cases = [(f"ids [3, {M}]", torch.randint(0, V, (3, M)), None),
             ("ids [2, 5]", torch.randint(0, V, (2, 5)), None),
             ("ids [4, 1] (T = 1)", torch.randint(0, V, (4, 1)), None),
             ("ids [2, 5], positions = [0, 3, 6, 9, 12]", torch.randint(0, V, (2, 5)), torch.arange(0, 15, 3))]
    for label, ids, positions in cases:
        with case(label):
            kw = {} if positions is None else {"positions": positions}
            got = call(model, ids, what=f"model(ids{', positions' if kw else ''})", **kw)
            with torch.no_grad():
                mistakes = [(t, (lambda k=k: _gpt_forward(reference, ids, positions, **k))) for t, k in GPT_MISTAKES]
                if positions is not None:
                    mistakes.append(("`positions` is not passed on to the blocks: block(x, positions, cache, layer)",
                                     lambda: _gpt_forward(reference, ids)))
                mistakes += _own_part_mistakes(reference, lambda variant: variant(ids, **kw), only=(None, "ln_f"))
                expect_close(got, reference(ids, **kw), "the logits", atol=1e-4, rtol=1e-4, mistakes=mistakes)
    with case("a KVCache: model(ids[:, :5], cache=cache), then ids[:, 5:6], ids[:, 6:7], ids[:, 7:8]"):
        ids = torch.randint(0, V, (2, M))
        chunks = [(0, 5), (5, 6), (6, 7), (7, 8)]
        cache = at(ref.KVCache)(config.n_layers)
        with torch.no_grad():
            got = []
            for a, b in chunks:
                out = call(model, ids[:, a:b], cache=cache, what=f"model(ids[:, {a}:{b}], cache=cache)")
                if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, b - a, V):
                    expect_close(out, torch.zeros(2, b - a, V), f"the logits for ids[:, {a}:{b}]")
                got.append(out)
            got = torch.cat(got, dim=1)
            held = [k.shape[-2] if isinstance(k, torch.Tensor) else 0 for k in cache.keys]
            if held != [M] * config.n_layers:
                hint = "pass the cache and each block's index on: for layer, block in enumerate(self.blocks): " \
                       "x = block(x, positions, cache, layer)"
                if held[0] > M:
                    hint = "every block writes to layer 0: " + hint
                raise Mismatch("the cache does not hold every position in every layer",
                               [f"after {M} positions the layers hold {held}"], hint=hint)

            def chunked(**kw):
                c = ref.KVCache(config.n_layers)
                return torch.cat([_gpt_forward(reference, ids[:, a:b], cache=c, **kw) for a, b in chunks], dim=1)

            mistakes = [("the positions do not start at the cache's length: read start = cache.length once, "
                         "before the blocks, and use positions = torch.arange(start, start + T)",
                         lambda: chunked(offset=False))]
            mistakes += [(t, (lambda k=k: chunked(**k))) for t, k in GPT_MISTAKES]
            expect_close(got, reference(ids), "the cached logits compared with one pass over all 8 tokens",
                         atol=1e-4, rtol=1e-4, mistakes=mistakes,
                         hint="read start = cache.length once, before the blocks run, and pass the same positions "
                              "to every block")
    with case("ModernConfig(..., d_hidden=40)"):
        config40 = ref.ModernConfig(**{**SMALL, "d_hidden": 40})
        _build_gpt(cls, config40, "ModernGPT(ModernConfig(..., d_hidden=40))")
    _gpt_theta(cls)
    _init_statistics(cls)
    with torch.no_grad():
        kind_cases(model, (torch.randint(0, V, (2, 5)),), reference, "model(ids) with ids [2, 5]", module=True)
        kind_cases(model, _with_cache(torch.randint(0, V, (2, 5)), config.n_layers), reference,
                   "model(ids, None, cache) with ids [2, 5] and an empty KVCache", module=True,
                   atol=1e-4, rtol=1e-4)
    return "4 inputs, a cache fed in 4 calls, d_hidden, theta, initialisation statistics, float64 and meta"


def _gpt_theta(cls):
    config = ref.ModernConfig(**{**SMALL, "theta": THETA})
    with case(f"ModernConfig(..., theta={THETA:g})"):
        model = _build_gpt(cls, config, f"ModernGPT(ModernConfig(..., theta={THETA:g}))")
        for i, block in enumerate(model.blocks):
            _expect_theta(block, THETA, f"blocks[{i}]", GPT_THETA_HINT)
        reference = _randomise(ref.ModernGPT(config), seed=2)
        load_reference_weights(model, reference, "your ModernGPT")
        default_theta = ref.ModernGPT(ref.ModernConfig(**SMALL))
        default_theta.load_state_dict(reference.state_dict())
        ids = torch.randint(0, config.vocab_size, (2, config.max_len))
        got = call(model, ids, what="model(ids)")
        with torch.no_grad():
            expect_close(got, reference(ids), "the logits", atol=1e-4, rtol=1e-4, mistakes=[
                (f"config.theta is ignored: the blocks rotate with theta = 10000, not {THETA:g}; " + GPT_THETA_HINT,
                 lambda: default_theta(ids))])


def _init_statistics(cls):
    config = ref.ModernConfig(**LARGE)
    with case("the initialisation, ModernConfig(vocab_size=64, max_len=64, d_model=64, n_heads=4, n_layers=6)"):
        model = _build_gpt(cls, config, "ModernGPT(config)")
        scaled = 0.02 / math.sqrt(2 * config.n_layers)
        params = sorted(model.named_parameters(), key=lambda item: 0 if item[0].startswith(("tok_emb", "head")) else 1)
        for name, p in params:
            w = p.detach().float()
            if p.dim() == 1:
                if not torch.all(w == 1):
                    raise Mismatch(f"`{name}` should start at 1 (an RMSNorm weight)", [f"got mean {w.mean():.4g}"],
                                   hint="leave RMSNorm weights at 1: your init loop may have re-drawn them")
                continue
            residual = name.endswith(("attn.out_proj.weight", "mlp.w2.weight"))
            std = scaled if residual else 0.02
            got = w.std().item()
            if abs(got / std - 1) <= 0.12:
                continue
            details = [f"expected std {std:.4g}, got {got:.4g}"]
            if residual and abs(got / 0.02 - 1) < 0.12:
                which = "mlp.w2" if "w2" in name else "attn.out_proj"
                hint = (f"{which} writes into the residual stream: draw it with std 0.02 / sqrt(2 * n_layers) = "
                        f"{scaled:.4g}, as the GPT's mlp.proj (in SwiGLU that is w2, not w1 or w3)")
            elif not residual and abs(got / scaled - 1) < 0.12:
                hint = "only attn.out_proj and mlp.w2 get the smaller std; w1, w3 and the rest use 0.02"
            elif name.startswith("tok_emb") and abs(got - 1) < 0.12:
                hint = "nn.Embedding's default init is normal(0, 1); re-initialise it with std 0.02"
            else:
                hint = ("initialise as the GPT: normal(0, 0.02) for every nn.Linear and nn.Embedding, RMSNorm "
                        "weights 1, then attn.out_proj.weight and mlp.w2.weight with std 0.02 / sqrt(2 * n_layers)")
            raise Mismatch(f"`{name}` has the wrong initial std", details, hint=hint)


# --- cached generation ------------------------------------------------------------------------


def _cached(fn, model, ids, n, **kw):
    label = f"generate_cached(model, ids [{', '.join(map(str, ids.shape))}], {n}{_kw(kw)})"
    before = ids.clone()
    out = call(fn, model, ids, n, what=label, **kw)
    if not torch.equal(ids, before):
        raise Mismatch("generate_cached changed the prompt tensor in place",
                       hint="build the result with torch.cat([ids, next_id], dim=1), a new tensor")
    B, T0 = ids.shape
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (B, T0 + n):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise Mismatch("generate_cached returned the wrong shape", [f"expected ({B}, {T0 + n}), got {shape}"],
                       hint="return the prompt followed by the new tokens, as generate does")
    if not torch.equal(out[:, :T0], ids):
        raise Mismatch("the prompt is not kept at the start of the result",
                       hint="append each new token at the end: ids = torch.cat([ids, next_id], dim=1)")
    return out


def _expect_calls(model, T0, n, prompt=None):
    """The prompt in one pass (or token by token), then one position per new token, always with one cache.

    Returns a note when the prompt was fed token by token (allowed, slower)."""
    calls = model.calls
    if not calls:
        raise Mismatch("generate_cached never called the model")
    if any(c["training"] for c in calls):
        raise Mismatch("the model ran in train mode during generation",
                       hint="call model.eval() first, and restore the mode you found at the end")
    if any(c["grad"] for c in calls):
        raise Mismatch("the model ran with gradient tracking on",
                       hint="decorate generate_cached with @torch.no_grad()")
    fed = [c["ids"].shape[1] for c in calls]
    caches = {id(c["cache"]) for c in calls}
    if any(c["cache"] is None for c in calls):
        raise Mismatch("the model was called without the cache",
                       [f"positions fed per call: {fed}"],
                       hint="make one cache = KVCache(model.config.n_layers) and pass it to every call: "
                            "model(ids, cache=cache)")
    if prompt is not None and len(calls) > 1 and fed[0] == T0 and fed[1] == 1 and T0 > 0 \
            and torch.equal(calls[1]["ids"], prompt[:, -1:]) and n > 1:
        raise Mismatch("the last prompt token went through the model twice",
                       [f"positions fed per call: {fed}", "the second call got the last prompt token again"],
                       hint="the prompt pass already put it in the cache (and gave the logits for the first new "
                            "token): sample first, then feed the token you just sampled")
    most = T0 + n  # the prompt, every new token but the last, and perhaps a harmless last call
    if sum(fed) > most:
        hint = ("you re-run the whole context at every step; with a cache, feed only the newest token "
                "(next_id, [B, 1]): the keys and values of the older ones are already in the cache")
        if len(caches) > 1:
            hint = "you make a new cache at every step; make one before the loop and pass it to every call"
        raise Mismatch(f"the model was fed {sum(fed)} positions for a prompt of {T0} and {n} new tokens",
                       [f"positions fed per call: {fed}", f"a cached sampler feeds about {T0} + {n - 1} = "
                        f"{T0 + n - 1}: the prompt once, then one position per new token"], hint=hint)
    if len(caches) > 1:
        raise Mismatch("the calls do not share one cache", [f"positions fed per call: {fed}"],
                       hint="make one cache = KVCache(model.config.n_layers) before the loop")
    if fed[0] == 1 and T0 > 1 and fed[:T0] == [1] * T0:
        return ("note: you feed the prompt one token at a time; that is correct, "
                "but one call on the whole prompt is faster")
    return None


TABLE_PROMPT = [5, 2, 6]


def _not_greedy(fn, model, ids, out, expected):
    """The Mismatch for top_k=1 tokens that differ from generate's, with its likely cause."""
    b, t = (out != expected).nonzero()[0].tolist()
    fed = [c["ids"][0].tolist() for c in model.calls]
    details = [f"first difference at row {b}, position {t}: expected {int(expected[b, t])}, got {int(out[b, t])}",
               f"tokens fed per call (row 0): {fed}"]
    hint = ("after the prompt pass, feed each sampled token once, with the same cache, and sample from "
            "logits[:, -1, :] of each call")
    last, first_new = ids[0, -1:].tolist(), out[0, ids.shape[1]:ids.shape[1] + 1].tolist()
    if len(fed) > 1 and fed[0] == ids[0].tolist() and fed[1] == last and last != first_new:
        hint = ("the last prompt token went through the model twice (once in the prompt pass, once more as "
                "the first 'new' token), so the cache holds it twice; feed the token you just sampled")
    else:
        drawn = _tokens_drawn_with_top_k_1(fn)
        if drawn > 1:
            details.append(f"100 rows of the same prompt with top_k=1 drew {drawn} different tokens, expected 1")
            hint = ("top_k is ignored: keep the top_k largest logits and set the others to -inf before the softmax "
                    "(with top_k=1 only the most likely token can be drawn)")
    return Mismatch("with top_k=1 the tokens differ from generate's", details, hint=hint)


def _tokens_drawn_with_top_k_1(fn):
    """How many different tokens fn draws after 100 copies of one prompt with top_k=1 (1 when top_k works)."""
    ids = torch.tensor(TABLE_PROMPT).repeat(100, 1)
    try:
        out = call(fn, at(beside.table_model)(), ids, 1, top_k=1,
                   what="generate_cached(model, ids [100, 3], 1, top_k=1)")
        return len(set(out[:, -1].tolist()))
    except (LearnerError, TypeError, AttributeError, IndexError):  # only a diagnosis: if it fails, no cause
        return 0


@check
def generate_cached(fn):
    config = ref.ModernConfig(vocab_size=13, max_len=16, d_model=16, n_heads=2, n_layers=2)
    note = None
    with case("ids [3, 4], 6 new tokens, top_k=1 (a model whose largest logit stands out)"):
        model = at(beside.counting_gpt)(config, peaked=True)
        ids = torch.randint(0, 13, (3, 4))
        out = _cached(fn, model, ids, 6, top_k=1)
        note = _expect_calls(model, 4, 6, ids)
        expected = ref.generate(beside.counting_gpt(config, peaked=True), ids, 6, top_k=1)
        if not torch.equal(out, expected):
            raise _not_greedy(fn, model, ids, out, expected)
    with case("ids [2, 1], 15 new tokens (T0 + max_new_tokens = max_len = 16), top_k=1"):
        model = at(beside.counting_gpt)(config, peaked=True, seed=salted(1))
        ids = torch.randint(0, 13, (2, 1))
        try:
            out = _cached(fn, model, ids, 15, top_k=1)
        except LearnerError as e:
            if isinstance(e.error, ValueError):
                raise Mismatch("generate_cached refused T0 + max_new_tokens = max_len", error_details(e),
                               hint="only T0 + max_new_tokens > model.config.max_len is too long (not >=)") from None
            raise
        _expect_calls(model, 1, 15)
        expected = ref.generate(beside.counting_gpt(config, peaked=True, seed=salted(1)), ids, 15, top_k=1)
        if not torch.equal(out, expected):
            raise _not_greedy(fn, model, ids, out, expected)
    with case("ids [1, 10], 7 new tokens: more than max_len = 16"):
        model = at(beside.counting_gpt)(config)
        try:
            call(fn, model, torch.zeros(1, 10, dtype=torch.long), 7, what="generate_cached(model, ids [1, 10], 7)")
        except LearnerError as e:
            if not isinstance(e.error, ValueError):
                raise Mismatch(f"a too long request raised {type(e.error).__name__}, expected a ValueError",
                               error_details(e), hint="check at the start: if T0 + max_new_tokens > "
                               "model.config.max_len: raise ValueError(...)") from None
        else:
            raise Mismatch("generate_cached accepted 10 + 7 tokens with max_len = 16",
                           hint="check at the start: if T0 + max_new_tokens > model.config.max_len: "
                                "raise ValueError(\"...\")")
    with case("no new tokens: max_new_tokens=0"):
        _cached(fn, at(beside.counting_gpt)(config), torch.zeros(2, 3, dtype=torch.long), 0)
    for mode in ("train", "eval"):
        with case(f"{mode} mode before generate_cached"):
            model = at(beside.counting_gpt)(config)
            model.train(mode == "train")
            _cached(fn, model, torch.zeros(1, 2, dtype=torch.long), 3)
            _expect_calls(model, 2, 3)
            if model.training != (mode == "train"):
                after = "eval" if mode == "train" else "train"
                raise Mismatch(f"generate_cached left the model in {after} mode; it was in {mode} mode",
                               hint="was_training = model.training at the start, model.train(was_training) at the end")
    table_model, prompt = at(beside.table_model)(), TABLE_PROMPT
    with torch.no_grad():
        logits = beside.table_model()(torch.tensor([prompt]))[0, -1].double()
    for label, temperature, top_k in [("temperature 1", 1.0, None), ("temperature 0.5", 0.5, None),
                                      ("top_k=3, temperature 2", 2.0, 3)]:
        with case(f"sampling 4000 rows after [5, 2, 6], {label}"):
            N = 4000
            ids = torch.tensor(prompt).repeat(N, 1)
            kw = {"temperature": temperature} if top_k is None else {"temperature": temperature, "top_k": top_k}
            out = _cached(fn, table_model, ids, 1, **kw)
            freq = torch.bincount(out[:, -1], minlength=8).double() / N
            expected = top_k_probs(logits, temperature, top_k)
            if frequencies_close(freq, expected, N):
                continue
            details = [f"expected {[round(p, 3) for p in expected.tolist()]}",
                       f"got      {[round(p, 3) for p in freq.tolist()]}"]
            if int((freq > 0).sum()) == 1:
                hint = "you take the most likely token (argmax); sample: torch.multinomial(probs, num_samples=1)"
            elif top_k is not None and ((expected == 0) & (freq > 0)).any():
                hint = "top_k is ignored: set the logits below the k-th largest to -inf before the softmax"
            elif frequencies_close(freq, top_k_probs(logits, 1.0, top_k), N):
                hint = "the temperature has no effect: divide the logits by it before the softmax"
            else:
                hint = "sample from softmax(logits[:, -1, :] / temperature) after the top-k filter, as generate does"
            raise Mismatch("the sampled tokens do not follow softmax(logits / temperature)", details, hint=hint)
    config = ref.ModernConfig(vocab_size=13, max_len=16, d_model=16, n_heads=2, n_layers=2)
    reference = ref.ModernGPT(config)
    model = at(ref.ModernGPT)(config)
    model.load_state_dict(reference.state_dict())
    kind_cases(fn, _generating(model, reference, torch.randint(0, 13, (2, 3))), ref.generate_cached,
               "generate_cached(a ModernGPT, ids [2, 3], 3 new tokens, top_k=1)", atol=0, rtol=0)
    return "same tokens as generate, one position per new token, max_len, modes, 3 distributions, float64 and " \
           "meta" + (f"; {note}" if note else "")


def _generating(model, reference, ids):
    """``kind_cases``' inputs for ``generate(model, ids, 3, 1.0, 1)`` (greedy: the same tokens in float64)."""
    return lambda kind: ((learner_as_kind(model, kind), as_kind(ids, kind), 3, 1.0, 1),
                         (as_kind(reference, kind), as_kind(ids, kind), 3, 1.0, 1))

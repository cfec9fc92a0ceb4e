"""What a check runs beside the learner's code, in the learner's process: stand-in models the learner's code calls,
recorders of what it did, and small operations on the learner's objects (``tutor.checks.harness.at``).

In a notebook this is the check's own process. When the grader checks a notebook, the learner's code runs in a
process of its own and the check reaches these through ``at(...)``: so this module holds no model answer, nothing
a check compares with, and imports only torch. Whatever these report comes from the learner's process, so a check
uses them only to explain a result (which torch functions were called, the model's mode during a call), and decides
from the values it computes itself.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections import Counter
from contextlib import contextmanager

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.overrides import TorchFunctionMode

from tutor.distributed import learner_where
from tutor.reference.model import GPTConfig


class TorchCalls(TorchFunctionMode):
    """``with TorchCalls() as calls: fn(x)``, then ``calls.seen`` names every torch function it called."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.add(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def torch_calls(fn, *args, **kwargs):
    """``(fn(*args, **kwargs), sorted names of the torch functions it called)``."""
    recorder = TorchCalls()
    with recorder:
        result = fn(*args, **kwargs)
    return result, sorted(recorder.seen)


class FastMetaTriangles(TorchFunctionMode):
    """tril/triu of a meta tensor, without PyTorch's slow first call.

    On the meta device (shapes, no data) PyTorch runs tril/triu through a Python decomposition
    whose first call imports torch._dynamo and sympy: seconds. The result of tril/triu has the
    input's shape, dtype and device, so on meta tensors we return exactly that.
    """

    NAMES = {"tril", "triu", "tril_", "triu_"}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        a = args[0] if args else kwargs.get("input")
        if name in self.NAMES and isinstance(a, torch.Tensor) and a.device.type == "meta" and "out" not in kwargs:
            if a.dim() < 2:
                raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
            return a if name.endswith("_") else torch.empty(a.shape, dtype=a.dtype, device=a.device)
        return func(*args, **kwargs)


def fast_meta_triangles(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with tril and triu of meta tensors fast (see ``FastMetaTriangles``)."""
    with FastMetaTriangles():
        return fn(*args, **kwargs)


class LikeAGPU(FastMetaTriangles):
    """The meta device held to a GPU's rule: an operation that mixes a tensor on the meta device with a tensor of
    one or more dimensions on the CPU raises, as it would with CUDA (a CPU index into an embedding, a CPU mask for
    masked_fill). On its own the meta device lets many of them through. As on a GPU, 0-d CPU tensors (scalars),
    indexing with CPU indices and moves (``.to``, ``copy_``, ``type_as``) are allowed."""

    ALLOWED = {"__getitem__", "__setitem__", "to", "copy_", "type_as", "cpu", "new_tensor"}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name not in self.ALLOWED:
            tensors = [t for t in _tensors_in(args) + _tensors_in(tuple(kwargs.values()))]
            if any(t.device.type == "meta" for t in tensors):
                cpu = next((t for t in tensors if t.device.type == "cpu" and t.dim() > 0), None)
                if cpu is not None:
                    raise RuntimeError(
                        f"Expected all tensors to be on the same device, but found at least two devices, meta and "
                        f"cpu ({name or func} got a tensor of shape {list(cpu.shape)} on the cpu)")
        return super().__torch_function__(func, types, args, kwargs)


def _tensors_in(values) -> list:
    found = []
    for v in values:
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found.extend(t for t in v if isinstance(t, torch.Tensor))
    return found


def like_a_gpu(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with the meta device held to a GPU's rule (``LikeAGPU``), tril and triu fast."""
    with LikeAGPU():
        return fn(*args, **kwargs)


def assign_parameters(module: nn.Module, values: dict) -> None:
    """Copy ``values`` (name -> tensor) into the parameters of ``module`` of those names, in place."""
    mine = dict(module.named_parameters())
    with torch.no_grad():
        for name, value in values.items():
            mine[name].copy_(value)


def returned_argument(fn, *args, **kwargs):
    """``(fn(*args, **kwargs), i)``: ``i`` is the index of the positional argument that ``fn`` returned (itself, not
    an equal copy), or None."""
    out = fn(*args, **kwargs)
    return out, next((i for i, arg in enumerate(args) if out is arg), None)


def with_graph(fn, *args, **kwargs):
    """``(out, graphs)``: ``out = fn(*args, **kwargs)`` and whether any tensor in it (or in a list or tuple of them)
    requires grad, read where ``fn`` ran (the tensors that come back to a check from another process carry none)."""
    out = fn(*args, **kwargs)
    items = out if isinstance(out, (list, tuple)) else [out]
    return out, any(isinstance(t, torch.Tensor) and t.requires_grad for t in items)


def sum_backward(fn, *args, **kwargs):
    """``(out, connected)``: ``out = fn(*args, **kwargs)``, then, if it is a tensor that requires grad (``connected``),
    ``out.sum().backward()``: the gradients are then in the ``.grad`` of what ``out`` depends on."""
    out = fn(*args, **kwargs)
    connected = isinstance(out, torch.Tensor) and out.requires_grad
    if connected:
        out.sum().backward()
    return out, connected


def input_grad(fn, x):
    """``(fn(x), d sum(fn(x)) / dx)``: the gradient that reaches ``x`` (a fresh leaf) through ``fn``, None if none."""
    x = x.detach().clone().requires_grad_(True)
    out = fn(x)
    if isinstance(out, torch.Tensor) and out.requires_grad:
        out.sum().backward()
    return out, x.grad


def is_tied(model) -> bool:
    """Whether ``model.head.weight`` is ``model.tok_emb.weight`` (weight tying), or shares its storage."""
    head, emb = getattr(model, "head", None), getattr(model, "tok_emb", None)
    w_head, w_emb = getattr(head, "weight", None), getattr(emb, "weight", None)
    if not isinstance(w_head, torch.Tensor) or not isinstance(w_emb, torch.Tensor):
        return False
    return w_head is w_emb or (w_head.data_ptr() == w_emb.data_ptr() and w_head.numel() > 0)


# --- notebook 07: a stand-in language model for generate


class ContextTooLong(Exception):
    pass


class FakeLM(nn.Module):
    """A stand-in for a GPT whose next-token logits depend only on the token at each position.

    ``forward(ids)[b, t] = table[ids[b, t]]``, so the distribution of the next token is known
    exactly. It records what generate feeds it, and refuses contexts longer than max_len (as the
    real model's position embedding does).
    """

    def __init__(self, table, max_len):
        super().__init__()
        V = table.shape[0]
        self.config = GPTConfig(vocab_size=V, max_len=max_len, d_model=8, n_heads=1, n_layers=1)
        self.table = nn.Parameter(table.clone())
        self.drop = nn.Dropout(0.0)
        self.seen = []

    def forward(self, ids, mask=None):
        self.seen.append({"ids": ids.detach().clone() if isinstance(ids, torch.Tensor) else ids,
                          "training": self.training or self.drop.training, "grad": torch.is_grad_enabled()})
        T = ids.shape[-1]
        if T > self.config.max_len:
            raise ContextTooLong(f"the model got a context of {T} tokens, but its max_len is {self.config.max_len}")
        return self.drop(self.table[ids])


# --- notebook 08: a small language model for train_step and evaluate, and a recorder of how it is called


class Toy(nn.Module):
    """The smallest language model: an embedding and a linear layer (a bigram model with a hidden layer).

    Its weights are large, so the gradient norm is well above 1 and clipping matters.
    """

    def __init__(self, V=7, d=5, scale=10.0, dropout=0.0):
        super().__init__()
        self.config = GPTConfig(vocab_size=V, max_len=8, d_model=d, n_heads=1, n_layers=1)
        self.emb = nn.Embedding(V, d)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(d, V)
        with torch.no_grad():
            self.out.weight.mul_(scale)

    def forward(self, ids, mask=None):
        return self.out(self.drop(self.emb(ids)))


class Recorder(nn.Module):
    """Wraps a model and records, at each forward pass, the train/eval mode and whether grad is enabled."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.config = getattr(model, "config", None)
        self.seen = []

    def forward(self, ids, mask=None):
        self.seen.append({"training": self.training, "grad": torch.is_grad_enabled(), "shape": tuple(ids.shape)})
        return self.model(ids)


def value_and_grad(fn, x, *args, **kwargs):
    """``(out, grad)``: ``out = fn(x, *args, **kwargs)``, and the gradient of ``out`` with respect to ``x`` when
    ``out`` is a single number that depends on ``x`` through autograd (else None)."""
    out = fn(x, *args, **kwargs)
    grad = None
    if isinstance(out, torch.Tensor) and out.dim() == 0 and out.requires_grad:
        (grad,) = torch.autograd.grad(out, x, allow_unused=True)
    return out, grad


def parameter_default(fn, name: str):
    """``(True, default)`` when ``fn``'s parameter ``name`` has a default, else ``(False, None)``."""
    try:
        parameter = inspect.signature(fn).parameters.get(name)
    except (TypeError, ValueError):
        return False, None
    if parameter is None or parameter.default is inspect.Parameter.empty:
        return False, None
    return True, parameter.default


# --- notebook 09: a ModernGPT that records how generate_cached calls it


def randomise(module, seed=0):
    """Weights of a trained-looking size, so that every part visibly matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() == 2:
                scale = 1.0 if name.endswith("emb.weight") else 1.0 / math.sqrt(p.shape[1])
                p.copy_(torch.randn(p.shape, generator=g) * scale)
            else:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
    return module


def counting_gpt(config, peaked=False, seed=0):
    """The reference ModernGPT that records how it is called (tokens fed, cache, mode, gradients) in ``calls``."""
    from tutor.reference.model import ModernGPT  # at the call: graded, the model answer is there by then

    class CountingGPT(ModernGPT):
        def __init__(self, config, peaked=False, seed=0):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                super().__init__(config)
                if peaked:  # the two largest logits far apart: greedy decoding does not depend on rounding
                    randomise(self, seed)
                    with torch.no_grad():
                        self.head.weight.mul_(30)
            self.calls = []

        def forward(self, ids, positions=None, cache=None):
            self.calls.append({"ids": ids.detach().clone() if isinstance(ids, torch.Tensor) else ids,
                               "cache": cache, "training": self.training, "grad": torch.is_grad_enabled()})
            return super().forward(ids, positions, cache)

    return CountingGPT(config, peaked, seed)


def table_model():
    """A one-layer model whose next token after [5, 2, 6] is spread over all 8 tokens (the most likely: 19 %)."""
    from tutor.reference.model import ModernConfig

    model = counting_gpt(ModernConfig(vocab_size=8, max_len=8, d_model=16, n_heads=2, n_layers=1))
    randomise(model, 3)
    with torch.no_grad():
        model.head.weight.mul_(0.6)
    return model


# --- notebook 10: one process of a group that averages gradients (``tutor.distributed.run_in_group``)


class Net(nn.Module):
    """A small model with an embedding, a linear layer, a bias-free head and a parameter that never
    gets a gradient (it is not used by ``forward``)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(6, 4)
        self.lin = nn.Linear(4, 5)
        self.head = nn.Linear(5, 3, bias=False)
        self.unused = nn.Parameter(torch.ones(2))

    def forward(self, ids):
        return self.head(torch.tanh(self.lin(self.emb(ids))))


def rank_model(rank):
    """Rank ``rank``'s model (weights differ a little from rank to rank, so that averaging the weights
    shows) with the gradient of its own batch."""
    torch.manual_seed(0)
    model = Net()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * (rank + 1))
    g = torch.Generator().manual_seed(100 + rank)
    ids = torch.randint(0, 6, (3, 4), generator=g)
    target = torch.randn(3, 4, 3, generator=g)
    loss = ((model(ids) - target) ** 2).mean() * (rank + 1)
    loss.backward()
    return model


COLLECTIVES = ("all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter", "barrier")

@contextmanager
def counting_collectives(counts: Counter):
    """Count this process's calls of ``dist.all_reduce``, ``dist.reduce``, ... (as ``dist.<name>``) in ``counts``."""
    originals = {name: getattr(dist, name) for name in COLLECTIVES if hasattr(dist, name)}

    def counted(name, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    for name, fn in originals.items():
        setattr(dist, name, counted(name, fn))
    try:
        yield counts
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)


def average_on_rank(rank, world_size, fn):
    """One process of the group (run by ``tutor.distributed.run_in_group``): build this rank's model and
    gradients, call the learner's function, return what it left in ``.grad``, the weights, and how many
    collective calls it made."""
    result = {}
    model = rank_model(rank)
    counts = result["collectives"] = Counter()
    try:
        with counting_collectives(counts):
            fn(model)
    except NotImplementedError:
        result["status"] = "not done"
    except Exception as e:  # noqa: BLE001 - learner code in a child process: reported to the parent as an error
        result.update(status="error", error=f"{type(e).__name__}: {e}", where=learner_where(e))
    result["grads"] = {n: (None if p.grad is None else p.grad.detach().clone()) for n, p in model.named_parameters()}
    result["params"] = {n: p.detach().clone() for n, p in model.named_parameters()}
    return result


# --- notebook 11: lines handed to encode_iterable one at a time


class Lines:
    """Lines of text handed out one at a time, counting how many were taken."""

    def __init__(self, lines):
        self.lines, self.taken = list(lines), 0

    def __iter__(self):
        for line in self.lines:
            self.taken += 1
            yield line


class PatternCounter:
    """``pattern_fn`` for ``capture_patterns``: ``fn(attn, x)`` (the model answer, found where this runs), counting
    its calls; a hook left on the model after ``capture_patterns`` returns shows as calls that go on."""

    def __init__(self, fn):
        self.fn = fn
        self.calls = 0

    def __call__(self, attn, x):
        self.calls += 1
        return self.fn(attn, x)


class UnrunnableAttention(nn.Module):
    """For ``attention_pattern``: notebook 04's attention layer (the same parameters, built from the model answer's
    class where this runs) whose forward refuses to run, so that the pattern can only come from ``q_proj`` and
    ``k_proj`` (running the layer and reading its weights from a hook on ``attn.dropout`` is not the exercise)."""

    MESSAGE = "attn(x) was called: compute the pattern from attn.q_proj and attn.k_proj, without running the layer"

    def __init__(self, d_model, n_heads, causal=True, bias=False):
        super().__init__()
        from tutor.reference.attention import MultiHeadAttention

        inner = MultiHeadAttention(d_model, n_heads, causal=causal, bias=bias)
        self.n_heads, self.causal = inner.n_heads, inner.causal
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = inner.q_proj, inner.k_proj, inner.v_proj, inner.out_proj
        self.dropout, self.fused = _Refuses(self.MESSAGE), False  # (a forward called on it by hand stops here too)

    def forward(self, *args, **kwargs):
        raise RuntimeError(self.MESSAGE)


class _Refuses(nn.Module):
    """A submodule that raises when run: the attention weights never pass through a module of this layer."""

    def __init__(self, message):
        super().__init__()
        self.message = message

    def forward(self, *args, **kwargs):
        raise RuntimeError(self.message)

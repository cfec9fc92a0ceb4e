"""Checks of notebook 13: accept the reference and correct variants, report the stub, reject the classic mistakes of
LoRA and of instruction tuning's labels with their cause."""

import math

import pytest
import torch
import torch.nn as nn
from checkkit import StubInit, not_done, passes, rejects, stub

from tutor import checks
from tutor import reference as ref
from tutor.course import catalog
from tutor.reference import PAD_X, PAD_Y

NAMES = [e.name for e in catalog.exercises(13)]
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("name", NAMES)
def test_accepts_reference(name):
    passes(getattr(checks, name), getattr(ref, name))


@pytest.mark.parametrize("name", NAMES)
def test_stub_is_not_done(name):
    not_done(getattr(checks, name), StubInit if name == "LoRALinear" else stub)


@pytest.mark.parametrize("name", NAMES)
def test_not_a_function(name):
    result = getattr(checks, name)(None)
    assert result.status == "failed" and "pass your" in result.summary


# --- LoRALinear ---------------------------------------------------------------------------------------------------


def make_lora(init_a="kaiming", init_b="zeros", scale="alpha/r", freeze=True, order="AB", bias_kept=True,
              as_linears=False, layout="peft", where="base", base_grad=True, flatten=False, in_place=False):
    class LoRA(nn.Module):
        def __init__(self, base, r, alpha):
            super().__init__()
            self.base = base
            if freeze:
                for p in base.parameters():
                    p.requires_grad_(False)
            self.scale = {"alpha/r": alpha / r, "r/alpha": r / alpha, "alpha": alpha, "none": 1.0,
                          "floor": alpha // r, "float floor": float(alpha // r)}[scale]
            a_shape = (r, base.in_features) if layout == "peft" else (base.in_features, r)
            b_shape = (base.out_features, r) if layout == "peft" else (r, base.out_features)
            w = base.weight
            kw = {"device": w.device, "dtype": w.dtype} if where == "base" else {}
            if as_linears:  # PEFT's own layout: two bias-free nn.Linear
                self.lora_A = nn.Linear(base.in_features, r, bias=False, **kw)
                self.lora_B = nn.Linear(r, base.out_features, bias=False, **kw)
                nn.init.zeros_(self.lora_B.weight)
                return
            self.A = nn.Parameter(torch.empty(a_shape, **kw))
            self.B = nn.Parameter(torch.empty(b_shape, **kw))
            for p, how in ((self.A, init_a), (self.B, init_b)):
                if how == "kaiming":
                    nn.init.kaiming_uniform_(p, a=math.sqrt(5))
                elif how == "normal":
                    nn.init.normal_(p, std=1 / r)
                else:
                    nn.init.zeros_(p)

        def forward(self, x):
            if in_place:
                x.clamp_(-3, 3)  # outliers clipped, in the caller's tensor
            if as_linears:
                return self.base(x) + self.scale * self.lora_B(self.lora_A(x))
            if layout != "peft":
                return self.base(x) + self.scale * (x @ self.A @ self.B)
            if not base_grad:
                with torch.no_grad():
                    base = self.base(x)
            else:
                base = self.base(x) if bias_kept else x @ self.base.weight.T
            if flatten:  # written for [B, T, d] only
                B_, T_, d = x.shape
                flat = x.reshape(B_ * T_, d)
                update = (flat @ self.A.T @ self.B.T).reshape(B_, T_, -1)
            else:
                update = x @ self.A.T @ self.B.T if order == "AB" else x @ self.B @ self.A
            return base + self.scale * update

    return LoRA


class CopiedBase(nn.Module):
    """A LoRA layer that copies the base weight into frozen buffers of its own instead of keeping the layer."""

    def __init__(self, base, r, alpha):
        super().__init__()
        self.register_buffer("weight", base.weight.detach().clone())
        self.register_buffer("bias", None if base.bias is None else base.bias.detach().clone())
        kw = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.A = nn.Parameter(torch.randn(r, base.in_features, **kw) / math.sqrt(base.in_features))
        self.B = nn.Parameter(torch.zeros(base.out_features, r, **kw))
        self.scale = alpha / r

    def forward(self, x):
        return nn.functional.linear(x, self.weight, self.bias) + self.scale * (x @ self.A.T @ self.B.T)


def test_lora_accepts_variants():
    passes(checks.LoRALinear, make_lora(init_a="normal"))  # A drawn from a normal, as the paper
    passes(checks.LoRALinear, make_lora(as_linears=True))  # the factors as two nn.Linear (PEFT)
    passes(checks.LoRALinear, CopiedBase)  # the base copied rather than wrapped


@pytest.mark.parametrize("wrong, needles", [
    (dict(init_b="kaiming"), ("B starts random", "start B at zero")),
    (dict(init_a="zeros"), ("both start at zero", "nothing trains")),
    (dict(init_a="zeros", init_b="kaiming"), ("A is zero and B random", "the other way round")),
    (dict(scale="r/alpha"), ("r / alpha",)),
    (dict(scale="alpha"), ("alpha = 8 alone",)),
    (dict(scale="none"), ("not scaled",)),
    (dict(freeze=False), ("still train", "freeze")),
    (dict(order="BA"), ("wrong order",)),
    (dict(bias_kept=False), ("bias",)),
    (dict(layout="transposed"), ("[r, in_features]",)),
    (dict(scale="floor"), ("alpha // r = 2: // rounds down", "alpha / r = 2.5")),
    (dict(scale="float floor"), ("alpha // r = 2: // rounds down",)),
    (dict(base_grad=False), ("torch.no_grad()", "the gradient stops reaching x")),
    (dict(where="cpu"), ("base.weight is torch.float64", "dtype=base.weight.dtype")),
    (dict(flatten=True), ("x of shape", "last axis")),
    (dict(in_place=True), ("changed its input x in place",)),
])
def test_lora_rejects(wrong, needles):
    rejects(checks.LoRALinear, make_lora(**wrong), *needles)


# --- add_lora -----------------------------------------------------------------------------------------------------


def make_add_lora(match="suffix", freeze="first", raise_missing="each", give_names=True, first_only=False,
                  strings="whole", read="once", order="model", wrap="once", name_missing=True):
    def add_lora(model, targets, r, alpha, lora_class=ref.LoRALinear):
        if strings == "whole" and isinstance(targets, str):
            targets = [targets]
        if read == "once":
            targets = list(targets)
        elif read == "list-only":
            targets = targets + []  # a tuple or an iterator has no + [] ...
        if freeze == "first":
            for p in model.parameters():
                p.requires_grad_(False)
        names = []
        for t in targets if order == "targets" else [None]:
            for name, module in list(model.named_modules()):
                if not isinstance(module, nn.Linear):
                    continue
                wanted = [t] if t is not None else targets
                hit = (any(name == x or name.endswith("." + x) for x in wanted) if match == "suffix"
                       else any(name.endswith(x) for x in wanted) if match == "suffix-no-dot"
                       else any(x in name for x in wanted) if match == "substring" else True)
                if hit and (wrap == "per-target" or name not in names):
                    names.append(name)
                    if first_only:
                        break
        missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]
        if (raise_missing == "each" and missing) or (raise_missing == "none-found" and not names):
            raise ValueError(f"no layer called {missing or targets}" if name_missing else "a target matches nothing")
        for name in names:
            parent, _, child = name.rpartition(".")
            owner = model.get_submodule(parent) if parent else model
            setattr(owner, child, lora_class(getattr(owner, child), r, alpha))
        if freeze == "after":
            for p in model.parameters():
                p.requires_grad_(False)
        if wrap == "per-target":  # (the names it gives back are right: only the layers are wrong)
            order_of = [n for n, _ in model.named_modules()]
            names = sorted(set(names), key=order_of.index)
        return names if give_names else None

    return add_lora


def test_add_lora_without_lora_class_is_told_the_signature():
    def add_lora(model, targets, r, alpha):
        return ref.add_lora(model, targets, r, alpha)

    rejects(checks.add_lora, add_lora, "lora_class=LoRALinear")


@pytest.mark.parametrize("wrong, needles", [
    (dict(match="substring"), ("'proj' also matches q_proj and out_proj",)),
    (dict(match="all"), ("replaced the wrong layers",)),
    (dict(freeze="never"), ("still train", "freeze every parameter")),
    (dict(freeze="after"), ("nothing in the model trains", "freeze the model's parameters first")),
    (dict(raise_missing=False), ("raise ValueError",)),
    (dict(raise_missing="none-found"), ("even when others match",)),
    (dict(name_missing=False), ("does not name the target",)),
    (dict(give_names=False), ("return the names",)),
    (dict(first_only=True, raise_missing=False), ("not replaced",)),
    (dict(strings="letters"), ("letter by letter", "isinstance(targets, str)")),
    (dict(strings="letters", raise_missing=False), ("read letter by letter", "isinstance(targets, str)")),
    (dict(match="suffix-no-dot"), ("'proj' also matches q_proj and out_proj", "without the dot")),
    (dict(read="list-only"), ("any iterable",)),
    (dict(read="twice"), ("any iterable", "iterator")),
    (dict(order="targets"), ("in another order", "model.named_modules()")),
    (dict(order="targets", wrap="per-target"), ("wrapped twice",)),
])
def test_add_lora_rejects(wrong, needles):
    rejects(checks.add_lora, make_add_lora(**wrong), *needles)


# --- merge_lora ---------------------------------------------------------------------------------------------------


def make_merge(update="BA", scale="alpha/r", bias=True, in_place=False, twice=False, return_layer=False,
               where="base"):
    def merge_lora(layer):
        base = layer.base
        s = {"alpha/r": layer.scale, "none": 1.0, "r/alpha": 1 / layer.scale,
             "recomputed": layer.A.shape[0] and getattr(layer, "alpha", 0) / layer.A.shape[0]}[scale]
        delta = s * (layer.B @ layer.A if update == "BA" else layer.A.T @ layer.B.T)
        if twice:
            delta = 2 * delta
        if return_layer:
            return layer
        if in_place:
            with torch.no_grad():
                base.weight += delta
            return base
        kw = {"device": base.weight.device, "dtype": base.weight.dtype} if where == "base" else {}
        merged = nn.Linear(base.in_features, base.out_features, bias=base.bias is not None, **kw)
        with torch.no_grad():
            merged.weight.copy_(base.weight + delta)
            if base.bias is not None and bias != "random":
                merged.bias.copy_(base.bias if bias else torch.zeros_like(base.bias))
        return merged

    return merge_lora


@pytest.mark.parametrize("wrong, needles", [
    (dict(scale="none"), ("the scale is missing",)),
    (dict(scale="r/alpha"), ("r / alpha",)),
    (dict(twice=True), ("added twice",)),
    (dict(bias=False), ("bias is not the base layer's", "copy it")),
    (dict(bias="random"), ("bias is not the base layer's", "copy it")),
    (dict(where="cpu"), ("base's is torch.float64", "dtype=base.weight.dtype")),
    (dict(scale="recomputed"), ("read layer.scale",)),
    (dict(update="ATBT"), ("transposed", "A.T @ B.T")),
    (dict(in_place=True), ("changed the LoRA layer", "twice")),
    (dict(return_layer=True), ("not a plain nn.Linear",)),
])
def test_merge_rejects(wrong, needles):
    rejects(checks.merge_lora, make_merge(**wrong), *needles)


# --- sft_example --------------------------------------------------------------------------------------------------


def make_sft(first="len-1", pad_y=PAD_Y, pad_x=PAD_X, shift=True, raise_long=True, limit="len-1", empty=True,
             in_place=False):
    def sft_example(prompt, response, block_size):
        if empty and (not prompt or not response):
            raise ValueError("empty")
        if in_place:
            prompt += response
            ids = prompt
        else:
            ids = prompt + response
        if raise_long and (len(ids) - 1 > block_size if limit == "len-1" else len(ids) > block_size):
            raise ValueError("too long")
        ids = ids[:block_size + 1]
        x = ids[:-1]
        y = ids[1:] if shift else ids[:-1]
        keep = {"len-1": len(prompt) - 1, "len": len(prompt), "len-2": len(prompt) - 2, "none": 0}[first]
        y = [PAD_Y if i < keep else t for i, t in enumerate(y)]
        pad = block_size - len(x)
        return torch.tensor(x + [pad_x] * pad), torch.tensor(y + [pad_y] * pad)

    return sft_example


def test_sft_example_reference_labels():
    x, y = ref.sft_example(ref.encode(" five "), ref.encode("laika "), 15)
    assert x.tolist()[:11] == ref.encode(" five laika")
    assert y.tolist() == [PAD_Y] * 5 + ref.encode("laika ") + [PAD_Y] * 4  # 'l' is the target at index 5
    assert ref.decode(y[5:10]) == "laika"


@pytest.mark.parametrize("wrong, needles", [
    (dict(first="len"), ("first response token is ignored",)),
    (dict(first="len-2"), ("last token of the prompt is counted",)),
    (dict(first="none"), ("the prompt is counted",)),
    (dict(pad_y=PAD_X), ("the padding is counted",)),
    (dict(shift=False), ("not shifted",)),
    (dict(pad_x=PAD_Y), ("pad x with PAD_X",)),
    (dict(raise_long=False), ("raising ValueError",)),
    (dict(limit="len"), ("which fit", "- 1 > block_size")),
    (dict(empty=False), ("empty prompt", "raise ValueError")),
    (dict(in_place=True), ("changed the prompt", "prompt += response")),
])
def test_sft_example_rejects(wrong, needles):
    rejects(checks.sft_example, make_sft(**wrong), *needles)


def test_a_merged_layer_that_calls_the_lora_layer_instead_of_merging_is_rejected():
    """A hostile student's: an nn.Linear subclass whose forward runs a hidden copy of the LoRA layer."""
    import copy

    def merge_lora(layer):
        base = layer.base

        class Merged(nn.Linear):
            def forward(self, x):
                return self._lora[0](x)

        merged = Merged(base.in_features, base.out_features, bias=base.bias is not None,
                        device=base.weight.device, dtype=base.weight.dtype)
        with torch.no_grad():
            merged.weight.copy_(base.weight)
            if base.bias is not None:
                merged.bias.copy_(base.bias)
        object.__setattr__(merged, "_lora", [copy.deepcopy(layer)])
        return merged

    rejects(checks.merge_lora, merge_lora, "its own weight and bias", "merge into the weight")


def test_sft_example_draws_a_case_a_table_of_the_fixed_ones_cannot_answer():
    from tutor.checks import harness, nb13_lora

    table = {(tuple(p), tuple(r), b): ref.sft_example(p, r, b) for _, p, r, b in nb13_lora.SFT_CASES}

    def sft_example(prompt, response, block_size):
        return table[(tuple(prompt), tuple(response), block_size)]

    try:
        harness.set_salt(777)
        assert checks.sft_example(sft_example).status == "failed"
        assert checks.sft_example(ref.sft_example).status == "passed"
    finally:
        harness.set_salt(0)

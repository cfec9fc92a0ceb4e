"""Checks for notebook 12: OpenAI's GPT-2 in the course's GPT (course_names, to_linear, split_qkv, load_gpt2).

Every check compares with a tiny random GPT-2 built by Hugging Face's ``transformers`` (``GPT2LMHeadModel``, no
download) whose parameters are re-initialised with std 0.3 (LayerNorm weights 1 ± 0.3). At GPT-2's own init (std
0.02) the exact and the tanh GELU give this model's logits 1e-6 apart, below the tolerance; at 0.3 they are 1.6e-3
apart, and an untransposed square ``c_proj`` moves them by several units, while a correct loader stays within 3e-6.
Logits are compared with atol 1e-4. Without ``transformers`` the same tensors come from the course's reference GPT
written in Hugging Face's names and layouts (``tutor.reference.hf_state_dict``), and the pass message says so.
"""

import functools
import re
from dataclasses import dataclass

import torch
import torch.nn as nn

from tutor import reference as ref
from tutor.checks import beside
from tutor.checks.compare import expect_close, shape_text
from tutor.checks.harness import (
    LearnerError,
    Mismatch,
    NotDone,
    at,
    call,
    case,
    check,
    error_details,
    generator,
    is_signature_error,
    manual_seed,
)
from tutor.course import catalog

__all__ = catalog.check_names(__name__)  # this notebook's exercises (tutor.course.catalog)
# What the checks import only when they run: the grader imports it before any learner code (tutor.grading.kernel).
IMPORTED_WHEN_CHECKING = ("transformers",)

V, T_MAX, D, LAYERS, HEADS = 37, 16, 24, 2, 4  # the tiny GPT-2 (d_head = 6)
STD = 0.3
LOGITS_ATOL = 1e-4
COURSE_NAMES_HINT = ("the course's names: tok_emb, pos_emb, blocks.N.ln1 / ln2, blocks.N.attn.q_proj / k_proj / v_proj "
                     "/ out_proj, blocks.N.mlp.fc / proj, ln_f, head (print(dict(model.named_parameters()).keys()))")


@dataclass(frozen=True)
class Tiny:
    """A tiny random GPT-2 as Hugging Face stores it, and what it computes."""

    state_dict: dict  # GPT2LMHeadModel.state_dict(): the "transformer." prefix, and lm_head.weight
    hub: dict  # as the hub's model.safetensors: no prefix, no lm_head.weight, the causal-mask buffers
    ids: torch.Tensor  # [2, 12]
    logits: torch.Tensor  # [2, 12, V], by transformers' GPT2LMHeadModel (or the reference GPT)
    source: str  # "transformers" or "reference"

    def fresh(self, which: str = "state_dict") -> dict:
        """A copy the learner's code may change without harming the next case."""
        return {k: v.clone() for k, v in getattr(self, which).items()}


def _reinitialise(named_parameters, generator):
    with torch.no_grad():
        for name, p in named_parameters:
            base = 1.0 if re.search(r"(^|\.)ln_?(1|2|f)\.weight$", name) else 0.0
            p.copy_(base + STD * torch.randn(p.shape, generator=generator))


def _from_transformers(generator, ids):
    from transformers import GPT2Config, GPT2LMHeadModel  # seconds to import: only when a check runs

    config = GPT2Config(vocab_size=V, n_positions=T_MAX, n_embd=D, n_layer=LAYERS, n_head=HEADS,
                        bos_token_id=V - 1, eos_token_id=V - 1, pad_token_id=V - 1)
    hf = GPT2LMHeadModel(config).eval()
    _reinitialise(hf.named_parameters(), generator)
    with torch.no_grad():
        logits = hf(ids).logits.float()
    return {k: v.detach().clone() for k, v in hf.state_dict().items()}, logits


def _from_reference(generator, ids):
    model = ref.GPT(ref.GPTConfig.gpt2(vocab_size=V, max_len=T_MAX, d_model=D, n_heads=HEADS, n_layers=LAYERS))
    named = [(ref.hf_name(n), p) for n, p in model.named_parameters()]
    _reinitialise(named, generator)
    with torch.no_grad():
        logits = model.eval()(ids)
    return ref.hf_state_dict(model), logits


@functools.lru_cache(maxsize=1)
def tiny() -> Tiny:
    """Built once per session (a few milliseconds, plus importing transformers once)."""
    with torch.random.fork_rng(devices=[]):
        manual_seed(0)
        g = generator(0)
        ids = torch.randint(0, V, (2, 12), generator=g)
        try:
            state_dict, logits = _from_transformers(g, ids)
            source = "transformers"
        except Exception:  # noqa: BLE001 - transformers missing or changed: the reference stands in, and says so
            g = generator(0)
            ids = torch.randint(0, V, (2, 12), generator=g)
            state_dict, logits = _from_reference(g, ids)
            source = "reference"
    hub = {k.removeprefix("transformer."): v for k, v in state_dict.items() if k != "lm_head.weight"}
    hub = {k: v for k, v in hub.items() if not re.fullmatch(r"h\.\d+\.attn\.(bias|masked_bias)", k)}
    for layer in range(LAYERS):  # as older transformers saved them (and the hub's checkpoint holds them)
        hub[f"h.{layer}.attn.bias"] = torch.tril(torch.ones(T_MAX, T_MAX, dtype=torch.bool)).view(1, 1, T_MAX, T_MAX)
        hub[f"h.{layer}.attn.masked_bias"] = torch.tensor(-1e4)
    return Tiny(state_dict, hub, ids, logits, source)


def _note(n: int, what: str) -> str:
    source = tiny().source
    if source == "transformers":
        return f"{n} {what}, against transformers' GPT2LMHeadModel"
    return f"{n} {what}, against the course's reference (transformers is not installed: pip install transformers)"


# --- course_names ------------------------------------------------------------------------------------------------


def _names_cases():
    names = list(tiny().state_dict)
    bare = [n.removeprefix("transformer.") for n in names if n.startswith("transformer.")]
    buffers = ["h.0.attn.bias", "h.1.attn.masked_bias", "transformer.h.0.attn.masked_bias", "transformer.h.1.attn.bias"]
    return names + bare + buffers + TWO_DIGITS


# GPT-2 small's blocks go up to h.11: names the tiny model has not, which a one-digit pattern gets wrong
TWO_DIGITS = ["transformer.h.10.attn.c_attn.weight", "h.11.mlp.c_proj.bias", "transformer.h.11.ln_2.weight",
              "h.10.attn.masked_bias"]
LAYER_DIGITS_HINT = (r"GPT-2 small has blocks h.0 to h.11 (GPT-2 xl h.0 to h.47): match the layer number with \d+ "
                     r"(one digit or more), not \d (exactly one)")


UNKNOWN = ["transformer.h.0.attn.c_gate.weight", "h.1.mlp.c_fc.scale", "score.weight", "transformer.wte.bias",
           "transformer.h.0.ln_3.weight"]


def _wrong_names(hf_name, got, expected) -> str | None:
    """The likely cause of a wrong answer of course_names."""
    bare = hf_name.removeprefix("transformer.")
    if not expected:
        return ("attn.bias and attn.masked_bias are the causal mask that some transformers versions save, not weights: "
                "return [] for them (the mask is built in your attention)")
    if ".c_attn." in bare:
        if not got:
            return (f"{bare} is c_attn's {bare.rsplit('.', 1)[1]}, not the causal-mask buffer h.N.attn.bias: "
                    "'h.0.attn.c_attn.bias'.endswith('attn.bias') is true too, so match the whole name")
        if sorted(got) == sorted(expected):
            return "c_attn holds q | k | v, in that order: return the q_proj name first, then k_proj, then v_proj"
        if len(got) != 3:
            return "the fused c_attn fills three of your parameters: q_proj, k_proj and v_proj (in that order)"
    if bare == "lm_head.weight":
        return "lm_head.weight is the head: ['head.weight'] (whether it is tied to tok_emb is the loader's business)"
    if ".attn.c_proj." in bare and got and "mlp.proj" in got[0]:
        return "attn.c_proj is attention's output projection (attn.out_proj); mlp.c_proj is the MLP's (mlp.proj)"
    if ".mlp.c_proj." in bare and got and "out_proj" in got[0]:
        return "mlp.c_proj is the MLP's second layer (mlp.proj); attn.c_proj is attention's (attn.out_proj)"
    match = re.match(r"h\.(\d+)\.", bare)
    if match and got and isinstance(got[0], str) and got[0].startswith("blocks.") and \
            got[0].split(".")[1] != match.group(1):
        return f"the layer index is off: h.{match.group(1)} is blocks.{match.group(1)} (both count from 0)"
    if any("transformer" in str(g) for g in got):
        return "drop the 'transformer.' prefix: the course's names start with tok_emb, pos_emb, blocks, ln_f, head"
    return COURSE_NAMES_HINT


PREFIX_HINT = ("GPT2LMHeadModel.state_dict() names start with 'transformer.' (the hub's file has no prefix): "
               "strip it first, name.removeprefix('transformer.')")


def _one_digit_only(fn, hf_name) -> bool:
    """Whether ``fn`` gets ``hf_name`` right once its two-digit layer number is a one-digit one."""
    match = re.search(r"(^|\.)h\.(\d\d+)\.", hf_name)
    if match is None:
        return False
    short = hf_name.replace(f"h.{match.group(2)}.", "h.1.", 1)
    try:
        return list(fn(short)) == ref.course_names(short)
    except Exception:  # noqa: BLE001 - only asking whether a one-digit layer works
        return False


def _works_without_prefix(fn, hf_name) -> bool:
    if not hf_name.startswith("transformer."):
        return False
    bare = hf_name.removeprefix("transformer.")
    try:
        return list(fn(bare)) == ref.course_names(bare)
    except Exception:  # noqa: BLE001 - only asking whether the name without its prefix works
        return False


@check
def course_names(fn):
    cases = _names_cases()
    for hf_name in cases:
        expected = ref.course_names(hf_name)
        with case(f"course_names({hf_name!r})"):
            try:
                got = call(fn, hf_name, what=f"course_names({hf_name!r})")
            except LearnerError as e:
                if _works_without_prefix(fn, hf_name):
                    e.hint = PREFIX_HINT
                elif _one_digit_only(fn, hf_name):
                    e.hint = LAYER_DIGITS_HINT
                raise
            if got is None or isinstance(got, str):
                raise Mismatch(f"course_names({hf_name!r}) returned {got!r}, not a list of names",
                               [f"expected {expected!r}"],
                               hint="return a list, even for one name (['tok_emb.weight']), and [] to skip a tensor")
            if not isinstance(got, (list, tuple)):
                raise Mismatch(f"course_names({hf_name!r}) returned a {type(got).__name__}, not a list of names",
                               [f"expected {expected!r}"])
            got = list(got)
            if got != expected:
                hint = (PREFIX_HINT if _works_without_prefix(fn, hf_name) else
                        LAYER_DIGITS_HINT if _one_digit_only(fn, hf_name) else _wrong_names(hf_name, got, expected))
                raise Mismatch(f"course_names({hf_name!r}) is wrong", [f"expected {expected!r}", f"got      {got!r}"],
                               hint=hint)
    for hf_name in UNKNOWN:
        with case(f"course_names({hf_name!r}), a name GPT-2 does not have"):
            try:
                got = fn(hf_name)
            except NotImplementedError:
                raise NotDone() from None
            except ValueError as error:
                if hf_name not in str(error):
                    raise Mismatch(f"the ValueError for {hf_name!r} does not name it",
                                   [f"ValueError: {error}"],
                                   hint="say which tensor: raise ValueError(f'unexpected tensor {hf_name!r}')",
                                   ) from None
                continue
            except Exception as error:  # noqa: BLE001 - the learner's exception is the result being checked
                raise Mismatch(f"course_names({hf_name!r}) raised {type(error).__name__}, not ValueError",
                               error_details(LearnerError("course_names", error)),
                               hint="the loader must refuse every name it does not know with a ValueError naming it: "
                                    "raise ValueError(f'unexpected tensor {hf_name!r}')") from None
            raise Mismatch(f"course_names({hf_name!r}) returned {got!r} for a name GPT-2 does not have",
                           hint="a tensor nobody expects must not be skipped or guessed: "
                                "raise ValueError(f'unexpected tensor {hf_name!r}') (only attn.bias and "
                                "attn.masked_bias are skipped, by their exact names)")
    return _note(len(cases) + len(UNKNOWN), "names")


# --- to_linear ---------------------------------------------------------------------------------------------------


def _conv1d_hint(name, tensor):
    square = tensor.dim() == 2 and tensor.shape[0] == tensor.shape[1]
    if square:
        return (f"{name} was not transposed. Conv1D stores its weight as [in, out] even when in == out: this square "
                f"weight would load without any error and only the logits would show it. Decide by the name "
                f"(c_attn, c_proj, c_fc), not by the shape")
    return (f"{name} was not transposed: Conv1D stores its weight as [in, out], nn.Linear as [out, in]; every weight "
            f"of c_attn, attn.c_proj, c_fc and mlp.c_proj needs .t()")


@check
def to_linear(fn):
    tiny_ = tiny()
    items = list(tiny_.state_dict.items())
    items += [(k.removeprefix("transformer."), v) for k, v in items if k.startswith("transformer.")]
    items.append(("transformer.h.1.mlp.c_fc.weight", tiny_.state_dict["transformer.h.1.mlp.c_fc.weight"]
                  .to(torch.bfloat16)))  # a bfloat16 checkpoint keeps its dtype
    for name, tensor in items:
        expected = ref.to_linear(name, tensor)
        label = f"to_linear({name!r}, {tensor.dtype if tensor.dtype != torch.float32 else 'tensor'} " \
                f"{shape_text(tensor.shape)})"
        with case(label, hint_on_error="biases are 1-D: transpose only the weights" if tensor.dim() == 1 else None):
            given = tensor.clone()
            got = call(fn, name, given, what=label)
            if tuple(given.shape) != tuple(tensor.shape) or not torch.equal(given, tensor):
                raise Mismatch(f"to_linear changed the tensor it was given ({name})",
                               hint="return a new view or tensor (tensor.t()); an in-place t_() or copy_() changes "
                                    "the state dict it came from")
            if isinstance(got, torch.Tensor) and got.dim() == 1 and tensor.dim() == 2:
                raise Mismatch(f"to_linear({name!r}) returned a 1-D tensor", hint="keep both axes: tensor.t()")
            transposed = expected is not tensor
            mistakes = []
            if transposed:
                mistakes.append((_conv1d_hint(name, tensor), tensor))
                mistakes.append(("reshape or view is not a transpose: it keeps the numbers in their order and only "
                                 "regroups them; use tensor.t() (or tensor.T)",
                                 lambda t=tensor: t.reshape(t.shape[::-1])))
            elif tensor.dim() == 2:
                mistakes.append((f"{name} is not a Conv1D weight: embeddings ([V, d], [T, d]), the LayerNorms, the "
                                 f"biases and lm_head (an nn.Linear already) stay as they are; transpose only the "
                                 f"weights of c_attn, c_proj and c_fc", lambda t=tensor: t.t()))
            expect_close(got, expected, f"to_linear({name!r}, ...)", atol=0.0, rtol=0.0, mistakes=mistakes,
                         hint=None if not transposed else _conv1d_hint(name, tensor))
    return _note(len(items), "tensors")


# --- split_qkv ---------------------------------------------------------------------------------------------------


def _split_mistakes(t, i):
    """(cause, what piece i would be) for the classic ways of splitting c_attn wrongly."""
    order = "qkv"
    out = []
    for perm in ("kqv", "vkq", "qvk", "kvq", "vqk"):
        out.append((f"the pieces come out in the order {', '.join(perm)}: GPT-2's c_attn holds q | k | v, "
                    f"in that order",
                    lambda perm=perm: t.chunk(3, dim=0)[order.index(perm[i])]))
    if t.dim() == 2:
        out.append(("split along the input axis (dim 1): after to_linear the weight is [3d, d], with q, k and v "
                    "stacked along the output axis, dim 0", lambda: t.chunk(3, dim=1)[i]))
    out.append(("every third row: q, k and v are three contiguous blocks of d rows, not interleaved",
                lambda: t[i::3]))
    return out


def _split_error_hint(error, tensor) -> str:
    """The likely cause of an exception in split_qkv, from what it says."""
    text = str(error)
    if "view" in text:
        return ("after to_linear, c_attn's weight is a transposed view, whose axes .view() cannot always merge: "
                "tensor.chunk(3, dim=0) (or tensor.split(d, dim=0)) needs no view")
    if tensor.dim() == 1 and "unpack" in text:
        return ("the size of a piece must come from the first axis: for the bias [3d] tensor.shape[-1] is 3d (one "
                "piece), while for the weight [3d, d] it happened to be d. Use tensor.chunk(3, dim=0), or "
                "tensor.split(tensor.shape[0] // 3, dim=0)")
    if "unpack" in text:
        return "cut the tensor into exactly three pieces along its first axis: tensor.chunk(3, dim=0)"
    return "three equal pieces along the first axis: tensor.chunk(3, dim=0)"


@check
def split_qkv(fn):
    tiny_ = tiny()
    g = generator(1)
    cases = [
        ("a weight [18, 6] (d = 6)", torch.randn(18, 6, generator=g)),
        ("a bias [18]", torch.randn(18, generator=g)),
        ("c_attn's weight after to_linear: [72, 24], a transposed (non-contiguous) view",
         ref.to_linear("h.0.attn.c_attn.weight", tiny_.state_dict["transformer.h.0.attn.c_attn.weight"])),
        ("c_attn's bias [72]", tiny_.state_dict["transformer.h.0.attn.c_attn.bias"]),
        ("a bfloat16 weight [12, 4]", torch.randn(12, 4, generator=g).to(torch.bfloat16)),
    ]
    for label, tensor in cases:
        expected = ref.split_qkv(tensor)
        with case(label):
            before = tensor.clone()
            try:
                got = call(fn, tensor, what=f"split_qkv({label})")
            except LearnerError as e:
                if not is_signature_error(e.error):
                    e.hint = _split_error_hint(e.error, tensor)
                raise
            if not torch.equal(before, tensor):
                raise Mismatch("split_qkv changed the tensor it was given", hint="return views or new tensors")
            if isinstance(got, torch.Tensor) and got.dim() >= 1 and got.shape[0] == 3:
                got = tuple(got)  # a stacked [3, ...] tensor unpacks as q, k, v: fine
            if not isinstance(got, (tuple, list)) or not all(isinstance(p, torch.Tensor) for p in got):
                raise Mismatch(f"split_qkv returned {type(got).__name__}, not three tensors (q, k, v)",
                               hint="return q, k, v (a tuple), e.g. return tensor.chunk(3, dim=0)")
            if len(got) != 3:
                one = tensor.dim() == 1 and len(got) == 1
                raise Mismatch(f"split_qkv returned {len(got)} piece{'s' if len(got) != 1 else ''}, not 3",
                               [f"their shapes: {', '.join(shape_text(p.shape) for p in got[:6])}"
                                + (" ..." if len(got) > 6 else "")],
                               hint=_split_error_hint("unpack", tensor) if one else
                               "torch.split(t, 3) cuts pieces of 3 rows each; cut the tensor into 3 pieces: "
                               "t.chunk(3, dim=0), or t.split(t.shape[0] // 3, dim=0)")
            for i, (piece, want) in enumerate(zip(got, expected)):
                expect_close(piece, want, f"{'qkv'[i]} (piece {i})", atol=0.0, rtol=0.0,
                             mistakes=_split_mistakes(tensor, i))
    return f"{len(cases)} tensors"


# --- load_gpt2 ---------------------------------------------------------------------------------------------------


def _reference_logits(state_dict, **changes):
    """The logits of the reference loader given ``state_dict`` and GPTConfig ``changes``: what a known mistake gives."""
    config = ref.GPTConfig.gpt2(vocab_size=V, max_len=T_MAX, d_model=D, n_heads=HEADS, n_layers=LAYERS, **changes)
    model = ref.gpt2_from_hf(state_dict, config)
    with torch.no_grad():
        return model(tiny().ids)


def _changed(state_dict, pattern, change):
    return {k: (change(v) if re.search(pattern, k) else v) for k, v in state_dict.items()}


def _load_mistakes(state_dict):
    def permuted(t):
        q, k, v = t.chunk(3, dim=-1)  # Conv1D layout: the output axis is the last
        return torch.cat([k, q, v], dim=-1)

    def interleaved(t):
        return t.reshape(*t.shape[:-1], -1, 3).transpose(-1, -2).reshape(t.shape)  # block b: old b::3

    return [
        ("your model uses the exact GELU; GPT-2's is the tanh approximation, nn.GELU(approximate='tanh') "
         "(GPTConfig.gpt2() sets gelu_approximate='tanh'). At GPT-2's init (std 0.02) the two give logits about "
         "1e-6 apart, below the tolerance; here (std 0.3) about 1e-3",
         lambda: _reference_logits(state_dict, gelu_approximate="none")),
        ("the square attn.c_proj weights were not transposed: Conv1D stores [in, out] even when in == out, so they "
         "load without an error, and only the logits show it (decide by the name in to_linear, not by the shape)",
         lambda: _reference_logits(_changed(state_dict, r"attn\.c_proj\.weight$", lambda t: t.t()))),
        ("q and k are swapped: c_attn holds q | k | v along its output axis, in that order",
         lambda: _reference_logits(_changed(state_dict, r"attn\.c_attn\.(weight|bias)$", permuted))),
        ("q, k and v were taken as interleaved rows: c_attn holds three contiguous blocks, q | k | v",
         lambda: _reference_logits(_changed(state_dict, r"attn\.c_attn\.(weight|bias)$", interleaved))),
        (f"the model has 12 heads, GPT-2 small's, not the n_heads given ({HEADS}): pass n_heads on to "
         f"GPTConfig.gpt2(..., n_heads=n_heads)", lambda: _reference_logits(state_dict, n_heads=12)),
        ("the biases of the q, k, v and out projections were not loaded (GPT-2's attention has biases: "
         "GPTConfig.gpt2() sets attn_bias=True)",
         lambda: _reference_logits(_changed(state_dict, r"attn\.c_(attn|proj)\.bias$", torch.zeros_like))),
    ]


def _refuses(fn, state_dict, label, names, why):
    """The learner's loader must raise a ValueError naming one of ``names`` for ``state_dict``."""
    with case(label):
        try:
            call(fn, state_dict, HEADS, what=f"load_gpt2({label})")
        except LearnerError as e:
            error = e.error
            if not isinstance(error, ValueError):
                raise Mismatch(f"{why}: your loader raised {type(error).__name__}, not a ValueError naming it",
                               error_details(e),
                               hint="check before you copy (a name your model has no parameter for, a shape that "
                                    "differs), and raise ValueError(f'... {hf_name!r} ...') yourself: a KeyError or "
                                    "copy_'s RuntimeError does not say which tensor of the file is wrong") from None
            if not any(n in str(error) for n in names):
                raise Mismatch(f"{why}: the ValueError does not name the tensor", [f"ValueError: {error}"],
                               hint=f"put its name in the message, e.g. {names[0]!r}") from None
            return
        raise Mismatch(f"{why}, and your loader accepted it without an error",
                       hint="a loader must refuse what it cannot place: keep a set of the parameters you filled and "
                            "raise ValueError for any left over (load_state_dict(strict=False) hides them), check "
                            "each shape before copy_ (which broadcasts a [1] into a [d] silently), and raise for "
                            "any name you do not know")


def _tied(model) -> bool:
    return bool(at(beside.is_tied)(model))


HEADS_HINT = (f"use the n_heads you are given: no tensor's shape holds the number of heads, and d_model // 64 "
              f"(GPT-2 small's 12 heads of 64) is not a rule: this tiny GPT-2 has d_model = {D} and {HEADS} heads")


def _refusal_hint(error, default):
    """Why a loader refused a valid state dict, from what its error says."""
    text = str(error)
    if isinstance(error, ZeroDivisionError):
        return HEADS_HINT
    if re.search(r"\.attn\.(masked_)?bias\b", text):
        return ("skip the causal-mask buffers h.N.attn.bias and h.N.attn.masked_bias (course_names gives [] for "
                "them): they are not weights")
    last = LAYERS - 1
    if set(re.findall(r"\b(?:h|blocks)\.(\d+)\.", text)) == {str(last)}:
        return (f"the error names block {last}, the last one: does your model have {LAYERS} blocks? They are "
                f"h.0 to h.{last}, counted from 0, so n_layers is the largest N plus one ({LAYERS})")
    if re.search(r"\b(50257|1024|768|3072|2304)\b", text):
        return (f"a shape of GPT-2 small's (50257, 1024, 768, ...) in the error: size the model from the tensors "
                f"themselves: vocab_size and d_model from wte.weight's shape, max_len from wpe.weight's, n_layers "
                f"from the names h.N (this tiny GPT-2 has d_model = {D}); GPTConfig.gpt2()'s defaults are GPT-2 "
                f"small's")
    if "transformer." in text:
        return PREFIX_HINT
    if "head" in text:
        return ("GPT-2's head is tied to wte (GPTConfig.gpt2() sets tie_head=True): the hub's file has no "
                "lm_head.weight, and the lm_head.weight of GPT2LMHeadModel.state_dict() is wte again: skip it")
    if "bias" in text and ("attn" in text or "q_proj" in text or "out_proj" in text):
        return "GPT-2's attention projections have biases: GPTConfig.gpt2() sets attn_bias=True"
    return default


def _loaded_logits(fn, state_dict, label, hint):
    try:
        model = call(fn, state_dict, HEADS, what=f"load_gpt2({label}, n_heads={HEADS})")
    except LearnerError as e:
        e.hint = _refusal_hint(e.error, hint)
        raise
    if model is None:
        raise Mismatch("load_gpt2 returned None", hint="build the model, fill it, and return it")
    if not isinstance(model, nn.Module):
        raise Mismatch(f"load_gpt2 returned a {type(model).__name__}, not the course's GPT",
                       hint="return the GPT you built and filled")
    heads = getattr(getattr(model, "config", None), "n_heads", HEADS)
    if heads != HEADS:
        raise Mismatch(f"load_gpt2(state_dict, n_heads={HEADS}) built a model with n_heads={heads}",
                       hint=HEADS_HINT if heads == D // 64 else "pass the n_heads argument on to GPTConfig.gpt2("
                                                               "..., n_heads=n_heads): no shape holds it")
    model.eval()
    with torch.no_grad():
        logits = call(model, tiny().ids.clone(), what="model(ids)")
    return model, logits


@check
def load_gpt2(fn):
    tiny_ = tiny()
    with case("GPT2LMHeadModel.state_dict() of a tiny random GPT-2 ('transformer.' prefix, lm_head.weight)"):
        state_dict = tiny_.fresh()
        model, logits = _loaded_logits(fn, state_dict, "state_dict",
                                       "your loader refused a valid state dict: the tensor it names was transformed "
                                       "or named wrongly (see the checks of course_names, to_linear and split_qkv)")
        if sorted(state_dict) != sorted(tiny_.state_dict):
            raise Mismatch("load_gpt2 changed the keys of the state dict it was given", hint="only read it")
        expect_close(logits, tiny_.logits, "the loaded model's logits", atol=LOGITS_ATOL, rtol=0.0,
                     mistakes=_load_mistakes(tiny_.fresh()))
        if not _tied(model):
            raise Mismatch("the head is not tied to the token embedding",
                           ["the logits are right because lm_head.weight holds the same numbers as wte.weight; but "
                            "your model keeps two copies (38.6M parameters of GPT-2 small's 124M), and the hub's "
                            "file has no lm_head.weight at all"],
                           hint="GPTConfig.gpt2(...) sets tie_head=True: the GPT then uses tok_emb.weight as "
                                "head.weight")
    with case("the hub's model.safetensors (no prefix, no lm_head.weight, causal-mask buffers attn.bias and "
              "attn.masked_bias)"):
        model, logits = _loaded_logits(fn, tiny_.fresh("hub"), "hub_state_dict",
                                       "a valid checkpoint was refused: skip the buffers h.N.attn.bias and "
                                       "h.N.attn.masked_bias, accept names with or without 'transformer.', and with a "
                                       "tied head there is no lm_head.weight to load")
        expect_close(logits, tiny_.logits, "the loaded model's logits", atol=LOGITS_ATOL, rtol=0.0,
                     mistakes=_load_mistakes(tiny_.fresh()),
                     hint=None if _tied(model) else "the head is not tied: it kept its random initial weights, as the "
                                                    "hub's file has no lm_head.weight (GPTConfig.gpt2() ties it)")
    missing = {k: v for k, v in tiny_.fresh().items() if k != "transformer.h.1.mlp.c_fc.bias"}
    _refuses(fn, missing, "without transformer.h.1.mlp.c_fc.bias", ["h.1.mlp.c_fc.bias", "blocks.1.mlp.fc.bias"],
             "a tensor is missing (h.1.mlp.c_fc.bias)")
    extra = {**tiny_.fresh(), "transformer.h.0.attn.c_gate.weight": torch.zeros(D, D)}
    _refuses(fn, extra, "with an extra transformer.h.0.attn.c_gate.weight", ["c_gate"],
             "the state dict has a tensor GPT-2 does not have (h.0.attn.c_gate.weight)")
    small = {**tiny_.fresh(), "transformer.ln_f.bias": torch.zeros(1)}
    _refuses(fn, small, "with ln_f.bias of shape (1,) instead of (24,)", ["ln_f.bias"],
             "a tensor has the wrong shape (ln_f.bias is (1,), not (24,))")
    gap = {k.replace("h.1.", "h.2."): v for k, v in tiny_.fresh().items()}
    _refuses(fn, gap, "with blocks h.0 and h.2 but no h.1", ["h.1", "blocks.1", "h.2", "blocks.2"],
             "the state dict skips block h.1 (it has h.0 and h.2)")
    flipped = tiny_.fresh()
    flipped["transformer.h.0.mlp.c_fc.weight"] = flipped["transformer.h.0.mlp.c_fc.weight"].t().contiguous()
    _refuses(fn, flipped, "with h.0.mlp.c_fc.weight stored as [96, 24] instead of [24, 96]",
             ["h.0.mlp.c_fc.weight", "blocks.0.mlp.fc.weight"], "a tensor has the wrong shape (h.0.mlp.c_fc.weight)")
    return _note("{cases}", "cases") + f", logits within {LOGITS_ATOL:g}"

"""Checks of notebook 12: accept the reference, report the stub, reject realistic mistakes with their cause."""

import re

import pytest
import torch
from checkkit import not_done, passes, rejects, stub

from tutor import checks
from tutor import reference as ref
from tutor.checks import nb12_gpt2
from tutor.course import catalog
from tutor.reference import GPT, GPTConfig

NAMES = [e.name for e in catalog.exercises(12)]  # an exercise added to the catalog is tested here too
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", autouse=True)
def _tiny_built_once():
    nb12_gpt2.tiny()  # imports transformers once (seconds): the checks themselves are then timed


@pytest.mark.parametrize("name", NAMES)
def test_accepts_reference(name):
    result = passes(getattr(checks, name), getattr(ref, name))
    if name != "split_qkv":
        assert "against transformers' GPT2LMHeadModel" in str(result)


@pytest.mark.parametrize("name", NAMES)
def test_stub_is_not_done(name):
    not_done(getattr(checks, name), stub)


@pytest.mark.parametrize("name", NAMES)
def test_not_a_function(name):
    result = getattr(checks, name)(None)
    assert result.status == "failed" and "pass your" in result.summary


@pytest.mark.parametrize("name", NAMES)
def test_checks_are_fast(name):
    assert getattr(checks, name)(getattr(ref, name)).seconds < 0.5


def test_the_tiny_model_shows_what_it_must():
    """std 0.3: the exact GELU and an untransposed square c_proj move the logits far beyond the tolerance."""
    tiny = nb12_gpt2.tiny()
    good = nb12_gpt2._reference_logits(tiny.fresh())
    assert (good - tiny.logits).abs().max() < 1e-5
    exact = nb12_gpt2._reference_logits(tiny.fresh(), gelu_approximate="none")
    assert (exact - tiny.logits).abs().max() > 5 * nb12_gpt2.LOGITS_ATOL
    swapped = {k: (v.t() if k.endswith("attn.c_proj.weight") else v) for k, v in tiny.fresh().items()}
    assert (nb12_gpt2._reference_logits(swapped) - tiny.logits).abs().max() > 0.1


def test_without_transformers_the_reference_stands_in(monkeypatch):
    def missing(*args):
        raise ImportError("No module named 'transformers'")

    monkeypatch.setattr(nb12_gpt2, "_from_transformers", missing)
    nb12_gpt2.tiny.cache_clear()
    try:
        assert nb12_gpt2.tiny().source == "reference"
        for name in NAMES:
            result = passes(getattr(checks, name), getattr(ref, name))
            assert name == "split_qkv" or "pip install transformers" in str(result)
        rejects(checks.load_gpt2, lg_exact_gelu, "exact GELU", "approximate='tanh'")
        rejects(checks.to_linear, tl_by_shape, "square", "decide by the name")
    finally:
        nb12_gpt2.tiny.cache_clear()


# --- course_names --------------------------------------------------------------------------------------------------

RENAMES = {"ln_1": "ln1", "ln_2": "ln2", "attn.c_proj": "attn.out_proj", "mlp.c_fc": "mlp.fc",
           "mlp.c_proj": "mlp.proj"}
TOP = {"wte.weight": "tok_emb.weight", "wpe.weight": "pos_emb.weight", "ln_f.weight": "ln_f.weight",
       "ln_f.bias": "ln_f.bias", "lm_head.weight": "head.weight"}


def _names(name, *, prefix=True, skip=r"h\.\d+\.attn\.(bias|masked_bias)", qkv="qkv", top=TOP, renames=RENAMES,
           unknown="raise", fused=False, layer=r"\d+"):
    if prefix:
        name = name.removeprefix("transformer.")
    if name in top:
        return [top[name]]
    if re.fullmatch(skip, name) if skip.startswith("h") else name.endswith(skip):
        return []
    match = re.fullmatch(rf"h\.({layer})\.(.+)\.(weight|bias)", name)
    if match and match.group(2) == "attn.c_attn":
        layer, _, kind = match.groups()
        if fused:
            return [f"blocks.{layer}.attn.qkv_proj.{kind}"]
        return [f"blocks.{layer}.attn.{p}_proj.{kind}" for p in qkv]
    if match and match.group(2) in renames:
        layer, module, kind = match.groups()
        return [f"blocks.{layer}.{renames[module]}.{kind}"]
    if unknown == "skip":
        return []
    if unknown == "keyerror":
        raise KeyError(name)
    raise ValueError(f"unexpected tensor {name!r}")


def cn_keeps_prefix(name):
    return _names(name, prefix=False)


def cn_endswith_bias(name):  # c_attn.bias ends with "attn.bias" too
    return _names(name, skip="attn.bias") if not name.endswith("masked_bias") else []


def cn_kqv(name):
    return _names(name, qkv="kqv")


def cn_fused(name):
    return _names(name, fused=True)


def cn_out_proj_everywhere(name):  # name.replace("c_proj", "out_proj") for both c_proj
    return _names(name, renames={**RENAMES, "mlp.c_proj": "mlp.out_proj"})


def cn_buffers_loaded(name):
    bare = name.removeprefix("transformer.")
    if re.fullmatch(r"h\.\d+\.attn\.bias", bare):
        return [f"blocks.{bare.split('.')[1]}.attn.bias"]
    return _names(name)


def cn_unknown_skipped(name):
    return _names(name, unknown="skip")


def cn_keyerror(name):
    return _names(name, unknown="keyerror")


def cn_lm_head_skipped(name):  # "the head is tied, so skip it"
    return [] if name == "lm_head.weight" else _names(name)


def cn_string(name):
    names = _names(name)
    return names[0] if len(names) == 1 else names


def cn_layer_plus_one(name):
    return [re.sub(r"blocks\.(\d+)", lambda m: f"blocks.{int(m.group(1)) + 1}", n) for n in _names(name)]


def cn_no_rename(name):
    return _names(name, renames={"ln_1": "ln_1", "ln_2": "ln_2", "attn.c_proj": "attn.out_proj", "mlp.c_fc": "mlp.fc",
                                 "mlp.c_proj": "mlp.proj"})


def cn_one_digit(name):  # the tiny model has blocks 0 and 1 only; GPT-2 small has 10 and 11 too
    return _names(name, layer=r"\d", skip=r"h\.\d\.attn\.(bias|masked_bias)")


def test_course_names_rejects():
    rejects(checks.course_names, cn_keeps_prefix, "transformer.", "removeprefix")
    rejects(checks.course_names, cn_endswith_bias, "c_attn's bias", "match the whole name")
    rejects(checks.course_names, cn_kqv, "q | k | v", "q_proj name first")
    rejects(checks.course_names, cn_fused, "three of your parameters")
    rejects(checks.course_names, cn_out_proj_everywhere, "mlp.c_proj is the MLP's second layer (mlp.proj)")
    rejects(checks.course_names, cn_buffers_loaded, "causal mask", "return []")
    rejects(checks.course_names, cn_unknown_skipped, "a name GPT-2 does not have", "must not be skipped")
    rejects(checks.course_names, cn_keyerror, "raised KeyError, not ValueError")
    rejects(checks.course_names, cn_lm_head_skipped, "lm_head.weight is the head", "['head.weight']")
    rejects(checks.course_names, cn_string, "not a list of names", "return a list")
    rejects(checks.course_names, cn_layer_plus_one, "layer index is off")
    rejects(checks.course_names, cn_no_rename, "the course's names", "ln1")
    rejects(checks.course_names, cn_one_digit, "h.10.attn.c_attn.weight", "h.0 to h.11", r"\d+")


# --- to_linear ------------------------------------------------------------------------------------------------------


def tl_by_shape(name, tensor):  # "transpose what does not fit": the square attn.c_proj fits either way
    if "c_" in name and tensor.dim() == 2 and tensor.shape[0] != tensor.shape[1]:
        return tensor.t()
    return tensor


def tl_forgets_attn_c_proj(name, tensor):
    if name.endswith(("c_attn.weight", "c_fc.weight", "mlp.c_proj.weight")):
        return tensor.t()
    return tensor


def tl_all_2d(name, tensor):
    return tensor.t() if tensor.dim() == 2 else tensor


def tl_reshape(name, tensor):
    if ref.to_linear(name, tensor) is not tensor:
        return tensor.reshape(tensor.shape[1], tensor.shape[0])
    return tensor


def tl_in_place(name, tensor):
    if ref.to_linear(name, tensor) is not tensor:
        return tensor.t_()
    return tensor


def tl_biases_too(name, tensor):
    if re.search(r"\.(c_attn|c_proj|c_fc)\.", name):
        return tensor.transpose(0, 1)
    return tensor


def tl_prefixed_only(name, tensor):
    if re.fullmatch(r"transformer\.h\.\d+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight", name):
        return tensor.t()
    return tensor


def tl_float(name, tensor):
    return ref.to_linear(name, tensor).float()


def tl_none(name, tensor):
    ref.to_linear(name, tensor)


def test_to_linear_rejects():
    rejects(checks.to_linear, tl_by_shape, "not transposed", "square", "decide by the name")
    rejects(checks.to_linear, tl_forgets_attn_c_proj, "attn.c_proj.weight was not transposed", "in == out")
    rejects(checks.to_linear, tl_all_2d, "not a Conv1D weight", "embeddings")
    rejects(checks.to_linear, tl_reshape, "reshape or view is not a transpose")
    rejects(checks.to_linear, tl_in_place, "changed the tensor it was given", "t_()")
    rejects(checks.to_linear, tl_biases_too, "biases are 1-D")
    rejects(checks.to_linear, tl_prefixed_only, "'h.0.attn.c_attn.weight'", "was not transposed")
    rejects(checks.to_linear, tl_float, "dtype torch.float32, expected torch.bfloat16", "keep the input's dtype")
    rejects(checks.to_linear, tl_none, "should be a torch.Tensor", "forget `return`")


# --- split_qkv ------------------------------------------------------------------------------------------------------


def sq_wrong_axis(t):
    return t.chunk(3, dim=-1)


def sq_kqv(t):
    q, k, v = t.chunk(3, dim=0)
    return k, q, v


def sq_interleaved(t):
    return t[0::3], t[1::3], t[2::3]


def sq_view(t):  # right on a contiguous tensor; c_attn's weight after to_linear is a transposed view
    d = t.shape[0] // 3
    return [piece.view(d, *t.shape[1:]) for piece in t.view(3, -1)]


def sq_split_3(t):
    return torch.split(t, 3)


def sq_list_of_two(t):
    d = t.shape[0] // 3
    return [t[:d], t[d:]]


def sq_split_last(t):  # right for the weight [3d, d], one piece for the bias [3d]
    q, k, v = t.split(t.shape[-1])
    return q, k, v


def sq_split_last_returned(t):
    return t.split(t.shape[-1])


def sq_string(t):
    return "q, k, v"


def test_split_qkv_rejects():
    rejects(checks.split_qkv, sq_wrong_axis, "input axis (dim 1)", "output axis, dim 0")
    rejects(checks.split_qkv, sq_kqv, "order k, q, v", "q | k | v")
    rejects(checks.split_qkv, sq_interleaved, "every third row", "contiguous blocks")
    rejects(checks.split_qkv, sq_view, "non-contiguous", ".view() cannot always merge", "chunk")
    for wrong in (sq_split_last, sq_split_last_returned):
        result = rejects(checks.split_qkv, wrong, "a bias [18]", "tensor.shape[-1] is 3d", "shape[0] // 3")
        assert "view" not in str(result)
    rejects(checks.split_qkv, sq_split_3, "pieces, not 3", "pieces of 3 rows")
    rejects(checks.split_qkv, sq_list_of_two, "2 pieces, not 3")
    rejects(checks.split_qkv, sq_string, "not three tensors")


def test_split_qkv_accepts_a_list_or_a_stacked_tensor():
    passes(checks.split_qkv, lambda t: list(t.split(t.shape[0] // 3)))
    passes(checks.split_qkv, lambda t: t.reshape(3, t.shape[0] // 3, *t.shape[1:]))


# --- load_gpt2 ------------------------------------------------------------------------------------------------------


def _layers(shapes):
    return 1 + max(int(k.split(".")[1]) for k in shapes if k.startswith("h."))


def make_loader(*, config=None, to_linear=ref.to_linear, split=ref.split_qkv, names=ref.course_names,
                strict=True, check_shapes=True, skip_unplaceable=False, layers=_layers, heads=None, guard=True):
    """A learner's loader, built from parts: each keyword swaps in one mistake."""

    def load(state_dict, n_heads):
        shapes = {k.removeprefix("transformer."): v.shape for k, v in state_dict.items()}
        V, d = shapes["wte.weight"]
        n_layers = layers(shapes)
        if heads is not None:
            n_heads = heads(d)
        sizes = dict(vocab_size=V, max_len=shapes["wpe.weight"][0], d_model=d, n_heads=n_heads, n_layers=n_layers)
        model = GPT(config(**sizes) if config else GPTConfig.gpt2(**sizes))
        params = dict(model.named_parameters())
        filled = set()
        for key, tensor in state_dict.items():
            course = names(key)
            if not course:
                continue
            tensor = to_linear(key, tensor)
            pieces = split(tensor) if len(course) == 3 else [tensor]
            for name, piece in zip(course, pieces):
                if name == "head.weight" and model.config.tie_head:
                    continue
                if name not in params and guard:
                    if skip_unplaceable:
                        continue
                    raise ValueError(f"unexpected tensor {key}")
                if check_shapes and piece.shape != params[name].shape:
                    raise ValueError(f"{key}: shape {tuple(piece.shape)}, expected {tuple(params[name].shape)}")
                with torch.no_grad():
                    params[name].copy_(piece)
                filled.add(name)
        missing = [n for n in params if n not in filled]
        if strict and missing:
            raise ValueError(f"missing {missing}")
        return model

    return load


def _no_attn_c_proj(key, tensor):
    return tl_forgets_attn_c_proj(key, tensor)


def _kqv_split(t):
    q, k, v = t.chunk(3, dim=0)
    return k, q, v


lg_exact_gelu = make_loader(config=lambda **s: GPTConfig(**s, attn_bias=True, tie_head=True))
lg_untransposed_c_proj = make_loader(to_linear=_no_attn_c_proj)
lg_kqv = make_loader(split=_kqv_split)
lg_interleaved = make_loader(split=sq_interleaved)
lg_untied = make_loader(config=lambda **s: GPTConfig.gpt2(**s, tie_head=False))
lg_no_shape_check = make_loader(check_shapes=False)
lg_keyerror = make_loader(names=cn_keyerror)
lg_buffers_not_skipped = make_loader(names=cn_buffers_loaded)
lg_no_attn_bias = make_loader(config=lambda **s: GPTConfig.gpt2(**s, attn_bias=False), skip_unplaceable=True)
lg_prefix_only = make_loader(names=cn_keeps_prefix)
lg_layers_off_by_one = make_loader(layers=lambda shapes: _layers(shapes) - 1)
lg_heads_from_width = make_loader(heads=lambda d: d // 64)  # GPT-2 small: 768 // 64 = 12; the tiny one: 24 // 64 = 0
lg_twelve_heads = make_loader(heads=lambda d: 12)
def _count_layers(shapes):  # a gap (h.0, h.2) makes it one too few
    return len({k.split(".")[1] for k in shapes if k.startswith("h.")})


lg_counts_layers_unguarded = make_loader(layers=_count_layers, guard=False)


def lg_load_state_dict_not_strict(state_dict, n_heads):
    """Renames everything, then lets load_state_dict(strict=False) sort it out: a missing tensor goes unnoticed."""
    shapes = {k.removeprefix("transformer."): v.shape for k, v in state_dict.items()}
    V, d = shapes["wte.weight"]
    n_layers = 1 + max(int(k.split(".")[1]) for k in shapes if k.startswith("h."))
    model = GPT(GPTConfig.gpt2(vocab_size=V, max_len=shapes["wpe.weight"][0], d_model=d, n_heads=n_heads,
                               n_layers=n_layers))
    renamed = {}
    for key, tensor in state_dict.items():
        try:
            course = ref.course_names(key)
        except ValueError:
            continue
        tensor = ref.to_linear(key, tensor)
        pieces = ref.split_qkv(tensor) if len(course) == 3 else [tensor]
        renamed.update(zip(course, pieces))
    model.load_state_dict(renamed, strict=False)
    return model


def lg_returns_nothing(state_dict, n_heads):
    ref.load_gpt2(state_dict, n_heads)


def test_load_gpt2_rejects():
    rejects(checks.load_gpt2, lg_exact_gelu, "exact GELU", "approximate='tanh'")
    rejects(checks.load_gpt2, lg_untransposed_c_proj, "square attn.c_proj weights were not transposed")
    rejects(checks.load_gpt2, lg_kqv, "q and k are swapped")
    rejects(checks.load_gpt2, lg_interleaved, "interleaved rows", "contiguous blocks")
    rejects(checks.load_gpt2, lg_untied, "head is not tied", "tie_head=True")
    rejects(checks.load_gpt2, lg_no_shape_check, "wrong shape", "accepted it without an error", "broadcasts")
    rejects(checks.load_gpt2, lg_keyerror, "raised KeyError, not a ValueError")
    rejects(checks.load_gpt2, lg_buffers_not_skipped, "the hub's model.safetensors", "skip the causal-mask buffers")
    rejects(checks.load_gpt2, lg_no_attn_bias, "biases of the q, k, v and out projections were not loaded")
    rejects(checks.load_gpt2, lg_prefix_only, "transformer.wte.weight", "removeprefix")
    rejects(checks.load_gpt2, lg_load_state_dict_not_strict, "is missing", "strict=False")
    rejects(checks.load_gpt2, lg_returns_nothing, "returned None")
    result = rejects(checks.load_gpt2, lg_layers_off_by_one, "names block 1, the last one", "largest N plus one")
    assert "removeprefix" not in str(result)
    result = rejects(checks.load_gpt2, lg_heads_from_width, "ZeroDivisionError", "use the n_heads you are given")
    assert "named wrongly" not in str(result)
    rejects(checks.load_gpt2, lg_twelve_heads, "built a model with n_heads=12", "pass the n_heads argument")
    rejects(checks.load_gpt2, lg_counts_layers_unguarded, "skips block h.1", "raised KeyError, not a ValueError")


def test_load_gpt2_a_counting_loader_with_the_guard_refuses_a_gap_by_name():
    # step 3 of the exercise ("a name your model has no parameter for") is what refuses h.2 here
    counting = make_loader(layers=_count_layers)
    passes(checks.load_gpt2, counting)


def test_load_gpt2_strictness_message_names_the_tensor():
    def vague(state_dict, n_heads):
        try:
            return ref.load_gpt2(state_dict, n_heads)
        except ValueError:
            raise ValueError("bad checkpoint") from None

    rejects(checks.load_gpt2, vague, "does not name the tensor")


def test_a_loader_that_does_not_size_the_model_is_told_to():
    def load_gpt2(state_dict, n_heads):
        model = ref.GPT(ref.GPTConfig.gpt2(n_heads=n_heads))  # GPT-2 small's sizes, whatever the tensors say
        params = dict(model.named_parameters())
        for hf_name, tensor in state_dict.items():
            name = hf_name.removeprefix("transformer.")
            for course, piece in zip(ref.course_names(name), [tensor]):
                if course in params and params[course].shape != ref.to_linear(name, piece).shape:
                    raise ValueError(f"{hf_name}: shape {tuple(piece.shape)} does not fit {course} "
                                     f"{tuple(params[course].shape)}")
        return model

    rejects(checks.load_gpt2, load_gpt2, "size the model from the tensors")

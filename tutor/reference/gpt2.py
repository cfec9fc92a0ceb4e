"""OpenAI's GPT-2 in the course's GPT (notebook 12): Hugging Face's tensor names and layouts, and a strict loader.

Hugging Face's ``GPT2LMHeadModel`` differs from the course's ``GPT`` (with ``GPTConfig.gpt2()``'s switches) only in
how it stores the same numbers:

- names: ``transformer.h.3.ln_1.weight`` is ``blocks.3.ln1.weight``, ``transformer.wte.weight`` is ``tok_emb.weight``
  (the checkpoint on the hub has no ``transformer.`` prefix; ``GPT2LMHeadModel.state_dict()`` has it);
- the attention and MLP projections are ``Conv1D`` layers, whose weight is ``[in, out]``: the transpose of
  ``nn.Linear``'s ``[out, in]``;
- q, k and v are one fused ``attn.c_attn`` (``[d, 3d]``: q | k | v along the output axis);
- the head ``lm_head.weight`` is tied to ``wte.weight`` (the hub's checkpoint does not store it at all);
- some ``transformers`` versions store the causal mask as buffers ``attn.bias`` and ``attn.masked_bias``: not
  weights, skipped by name.

``course_names``, ``to_linear``, ``split_qkv`` and ``load_gpt2`` are the notebook's four exercises;
``gpt2_from_hf`` is the loader for any Hugging Face GPT-2 model or state dict.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

import torch

from tutor.reference.model import GPT, GPTConfig

PREFIX = "transformer."
# GPT-2's Conv1D layers: their weights are [in, out]
CONV1D = re.compile(r"h\.\d+\.(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.weight")
# the causal-mask buffers some transformers versions save (and the hub's checkpoint holds): not weights
MASK_BUFFERS = re.compile(r"h\.\d+\.attn\.(bias|masked_bias)")
TOP = {"wte.weight": "tok_emb.weight", "wpe.weight": "pos_emb.weight", "ln_f.weight": "ln_f.weight",
       "ln_f.bias": "ln_f.bias", "lm_head.weight": "head.weight"}
BLOCK = {"ln_1": "ln1", "ln_2": "ln2", "attn.c_proj": "attn.out_proj", "mlp.c_fc": "mlp.fc", "mlp.c_proj": "mlp.proj"}
TOP_BACK, BLOCK_BACK = ({course: hf for hf, course in table.items()} for table in (TOP, BLOCK))
# Hugging Face's activation names for the GELU (transformers.activations.ACT2FN)
GELUS = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu_fast": "tanh", "gelu": "none"}


def course_names(hf_name: str) -> list[str]:
    """The course's parameter names that Hugging Face's tensor ``hf_name`` fills: one name, three for the fused
    ``attn.c_attn`` (q, k, v in that order), none for a causal-mask buffer. A name GPT-2 does not have is a
    ``ValueError`` naming it. The ``transformer.`` prefix is optional."""
    name = hf_name.removeprefix(PREFIX)
    if name in TOP:
        return [TOP[name]]
    if MASK_BUFFERS.fullmatch(name):
        return []
    match = re.fullmatch(r"h\.(\d+)\.(ln_1|ln_2|attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.(weight|bias)", name)
    if match is None:
        raise ValueError(f"unexpected tensor {hf_name!r}: GPT-2 has no such weight")
    layer, module, kind = match.groups()
    if module == "attn.c_attn":
        return [f"blocks.{layer}.attn.{p}_proj.{kind}" for p in "qkv"]
    return [f"blocks.{layer}.{BLOCK[module]}.{kind}"]


def to_linear(hf_name: str, tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in the layout of the course's ``nn.Linear``: the weights of GPT-2's ``Conv1D`` layers (``c_attn``,
    ``c_proj``, ``c_fc``: ``[in, out]``) transposed to ``[out, in]``, every other tensor as it is. Decided by the
    name: ``attn.c_proj`` is square, so its shape cannot tell."""
    if CONV1D.fullmatch(hf_name.removeprefix(PREFIX)):
        return tensor.t()
    return tensor


def split_qkv(tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused ``c_attn`` weight ``[3d, d]`` (after ``to_linear``) or bias ``[3d]`` cut into q, k, v: three equal
    blocks along the first (output) axis, in that order."""
    return tuple(tensor.chunk(3, dim=0))


def hf_name(course_name: str) -> str:
    """The Hugging Face name (without the ``transformer.`` prefix) of the tensor that fills ``course_name``."""
    if course_name in TOP_BACK:
        return TOP_BACK[course_name]
    match = re.fullmatch(r"blocks\.(\d+)\.(.+)\.(weight|bias)", course_name)
    if match is None or match.group(2) not in (*BLOCK_BACK, "attn.q_proj", "attn.k_proj", "attn.v_proj"):
        raise ValueError(f"{course_name!r} is not a parameter of the course's GPT")
    layer, module, kind = match.groups()
    if module in ("attn.q_proj", "attn.k_proj", "attn.v_proj"):
        return f"h.{layer}.attn.c_attn.{kind}"
    return f"h.{layer}.{BLOCK_BACK[module]}.{kind}"


def load_gpt2(state_dict, n_heads: int) -> GPT:
    """A course GPT with GPT-2's switches, sized from the tensors of ``state_dict`` (Hugging Face's names, with or
    without the ``transformer.`` prefix), holding exactly those tensors. A missing, unexpected or mis-shaped
    tensor is a ``ValueError`` naming it; the causal-mask buffers are skipped."""
    shapes = {name.removeprefix(PREFIX): tensor.shape for name, tensor in state_dict.items()}
    for needed in ("wte.weight", "wpe.weight"):
        if needed not in shapes:
            raise ValueError(f"missing tensor {needed!r}: the model's size is read from it")
    vocab_size, d_model = shapes["wte.weight"]
    layers = [int(name.split(".")[1]) for name in shapes if re.match(r"h\.\d+\.", name)]
    config = GPTConfig.gpt2(vocab_size=vocab_size, max_len=shapes["wpe.weight"][0], d_model=d_model,
                            n_heads=n_heads, n_layers=max(layers) + 1 if layers else 0)
    return _fill(GPT(config), state_dict)


def _fill(model: GPT, state_dict) -> GPT:
    """Copy every tensor of ``state_dict`` into ``model``, strictly; returns the model in eval mode."""
    params = dict(model.named_parameters())  # a tied head is one parameter, named tok_emb.weight
    tied = getattr(model.config, "tie_head", False)
    filled, seen, head = {}, {}, None
    for key, tensor in state_dict.items():
        names = course_names(key)
        bare = key.removeprefix(PREFIX)
        if bare in seen:
            raise ValueError(f"{key!r} and {seen[bare]!r} name the same tensor")
        seen[bare] = key
        if not names:
            continue  # a causal-mask buffer
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"{key!r} is a {type(tensor).__name__}, not a tensor")
        tensor = to_linear(key, tensor)
        pieces = split_qkv(tensor) if len(names) == 3 else (tensor,)
        for name, piece in zip(names, pieces):
            if name == "head.weight" and tied:
                head = (key, piece)  # the same matrix as wte: compared below
                continue
            if name not in params:
                raise ValueError(f"unexpected tensor {key!r}: the model has no {name!r} "
                                 f"({model.config.n_layers} layers, tie_head={tied})")
            _same_shape(key, name, piece, params[name])
            with torch.no_grad():
                params[name].copy_(piece)
            filled[name] = key
    missing = [name for name in params if name not in filled]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ValueError(f"missing tensor {hf_name(missing[0])!r} for the course's {missing[0]!r}{more}")
    if head is not None:
        key, weight = head
        _same_shape(key, "head.weight", weight, params["tok_emb.weight"])
        if not torch.equal(weight.to(params["tok_emb.weight"].dtype), params["tok_emb.weight"].detach()):
            raise ValueError(f"{key!r} differs from wte.weight, but the head is tied (tie_head=True): load it into "
                             f"a model with tie_head=False")
    return model.eval()


def _same_shape(key, name, tensor, param):
    if tuple(tensor.shape) != tuple(param.shape):
        hint = " (a Conv1D weight that was not transposed?)" if tuple(tensor.shape)[::-1] == tuple(param.shape) else ""
        raise ValueError(f"{key!r} has shape {tuple(tensor.shape)}, but the course's {name!r} is "
                         f"{tuple(param.shape)}{hint}")


def config_from_hf(hf_config, **changes) -> GPTConfig:
    """The ``GPTConfig`` of a Hugging Face ``GPT2Config``; a variant the course's GPT cannot run is a ``ValueError``."""
    activation = getattr(hf_config, "activation_function", "gelu_new")
    if activation not in GELUS:
        raise ValueError(f"activation {activation!r}: the course's GPT has the GELU only ({', '.join(GELUS)})")
    if getattr(hf_config, "n_inner", None) not in (None, 4 * hf_config.n_embd):
        raise ValueError(f"n_inner={hf_config.n_inner}: the course's MLP is 4 x d_model wide")
    if getattr(hf_config, "scale_attn_by_inverse_layer_idx", False) or not getattr(hf_config, "scale_attn_weights",
                                                                                   True):
        raise ValueError("this GPT-2 scales its attention differently from 1/sqrt(d_head)")
    config = GPTConfig.gpt2(vocab_size=hf_config.vocab_size, max_len=hf_config.n_positions,
                            d_model=hf_config.n_embd, n_heads=hf_config.n_head, n_layers=hf_config.n_layer,
                            gelu_approximate=GELUS[activation], ln_eps=hf_config.layer_norm_epsilon,
                            tie_head=bool(getattr(hf_config, "tie_word_embeddings", True)))
    return replace(config, **changes)


def gpt2_from_hf(hf_model_or_state_dict, config: GPTConfig | None = None) -> GPT:
    """The course's GPT holding a Hugging Face GPT-2: a ``GPT2LMHeadModel`` or ``GPT2Model``, or a state dict
    (``model.state_dict()``, or the hub's ``model.safetensors``). ``config`` defaults to the model's own config,
    or, for a state dict, to GPT-2's switches sized from the tensors (``d_head = 64``, as in every GPT-2).

    Strict: a missing, unexpected or mis-shaped tensor is a ``ValueError`` naming it; the causal-mask buffers
    (``attn.bias``, ``attn.masked_bias``) are skipped by name. Returns the model in eval mode."""
    source = hf_model_or_state_dict
    if isinstance(source, torch.nn.Module):
        if config is None and getattr(source, "config", None) is not None:
            config = config_from_hf(source.config)
        state_dict = source.state_dict()
    elif isinstance(source, Mapping):
        state_dict = dict(source)
    else:
        raise ValueError(f"expected a Hugging Face GPT-2 model or a state dict, got {type(source).__name__}")
    if config is None:
        width = state_dict.get("wte.weight", state_dict.get(PREFIX + "wte.weight"))
        if width is None:
            raise ValueError("missing tensor 'wte.weight': the model's size is read from it")
        if width.shape[1] % 64:
            raise ValueError(f"d_model={width.shape[1]} is not a multiple of GPT-2's d_head = 64: pass config=")
        return load_gpt2(state_dict, n_heads=width.shape[1] // 64)
    return _fill(GPT(config), state_dict)


def hf_state_dict(model: GPT, prefix: str = PREFIX, head: bool = True) -> dict[str, torch.Tensor]:
    """The inverse: ``model``'s parameters under Hugging Face's names and in its layouts (``Conv1D`` weights
    ``[in, out]``, q | k | v fused), as ``GPT2LMHeadModel.state_dict()`` holds them (``prefix=""`` and
    ``head=False``: as the hub's checkpoint does)."""
    params = dict(model.state_dict())
    out = {}
    for name, tensor in params.items():
        if name == "head.weight" and not head:
            continue
        key = ("" if name == "head.weight" else prefix) + hf_name(name)
        if re.search(r"\.attn\.[kv]_proj\.", name):
            continue  # joined with q below
        if re.search(r"\.attn\.q_proj\.", name):
            tensor = torch.cat([params[name], params[name.replace("q_proj", "k_proj")],
                                params[name.replace("q_proj", "v_proj")]], dim=0)
        out[key] = tensor.t().contiguous() if CONV1D.fullmatch(key.removeprefix(prefix)) else tensor.clone()
    return out

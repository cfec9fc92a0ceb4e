"""Hugging Face's own GPT-2 (``transformers.GPT2LMHeadModel``), the model the course's GPT is compared with (notebook
12): the pretrained one, a random one of any shape (no download), and the names and shapes of its tensors.

``transformers`` is imported only when used (it takes seconds to import); a missing one is a ``None`` and one line,
never an exception, where the notebook can go on without it.
"""

from __future__ import annotations

import warnings

import torch

from tutor.data.gpt2 import INSTALL, Weights
from tutor.reference.gpt2 import hf_state_dict, load_gpt2
from tutor.reference.lora import LoRALinear, add_lora, merge_lora
from tutor.reference.model import GPT, GPTConfig


def _say(line: str, verbose: bool) -> None:
    if verbose:
        print(line)


def pretrained_gpt2(weights: Weights, verbose: bool = True):
    """Hugging Face's own ``GPT2LMHeadModel`` of these weights (from the cache), in eval mode; ``None`` with one
    line if transformers is missing or cannot load it."""
    try:
        from transformers import GPT2LMHeadModel
        from transformers.utils import logging as hf_logging
    except ImportError:
        _say(f"transformers is not installed ({INSTALL}), so the comparison with it is skipped.", verbose)
        return None
    # Quiet: the hub's file holds the causal-mask buffers h.N.attn.masked_bias, which transformers reports as
    # unexpected keys in a table; the weights themselves load.
    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        return GPT2LMHeadModel.from_pretrained(weights.repo).eval()
    except Exception as error:  # noqa: BLE001 - the comparison is skipped with one line, never an exception
        _say(f"transformers' GPT-2 could not be loaded ({type(error).__name__}: {str(error)[:120]}), so the "
             f"comparison with it is skipped.", verbose)
        return None
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()


def gpt2_config(config: GPTConfig):
    """The ``transformers.GPT2Config`` of a course config with GPT-2's switches."""
    from transformers import GPT2Config

    last = config.vocab_size - 1
    return GPT2Config(vocab_size=config.vocab_size, n_positions=config.max_len, n_embd=config.d_model,
                      n_layer=config.n_layers, n_head=config.n_heads, layer_norm_epsilon=config.ln_eps,
                      activation_function="gelu_new" if config.gelu_approximate == "tanh" else "gelu",
                      tie_word_embeddings=config.tie_head, bos_token_id=min(50256, last), eos_token_id=min(50256, last))


def random_gpt2(config: GPTConfig, std: float | None = None, seed: int = 0):
    """A ``transformers.GPT2LMHeadModel`` of ``config``'s shape, in eval mode, with GPT-2's random initialisation
    (std 0.02), or every weight redrawn with ``std`` (LayerNorm weights 1 ± ``std``), as the checks do so that
    small differences such as the GELU's show in the logits."""
    try:
        from transformers import GPT2LMHeadModel
    except ImportError as error:
        raise ImportError(f"transformers is not installed: {INSTALL}") from error
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT2LMHeadModel(gpt2_config(config)).eval()
        if std is not None:
            with torch.no_grad():
                for name, p in model.named_parameters():
                    is_norm_weight = ".ln_" in name and name.endswith(".weight")
                    p.copy_((1.0 if is_norm_weight else 0.0) + std * torch.randn_like(p))
    return model


def shapes(config: GPTConfig) -> dict[str, torch.Size]:
    """The names and shapes of ``GPT2LMHeadModel.state_dict()`` for ``config``, without memory (the meta device);
    from the course's ``hf_state_dict`` when transformers is not installed (the same names, in the same order)."""
    with torch.device("meta"):
        try:
            state_dict = random_gpt2(config).state_dict()
        except ImportError:
            state_dict = hf_state_dict(GPT(config))
    return {name: tensor.shape for name, tensor in state_dict.items()}


def lora_against_peft(add_lora_fn=None, merge_fn=None, lora_class=None, *, r: int = 4, alpha: float = 8.0,
                      verbose: bool = True, seed: int = 0) -> dict | None:
    """The course's LoRA against Hugging Face's PEFT (notebook 13) on a random tiny GPT-2 (no download): PEFT's
    ``LoraConfig(target_modules=["c_attn", "c_fc"])`` on ``transformers``' model, and ``add_lora_fn`` on the same
    weights loaded into the course's GPT (q, k, v and fc), with PEFT's factors copied in (its ``B`` made random, so the
    update shows; c_attn's one ``B`` is the three of q, k and v stacked, sharing its ``A``). Returns the largest logit
    differences ``{"lora": ..., "merged": ..., "update": ...}`` (``merged``: ``merge_fn`` on every LoRA layer against
    PEFT's ``merge_and_unload()``; ``update``: how far the LoRA moved PEFT's logits) and the parameters each trains
    (``trainable_peft``, ``trainable_course``), or ``None`` with one line when transformers or peft is missing."""
    try:
        import peft
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as error:
        _say(f"{error.name} is not installed (pip install transformers peft), so the comparison with PEFT is "
             f"skipped.", verbose)
        return None
    add_lora_fn, merge_fn, lora_class = add_lora_fn or add_lora, merge_fn or merge_lora, lora_class or LoRALinear
    d, heads, layers, vocab = 32, 4, 2, 50
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # transformers' own deprecation notices, raised inside PEFT
        torch.manual_seed(seed)
        hf = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=16, n_embd=d, n_layer=layers, n_head=heads,
                                        bos_token_id=vocab - 1, eos_token_id=vocab - 1)).eval()
        ids = torch.randint(0, vocab, (2, 12))
        with torch.no_grad():
            plain = hf(ids).logits
        course = load_gpt2(hf.state_dict(), heads).eval()
        config = peft.LoraConfig(r=r, lora_alpha=alpha, target_modules=["c_attn", "c_fc"], lora_dropout=0.0,
                                 fan_in_fan_out=True, bias="none")
        theirs = peft.get_peft_model(hf, config).eval()
        add_lora_fn(course, ["q_proj", "k_proj", "v_proj", "fc"], r, alpha, lora_class=lora_class)
        trainable = [sum(p.numel() for p in m.parameters() if p.requires_grad) for m in (theirs, course)]
        with torch.no_grad():
            for i in range(layers):
                block, mine = theirs.base_model.model.transformer.h[i], course.blocks[i]
                for layer, targets in ((block.attn.c_attn, (mine.attn.q_proj, mine.attn.k_proj, mine.attn.v_proj)),
                                       (block.mlp.c_fc, (mine.mlp.fc,))):
                    A, B = layer.lora_A["default"].weight, layer.lora_B["default"].weight
                    B.copy_(0.1 * torch.randn(B.shape))
                    rows = B.shape[0] // len(targets)
                    for j, target in enumerate(targets):
                        target.A.copy_(A)
                        target.B.copy_(B[j * rows:(j + 1) * rows])
            theirs_logits, mine_logits = theirs(ids).logits, course(ids)
            merged_theirs = theirs.merge_and_unload()(ids).logits
            for name, module in list(course.named_modules()):
                if isinstance(module, lora_class):
                    parent, _, child = name.rpartition(".")
                    setattr(course.get_submodule(parent), child, merge_fn(module))
            merged_mine = course(ids)
    return {"lora": (mine_logits - theirs_logits).abs().max().item(),
            "merged": (merged_mine - merged_theirs).abs().max().item(),
            "update": (theirs_logits - plain).abs().max().item(), "trainable_peft": trainable[0],
            "trainable_course": trainable[1]}

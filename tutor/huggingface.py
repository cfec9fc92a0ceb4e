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


# --- notebook 14: attention patterns against transformers' and TransformerLens' -----------------------------------

PATTERN_CONFIG = dict(vocab_size=50, max_len=24, d_model=32, n_heads=4, n_layers=2)


def _tiny_gpt2(std: float, seed: int):
    """A random tiny ``GPT2LMHeadModel`` with eager attention (the one that can return its probabilities)."""
    model = random_gpt2(GPTConfig.gpt2(**PATTERN_CONFIG), std=std, seed=seed)
    model.set_attn_implementation("eager")
    return model


def patterns_against_transformers(capture_fn, load_fn=None, *, std: float = 0.3, seed: int = 0,
                                  verbose: bool = True) -> dict | None:
    """``capture_fn`` (``capture_patterns``) on a random tiny GPT-2 loaded into the course's GPT with ``load_fn``
    (notebook 12's ``load_gpt2``) against ``transformers``' own attentions (``output_attentions=True``, eager
    attention), every layer and head: ``{"largest": ..., "layers": L, "heads": H}``; ``None`` with one line without
    transformers."""
    try:
        hf = _tiny_gpt2(std, seed)
    except ImportError:
        _say(f"transformers is not installed ({INSTALL}), so the comparison with it is skipped.", verbose)
        return None
    course = (load_fn or load_gpt2)(hf.state_dict(), PATTERN_CONFIG["n_heads"]).eval()
    ids = torch.randint(0, PATTERN_CONFIG["vocab_size"], (3, 20), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        theirs = hf(ids, output_attentions=True).attentions
    mine = capture_fn(course, ids)
    largest = max((m.detach().float() - t.float()).abs().max().item() for m, t in zip(mine, theirs, strict=True))
    return {"largest": largest, "layers": len(theirs), "heads": theirs[0].shape[1]}


def tutorial_induction_scores(pattern: torch.Tensor, n: int) -> torch.Tensor:
    """ARENA's and TransformerLens' tutorial score of one layer, on ``[BOS] + n tokens + the same n``: the mean of
    the stripe ``pattern.diagonal(offset=1 - n)`` over the batch and its positions (queries ``n - 1`` to ``2n`` of
    the ``2n + 1``: the stripe starts two queries before the repeat)."""
    return pattern.diagonal(dim1=-2, dim2=-1, offset=1 - n).mean(dim=(0, 2))


def _tiny_tokenizer(vocab_size: int, folder: str):
    """A GPT-2 tokenizer of ``vocab_size`` tokens (``<|endoftext|>`` last), saved in ``folder`` (which must stay
    while it is used): TransformerLens' bridge wants one, and the real one would need a download."""
    import json

    from transformers import GPT2TokenizerFast

    tokens = {chr(ord("a") + i) if i < 26 else f"t{i}": i for i in range(vocab_size - 1)}
    tokens["<|endoftext|>"] = vocab_size - 1
    with open(f"{folder}/vocab.json", "w", encoding="utf-8") as f:
        json.dump(tokens, f)
    with open(f"{folder}/merges.txt", "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
    GPT2TokenizerFast(vocab_file=f"{folder}/vocab.json", merges_file=f"{folder}/merges.txt").save_pretrained(folder)
    return GPT2TokenizerFast.from_pretrained(folder)


def against_transformer_lens(capture_fn, score_fn, load_fn=None, *, n: int = 10, std: float = 0.3, seed: int = 0,
                             verbose: bool = True) -> dict | None:
    """The same random tiny GPT-2 in TransformerLens (``TransformerBridge`` around ``transformers``' model, no
    download) and in the course's GPT (``load_fn``): ``run_with_cache``'s ``cache["pattern", layer]`` against
    ``capture_fn``'s, on ``[BOS] + n random tokens + the same n``. Returns the largest differences of the patterns
    (``patterns``), of the tutorial's induction score computed on both (``tutorial``), and of ``score_fn`` (the
    learner's ``induction_scores``) on both, the first position left out (``scores``); with the two scores of the
    first layer (``tutorial_scores``, ``your_scores``). ``None``, with one line, without transformer-lens."""
    try:
        import transformer_lens as tl
    except ImportError:
        _say("transformer-lens is not installed (pip install transformer-lens, or the course's [interp] extra), so "
             "the comparison with TransformerLens is skipped.", verbose)
        return None
    from importlib.metadata import version

    if not hasattr(tl, "TransformerBridge"):  # TransformerLens 4 wraps transformers' own model
        _say(f"transformer-lens {version('transformer-lens')} has no TransformerBridge (version 4 or later has), so "
             f"the comparison with TransformerLens is skipped.", verbose)
        return None
    import copy
    import logging
    import tempfile

    hf = _tiny_gpt2(std, seed)
    course = (load_fn or load_gpt2)(hf.state_dict(), PATTERN_CONFIG["n_heads"]).eval()
    vocab = PATTERN_CONFIG["vocab_size"]
    first = torch.randint(0, vocab - 1, (4, n), generator=torch.Generator().manual_seed(seed))
    ids = torch.cat([torch.full((4, 1), vocab - 1), first, first], dim=1)
    quiet = logging.getLogger("transformer_lens").level
    logging.getLogger("transformer_lens").setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), tempfile.TemporaryDirectory() as folder:
            warnings.simplefilter("ignore")
            bridge = tl.TransformerBridge.boot_transformers("gpt2", hf_model=copy.deepcopy(hf),
                                                            tokenizer=_tiny_tokenizer(vocab, folder),
                                                            load_weights=False)
            with torch.no_grad():
                _, cache = bridge.run_with_cache(ids)
    finally:
        logging.getLogger("transformer_lens").setLevel(quiet)
    theirs = [cache["pattern", layer].detach() for layer in range(PATTERN_CONFIG["n_layers"])]
    mine = [p.detach() for p in capture_fn(course, ids)]
    tutorial_theirs = torch.stack([tutorial_induction_scores(p, n) for p in theirs])
    tutorial_mine = torch.stack([tutorial_induction_scores(p, n) for p in mine])
    scores_theirs = score_fn([p[:, :, 1:, 1:] for p in theirs], n)
    scores_mine = score_fn([p[:, :, 1:, 1:] for p in mine], n)
    return {"patterns": max((m - t).abs().max().item() for m, t in zip(mine, theirs, strict=True)),
            "tutorial": (tutorial_mine - tutorial_theirs).abs().max().item(),
            "scores": (scores_mine - scores_theirs).abs().max().item(),
            "tutorial_scores": tutorial_theirs, "your_scores": scores_mine, "version": version("transformer-lens")}

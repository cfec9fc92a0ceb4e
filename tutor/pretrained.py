"""OpenAI's GPT-2 weights from the Hugging Face hub (notebook 12), and what the notebook measures with them.

``gpt2_weights()`` finds ``model.safetensors`` of ``openai-community/gpt2`` (OpenAI's 124M GPT-2 as Hugging Face
hosts it, MIT licence; 548 MB in float32) in huggingface_hub's cache, or downloads it once, saying its size first
and showing huggingface_hub's progress bar; the cache is ``~/.cache/huggingface/hub`` (``HF_HOME`` moves it). With no
network, or ``TUTOR_OFFLINE=1`` / ``HF_HUB_OFFLINE=1``, and nothing cached, one line says so and it returns ``None``:
the notebook then runs on ``random_gpt2``, a randomly initialised model of GPT-2's shape, so that every cell runs.

``transformers`` and ``huggingface_hub`` are imported only when used (they take seconds to import), and a missing
one is a ``None`` and one line, never an exception.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from tutor import env
from tutor.reference.model import GPTConfig

REPOS = {"small": "openai-community/gpt2", "medium": "openai-community/gpt2-medium",
         "large": "openai-community/gpt2-large", "xl": "openai-community/gpt2-xl"}
WEIGHTS = "model.safetensors"
INSTALL = "pip install transformers huggingface_hub"


@dataclass(frozen=True)
class Weights:
    """Where GPT-2's weights are on this machine."""

    repo: str  # "openai-community/gpt2"
    path: Path  # model.safetensors in huggingface_hub's cache
    size: int  # bytes
    notice: str  # the line that said where they came from


def _say(line: str, verbose: bool) -> None:
    if verbose:
        print(line)


def _offline(offline: bool | None) -> bool:
    if offline is not None:
        return offline
    return env.offline() or env.is_true(os.environ.get("HF_HUB_OFFLINE"))


def gpt2_weights(size: str = "small", *, verbose: bool = True, offline: bool | None = None) -> Weights | None:
    """GPT-2's ``model.safetensors`` of ``size`` (``"small"``: 124M), from the cache or downloaded once; ``None``,
    with one line saying why, when it is not here and cannot be downloaded."""
    repo = REPOS[size]
    skipped = "so this notebook runs on a random model of GPT-2's shape, and its text is gibberish"
    try:
        import huggingface_hub as hub  # seconds to import: only here
    except ImportError:
        _say(f"huggingface_hub is not installed ({INSTALL}), {skipped}.", verbose)
        return None
    cached = hub.try_to_load_from_cache(repo, WEIGHTS)
    if isinstance(cached, str):
        path = Path(cached)
        notice = f"GPT-2 ({repo}): {WEIGHTS}, {path.stat().st_size / 1e6:,.0f} MB, from the cache ({path.parent})"
        _say(notice, verbose)
        return Weights(repo, path, path.stat().st_size, notice)
    if _offline(offline):
        _say(f"GPT-2's weights are not in the cache and downloads are off (TUTOR_OFFLINE or HF_HUB_OFFLINE), "
             f"{skipped}.", verbose)
        return None
    try:
        size_bytes = hub.get_hf_file_metadata(hub.hf_hub_url(repo, WEIGHTS), timeout=10).size
        _say(f"Downloading GPT-2 ({repo}): {WEIGHTS}, {size_bytes / 1e6:,.0f} MB, once; it is kept in "
             f"huggingface_hub's cache ({hub.constants.HF_HUB_CACHE}).", verbose)
        path = Path(hub.hf_hub_download(repo, WEIGHTS))  # shows its own progress bar
    except Exception as error:  # noqa: BLE001 - no network, a proxy, a full disk: say so in one line and go on
        reason = str(error).splitlines()[0][:120] if str(error) else type(error).__name__
        _say(f"GPT-2's weights could not be downloaded ({type(error).__name__}: {reason}), {skipped}.", verbose)
        return None
    notice = f"GPT-2 ({repo}): {WEIGHTS}, {path.stat().st_size / 1e6:,.0f} MB, downloaded to {path.parent}"
    _say(notice, verbose)
    return Weights(repo, path, path.stat().st_size, notice)


def read_weights(weights: Weights) -> dict[str, torch.Tensor]:
    """The tensors of ``model.safetensors`` by Hugging Face's names (no ``transformer.`` prefix, no ``lm_head``)."""
    from safetensors.torch import load_file  # comes with transformers and huggingface_hub

    return load_file(str(weights.path))


def transformers_gpt2(weights: Weights, verbose: bool = True):
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


def hf_config(config: GPTConfig):
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
        model = GPT2LMHeadModel(hf_config(config)).eval()
        if std is not None:
            with torch.no_grad():
                for name, p in model.named_parameters():
                    is_norm_weight = ".ln_" in name and name.endswith(".weight")
                    p.copy_((1.0 if is_norm_weight else 0.0) + std * torch.randn_like(p))
    return model


def hf_shapes(config: GPTConfig) -> dict[str, torch.Size]:
    """The names and shapes of ``GPT2LMHeadModel.state_dict()`` for ``config``, without memory (the meta device);
    from the course's ``hf_state_dict`` when transformers is not installed (the same names, in the same order)."""
    from tutor.reference.gpt2 import hf_state_dict
    from tutor.reference.model import GPT

    with torch.device("meta"):
        try:
            state_dict = random_gpt2(config).state_dict()
        except ImportError:
            state_dict = hf_state_dict(GPT(config))
    return {name: tensor.shape for name, tensor in state_dict.items()}


@torch.no_grad()
def mean_loss(model, ids: torch.Tensor, block: int, device=None, max_tokens: int | None = None):
    """The mean cross-entropy (nats per token) of ``model`` predicting every token of ``ids`` [N] but the first,
    read in consecutive windows of ``block + 1`` tokens that share one token (each window predicts ``block``),
    and the number of tokens predicted. ``max_tokens`` stops after that many."""
    device = device or next(model.parameters()).device
    n = len(ids) - 1 if max_tokens is None else min(max_tokens, len(ids) - 1)
    total, count = 0.0, 0
    for start in range(0, n, block):
        window = ids[start:start + min(block, n - start) + 1].to(device)
        logits = model(window[None, :-1])[0].float()
        total += torch.nn.functional.cross_entropy(logits, window[1:], reduction="sum").item()
        count += len(window) - 1
    return total / count, count


def parameter_bytes(model) -> int:
    """The bytes of ``model``'s parameters (a tied matrix counted once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())

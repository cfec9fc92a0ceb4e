"""Hugging Face's own GPT-2 (``transformers.GPT2LMHeadModel``), the model the course's GPT is compared with (notebook
12): the pretrained one, a random one of any shape (no download), and the names and shapes of its tensors.

``transformers`` is imported only when used (it takes seconds to import); a missing one is a ``None`` and one line,
never an exception, where the notebook can go on without it.
"""

from __future__ import annotations

import torch

from tutor.data.gpt2 import INSTALL, Weights
from tutor.reference.gpt2 import hf_state_dict
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

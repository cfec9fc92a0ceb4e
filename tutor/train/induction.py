"""Notebook 14's experiment: a small attention-only transformer (two layers, no MLP) trained on random tokens where
copying pays, measured while it trains (the loss on a repeated half, the previous-token and induction scores), then
opened up: one head ablated at a time, and the layer-0 head that the induction head reads from ablated under it.

The functions take the learner's own ``capture_fn`` (``capture_patterns``), ``score_fn`` (``induction_scores``) and
``ablate_fn`` (``ablate_head``); the notebook passes ``checks.yours_or_reference(...)``.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from tutor.reference.attention import MultiHeadAttention
from tutor.reference.interpretability import ablated, previous_token_scores, repeated_tokens
from tutor.reference.layers import LayerNorm


@dataclass(frozen=True)
class InductionConfig:
    vocab_size: int = 64
    n: int = 20  # a repeated sequence is n random tokens, then the same n: 2n positions
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    batch_size: int = 32
    steps: int = 3000
    lr: float = 3e-3
    eval_every: int = 50
    eval_batch: int = 64
    seed: int = 0

    @property
    def max_len(self) -> int:
        return 2 * self.n


INDUCTION_CONFIG = InductionConfig()


class AttentionOnlyBlock(nn.Module):
    """``x + attn(ln1(x))``: notebook 06's block without its MLP (the names are the course's: ``ln1``, ``attn``)."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.ln1 = LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads, causal=True)

    def forward(self, x):
        return x + self.attn(self.ln1(x))


class AttentionOnlyGPT(nn.Module):
    """Notebook 07's GPT with attention-only blocks: token and position embeddings, ``blocks``, ``ln_f``, ``head``."""

    def __init__(self, config: InductionConfig):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.max_len, config.d_model)
        self.blocks = nn.ModuleList([AttentionOnlyBlock(config.d_model, config.n_heads)
                                     for _ in range(config.n_layers)])
        self.ln_f = LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def forward(self, ids):
        x = self.tok_emb(ids) + self.pos_emb(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def training_batch(config: InductionConfig, generator: torch.Generator) -> torch.Tensor:
    """``[batch_size, 2n]`` random tokens in which a segment of random length (4 to n) is repeated right after
    itself, at a random place. The length varies so that no head can find the earlier token by a fixed offset: only
    "look for the same token, take the one after it" works everywhere."""
    B, T = config.batch_size, config.max_len
    ids = torch.randint(0, config.vocab_size, (B, T), generator=generator)
    lengths = torch.randint(4, config.n + 1, (B,), generator=generator)
    for b in range(B):
        k = int(lengths[b])
        start = int(torch.randint(0, T - 2 * k + 1, (1,), generator=generator))
        ids[b, start + k:start + 2 * k] = ids[b, start:start + k]
    return ids


def eval_tokens(config: InductionConfig, device=None) -> torch.Tensor:
    """The fixed batch every measurement uses: ``eval_batch`` sequences of ``n`` random tokens repeated twice."""
    generator = torch.Generator().manual_seed(config.seed + 1)
    return repeated_tokens(config.eval_batch, config.n, config.vocab_size, generator, device)


def losses_of(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``[T - 1]``: the loss of predicting token ``t + 1`` from position ``t``, averaged over the batch, from logits
    already computed (an ablated model's too); ``tutor.train.validation.position_losses`` runs a model on a loader."""
    V = logits.shape[-1]
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, V).float(), ids[:, 1:].reshape(-1), reduction="none")
    return loss.view(ids.shape[0], -1).mean(dim=0)


def halves(losses: torch.Tensor, n: int) -> tuple[float, float]:
    """(first half, repeated half) of :func:`losses_of` on ``n`` tokens repeated: the repeated half is the
    predictions of tokens ``n + 1`` to ``2n - 1``, each seen before; token ``n`` (the repeat's first) is not, nor
    is any token of the first half."""
    return losses[:n - 1].mean().item(), losses[n:].mean().item()


@dataclass
class InductionRun:
    model: AttentionOnlyGPT
    config: InductionConfig
    steps: list[int] = field(default_factory=list)
    loss_first: list[float] = field(default_factory=list)  # on the fixed batch: tokens 1..n-1
    loss_repeated: list[float] = field(default_factory=list)  # tokens n+1..2n-1
    induction: list[torch.Tensor] = field(default_factory=list)  # [L, H] at each measurement
    previous: list[torch.Tensor] = field(default_factory=list)  # [L, H]
    seconds: float = 0.0

    @property
    def best_induction(self) -> list[float]:
        """The last layer's highest induction score, at each measurement."""
        return [s[-1].max().item() for s in self.induction]

    @property
    def best_previous(self) -> list[float]:
        """Layer 0's highest previous-token score, at each measurement."""
        return [s[0].max().item() for s in self.previous]

    def step_of_fastest_rise(self, values: list[float]) -> int:
        """The step at the end of the interval where ``values`` rise most."""
        rises = [b - a for a, b in zip(values, values[1:])]
        return self.steps[1 + max(range(len(rises)), key=rises.__getitem__)]

    @property
    def formed_at(self) -> int:
        return self.step_of_fastest_rise(self.best_induction)

    @property
    def loss_dropped_at(self) -> int:
        return self.step_of_fastest_rise([-v for v in self.loss_repeated])


def around(run: InductionRun, step: int, k: int = 2) -> str:
    """A table of the measurements ``k`` before and after ``step``: the losses and the best scores."""
    i = run.steps.index(step)
    lines = [f"{'step':>6} {'loss, first half':>17} {'repeated half':>14} {'induction (L1)':>15} "
             f"{'previous (L0)':>14}"]
    for j in range(max(0, i - k), min(len(run.steps), i + k + 1)):
        lines.append(f"{run.steps[j]:>6} {run.loss_first[j]:>17.3f} {run.loss_repeated[j]:>14.3f} "
                     f"{run.best_induction[j]:>15.2f} {run.best_previous[j]:>14.2f}")
    return "\n".join(lines)


def measure(model, ids: torch.Tensor, n: int, capture_fn, score_fn):
    """(losses per position, induction scores [L, H], previous-token scores [L, H]) of ``model`` on ``ids``."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            losses = losses_of(model(ids), ids)
        patterns = capture_fn(model, ids)
        return losses, score_fn(patterns, n).detach().cpu(), previous_token_scores(patterns).detach().cpu()
    finally:
        model.train(was_training)


def train(capture_fn, score_fn, config: InductionConfig = INDUCTION_CONFIG, device="cpu",
          progress: bool = True) -> InductionRun:
    """Train an :class:`AttentionOnlyGPT` on :func:`training_batch` with AdamW, measuring it on
    :func:`eval_tokens` every ``eval_every`` steps with the learner's ``capture_fn`` and ``score_fn``."""
    from tutor.train.progress_bar import PlainProgress, progress_bar

    torch.manual_seed(config.seed)
    model = AttentionOnlyGPT(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(config.seed)
    ids_eval = eval_tokens(config, device)
    run = InductionRun(model, config)

    def record(step):
        losses, induction, previous = measure(model, ids_eval, config.n, capture_fn, score_fn)
        first, repeated = halves(losses, config.n)
        run.steps.append(step)
        run.loss_first.append(first)
        run.loss_repeated.append(repeated)
        run.induction.append(induction)
        run.previous.append(previous)

    start = time.perf_counter()
    record(0)
    bar = progress_bar(config.steps) if progress else PlainProgress(config.steps, file=io.StringIO())
    bar.set_description("attention-only model")
    for step in range(1, config.steps + 1):
        ids = training_batch(config, generator).to(device)
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, config.vocab_size), ids[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % config.eval_every == 0 or step == config.steps:
            record(step)
            bar.set_postfix({"repeated half": f"{run.loss_repeated[-1]:.2f}",
                             "induction": f"{run.best_induction[-1]:.2f}"})
        bar.update()
    bar.close()
    run.seconds = time.perf_counter() - start
    model.eval()
    return run


def ablation_losses(model, ids: torch.Tensor, n: int, ablate_fn, how: str = "zero") -> torch.Tensor:
    """``[L, H]``: the loss on the repeated half with each head ablated in turn (``ablate_fn``: ``ablate_head``)."""
    L, H = len(model.blocks), model.blocks[0].attn.n_heads
    table = torch.zeros(L, H)
    for layer in range(L):
        for head in range(H):
            logits = ablate_fn(model, ids, layer, head, how)
            table[layer, head] = halves(losses_of(logits, ids), n)[1]
    return table


def composition(model, ids: torch.Tensor, n: int, capture_fn, score_fn, layer: int, head: int) -> dict:
    """Every head's induction score and the loss on the repeated half, as trained and with head ``head`` of layer
    ``layer`` zero-ablated (the course's ``ablated`` hook around the learner's ``capture_fn``)."""
    clean_scores = score_fn(capture_fn(model, ids), n)
    with ablated(model, layer, head), torch.no_grad():
        ablated_scores = score_fn(capture_fn(model, ids), n)
        ablated_loss = halves(losses_of(model(ids), ids), n)[1]
    with torch.no_grad():
        clean_loss = halves(losses_of(model(ids), ids), n)[1]
    return dict(clean=clean_scores, ablated=ablated_scores, clean_loss=clean_loss, ablated_loss=ablated_loss)


# --- GPT-2 small (with internet) ---------------------------------------------------------------------------------

LITERATURE_HEADS = ["5.1", "5.5", "6.9", "7.2", "7.10"]  # GPT-2 small's induction heads (Olsson et al. 2022; ARENA)


def gpt2_scores(capture_fn, score_fn, load_fn=None, n: int = 50, batch: int = 8, device="cpu",
                verbose: bool = True):
    """GPT-2 small's induction scores ``[12, 12]`` on ``batch`` sequences of ``n`` random tokens repeated, loaded with
    notebook 12's loader (``load_fn``, by default the model answer); ``None``, and one line, without its weights.
    The sequences start with ``<|endoftext|>``, as GPT-2's training documents did; the scores are read on the
    patterns without that first position."""
    from tutor.data import gpt2 as gpt2_data
    from tutor.reference.gpt2 import load_gpt2

    weights = gpt2_data.gpt2_weights(verbose=verbose, skipped="so this section is skipped")
    if weights is None:
        return None
    model = (load_fn or load_gpt2)(gpt2_data.read_weights(weights), 12).to(device).eval()
    generator = torch.Generator().manual_seed(0)
    ids = repeated_tokens(batch, n, 50257, generator)
    ids = torch.cat([torch.full((batch, 1), 50256), ids], dim=1).to(device)
    patterns = [p[:, :, 1:, 1:] for p in capture_fn(model, ids)]
    return score_fn(patterns, n).cpu()


def top_heads(scores: torch.Tensor, k: int = 5) -> list[tuple[str, float]]:
    """The ``k`` highest scores of ``[L, H]`` as ("layer.head", score), highest first."""
    values, flat = scores.flatten().topk(k)
    H = scores.shape[1]
    return [(f"{i // H}.{i % H}", v) for i, v in zip(flat.tolist(), values.tolist())]

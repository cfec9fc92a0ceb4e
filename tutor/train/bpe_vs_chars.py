"""Characters against byte-pair tokens at the same compute: notebook 11's payoff and
``benchmarks/bpe.py --payoff`` run this one module, so they train the very same way.

The same GPT (notebook 07's, as notebook 10 trains it) learns tiny Shakespeare twice: once on
characters, once on BPE tokens learned from the training text. Both get the same budget of
training FLOPs (``flops_per_token`` of notebook 10 times the tokens seen), and both are measured in
bits per byte (``bits_per_byte``), the one unit that is fair across tokenizers.

Notebook 10 provides the text (``tutor.data.load_shakespeare``), the batches
(``tutor.reference.get_batch``), the FLOPs per token (``tutor.reference.flops_per_token``) and the training
loop (``tutor.train.fit``); this module only adds the two tokenizations and the bits-per-byte curves.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from tutor.data import CharVocab, load_shakespeare, split_text
from tutor.reference.bpe import BPETokenizer, bits_per_byte, train_bpe
from tutor.reference.model import GPT, GPTConfig, generate
from tutor.reference.scaling_up import flops_per_token, get_batch
from tutor.train import presets
from tutor.train.config import PayoffConfig
from tutor.train.loop import fit
from tutor.train.models import use_fused_kernels

# --- what notebook 10 provides ----------------------------------------------------------------------


def load_text(verbose: bool = True) -> str:
    """Tiny Shakespeare, from notebook 10's loader (which says where it came from)."""
    return load_shakespeare(verbose=verbose)


# --- the two ways of reading the text -------------------------------------------------------------


@dataclass
class Tokenized:
    """One tokenizer's view of the text: ids for training and validation, and the exchange rate."""

    name: str
    vocab_size: int
    train: torch.Tensor  # LongTensor [N_train]
    val: torch.Tensor
    val_bytes: int  # UTF-8 bytes of the validation text
    bytes_per_token: float  # on the training text
    encode: object  # str -> ids
    decode: object  # ids -> str

    def describe(self) -> str:
        return (f"{self.name}: vocabulary {self.vocab_size}, {len(self.train):,} training tokens, "
                f"{self.bytes_per_token:.2f} bytes per token")


def split(text: str, val_fraction: float = 0.1):
    """The first 90% of the text for training, the rest for validation (notebook 10's ``split_text``)."""
    return split_text(text, val_fraction)


def characters(train_text: str, val_text: str) -> Tokenized:
    """One id per character of the text's alphabet (notebook 10's ``CharVocab``: 65 for tiny Shakespeare)."""
    vocab = CharVocab.from_text(train_text + val_text)
    return Tokenized("characters", vocab.vocab_size, vocab.tensor(train_text), vocab.tensor(val_text),
                     len(val_text.encode("utf-8")), len(train_text.encode("utf-8")) / len(train_text),
                     vocab.encode, vocab.decode)


def bpe(train_text: str, val_text: str, vocab_size: int, trainer=train_bpe, tokenizer_class=BPETokenizer) -> Tokenized:
    """BPE learned on the training text only (the validation text is never seen by the tokenizer)."""
    vocab, merges = trainer(train_text, vocab_size)
    tok = tokenizer_class(vocab, merges)
    train_ids, val_ids = tok.encode(train_text), tok.encode(val_text)
    return Tokenized(f"BPE {vocab_size}", vocab_size, torch.tensor(train_ids), torch.tensor(val_ids),
                     len(val_text.encode("utf-8")), len(train_text.encode("utf-8")) / len(train_ids),
                     tok.encode, tok.decode)


# FLOP budgets per model. The benchmark's is what notebook 10's CPU preset does in 180 s on an idle
# 2-core machine (benchmarks/train_shakespeare.py: 2,140 steps of 16 x 64 characters at 5.3 MFLOP per
# token, one training thread). The notebook's (~15 s idle) and TUTOR_QUICK=1's (a few seconds) keep its
# run short.
PAYOFF_FLOPS = 1.16e13
NOTEBOOK_FLOPS = 7e11
QUICK_FLOPS = 4e10


# --- one training run ------------------------------------------------------------------------------


# The payoff's settings, defined with the other presets in ``tutor.train.presets`` (``sweep`` below chose them):
# notebook 11 reads them here.
BPE_VOCAB, CHAR_CONFIG, BPE_CONFIG = presets.BPE_VOCAB, presets.CHAR_CONFIG, presets.BPE_CONFIG

# The tuning sweep: (BPE vocabulary, or None for characters; block; batch; max_lr), each one run of ``train``.
SWEEP = [(None, 64, 16, 3e-3), (None, 128, 16, 3e-3), (None, 64, 16, 1e-2), (None, 64, 32, 3e-3),
         (512, 32, 16, 3e-3), (1024, 32, 16, 3e-3), (2048, 32, 16, 3e-3), (1024, 64, 16, 3e-3), (1024, 32, 16, 1e-2)]


@dataclass
class Run:
    tokenized: Tokenized
    config: PayoffConfig
    model: GPT
    flops_per_token: int
    steps: int
    bytes_seen: list = field(default_factory=list)
    val_bits_per_byte: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def final(self) -> float:
        return self.val_bits_per_byte[-1]


def make_model(tokenized: Tokenized, config: PayoffConfig) -> GPT:
    """A fresh GPT for ``tokenized``'s vocabulary and ``config``'s sizes, seeded, with fused kernels."""
    torch.manual_seed(config.seed)
    gpt = GPT(GPTConfig(vocab_size=tokenized.vocab_size, max_len=config.block_size, d_model=config.d_model,
                        n_heads=config.n_heads, n_layers=config.n_layers))
    return use_fused_kernels(gpt)


def steps_for(budget_flops: float, fpt: int, config: PayoffConfig) -> int:
    return max(1, int(budget_flops // (fpt * config.batch_size * config.block_size)))


def train(tokenized: Tokenized, config: PayoffConfig, budget_flops: float, progress: bool = True,
          bits_per_byte_fn=bits_per_byte) -> Run:
    """Train a fresh GPT on ``tokenized`` for ``budget_flops`` training FLOPs with the course's ``fit``."""
    model = make_model(tokenized, config)
    n_params = sum(p.numel() for p in model.parameters())
    fpt = flops_per_token(n_params, config.n_layers, config.d_model, config.block_size)
    steps = steps_for(budget_flops, fpt, config)
    generator = torch.Generator().manual_seed(config.seed)
    batches = iter(lambda: get_batch(tokenized.train, config.block_size, config.batch_size, generator), None)
    val_generator = torch.Generator().manual_seed(1234)
    val = [get_batch(tokenized.val, config.block_size, config.batch_size, val_generator)
           for _ in range(config.eval_batches)]
    settings = replace(config, steps=steps, warmup_steps=min(config.warmup_steps, steps // 5),
                       eval_every=max(1, steps // config.eval_points))
    history = fit(model, batches, val, settings, ignore_index=-100, progress=progress)
    run = Run(tokenized, config, model, fpt, steps, seconds=history.seconds)
    val_tokens = len(tokenized.val)
    for step, loss in zip(history.val_steps, history.val_loss):
        run.bytes_seen.append((step + 1) * config.batch_size * config.block_size * tokenized.bytes_per_token)
        run.val_bits_per_byte.append(bits_per_byte_fn(loss, val_tokens, tokenized.val_bytes))
    return run


def sweep(train_text: str, val_text: str, budget_flops: float = NOTEBOOK_FLOPS, settings=SWEEP, seeds=(0,),
          verbose: bool = True) -> list[tuple[tuple, int, Run]]:
    """The tuning sweep behind ``CHAR_CONFIG``, ``BPE_CONFIG`` and ``BPE_VOCAB``: one run of ``train`` per setting of
    ``settings`` and seed of ``seeds``, all at ``budget_flops`` (the notebook's by default), ``min_lr = max_lr / 10``.
    Prints one line per run as it ends (``verbose``); returns ``[(setting, seed, run)]``. On a laptop CPU each run
    takes about 20 s (``NOTEBOOK_FLOPS``), and each BPE vocabulary is learned once, in about 10 s."""
    tokenizations, results = {}, []
    for setting in settings:
        vocab_size, block, batch, lr = setting
        if vocab_size not in tokenizations:
            tokenizations[vocab_size] = (characters(train_text, val_text) if vocab_size is None
                                         else bpe(train_text, val_text, vocab_size))
        tokenized = tokenizations[vocab_size]
        for seed in seeds:
            config = PayoffConfig(block_size=block, batch_size=batch, max_lr=lr, min_lr=lr / 10, seed=seed)
            run = train(tokenized, config, budget_flops, progress=False)
            results.append((setting, seed, run))
            if verbose:
                print(f"{tokenized.name:<12} block {block:>3}, batch {batch:>2}, lr {lr:.0e}, seed {seed}: "
                      f"{run.steps:>4} steps, {run.final:.3f} bits per byte")
    return results


def sample(run: Run, prompt: str = "\n", n_bytes: int = 300, temperature: float = 0.8, seed: int = 0) -> str:
    """About ``n_bytes`` of text generated by the run's model after ``prompt``."""
    tok = run.tokenized
    ids = torch.tensor([tok.encode(prompt)])
    n_tokens = max(1, int(n_bytes / tok.bytes_per_token))
    out = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        while len(out) < n_tokens:
            step = min(run.config.block_size // 2, n_tokens - len(out))
            context = ids[:, -(run.config.block_size - step):]
            new = generate(run.model, context, step, temperature=temperature)
            out += new[0, context.shape[1]:].tolist()
            ids = new
    return tok.decode(out)

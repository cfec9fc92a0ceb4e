"""Notebook 13's payoff: a names model adapted to follow an instruction, "a name of five letters", by full
fine-tuning, by LoRA at several ranks and by training the head alone, side by side at equal steps.

The instruction is written with the letters the model already reads: the prompt ``" five "`` (the start token, the
word, the ``' '`` that starts a name) and the response ``"laika "`` (the name and its end). Positions restart at 0
at every ``' '`` (``WordPositions``), as in notebook 08's packed rows, so the name after the prompt sits where the
base model saw every name; attention spans the whole row, so the name can read the instruction. The task's success
is counted exactly: the share of sampled names that have the asked length.
"""

from __future__ import annotations

import copy
import random
import statistics
import time
from dataclasses import dataclass, field, replace

import torch
import torch.nn as nn

from tutor.data import gpt2 as gpt2_data
from tutor.data.batching import make_loader, make_packed_loader, name_positions
from tutor.data.shakespeare import load_shakespeare, split_text
from tutor.reference.bpe import BPETokenizer, bits_per_byte
from tutor.reference.characters import PAD_Y, decode, encode
from tutor.reference.gpt2 import load_gpt2
from tutor.reference.lora import LoRALinear, add_lora, merge_lora, sft_example
from tutor.reference.scaling_up import get_batch
from tutor.reference.training import evaluate
from tutor.train.loop import History, Hooks, fit, training_threads
from tutor.train.models import make_model
from tutor.train.optim import make_optimizer
from tutor.train.presets import FINETUNE_BASE_CONFIG, FINETUNE_CONFIG, FINETUNE_LRS

WORDS = {3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}  # the lengths asked for
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "out_proj", "fc", "proj")  # every linear layer of the blocks
BLOCK = 15  # inputs per example: " seven " (7) + 8 letters + the end, minus the shift


def prompt(n_letters: int) -> str:
    """The instruction for a name of ``n_letters`` letters: ``" five "``."""
    return f" {WORDS[n_letters]} "


class WordPositions(nn.Module):
    """The model with positions that restart at 0 at every ``' '`` (``tutor.data.name_positions``) and causal
    attention over the whole row: the name after an instruction is at the positions of a name."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.config = model.config

    def forward(self, ids):
        return self.model(ids, positions=name_positions(ids))


@dataclass
class Instructions:
    """Instruction examples from a list of names: a length drawn uniformly from ``WORDS``, then a name of that
    length. ``batches`` makes them into ``(x, y)`` with ``sft_fn`` (``sft_example``, or the learner's own)."""

    by_length: dict

    @classmethod
    def of(cls, names) -> Instructions:
        return cls({n: [name for name in names if len(name) == n] for n in WORDS})

    def pairs(self, count: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
        """``count`` (prompt ids, response ids) pairs, the same for the same seed."""
        rng = random.Random(seed)
        out = []
        for _ in range(count):
            n = rng.choice(list(WORDS))
            out.append((encode(prompt(n)), encode(rng.choice(self.by_length[n]) + " ")))
        return out

    def batches(self, batch_size: int, seed: int = 0, sft_fn=sft_example, mask_prompt: bool = True):
        """An endless iterator of ``(x, y)`` batches, as ``fit`` takes them. With ``mask_prompt=False`` the prompt's
        targets are counted too (``sft_fn`` is then not used)."""
        make = sft_fn if mask_prompt else counting_the_prompt
        step = 0
        while True:
            rows = [make(p, r, BLOCK) for p, r in self.pairs(batch_size, seed=seed * 1_000_003 + step)]
            step += 1
            yield torch.stack([x for x, _ in rows]), torch.stack([y for _, y in rows])

    def fixed(self, count: int, batch_size: int = 200, seed: int = 10**6) -> list:
        """The same ``count`` examples every time, the prompt ignored, in batches: a validation set."""
        rows = [sft_example(p, r, BLOCK) for p, r in self.pairs(count, seed=seed)]
        return [(torch.stack([x for x, _ in rows[i:i + batch_size]]),
                 torch.stack([y for _, y in rows[i:i + batch_size]])) for i in range(0, len(rows), batch_size)]


def counting_the_prompt(prompt_ids, response_ids, block_size=BLOCK):
    """``sft_example`` with the prompt's targets counted too (only the padding ignored): what the loss was before
    instruction tuning masked the prompt."""
    ids = list(prompt_ids) + list(response_ids)
    x, y = sft_example(prompt_ids, response_ids, block_size)
    y[:len(ids) - 1] = torch.tensor(ids[1:])
    return x, y


# --- the base model -----------------------------------------------------------------------------------------------


def train_base(train_names, val_loader, config=FINETUNE_BASE_CONFIG, device="cpu", progress=True, plot=None):
    """Notebook 08's GPT trained on the names (``FINETUNE_BASE_CONFIG``: notebook 08's CPU preset, shorter):
    the model to adapt. Returns ``(model, history)``."""
    model = make_model(config, device)
    loader = make_packed_loader(train_names, batch_size=config.batch_size, seed=config.seed)
    history = fit(model, loader, val_loader, config, progress=progress, plot=plot)
    return model.eval(), history


# --- one way of adapting it ---------------------------------------------------------------------------------------

METHODS = ["full fine-tuning", "LoRA r=1", "LoRA r=4", "LoRA r=16", "head alone"]


def prepare(base: nn.Module, method: str, add_lora_fn=add_lora) -> nn.Module:
    """A copy of ``base`` with what ``method`` trains left trainable: every weight, LoRA factors of rank r (alpha = 2r,
    in every linear layer of the blocks: ``LORA_TARGETS``), or the output head alone."""
    model = copy.deepcopy(base)
    for p in model.parameters():
        p.requires_grad_(method == "full fine-tuning")
    if method == "head alone":
        for p in model.head.parameters():
            p.requires_grad_(True)
    elif method.startswith("LoRA r="):
        r = int(method.removeprefix("LoRA r="))
        add_lora_fn(model, LORA_TARGETS, r, 2 * r)
    elif method != "full fine-tuning":
        raise ValueError(f"unknown method {method!r}: one of {METHODS}")
    return model


def trainable_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def optimizer_bytes(optimizer) -> int:
    """The bytes of the optimizer's state (AdamW: two moments per trained number)."""
    return sum(t.numel() * t.element_size() for state in optimizer.state.values() for t in state.values()
               if isinstance(t, torch.Tensor) and t.dim() > 0)


@torch.no_grad()
def sample_lengths(model: nn.Module, n_letters: int, count: int, temperature: float = 1.0, seed: int = 0) -> list[str]:
    """``count`` names sampled after the instruction for ``n_letters`` letters (the model is wrapped in
    ``WordPositions`` here)."""
    runner = WordPositions(model).eval()
    device = next(model.parameters()).device
    start = encode(prompt(n_letters))
    ids = torch.tensor([start] * count, device=device)
    generator = torch.Generator(device=device).manual_seed(seed)
    while ids.shape[1] < model.config.max_len:
        logits = runner(ids)[:, -1, :].float() / temperature
        logits[:, PAD_Y] = float("-inf")  # target padding: never a token to write
        nxt = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)
        ids = torch.cat([ids, nxt], dim=1)
    return [decode(row[len(start):]).split(" ")[0] for row in ids.tolist()]


def success(model: nn.Module, per_length: int = 100, seed: int = 0) -> tuple[float, dict]:
    """The share of sampled names that have the asked length, overall and by length."""
    by_length = {n: sum(len(name) == n for name in sample_lengths(model, n, per_length, seed=seed + n)) / per_length
                 for n in WORDS}
    return sum(by_length.values()) / len(by_length), by_length


@dataclass
class Result:
    """One way of adapting the base model, measured."""

    method: str
    trainable: int  # parameters that train
    optimizer_bytes: int  # AdamW's state
    seconds: float  # training wall time
    success: float  # share of sampled names of the asked length
    by_length: dict
    response_loss: float  # loss on held-out instruction examples, the responses only
    names_loss: float  # the base task: loss on held-out plain names
    history: History = field(repr=False)
    model: nn.Module = field(repr=False)


def adapt(base, method, instructions: Instructions, names_val, *, config=FINETUNE_CONFIG, mask_prompt: bool = True,
          sft_fn=sft_example, add_lora_fn=add_lora, per_length: int = 100, seed: int = 0,
          progress: bool = False) -> Result:
    """Adapt a copy of ``base`` by ``method`` on ``instructions`` for ``config.steps`` steps of AdamW (the
    learning rate of ``FINETUNE_LRS``), and measure it."""
    torch.manual_seed(seed)
    model = prepare(base, method, add_lora_fn)
    runner = WordPositions(model)
    lr = FINETUNE_LRS["LoRA" if method.startswith("LoRA") else method]
    config = replace(config, max_lr=lr, min_lr=lr / 10, seed=seed)
    val = instructions.fixed(400)
    start = time.perf_counter()
    optimizer = make_optimizer(runner, config)
    history = fit(runner, instructions.batches(config.batch_size, seed, sft_fn, mask_prompt), val, config,
                  ignore_index=PAD_Y, progress=progress, hooks=Hooks(optimizer=optimizer))
    seconds = time.perf_counter() - start
    rate, by_length = success(model, per_length, seed=seed)
    return Result(method + ("" if mask_prompt else ", prompt counted"), trainable_parameters(model),
                  optimizer_bytes(optimizer), seconds, rate, by_length,
                  evaluate(runner, val, PAD_Y), evaluate(model, names_val, PAD_Y), history, model)


def step_times(base, methods, instructions: Instructions, *, config=FINETUNE_CONFIG, sft_fn=sft_example,
               add_lora_fn=add_lora, rounds: int = 30, warmup: int = 3) -> dict:
    """The median milliseconds of one training step (forward, backward, AdamW) of each of ``methods``, measured
    side by side: a fresh copy of ``base`` per method, and each round takes one step of every method in turn, so
    that a machine that gets busier or quieter meanwhile slows them all alike. The first ``warmup`` rounds are not
    timed (first calls allocate)."""
    device = next(base.parameters()).device
    runs = []
    for method in methods:
        model = prepare(base, method, add_lora_fn)
        runner = WordPositions(model).train()
        lr = FINETUNE_LRS["LoRA" if method.startswith("LoRA") else method]
        optimizer = make_optimizer(runner, replace(config, max_lr=lr, min_lr=lr / 10))
        runs.append((method, runner, optimizer, instructions.batches(config.batch_size, 0, sft_fn), []))

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elif device.type == "mps":
            torch.mps.synchronize()

    with training_threads(config, device):
        for round_ in range(warmup + rounds):
            for _, runner, optimizer, batches, times in runs:
                x, y = (t.to(device) for t in next(batches))
                synchronize()
                start = time.perf_counter()
                logits = runner(x)
                loss = nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=PAD_Y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                synchronize()
                if round_ >= warmup:
                    times.append(time.perf_counter() - start)
    return {method: 1e3 * statistics.median(times) for method, _, _, _, times in runs}


def baseline(base, instructions: Instructions, names_val, per_length: int = 100, seed: int = 0) -> Result:
    """The base model, not adapted, measured the same way."""
    rate, by_length = success(base, per_length, seed=seed)
    val = instructions.fixed(400)
    return Result("base model (not adapted)", 0, 0, 0.0, rate, by_length, evaluate(WordPositions(base), val, PAD_Y),
                  evaluate(base, names_val, PAD_Y), History(), base)


def names_val_loader(val_names):
    """The base task's held-out names, padded: the loss on them is what adapting may make the model forget."""
    return make_loader(val_names, batch_size=512, shuffle=False)


def table(results) -> str:
    """The results as one text table, a row per method. (No time column: runs one after the other are timed on a
    machine that changes meanwhile; ``step_times`` measures the methods side by side.)"""
    head = (f"{'method':31} {'trains':>8} {'AdamW state':>12} {'asked length':>13} "
            f"{'loss, responses':>16} {'loss, plain names':>18}")
    rows = [head, "-" * len(head)]
    for r in results:
        rows.append(f"{r.method:31} {r.trainable:>8,} {r.optimizer_bytes / 1e3:>9,.1f} kB "
                    f"{r.success:>13.0%} {r.response_loss:>16.3f} {r.names_loss:>18.3f}")
    return "\n".join(rows)


def step_table(step_ms: dict) -> str:
    """``step_times``' figures as text, each against the first method's."""
    first, first_ms = next(iter(step_ms.items()))
    return "\n".join(f"{method:18} {ms:6.2f} ms a step, {ms / first_ms:4.2f}x {first}"
                     for method, ms in step_ms.items())


def merge_all(model: nn.Module, merge_fn=None) -> nn.Module:
    """A copy of ``model`` with every LoRA layer (a module with ``A``, ``B`` and ``base``) replaced by
    ``merge_fn(layer)``, a plain ``nn.Linear`` (``merge_lora`` by default)."""
    merge_fn = merge_fn or merge_lora
    merged = copy.deepcopy(model)
    for name, module in list(merged.named_modules()):
        if all(hasattr(module, a) for a in ("A", "B", "base")):
            parent, _, child = name.rpartition(".")
            setattr(merged.get_submodule(parent), child, merge_fn(module))
    return merged


# --- with internet: GPT-2 small on tiny Shakespeare ---------------------------------------------------------------


def gpt2_on_shakespeare(add_lora_fn=add_lora, lora_class=None, *, device="cpu", quick=False, r=8, verbose=True,
                        weights=None, tokenizer=None, n_heads=12):
    """GPT-2 small (notebook 12's loader) with LoRA of rank ``r`` in the attention's q, k, v and output projections,
    trained on tiny Shakespeare for a few dozen steps: bits per byte on held-out text before and after. ``None``,
    with one line saying why, when GPT-2's weights or vocabulary are not here (offline). ``weights`` (a state dict)
    and ``tokenizer`` replace GPT-2's own (the tests use a tiny random GPT-2)."""
    if weights is None:
        found = gpt2_data.gpt2_weights(verbose=verbose, skipped="so this section is skipped")
        if found is None:
            return None
        weights = gpt2_data.read_weights(found)
    if tokenizer is None:
        files = gpt2_data.gpt2_files(verbose=verbose)  # (it says "this part is skipped" when they are missing)
        if files is None:
            return None
        tokenizer = BPETokenizer.from_files(files.encoder, files.merges, ["<|endoftext|>"])
    device = torch.device(device)
    model = load_gpt2(weights, n_heads).to(device)
    del weights
    train_text, val_text = split_text(load_shakespeare(verbose=False))
    # 4 windows of 64 tokens a step: with 4 x 128 the step's activations and logits ([4, 128, 50,257]) took the
    # notebook's kernel past Binder's 2 GB (a fresh process with a file of GPT-2 small's size: peak 2,033 MB at
    # 4 x 128, 1,437 MB at 4 x 64, over 361 MB before the file was read)
    block = 32 if quick else 64
    val_ids = torch.tensor(tokenizer.encode(val_text[:4_000 if quick else 10_000]))  # about 2,700 tokens
    train_ids = torch.tensor(tokenizer.encode(train_text[:20_000 if quick else 100_000]))  # enough for 100 steps
    windows = [(val_ids[i:i + block], val_ids[i + 1:i + block + 1]) for i in range(0, len(val_ids) - block - 1, block)]
    n_bytes = len(tokenizer.decode(torch.cat([y for _, y in windows]).tolist()).encode("utf-8"))

    def bpb():
        model.eval()
        total = 0.0
        with torch.no_grad():
            for x, y in windows:
                logits = model(x[None].to(device)).float()
                total += torch.nn.functional.cross_entropy(logits[0], y.to(device), reduction="sum").item()
        n_tokens = sum(len(y) for _, y in windows)
        return bits_per_byte(total / n_tokens, n_tokens, n_bytes)

    before = bpb()
    add_lora_fn(model, ["q_proj", "k_proj", "v_proj", "out_proj"], r, 2 * r, lora_class=lora_class or LoRALinear)
    steps = 4 if quick else (100 if device.type == "cuda" else 30)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    generator = torch.Generator().manual_seed(0)
    model.train()
    start = time.perf_counter()
    for _ in range(steps):
        x, y = get_batch(train_ids, block, 4, generator=generator)
        logits = model(x.to(device))
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.to(device).flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    seconds = time.perf_counter() - start
    return {"before": before, "after": bpb(), "steps": steps, "seconds": seconds,
            "trainable": trainable_parameters(model), "parameters": sum(p.numel() for p in model.parameters())}

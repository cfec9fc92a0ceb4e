"""The training engine: the loop that notebooks 08-11, ``benchmarks/`` and ``python -m tutor.scale``
share, with its presets, the bigram baseline, evaluation by position, fused kernels, progress bar,
checkpoints and sampling.

The four things a learner writes in notebook 08 (``lm_loss``, ``lr_schedule``, ``train_step``,
``evaluate``) are in ``tutor.reference.training``; ``fit`` uses them unless the notebook passes the
learner's own.
"""

import statistics
import time
from dataclasses import dataclass, field, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from tutor.reference.attention import MultiHeadAttention, merge_heads, split_heads
from tutor.reference.layers import LayerNorm
from tutor.reference.model import GPTConfig
from tutor.reference.tokens import PAD_X, PAD_Y, vocab_size
from tutor.reference.training import evaluate, lm_loss, lr_schedule, train_step  # noqa: F401


# --- the baseline to beat: a count-based bigram model ---------------------------------------


class BigramModel(nn.Module):
    """P(next | current) from counts over the training names, with add-``smoothing`` counts.

    ``forward(ids [B, T]) -> logits [B, T, V]`` are log-probabilities, so ``evaluate`` and
    ``generate`` work on it unchanged. ``'.'`` (the target padding) gets probability 0.
    """

    def __init__(self, names, smoothing: float = 1.0):
        super().__init__()
        V = vocab_size
        firsts, seconds = [], []
        for name in names:
            ids = [PAD_X] + [ord(ch) - ord("a") + 1 for ch in name.lower()] + [PAD_X]
            firsts += ids[:-1]
            seconds += ids[1:]
        pairs = torch.tensor(firsts, dtype=torch.long) * V + torch.tensor(seconds, dtype=torch.long)
        counts = torch.bincount(pairs, minlength=V * V).view(V, V).float()
        self.register_buffer("counts", counts)  # [V, V]: counts[a, b] = how often b follows a
        smoothed = counts + smoothing
        smoothed[:, PAD_Y] = 0.0  # '.' never follows anything: it is padding
        probs = smoothed / smoothed.sum(dim=1, keepdim=True)
        # a parameter (frozen) rather than a buffer, so `next(model.parameters())` gives its device
        self.log_probs = nn.Parameter(probs.log(), requires_grad=False)
        self.config = GPTConfig(vocab_size=V, max_len=16, d_model=0, n_heads=1, n_layers=0)

    def forward(self, ids, mask=None):
        return self.log_probs[ids]


# --- evaluation by position -------------------------------------------------------------------


@torch.no_grad()
def position_losses(model, loader, ignore_index=PAD_Y, max_batches=None):
    """Summed loss and token count at every position: two float64 tensors ``[T_max]``.

    Position 0 predicts the first letter from the start token ' ' alone.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    sums = torch.zeros(0, dtype=torch.float64)
    counts = torch.zeros(0, dtype=torch.float64)
    for i, (x, y) in enumerate(loader):
        if max_batches is not None and i >= max_batches:
            break
        x, y = x.to(device), y.to(device)
        logits = model(x).float()
        loss = F.cross_entropy(logits.transpose(1, 2), y, ignore_index=ignore_index, reduction="none")  # [B, T]
        T = y.shape[1]
        if T > len(sums):
            sums = torch.cat([sums, torch.zeros(T - len(sums), dtype=torch.float64)])
            counts = torch.cat([counts, torch.zeros(T - len(counts), dtype=torch.float64)])
        sums[:T] += loss.sum(dim=0).double().cpu()
        counts[:T] += (y != ignore_index).sum(dim=0).double().cpu()
    model.train(was_training)
    return sums, counts


def val_losses(model, loader, ignore_index=PAD_Y, max_batches=None) -> dict:
    """``{"all": ..., "excluding_first": ...}``: the mean loss over every predicted character, and
    over every one but the first letter (the model is then given the first letter, as in the
    source article)."""
    return losses_from_positions(*position_losses(model, loader, ignore_index, max_batches))


def losses_from_positions(sums, counts) -> dict:
    """``val_losses`` from the output of ``position_losses``."""
    return {
        "all": (sums.sum() / counts.sum().clamp(min=1)).item(),
        "excluding_first": (sums[1:].sum() / counts[1:].sum().clamp(min=1)).item(),
    }


# --- the fused attention kernel -----------------------------------------------------------------


class FusedMultiHeadAttention(MultiHeadAttention):
    """The same module as ``MultiHeadAttention`` (same parameters, same outputs), with the
    scores, mask, softmax and weighted sum done by one call to ``F.scaled_dot_product_attention``."""

    def forward(self, x, mask=None):
        q = split_heads(self.q_proj(x), self.n_heads)  # [B, H, T, d_head]
        k = split_heads(self.k_proj(x), self.n_heads)
        v = split_heads(self.v_proj(x), self.n_heads)
        p = self.dropout.p if self.training else 0.0
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=self.causal)
        else:
            mask = mask.unsqueeze(-3)  # the head axis
            if self.causal:
                mask = mask & torch.tril(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device))
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return self.out_proj(merge_heads(y))


class FusedLayerNorm(LayerNorm):
    """``LayerNorm`` computed by ``F.layer_norm`` (one kernel; the same numbers to float precision)."""

    def forward(self, x):
        dtype = x.dtype
        y = F.layer_norm(x.float(), self.weight.shape, self.weight.float(), self.bias.float(), self.eps)
        return y.to(dtype)


def use_fused_attention(model, fused: bool = True):
    """Switch every ``MultiHeadAttention`` in ``model`` to the fused kernel (or back), in place.

    The weights are untouched: only the ``forward`` used changes. Returns ``model``.
    """
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            module.__class__ = FusedMultiHeadAttention if fused else MultiHeadAttention
    return model


def use_fused_kernels(model, fused: bool = True):
    """``use_fused_attention``, and ``F.layer_norm`` for every ``LayerNorm``: in place, same weights."""
    use_fused_attention(model, fused)
    for module in model.modules():
        if isinstance(module, LayerNorm):
            module.__class__ = FusedLayerNorm if fused else LayerNorm
    return model


# --- configurations ------------------------------------------------------------------------------


@dataclass
class TrainConfig:
    """Model size and optimisation settings of one training run."""

    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 4
    dropout: float = 0.0
    batch_size: int = 128
    steps: int = 2200
    max_lr: float = 8e-3
    min_lr: float = 5e-4
    warmup_steps: int = 100
    weight_decay: float = 0.1
    clip: float = 1.0
    eval_every: int = 200  # steps between two evaluations on ``eval_batches`` validation batches
    eval_batches: int = 10
    bf16: bool = False  # CUDA only: run the forward pass under torch.autocast(dtype=torch.bfloat16)
    compile: bool = False  # torch.compile the model (CUDA only here: on a CPU the compile costs more than it saves)
    # threads for training on a CPU: a number, None (PyTorch's default, one per core), or "auto" (``ThreadChooser``:
    # the fastest of 1, 2, 4, ... measured while training, again every few hundred steps); see fit
    cpu_threads: int | str | None = 1
    fused_kernels: bool = True  # F.scaled_dot_product_attention and F.layer_norm instead of the hand-written ones
    # train on the packed rows of ``tutor.data.make_packed_loader``: fit then wraps the model in ``PackedNames``
    packed: bool = False
    optimizer: str = "adamw"  # or "muon": Muon for the matrices inside the blocks, AdamW for the rest (``MuonAdamW``)
    seed: int = 0

    def model_config(self) -> GPTConfig:
        return GPTConfig(vocab_size=vocab_size, max_len=16, d_model=self.d_model, n_heads=self.n_heads,
                         n_layers=self.n_layers, dropout=self.dropout)

    def describe(self) -> str:
        packed = " (packed rows)" if self.packed else ""
        optimizer = "Muon + AdamW" if self.optimizer == "muon" else "AdamW"
        return (f"d_model={self.d_model}, {self.n_layers} layers, {self.n_heads} heads, batch {self.batch_size}{packed}, "
                f"{self.steps} steps, {optimizer}, lr {self.max_lr:g} → {self.min_lr:g}")


# Sized for about 90 seconds on a laptop CPU (2 cores; the goal is 120 s) and for one modern GPU. With a fixed time, the CPU preset is the GPT
# of notebook 07 with 2 layers instead of 4 (a step takes about half as long, so it makes about twice as many, and
# ends lower), on packed batches (``tutor.data.make_packed_loader``: a step computes about 40% fewer positions),
# trained by Muon and AdamW (``MuonAdamW``: lower after the same number of steps), in batches of 256 names (Muon costs
# about as much per step whatever the batch holds). benchmarks/train_names.py measures it, --ablate each change alone.
CPU_CONFIG = TrainConfig(d_model=64, n_heads=4, n_layers=2, batch_size=256, steps=3000, max_lr=1.8e-2, min_lr=5e-4,
                         warmup_steps=100, eval_every=250, eval_batches=10, cpu_threads="auto", packed=True,
                         optimizer="muon")
# The preset before packing and Muon (issue 9, first round): 1.832 (excluding the first letter) in about 110 s.
PADDED_CPU_CONFIG = TrainConfig(d_model=64, n_heads=4, n_layers=2, batch_size=128, steps=5800, max_lr=8e-3,
                                min_lr=5e-4, warmup_steps=100, eval_every=500, eval_batches=10, cpu_threads="auto")
# The CPU preset as issue 9 found it: 1.893 (excluding the first letter) in 105.6 s on an idle 2-core CPU, on one
# thread. Kept by name so that benchmarks compare against it.
OLD_CPU_CONFIG = TrainConfig(d_model=64, n_heads=4, n_layers=4, batch_size=128, steps=2200, max_lr=8e-3,
                             min_lr=5e-4, warmup_steps=100, cpu_threads=1)
GPU_CONFIG = TrainConfig(d_model=256, n_heads=8, n_layers=6, dropout=0.1, batch_size=512, steps=4000,
                         max_lr=1e-3, min_lr=1e-4, warmup_steps=200, eval_every=500, eval_batches=20,
                         bf16=True, compile=True)


def config_for(device) -> TrainConfig:
    """The preset for ``device``: ``GPU_CONFIG`` on CUDA, a CPU-sized one elsewhere (MPS included,
    without bf16 autocast or compile)."""
    device = torch.device(device)
    if device.type == "cuda":
        return replace(GPU_CONFIG)
    if device.type == "mps":
        return replace(GPU_CONFIG, bf16=False, compile=False, steps=2000)
    return replace(CPU_CONFIG)


def model_class(config):
    """The model class a config asks for: ``GPT`` unless it has a ``model`` field naming another
    (``"gpt"``, ``"modern"`` for notebook 09's ``ModernGPT``, or ``"package.module:Class"``)."""
    name = getattr(config, "model", "gpt") or "gpt"
    if name == "gpt":
        from tutor.reference.model import GPT

        return GPT
    if name == "modern":
        from tutor.reference.model import ModernGPT

        return ModernGPT
    module, _, attribute = name.partition(":")
    if not attribute:
        raise ValueError(f"unknown model {name!r}: use 'gpt', 'modern' or 'package.module:Class'")
    import importlib

    return getattr(importlib.import_module(module), attribute)


def make_model(config: TrainConfig, device="cpu"):
    """A fresh GPT for ``config`` on ``device``, seeded with ``config.seed``, with fused kernels if asked."""
    torch.manual_seed(config.seed)
    cls, gpt_config = model_class(config), config.model_config()
    if cls.__name__ == "ModernGPT":  # notebook 09's model takes a ModernConfig (no position table, SwiGLU, RoPE)
        from dataclasses import asdict

        from tutor.reference.model import ModernConfig

        gpt_config = ModernConfig(**{k: v for k, v in asdict(gpt_config).items() if k != "dropout"})
    model = cls(gpt_config).to(device)
    if config.fused_kernels:
        use_fused_kernels(model)
    return model


# --- the training loop -----------------------------------------------------------------------------


class AutocastBF16(nn.Module):
    """Wraps a model so that its forward pass runs under bf16 autocast on CUDA.

    The parameters stay float32 (the optimizer updates them in full precision); matrix products
    run in bfloat16. The logits are returned in float32, so the loss (computed outside the
    autocast region, by ``train_step`` or ``evaluate``) is computed in full precision.
    """

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.config = getattr(model, "config", None)

    def forward(self, *args, **kwargs):
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            logits = self.model(*args, **kwargs)
        return logits.float()


@dataclass
class History:
    """What ``fit`` records: the training loss at every step, the validation loss now and then."""

    steps: list = field(default_factory=list)
    train_loss: list = field(default_factory=list)
    lr: list = field(default_factory=list)
    val_steps: list = field(default_factory=list)
    val_loss: list = field(default_factory=list)
    tokens: int = 0  # real target tokens trained on
    seconds: float = 0.0  # wall time of the loop (evaluations included)
    cpu_threads: int | None = None  # with cpu_threads="auto": the thread count the run ended with

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)


def _batches(loader):
    """Loop over ``loader`` forever (one shuffle per epoch)."""
    while True:
        yield from loader


def _adamw(params, config: TrainConfig):
    """AdamW with weight decay on the matrices (Linear and Embedding weights) only, as in GPT-2."""
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=config.max_lr, betas=(0.9, 0.99))


class MuonAdamW:
    """Two optimizers stepped as one: ``torch.optim.Muon`` for the weight matrices inside the blocks, AdamW for
    everything else (the embeddings, the head, LayerNorms and biases, which Muon is not made for).

    Muon keeps a momentum of the gradient, as SGD does, but replaces each matrix's update by the nearest
    orthogonal matrix (a few Newton-Schulz iterations): every direction of the matrix moves by the same amount, so
    the rare directions learn as fast as the common ones. ``adjust_lr_fn="match_rms_adamw"`` scales the update to
    the size of an AdamW update, so one learning rate (set through ``param_groups``, as ``fit`` does) suits both.
    """

    def __init__(self, muon, adamw):
        self.muon, self.adamw = muon, adamw

    @property
    def param_groups(self):
        return self.muon.param_groups + self.adamw.param_groups

    def zero_grad(self, set_to_none: bool = True):
        self.muon.zero_grad(set_to_none=set_to_none)
        self.adamw.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        loss = self.muon.step(closure)
        self.adamw.step()
        return loss

    def state_dict(self):
        return {"muon": self.muon.state_dict(), "adamw": self.adamw.state_dict()}

    def load_state_dict(self, state):
        self.muon.load_state_dict(state["muon"])
        self.adamw.load_state_dict(state["adamw"])


def block_matrices(model) -> list:
    """The weights of every ``nn.Linear`` inside ``model.blocks``: the matrices Muon trains."""
    return [m.weight for m in model.blocks.modules() if isinstance(m, nn.Linear) and m.weight.requires_grad]


def make_optimizer(model, config: TrainConfig):
    """``config.optimizer``: ``"adamw"`` (AdamW, weight decay on the matrices only, as in GPT-2) or ``"muon"``
    (``MuonAdamW``; AdamW alone, with a warning, on a PyTorch older than 2.9, which has no ``torch.optim.Muon``)."""
    params = [p for p in model.parameters() if p.requires_grad]
    kind = getattr(config, "optimizer", "adamw")
    if kind == "adamw":
        return _adamw(params, config)
    if kind != "muon":
        raise ValueError(f"unknown optimizer {kind!r}: use 'adamw' or 'muon'")
    if not hasattr(torch.optim, "Muon"):
        import warnings

        warnings.warn(f"PyTorch {torch.__version__} has no torch.optim.Muon (new in 2.9): training with AdamW "
                      "alone, so the validation loss will be a little higher than the figures quoted", stacklevel=2)
        return _adamw(params, config)
    matrices = block_matrices(model)
    chosen = {id(p) for p in matrices}
    muon = torch.optim.Muon(matrices, lr=config.max_lr, weight_decay=config.weight_decay,
                            adjust_lr_fn="match_rms_adamw")
    return MuonAdamW(muon, _adamw([p for p in params if id(p) not in chosen], config))


class PackedNames(nn.Module):
    """A GPT for packed batches (``tutor.data.make_packed_loader``): ``forward(ids)`` gives the GPT, found from the
    ``' '`` that starts each name, a mask that keeps attention inside each name (``data.same_name_mask``) and
    positions that restart at 0 with every name (``data.name_positions``).

    On an ordinary padded batch (one name per row) it gives the same logits as the GPT at every real position, so
    evaluation may use either. The weights are the GPT's own: save and load ``model``, not the wrapper.
    """

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        from tutor.data import name_positions, same_name_mask

        return self.model(ids, mask=same_name_mask(ids), positions=name_positions(ids))


def fit(model, train_loader, val_loader, config: TrainConfig, *, step_fn=None, eval_fn=None, lr_fn=None,
        ignore_index=PAD_Y, optimizer=None, progress=True, plot=None, start_step=0, history=None,
        callback=None, metrics=None, runner=None):
    """Train ``model`` for ``config.steps`` steps and return a ``History``.

    ``step_fn``, ``eval_fn`` and ``lr_fn`` default to ``train_step``, ``evaluate`` and
    ``lr_schedule``; the notebook passes the learner's own. ``plot`` (optional) has an
    ``update(history)`` method called after every evaluation (see ``tutor.viz.training.LivePlot``).
    ``config.bf16`` and ``config.compile`` only act on CUDA. With ``config.packed`` (batches from
    ``tutor.data.make_packed_loader``), the step and the evaluation get the model wrapped in ``PackedNames``.

    For longer runs (notebook 10, ``python -m tutor.scale``):

    - ``train_loader`` may be an iterator of batches (anything with ``__next__``, e.g.
      ``RandomWindows``) instead of a DataLoader; a batch may be a list of ``(x, y)`` micro-batches
      for gradient accumulation, with a ``step_fn`` that takes such lists (``accumulate_step``).
    - ``start_step`` and ``history`` continue a run restored from a checkpoint.
    - ``callback(step, history)`` runs after every step; returning True stops the run there
      (checkpoints, Ctrl-C).
    - ``metrics(history)`` returns extra fields for the progress bar (tokens/s, MFU).
    - ``runner`` is what the step and evaluation call instead of ``model`` (e.g. a
      ``DistributedDataParallel`` wrapper); bf16 autocast and compile wrap it.
    """
    step_fn = step_fn or train_step
    eval_fn = eval_fn or evaluate
    lr_fn = lr_fn or lr_schedule
    device = next(model.parameters()).device
    optimizer = optimizer or make_optimizer(model, config)
    runner = model if runner is None else runner
    if getattr(config, "packed", False):
        runner = PackedNames(runner)
    if config.bf16 and device.type == "cuda":
        runner = AutocastBF16(runner)
    if config.compile and device.type == "cuda":
        runner = torch.compile(runner)
    # On 2 idle cores a second thread makes a step of the CPU preset about 1.3-1.5x faster, but threads that wait for
    # each other slow down many times over when other programs share the cores: "auto" measures which is faster.
    threads = torch.get_num_threads()
    chooser = None
    if device.type == "cpu" and config.cpu_threads == "auto":
        chooser = ThreadChooser()
    elif device.type == "cpu" and config.cpu_threads:
        torch.set_num_threads(int(config.cpu_threads))
    try:
        return _fit(model, runner, train_loader, val_loader, config, optimizer, step_fn, eval_fn, lr_fn,
                    ignore_index, progress, plot, device, start_step, history, callback, metrics, chooser)
    finally:
        torch.set_num_threads(threads)


class _NotebookLine:
    """A file for tqdm that shows the bar as one line of notebook output, replaced in place.

    The saved output keeps the bar's last state, so a notebook opened on GitHub or after a headless
    run shows the finished bar, not the 0% a progress widget would leave there.
    """

    encoding = "utf-8"  # tells tqdm it may draw the bar with Unicode blocks

    def __init__(self):
        from IPython.display import display

        self.handle = display({"text/plain": ""}, raw=True, display_id=True)

    def write(self, text):
        text = text.replace("\r", "").strip()
        if text:
            self.handle.update({"text/plain": text}, raw=True)

    def flush(self):
        pass


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _progress_bar(total, initial=0, expected=None):
    """A tqdm bar: in a notebook one line of output updated in place, on a terminal the usual one on
    stderr, and plain lines (``PlainProgress``) when stderr is not a terminal (a log file, CI).

    It shows the elapsed and remaining time; ``expected`` (seconds, if known) is shown as the expected total.
    """
    import sys

    from tqdm import tqdm

    desc = "training" if expected is None else f"training (expected {format_duration(expected)})"
    if _in_notebook():
        return tqdm(total=total, initial=initial, desc=desc, unit="step", mininterval=0.5,
                    file=_NotebookLine(), ncols=130)
    if not sys.stderr.isatty():
        return PlainProgress(total, initial)
    return tqdm(total=total, initial=initial, desc=desc, unit="step", mininterval=0.5)


def _wall_clock() -> float:
    """The progress line's own clock (separate from the one ``fit`` times itself with)."""
    import time as clock

    return clock.perf_counter()


class PlainProgress:
    """The progress bar's interface, written as one plain line every ``every`` steps (and at the end)."""

    def __init__(self, total, initial=0, every=None, file=None):
        import sys

        self.total, self.n = total, initial
        self.every = every or max(1, total // 20)
        self.file = file or sys.stderr
        self.postfix = {}
        self.desc = "training"
        self.start = _wall_clock()

    def update(self, n=1):
        self.n += n
        if self.n % self.every == 0 or self.n == self.total:
            fields = " ".join(f"{k} {v}" for k, v in self.postfix.items())
            print(f"{self.desc}: step {self.n}/{self.total} ({_wall_clock() - self.start:.0f} s) {fields}".rstrip(),
                  file=self.file, flush=True)

    def set_postfix(self, postfix, refresh=False):
        self.postfix = dict(postfix)

    def set_description(self, desc, refresh=False):
        self.desc = desc

    def write(self, text):
        print(text, flush=True)  # on stdout, as tqdm.write does

    def close(self):
        pass


def _is_micro_batches(batch) -> bool:
    """A list of ``(x, y)`` pairs (gradient accumulation), rather than one ``(x, y)``."""
    return isinstance(batch, list) and len(batch) > 0 and isinstance(batch[0], (tuple, list))


def _count_tokens(y, ignore_index) -> int:
    if isinstance(y, torch.Tensor):
        return int((y != ignore_index).sum())
    return sum(_count_tokens(part, ignore_index) for part in y)


def cpu_cores() -> int:
    """The CPU cores this process may run on (its affinity, e.g. a container's cpuset; a CPU quota is not seen
    here, which is one reason ``ThreadChooser`` measures instead of trusting this number)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows
        return os.cpu_count() or 1


class ThreadChooser:
    """``cpu_threads="auto"``: train with whichever thread count is fastest right now.

    Every ``every`` steps (and at the start), the next ``rounds`` rounds of steps cycle through the
    candidates (1, 2, 4, ... up to the cores, at most 8), timing each step; then the count with the
    fastest median step is kept. The steps are real training steps: nothing is wasted but the time
    of the slower counts. On an idle machine more threads win; when another program keeps a core
    busy, threads that wait for each other lose, and one thread wins.
    """

    def __init__(self, cores: int | None = None, rounds: int = 5, every: int = 500, first: int = 1):
        cores = cores or cpu_cores()
        self.candidates = [1] + [n for n in (2, 4, 8) if n <= cores]
        self.rounds, self.every, self.first = rounds, every, first
        self.threads = max(self.candidates)  # until the first measurement
        self.times = {n: [] for n in self.candidates}
        self.choices = []  # (step, threads, {threads: median seconds per step}) for each measurement
        self._probing = None

    def before_step(self, step: int):
        """Set the thread count for ``step``; returns it."""
        window = self.rounds * len(self.candidates)
        offset = (step - self.first) % self.every
        self._probing = len(self.candidates) > 1 and step >= self.first and offset < window
        n = self.candidates[offset % len(self.candidates)] if self._probing else self.threads
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)
        return n

    def after_step(self, step: int, seconds: float):
        """Record the time of ``step``; at the end of a measurement, keep the fastest count."""
        if not self._probing:
            return
        self.times[torch.get_num_threads()].append(seconds)
        if (step - self.first) % self.every == self.rounds * len(self.candidates) - 1:
            medians = {n: statistics.median(t) for n, t in self.times.items() if t}
            self.threads = min(medians, key=medians.get)
            self.choices.append((step, self.threads, medians))
            self.times = {n: [] for n in self.candidates}
            torch.set_num_threads(self.threads)


# --- how long a run takes ---------------------------------------------------------------------------

# Seconds per step of ``CPU_CONFIG``'s model and batch size on an idle 2-core CPU (2 threads, chosen by
# ``ThreadChooser``), evaluations included, on padded batches, as notebook 08 runs it (its live plot included).
CPU_SECONDS_PER_STEP = 95 / 3000  # benchmarks/train_names.py on an idle machine: 3,000 steps in 86-100 s (3 runs)
SLOW_FACTOR = 1.5  # projected / expected time above which the progress bar says the machine is slow
TIMING_STEPS = (15, 65)  # the steps between which the speed of the machine is measured (after ThreadChooser's first)


def expected_seconds(config: TrainConfig, device="cpu") -> float | None:
    """The wall time a run of ``config`` should take on an idle 2-core CPU, or ``None`` when there is no
    calibrated figure for it (another model or batch size, or not a CPU)."""
    same = ("d_model", "n_heads", "n_layers", "batch_size", "cpu_threads", "fused_kernels", "packed", "optimizer")
    if torch.device(device).type != "cpu" or any(getattr(config, k, None) != getattr(CPU_CONFIG, k) for k in same):
        return None
    return config.steps * CPU_SECONDS_PER_STEP


def _preset_sized(model, config) -> bool:
    """Whether ``model`` has exactly as many parameters as the preset's GPT for ``config`` (the model the
    expected time was measured with)."""
    try:
        from tutor.reference.model import GPT

        with torch.device("meta"):
            preset = GPT(config.model_config())
        return sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in preset.parameters())
    except Exception:  # a config without a GPT shape (notebook 10's), or an unusual model: no figure
        return False


def format_duration(seconds: float) -> str:
    """``95`` -> ``'1 min 35 s'``, ``40`` -> ``'40 s'``."""
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def time_report(total_steps: int, steps_timed: int, seconds: float, expected: float | None,
                slow_factor: float = SLOW_FACTOR) -> tuple[str, str | None]:
    """From ``seconds`` measured over ``steps_timed`` steps: ``(label, warning)``.

    ``label`` is what the progress bar shows as the expected total; ``warning`` is ``None``, or, when
    the run is on course to take more than ``slow_factor`` times ``expected``, one sentence saying so
    and how to shorten the run. The run itself is never shortened.
    """
    projected = seconds / max(steps_timed, 1) * total_steps
    if expected is None:
        return f"expected {format_duration(projected)}", None
    if projected <= slow_factor * expected:
        return f"expected {format_duration(expected)}", None
    label = f"on course for {format_duration(projected)}; idle 2-core CPU: {format_duration(expected)}"
    warning = (f"This machine is running about {projected / expected:.1f}x slower than an idle 2-core CPU "
               f"(busy, or a slower processor): the {total_steps} steps will take about "
               f"{format_duration(projected)} instead of {format_duration(expected)}. Training goes on. To "
               "shorten it, interrupt the kernel and set config.steps lower (the validation loss will be "
               "higher), or set TUTOR_QUICK=1 before starting Jupyter for a smoke test of 60 steps.")
    return label, warning


def _fit(model, runner, train_loader, val_loader, config, optimizer, step_fn, eval_fn, lr_fn, ignore_index,
         progress, plot, device, start_step=0, history=None, callback=None, metrics=None, chooser=None):
    history = history if history is not None else History()
    seconds_before = history.seconds
    batches = train_loader if hasattr(train_loader, "__next__") else _batches(train_loader)
    if chooser is not None:
        chooser.first = start_step + 1  # step 0 warms up (first calls allocate), so it is not timed
    # The calibrated time is for the preset's GPT; another model (notebook 09's ModernGPT) gets no figure.
    expected = expected_seconds(config, device) if _preset_sized(model, config) else None
    bar = _progress_bar(config.steps, start_step, expected) if progress else None
    label = None if expected is None else f"expected {format_duration(expected)}"
    shown = bar.desc if bar is not None else None

    def describe():  # the progress bar's label: "training (expected 1 min 35 s; 2 threads)"
        parts = [label] if label else []
        if chooser is not None and chooser.choices:
            parts.append(f"{chooser.threads} thread" + ("s" if chooser.threads > 1 else ""))
        return "training" + (f" ({'; '.join(parts)})" if parts else "")

    model.train()
    start = time.perf_counter()
    timing_start = None
    timing_evals = 0.0  # seconds of evaluation (and plotting) inside the timed steps: not training speed
    for step in range(start_step, config.steps):
        if step == start_step + TIMING_STEPS[0]:
            timing_start = time.perf_counter()
        if (bar is not None and step == start_step + TIMING_STEPS[1]
                and config.steps - start_step >= 2 * TIMING_STEPS[1]):
            label, warning = time_report(config.steps - start_step, TIMING_STEPS[1] - TIMING_STEPS[0],
                                         time.perf_counter() - timing_start - timing_evals, expected)
            if warning:
                bar.write(warning)  # once; tqdm prints it above the bar (on stdout)
        lr = lr_fn(step, config.max_lr, config.warmup_steps, config.steps, config.min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = next(batches)
        if chooser is not None:
            chooser.before_step(step)
            step_start = time.perf_counter()
        loss = step_fn(runner, batch, optimizer, ignore_index, clip=config.clip)
        if chooser is not None:
            chooser.after_step(step, time.perf_counter() - step_start)
            history.cpu_threads = chooser.threads
        if bar is not None and describe() != shown:
            shown = describe()
            bar.set_description(shown, refresh=False)
        history.steps.append(step)
        history.train_loss.append(float(loss))
        history.lr.append(lr)
        history.tokens += _count_tokens([y for _, y in batch] if _is_micro_batches(batch) else batch[1], ignore_index)
        last = step == config.steps - 1
        if (step + 1) % config.eval_every == 0 or last:
            timed = timing_start is not None and step < start_step + TIMING_STEPS[1]
            eval_start = time.perf_counter() if timed else 0.0
            val = eval_fn(runner, val_loader, ignore_index, max_batches=config.eval_batches)
            history.val_steps.append(step)
            history.val_loss.append(float(val))
            if plot is not None:
                plot.update(history)
            if timed:
                timing_evals += time.perf_counter() - eval_start
        if bar is not None:
            plain_line_next = isinstance(bar, PlainProgress) and (bar.n + 1) % bar.every == 0
            if not plain_line_next:
                bar.update(1)
            if step % 25 == 0 or last or plain_line_next:
                postfix = {"loss": f"{float(loss):.3f}", "lr": f"{lr:.2e}"}
                if history.val_loss:
                    postfix["val"] = f"{history.val_loss[-1]:.3f}"
                if metrics is not None:
                    history.seconds = seconds_before + time.perf_counter() - start
                    postfix.update(metrics(history))
                bar.set_postfix(postfix, refresh=False)
            if plain_line_next:
                bar.update(1)
        if callback is not None:
            history.seconds = seconds_before + time.perf_counter() - start
            if callback(step, history):
                break
    if device.type == "cuda":
        torch.cuda.synchronize()
    history.seconds = seconds_before + time.perf_counter() - start
    if bar is not None:
        bar.close()
    return history


# --- checkpoints -------------------------------------------------------------------------------------


def save_checkpoint(path, model, config: TrainConfig, history: History | None = None):
    """Save the weights and the configs needed to rebuild the model (a ``.pt`` file)."""
    from dataclasses import asdict
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    torch.save({"model": state, "train_config": asdict(config),
                "val_loss": history.val_loss[-1] if history and history.val_loss else None}, path)
    return path


def load_checkpoint(path, device="cpu"):
    """Rebuild the GPT saved by ``save_checkpoint``; returns ``(model, train_config)``."""
    saved = torch.load(path, map_location=device, weights_only=True)
    config = TrainConfig(**saved["train_config"])
    model = make_model(config, device)
    model.load_state_dict(saved["model"])
    return model, config


def sample_names(model, n: int = 10, temperature: float = 1.0, top_k=None, seed=None, generate_fn=None):
    """``n`` new names: start from ' ', sample until the next ' ' (or ``max_len`` characters)."""
    from tutor.reference.model import generate
    from tutor.reference.tokens import decode

    generate_fn = generate_fn or generate
    device = next(model.parameters()).device
    start = torch.full((n, 1), PAD_X, dtype=torch.long, device=device)
    with seeded(seed):
        ids = generate_fn(model, start, model.config.max_len, temperature=temperature, top_k=top_k)
    names = []
    for row in ids[:, 1:].tolist():
        text = decode(row)
        names.append(text.split(" ")[0].replace(".", ""))
    return names


class seeded:
    """``with seeded(seed):`` runs with a fixed torch seed (and restores the RNG); ``None`` = no-op."""

    def __init__(self, seed):
        self.seed = seed
        self._fork = None

    def __enter__(self):
        if self.seed is not None:
            self._fork = torch.random.fork_rng(devices=[])
            self._fork.__enter__()
            torch.manual_seed(self.seed)
        return self

    def __exit__(self, *exc):
        if self._fork is not None:
            return self._fork.__exit__(*exc)
        return False



# --- longer runs: text windows, gradient accumulation, full checkpoints, MFU (notebook 10) ----------


class RandomWindows:
    """An endless stream of batches of random windows of ``data`` (``get_batch``), from its own
    seeded generator: its ``state_dict()`` is the position in the stream, so a run resumed from a
    checkpoint sees exactly the batches it would have seen.

    Each rank of a data-parallel run gets a different stream (the seed is offset by the rank).
    With ``accum_steps > 1`` every item is a list of that many ``(x, y)`` micro-batches.
    """

    def __init__(self, data, block_size, batch_size, seed=0, rank=0, accum_steps=1, get_batch_fn=None,
                 device="cpu"):
        from tutor.reference.scaling import get_batch

        self.data, self.block_size, self.batch_size = data, block_size, batch_size
        self.accum_steps, self.device = accum_steps, torch.device(device)
        self.get_batch = get_batch_fn or get_batch
        self.generator = torch.Generator().manual_seed(seed + 1_000_003 * rank)

    def __iter__(self):
        return self

    def _one(self):
        x, y = self.get_batch(self.data, self.block_size, self.batch_size, generator=self.generator)
        if self.device.type == "cuda":
            return x.pin_memory().to(self.device, non_blocking=True), y.pin_memory().to(self.device, non_blocking=True)
        return x.to(self.device), y.to(self.device)

    def __next__(self):
        if self.accum_steps == 1:
            return self._one()
        return [self._one() for _ in range(self.accum_steps)]

    def state_dict(self):
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state):
        self.generator.set_state(state["generator"])


def fixed_batches(data, block_size, batch_size, n_batches, seed=1234):
    """``n_batches`` batches of random windows drawn once with a fixed seed: the same validation
    batches at every evaluation (and on every rank), usable as ``evaluate``'s loader."""
    from tutor.reference.scaling import get_batch

    generator = torch.Generator().manual_seed(seed)
    return [get_batch(data, block_size, batch_size, generator=generator) for _ in range(n_batches)]


def accumulate_step(model, batches, optimizer, ignore_index, clip=1.0):
    """``train_step`` with gradient accumulation: ``batches`` is a list of ``(x, y)`` micro-batches
    (or one ``(x, y)``). Each micro-batch's loss is divided by their number, so the summed
    gradients are those of the mean loss over the combined batch (equal-sized micro-batches), as
    if it had been one big batch. Under ``DistributedDataParallel`` the gradients are averaged
    across processes once, at the last micro-batch (``no_sync`` before it).

    Returns the mean loss as a float.
    """
    if not _is_micro_batches(batches):
        batches = [batches]
    device = next(model.parameters()).device
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    n = len(batches)
    ddp = _find_ddp(model)
    for i, (x, y) in enumerate(batches):
        x, y = x.to(device), y.to(device)
        if ddp is not None:  # what ddp.no_sync() does, in a form torch.compile also accepts (as nanoGPT does)
            ddp.require_backward_grad_sync = i == n - 1
        loss = lm_loss(model(x), y, ignore_index) / n
        loss.backward()
        total += loss.detach()
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return float(total)


def _find_ddp(model):
    """The ``DistributedDataParallel`` module inside a runner (autocast or compile wrappers), if any."""
    from torch.nn.parallel import DistributedDataParallel

    seen = model
    for _ in range(4):
        if isinstance(seen, DistributedDataParallel):
            return seen
        seen = getattr(seen, "model", None) or getattr(seen, "_orig_mod", None)
        if seen is None:
            return None
    return None


# Peak dense bf16 tensor-core FLOP/s (no sparsity), from the vendors' data sheets; a CPU's peak
# depends on its cores and vector units, so it is an assumption (override with --peak-tflops).
PEAK_TFLOPS = {
    "H200": 989.0, "H100": 989.0,  # SXM; the PCIe H100 is 756
    "A100": 312.0, "A10G": 125.0, "A10": 125.0, "L40S": 362.0, "L4": 121.0,
    "RTX 4090": 165.0, "RTX 3090": 71.0, "V100": 125.0, "T4": 65.0,
}
CPU_PEAK_TFLOPS_PER_CORE = 0.1  # about 3 GHz x 2 FMA units x 8 float32 lanes x 2: an AVX2 core's float32 peak


def peak_flops(device, override_tflops=None) -> tuple[float, str]:
    """``(peak FLOP/s, where the figure comes from)`` for ``device``."""
    if override_tflops:
        return override_tflops * 1e12, "given with --peak-tflops"
    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        if "H100" in name and "PCIe" in name:
            return 756e12, f"{name} (table, bf16 dense)"
        for key, tflops in PEAK_TFLOPS.items():
            if key in name:
                return tflops * 1e12, f"{name} (table, bf16 dense)"
        return 100e12, f"{name}: not in the table, assuming 100 TFLOP/s (use --peak-tflops)"
    cores = torch.get_num_threads()
    return (CPU_PEAK_TFLOPS_PER_CORE * cores * 1e12,
            f"CPU, {cores} thread(s) x {CPU_PEAK_TFLOPS_PER_CORE * 1000:g} GFLOP/s assumed (float32 AVX2 peak)")


def mfu(tokens_per_second: float, flops_per_token: int, peak: float) -> float:
    """Model FLOPs utilisation: the fraction of the hardware's peak that the model's FLOPs use."""
    return tokens_per_second * flops_per_token / peak


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot be used: truncated, corrupted, or not a checkpoint."""


CHECKPOINT_MAGIC = b"tutor-checkpoint v1 sha256="


def save_training_state(path, state: dict, keep_previous: bool = True):
    """Write ``state`` (any ``torch.save``-able dict) to ``path`` atomically, with a checksum.

    The bytes go to a temporary file in the same folder, are flushed to disk, and only then
    replace ``path`` (``os.replace`` is atomic): a crash or Ctrl-C while writing leaves the
    previous checkpoint as it was. With ``keep_previous``, the checkpoint being replaced is kept
    as ``<name>.prev.pt``. Returns the path.
    """
    import hashlib
    import io
    from pathlib import Path

    from tutor.data import _write_atomically

    path = Path(path)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    header = CHECKPOINT_MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n"
    _write_atomically(path, header + payload, keep_previous=previous_checkpoint(path) if keep_previous else None)
    return path


def previous_checkpoint(path):
    from pathlib import Path

    path = Path(path)
    return path.with_name(path.stem + ".prev" + path.suffix)


def load_training_state(path, map_location="cpu") -> dict:
    """Read a checkpoint written by ``save_training_state``; a ``CheckpointError`` says clearly what
    is wrong with a truncated or corrupted file (and where the previous one is, if there is one)."""
    import hashlib
    import io
    from pathlib import Path

    path = Path(path)
    previous = previous_checkpoint(path)
    advice = f"; the previous checkpoint {previous} is intact: resume from it" if previous.exists() else ""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"cannot read the checkpoint {path}: {e}") from None
    header, _, payload = raw.partition(b"\n")
    if not header.startswith(CHECKPOINT_MAGIC):
        raise CheckpointError(f"{path} is not a checkpoint written by tutor.scale (no header){advice}")
    expected = header[len(CHECKPOINT_MAGIC):].decode("ascii", "replace")
    if hashlib.sha256(payload).hexdigest() != expected:
        raise CheckpointError(f"{path} is truncated or corrupted (its checksum does not match: "
                              f"{len(raw):,} bytes){advice}")
    return torch.load(io.BytesIO(payload), map_location=map_location, weights_only=False)


def rng_states() -> dict:
    """Every random number generator a training step may use (dropout, sampling)."""
    import random

    states = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict) -> None:
    import random

    torch.set_rng_state(states["torch"])
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])

"""The training loop: ``fit`` (notebooks 08-11, ``benchmarks/``, ``python -m tutor.scale``), what it records
(``History``), and ``accumulate_step``, the training step with gradient accumulation of notebook 10.

The four things a learner writes in notebook 08 (``lm_loss``, ``lr_schedule``, ``train_step``,
``evaluate``) are in ``tutor.reference.training``; ``fit`` uses them unless the notebook passes the
learner's own.
"""

import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch.nn.parallel import DistributedDataParallel

from tutor.reference.characters import PAD_Y
from tutor.reference.training import evaluate, lm_loss, lr_schedule, train_step
from tutor.train.config import TrainConfig
from tutor.train.models import PackedNames
from tutor.train.optim import make_optimizer
from tutor.train.precision import Autocast, ScaledBackward, ScaledOptimizer, say_once
from tutor.train.precision import choose as choose_precision
from tutor.train.progress_bar import (
    TIMING_STEPS,
    PlainProgress,
    expected_seconds,
    format_duration,
    preset_sized,
    progress_bar,
    time_report,
)
from tutor.train.threads import ThreadChooser


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
    eval_seconds: float = 0.0  # of which evaluating (and plotting): ``seconds - eval_seconds`` is training
    cpu_threads: int | None = None  # with cpu_threads="auto": the thread count the run ended with

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)


@dataclass
class Hooks:
    """What a longer run (``long_run.train``: notebook 10, ``python -m tutor.scale``) plugs into ``fit``.

    - ``optimizer``: made by ``make_optimizer`` when None; a resumed run passes the one it restored.
    - ``runner``: what the step and the evaluation call instead of the model (a ``DistributedDataParallel``
      wrapper); bf16 autocast and compile wrap it.
    - ``start_step`` and ``history``: where a run restored from a checkpoint continues.
    - ``callback(step, history)``: runs after every step; returning True stops the run there (checkpoints,
      Ctrl-C, a time budget).
    - ``metrics(history)``: extra fields for the progress bar (tokens/s, MFU).
    """

    optimizer: torch.optim.Optimizer | None = None
    runner: torch.nn.Module | None = None
    start_step: int = 0
    history: History | None = None
    callback: Callable[[int, History], bool] | None = None
    metrics: Callable[[History], dict] | None = None


def fit(model, train_loader, val_loader, config: TrainConfig, *, step_fn=None, eval_fn=None, lr_fn=None,
        ignore_index=PAD_Y, progress=True, plot=None, hooks: Hooks | None = None) -> History:
    """Train ``model`` for ``config.steps`` steps and return a ``History``.

    ``step_fn``, ``eval_fn`` and ``lr_fn`` default to ``train_step``, ``evaluate`` and
    ``lr_schedule``; the notebook passes the learner's own. ``plot`` (optional) has an
    ``update(history)`` method called after every evaluation (see ``tutor.viz.training.LivePlot``).
    ``config.bf16`` (mixed precision) and ``config.compile`` act as the device allows (``tutor.train.precision``:
    bfloat16 on GPUs of capability 8.0 and up, float16 with loss scaling on 7.x, compile where Inductor runs).
    With ``config.packed`` (batches from ``tutor.data.make_packed_loader``), the step and the evaluation get
    the model wrapped in ``PackedNames``.

    ``train_loader`` may also be an iterator of batches (anything with ``__next__``, e.g. ``RandomWindows``)
    instead of a DataLoader; a batch may be a list of ``(x, y)`` micro-batches for gradient accumulation, with
    a ``step_fn`` that takes such lists (``accumulate_step``). ``hooks`` is what a longer run adds.
    """
    step_fn = step_fn or train_step
    eval_fn = eval_fn or evaluate
    lr_fn = lr_fn or lr_schedule
    hooks = hooks or Hooks()
    device = next(model.parameters()).device
    precision = choose_precision(config, device)
    optimizer = hooks.optimizer or make_optimizer(model, config)
    if precision.scaled and not isinstance(optimizer, ScaledOptimizer):
        optimizer = ScaledOptimizer(optimizer, torch.amp.GradScaler(device.type))
    scaler = optimizer.scaler if isinstance(optimizer, ScaledOptimizer) else None
    runner = _runner(model if hooks.runner is None else hooks.runner, config, device, precision, scaler)
    history = hooks.history if hooks.history is not None else History()
    start_step, seconds_before = hooks.start_step, history.seconds
    batches = train_loader if hasattr(train_loader, "__next__") else _batches(train_loader)

    # The calibrated time is for the preset's GPT; another model (notebook 09's ModernGPT) gets no figure.
    expected = expected_seconds(config, device) if preset_sized(model, config) else None
    bar = progress_bar(config.steps, start_step, expected) if progress else None
    if progress and (device.type != "cpu" or config.bf16 or config.compile):  # a plain CPU run: nothing to say
        say_once(precision)
    label = None if expected is None else f"expected {format_duration(expected)}"
    shown = bar.desc if bar is not None else None

    with training_threads(config, device) as chooser:
        if chooser is not None:
            chooser.first = start_step + 1  # step 0 warms up (first calls allocate), so it is not timed

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
            clip = config.clip
            if scaler is not None and clip is not None:  # the gradients arrive scaled: clip them at the same scale
                clip = clip * scaler.get_scale()
            loss = step_fn(runner, batch, optimizer, ignore_index, clip=clip)
            if chooser is not None:
                chooser.after_step(step, time.perf_counter() - step_start)
                history.cpu_threads = chooser.threads
            if bar is not None and describe() != shown:
                shown = describe()
                bar.set_description(shown, refresh=False)
            history.steps.append(step)
            history.train_loss.append(float(loss))
            history.lr.append(lr)
            history.tokens += _count_tokens([y for _, y in batch] if _is_micro_batches(batch) else batch[1],
                                            ignore_index)
            last = step == config.steps - 1
            if (step + 1) % config.eval_every == 0 or last:
                timed = timing_start is not None and step < start_step + TIMING_STEPS[1]
                eval_start = time.perf_counter()
                history.seconds = seconds_before + eval_start - start  # when the evaluated model was reached
                val = eval_fn(runner, val_loader, ignore_index, max_batches=config.eval_batches)
                history.val_steps.append(step)
                history.val_loss.append(float(val))
                if plot is not None:
                    plot.update(history)
                history.eval_seconds += time.perf_counter() - eval_start
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
                    if hooks.metrics is not None:
                        history.seconds = seconds_before + time.perf_counter() - start
                        postfix.update(hooks.metrics(history))
                    bar.set_postfix(postfix, refresh=False)
                if plain_line_next:
                    bar.update(1)
            if hooks.callback is not None:
                history.seconds = seconds_before + time.perf_counter() - start
                if hooks.callback(step, history):
                    break
        if device.type == "cuda":
            torch.cuda.synchronize()
        history.seconds = seconds_before + time.perf_counter() - start
    if bar is not None:
        bar.close()
    return history


def _runner(runner, config, device, precision, scaler=None):
    """What the step and the evaluation call: ``runner`` wrapped for packed rows, autocast, compile and float16's
    loss scaling, as ``config`` asks and the device allows (``precision``)."""
    if getattr(config, "packed", False):
        runner = PackedNames(runner)
    if precision.autocast is not None:
        runner = Autocast(runner, device.type, precision.autocast)
    if precision.compile:
        runner = torch.compile(runner)
    if scaler is not None:
        runner = ScaledBackward(runner, scaler)
    return runner


@contextmanager
def training_threads(config, device):
    """Set the CPU threads ``config.cpu_threads`` asks for while the run trains, and put PyTorch's count back after.
    Yields the ``ThreadChooser`` of ``cpu_threads="auto"`` (None otherwise).

    On 2 idle cores a second thread makes a step of the CPU preset about 1.3-1.5x faster, but threads that wait for
    each other slow down many times over when other programs share the cores: "auto" measures which is faster."""
    threads = torch.get_num_threads()
    chooser = None
    if device.type == "cpu" and config.cpu_threads == "auto":
        chooser = ThreadChooser()
    elif device.type == "cpu" and config.cpu_threads:
        torch.set_num_threads(int(config.cpu_threads))
    try:
        yield chooser
    finally:
        torch.set_num_threads(threads)


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


def _batches(loader):
    """Loop over ``loader`` forever (one shuffle per epoch)."""
    while True:
        yield from loader


def _is_micro_batches(batch) -> bool:
    """A list of ``(x, y)`` pairs (gradient accumulation), rather than one ``(x, y)``."""
    return isinstance(batch, list) and len(batch) > 0 and isinstance(batch[0], (tuple, list))


def _count_tokens(y, ignore_index) -> int:
    if isinstance(y, torch.Tensor):
        return int((y != ignore_index).sum())
    return sum(_count_tokens(part, ignore_index) for part in y)


def _find_ddp(model):
    """The ``DistributedDataParallel`` module inside a runner (autocast or compile wrappers), if any."""
    seen = model
    for _ in range(4):
        if isinstance(seen, DistributedDataParallel):
            return seen
        seen = getattr(seen, "model", None) or getattr(seen, "_orig_mod", None)
        if seen is None:
            return None
    return None

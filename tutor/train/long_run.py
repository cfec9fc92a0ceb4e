"""Notebook 10's training on a long text (tiny Shakespeare): its config and presets, ``train`` (the run behind
``python -m tutor.scale``: data parallel under ``torchrun``, checkpoints, exact resume, Ctrl-C), sampling, and
``data_parallel_step``, one step of data parallelism by hand in a Gloo group of processes.

Each process trains on its own stream of random windows; every step their gradients are averaged (the
``average_gradients`` of notebook 10, done by DDP in buckets while the backward pass runs), so every process
holds the same weights. Only rank 0 prints, evaluates for the log, samples and writes checkpoints.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel

from tutor.data import shakespeare_data
from tutor.distributed import Dist, NoProcessGroup, all_gather, any_rank, run_in_group
from tutor.reference.model import generate
from tutor.reference.scaling_up import flops_per_token
from tutor.reference.training import lm_loss, lr_schedule
from tutor.train import presets
from tutor.train.checkpoint import load_training_state, rng_states, save_training_state, set_rng_states
from tutor.train.config import ScaleConfig
from tutor.train.loop import History, Hooks, accumulate_step, fit
from tutor.train.metrics import peak_flops
from tutor.train.models import make_model
from tutor.train.optim import make_optimizer
from tutor.train.precision import ScaledOptimizer
from tutor.train.precision import choose as choose_precision
from tutor.train.sampling import seeded
from tutor.train.streams import RandomWindows, fixed_batches
from tutor.train.threads import cpu_cores

# This run's presets, defined with the others in ``tutor.train.presets``: notebook 10 and ``python -m tutor.scale``
# read them here.
PRESETS = presets.SHAKESPEARE_PRESETS
preset = presets.shakespeare_preset

IGNORE_NONE = -100  # every target of a text window is real: nothing to ignore


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


@dataclass
class RunResult:
    """What ``train`` returns."""

    model: torch.nn.Module
    history: History
    config: ScaleConfig
    vocab: object
    step: int  # steps done (the next step to run)
    stopped_early: bool  # Ctrl-C, --stop-after or the time budget
    tokens_per_second: float  # over all processes
    mfu: float
    peak_note: str
    checkpoint: Path | None


class _StopFlag:
    """Ctrl-C (SIGINT) or SIGTERM (what a cluster's scheduler sends before it kills a job) sets the
    flag: the step in progress finishes, a checkpoint is written, the run stops. A second Ctrl-C
    interrupts at once."""

    def __init__(self):
        self.set = False
        self.previous = None

    def install(self):
        if threading.current_thread() is not threading.main_thread():
            return self
        self.previous = signal.getsignal(signal.SIGINT)
        self.previous_term = signal.getsignal(signal.SIGTERM)

        def handler(signum, frame):
            if self.set:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                raise KeyboardInterrupt
            self.set = True
            print("\n" + self.message(signum), file=sys.stderr, flush=True)

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)
        return self

    @staticmethod
    def message(signum: int) -> str:
        """The line the run prints when a signal asks it to stop: it names the signal it got."""
        if signum == signal.SIGTERM:
            return ("SIGTERM (the scheduler, or `kill`, asked the job to stop): finishing this step, saving a "
                    "checkpoint and stopping")
        return ("Ctrl-C (SIGINT): finishing this step, saving a checkpoint and stopping "
                "(press Ctrl-C again to stop at once)")

    def uninstall(self):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
            signal.signal(signal.SIGTERM, self.previous_term)


def checkpoint_state(model, optimizer, config, step, history, streams, rngs, vocab_chars) -> dict:
    return {
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "optimizer": optimizer.state_dict(),
        "config": asdict(config),
        "step": step,
        "history": asdict(history),
        "streams": streams,  # every rank's position in its data stream
        "rng": rngs,  # every rank's random generators
        "vocab": vocab_chars,
    }


def train(config: ScaleConfig, *, text_data=None, device=None, out_dir=None, resume=None, progress=True,
          plot=None, seconds=None, stop_after=None, peak_tflops=None, dist_info: Dist | None = None,
          handle_ctrl_c=False) -> RunResult:
    """Train ``config`` on ``text_data`` (a ``tutor.data.ShakespeareData``; loaded if None) with ``fit``.

    ``resume`` is a checkpoint to continue from; ``out_dir`` gets ``last.pt`` (every
    ``config.checkpoint_every`` steps, at the end, and when stopped early). ``seconds`` is a time
    budget and ``stop_after`` a number of steps after which to stop (and save) without changing the
    learning-rate schedule; ``config.time_budget`` instead makes the time drive the schedule, which then ends
    when the time is up (one process only). ``peak_tflops`` overrides the peak that MFU is measured against;
    ``dist_info`` is the process group of ``torchrun``; ``handle_ctrl_c`` lets Ctrl-C and SIGTERM save and stop.
    """
    d = dist_info or Dist()
    if config.time_budget and d.on:
        raise ValueError("time_budget is for one process: each process would follow its own clock (use steps)")
    device = torch.device(device) if device is not None else torch.device("cpu")
    if text_data is None:
        text_data = shakespeare_data(verbose=d.main)
    vocab = text_data.vocab
    config = replace(config, vocab_size=vocab.vocab_size)
    saved = None
    if resume is not None:
        saved = load_training_state(resume)
        if saved["vocab"] != getattr(vocab, "chars", None):
            raise ValueError(f"{resume} was trained on another vocabulary ({len(saved['vocab'])} characters)")
        config = replace(config, **{k: v for k, v in saved["config"].items()
                                    if k not in ("steps", "checkpoint_every", "cpu_threads", "compile")})
    model = make_model(config, device)
    optimizer = make_optimizer(model, config)
    precision = choose_precision(config, device)
    if precision.scaled:  # float16: the loss scaler is part of the optimizer's state, saved and resumed with it
        optimizer = ScaledOptimizer(optimizer, torch.amp.GradScaler(device.type))
    stream = RandomWindows(text_data.train, config.block_size, config.batch_size, seed=config.seed, rank=d.rank,
                           accum_steps=config.grad_accum, device=device)
    val_batches = fixed_batches(text_data.val, config.block_size, config.eval_batch_size or config.batch_size,
                                config.eval_batches)
    history, start = History(), 0
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        start = saved["step"]
        history = History(**saved["history"])
        if len(saved["streams"]) != d.world_size:
            raise ValueError(f"{resume} was written by {len(saved['streams'])} process(es); resume it with as many "
                             f"(this run has {d.world_size})")
        stream.load_state_dict(saved["streams"][d.rank])
        set_rng_states(saved["rng"][d.rank])
    else:
        torch.manual_seed(config.seed + d.rank)  # dropout masks differ from rank to rank
    runner = None
    if d.on:
        runner = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    fpt = flops_per_token(n_params(model), config.n_layers, config.d_model, config.block_size)
    threads_before = torch.get_num_threads()
    if d.on and device.type == "cpu" and config.cpu_threads == "auto":  # processes share the cores: one share each
        config = replace(config, cpu_threads=max(1, cpu_cores() // d.world_size))
    if device.type == "cpu" and isinstance(config.cpu_threads, int):  # fit sets it too; peak_flops reads it here
        torch.set_num_threads(config.cpu_threads)
    # the peak of all processes together, in the precision the matrix products run in
    peak, peak_note = peak_flops(device, peak_tflops, dtype=precision.autocast or torch.float32,
                                 processes=d.world_size)

    out_dir = Path(out_dir) if out_dir is not None else None
    last_path = out_dir / "last.pt" if out_dir is not None else None
    flag = _StopFlag().install() if handle_ctrl_c else _StopFlag()
    state = {"stopped": False, "step": start, "checkpoint": None, "trained": 0.0, "out_of_time": False}
    wall_start = time.perf_counter()

    def speed(h):
        tps = h.tokens * d.world_size / max(h.seconds, 1e-9)
        return tps, tps * fpt / peak

    def metrics(h):
        tps, u = speed(h)
        return {"tok/s": f"{tps:,.0f}", "mfu": f"{100 * u:.1f}%"}

    def save(step, h):
        streams = all_gather(stream.state_dict(), d)
        rngs = all_gather(rng_states(), d)
        if d.main and last_path is not None:
            save_training_state(last_path, checkpoint_state(model, optimizer, config, step, h, streams, rngs,
                                                            getattr(vocab, "chars", None)))
            state["checkpoint"] = last_path

    def lr_fn(step, max_lr, warmup_steps, total_steps, min_lr):
        """The reference schedule; with ``config.time_budget``, at the share of the steps or of the time spent,
        whichever is further along."""
        if config.time_budget:
            step = max(step, int(total_steps * state["trained"] / config.time_budget))
        return lr_schedule(step, max_lr, warmup_steps, total_steps, min_lr)

    def callback(step, h):
        done = step + 1
        state["step"] = done
        state["trained"] = h.seconds - h.eval_seconds
        if config.time_budget and state["trained"] >= config.time_budget and done < config.steps:
            state["out_of_time"] = True  # the schedule has ended: the run is complete, not stopped early
            return True
        stop = flag.set or (stop_after is not None and done - start >= stop_after) or \
            (seconds is not None and time.perf_counter() - wall_start >= seconds)
        stop = any_rank(stop, d)
        if stop and done < config.steps:
            state["stopped"] = True
            save(done, h)
            return True
        if config.checkpoint_every and done % config.checkpoint_every == 0 and done < config.steps:
            save(done, h)
        return False

    try:
        history = fit(model, stream, val_batches, config, step_fn=accumulate_step, lr_fn=lr_fn,
                      ignore_index=IGNORE_NONE,
                      progress=progress and d.main, plot=plot if d.main else None,
                      hooks=Hooks(optimizer=optimizer, runner=runner, start_step=start, history=history,
                                  callback=callback, metrics=metrics))
    finally:
        flag.uninstall()
        torch.set_num_threads(threads_before)
    if not state["stopped"]:
        state["step"] = state["step"] if state["out_of_time"] else config.steps
        save(state["step"], history)
    tps, u = speed(history)
    if u > 1.0 and device.type == "cpu" and not peak_tflops:  # the cached peak was measured on a busy machine
        peak, peak_note = peak_flops(device, None, dtype=precision.autocast or torch.float32,
                                     processes=d.world_size, refresh=True)
        tps, u = speed(history)
    return RunResult(model, history, config, vocab, state["step"], state["stopped"], tps, u, peak_note,
                     state["checkpoint"])


def sample_text(model, vocab, prompt="\n", n_chars=300, temperature=0.8, top_k=None, seed=0, generate_fn=None):
    """``n_chars`` characters generated after ``prompt``, in chunks of the model's context."""
    generate_fn = generate_fn or generate
    device = next(model.parameters()).device
    ids = torch.tensor([vocab.encode(prompt)], dtype=torch.long, device=device)
    with seeded(seed):
        out = generate_fn(model, ids, n_chars, temperature=temperature, top_k=top_k)
    return vocab.decode(out[0, len(prompt):])


# --- data parallelism by hand, for notebook 10 ------------------------------------------------------


def _sgd_step(model, lr):
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= lr * p.grad


def _step_on_rank(rank, world_size, average_gradients_fn, config, x, y, lr) -> dict:
    """One rank of ``data_parallel_step`` (run by ``tutor.distributed.run_in_group``): its slice of the
    batch, backward, the learner's ``average_gradients``, one SGD step; returns its loss and weights."""
    model = make_model(config)
    per_rank = len(x) // world_size
    xs, ys = x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]
    loss = lm_loss(model(xs), ys, IGNORE_NONE)
    loss.backward()
    average_gradients_fn(model)
    _sgd_step(model, lr)
    return {"loss": loss.item(), "weights": {k: v.clone() for k, v in model.state_dict().items()}}


def data_parallel_step(average_gradients_fn, config: ScaleConfig, x, y, world_size=2, lr=0.5, timeout=120.0):
    """One SGD step of ``config``'s model on the batch ``(x, y)`` split over ``world_size`` Gloo
    processes, which average their gradients with ``average_gradients_fn``; and the same step in
    this process on the whole batch.

    Returns ``{"ranks": [weights of every rank], "single": weights of the one process,
    "losses": [each rank's loss]}``. Raises ``RuntimeError`` with the reason when no process
    group can start here.
    """
    try:
        results = run_in_group(_step_on_rank, world_size, learner_fn=average_gradients_fn, args=(config, x, y, lr),
                               timeout=timeout)
    except (NoProcessGroup, TimeoutError) as e:
        raise RuntimeError(str(e)) from None
    errors = [f"rank {r['rank']}: {r['error']}" for r in results if r["status"] == "error"]
    if errors:
        raise RuntimeError("; ".join(errors))
    model = make_model(config)
    lm_loss(model(x), y, IGNORE_NONE).backward()
    _sgd_step(model, lr)
    return {"ranks": [r["weights"] for r in results], "single": {k: v.clone() for k, v in model.state_dict().items()},
            "losses": [r["loss"] for r in results]}


def max_difference(a: dict, b: dict) -> float:
    """The largest absolute difference between two state dicts."""
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)

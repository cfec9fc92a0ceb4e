"""Benchmark: train notebook 10's model on tiny Shakespeare for a fixed time, and report the
validation loss it reaches (CPU), or the time it takes to reach nanoGPT's 1.47 and the MFU (GPU).

    python benchmarks/train_shakespeare.py                    # CPU: 180 s, the goal is val <= 1.80
    python benchmarks/train_shakespeare.py --seconds 60       # another budget
    python benchmarks/train_shakespeare.py --quick            # a 20 s smoke run
    python benchmarks/train_shakespeare.py --steps 300        # a fixed number of steps (a busy machine)
    python benchmarks/train_shakespeare.py --device cuda      # GPU: time to val 1.47, MFU
    python benchmarks/train_shakespeare.py --vs-nanogpt ../shared/anchors/nanoGPT --runs 2
                                                              # side by side with nanoGPT, same machine and time

On a CPU the run plans its number of steps from the speed of its first steps, so that the
learning-rate schedule ends when the time is up (the last evaluation included), and stops there at
the latest. Besides wall time it reports the process's CPU time: on a machine shared with other
programs, tokens per CPU-second times the threads used estimates what an idle machine would do.
The goals: on an idle 2-core CPU, val <= 1.80 in 180 s, and at least 0.05 below nanoGPT's README CPU recipe run
for the same time on the same machine (``--vs-nanogpt``, which measures both; no figure from elsewhere is the
comparison); on one GPU, val 1.47 sooner than nanoGPT's ~3 minutes on an A100 (not measured yet: no GPU was lent).

What each lever of the CPU preset bought (one idle 2-core AMD EPYC with AVX-512 and AVX512-BF16, 180 s each, every
final model scored on the same 100 x 16 windows of 64 characters of the validation text):

    180 s on 2 cores                                           tokens/s   val loss
    the preset before (AdamW lr 3e-3, 1 thread, batch 16)        12,186     1.725
    + both cores (2 threads)                                     15,726     1.676
    + Muon, lr 5e-3 (the preset, with cpu_threads="auto")        12,037     1.576
    + bf16 autocast                                              10,748     1.604
    Muon, batch 24, lr 7e-3                                      12,786     1.605
    Muon, batch 24, lr 7e-3, bf16 autocast                       14,902     1.559
    Muon, batch 24, lr 5e-3, bf16 autocast                       13,732     1.563
    nanoGPT's README CPU recipe (batch 12, AdamW lr 1e-3)        15,339     1.760

    At a fixed 2,000 steps of batch 16 on one thread (no timing involved): AdamW lr 3e-3 1.737, lr 6e-3 1.733;
    Muon lr 2e-2 1.606, 1e-2 1.580, 5e-3 1.572, 3e-3 1.577; Muon lr 1e-2 with batch 24 1.547.
    torch.compile: a compiled step of the preset took 71.1 ms against 69.7 ms eager (2 threads), after 5.5 s
    (inductor cache warm) to 40 s of compiling: it does not pay on a CPU for a model this small. bf16 autocast:
    at most 5% faster per step, and the losses moved both ways (180 s runs vary by about +-0.03): not adopted.

The loop is ``tutor.train.fit``, through ``tutor.train.long_run.train``: the one the notebook and
``python -m tutor.scale`` run.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from tutor import data
from tutor import train as tr
from tutor.train import long_run

SHAKESPEARE = Path(__file__).resolve().parents[2] / "shared/data/tinyshakespeare.txt"
CPU_GOAL = 1.80  # validation loss within the time budget on an idle 2-core CPU
GPU_TARGET = 1.47  # nanoGPT's shakespeare-char validation loss
NANOGPT_A100_SECONDS = 180.0  # nanoGPT reaches it in about 3 minutes on one A100


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class TimeToTarget:
    """A ``plot`` for ``fit``: notes the wall time at which the validation loss first reaches the target."""

    def __init__(self, target):
        self.target, self.seconds, self.step = target, None, None

    def update(self, history):
        if self.seconds is None and history.val_loss and history.val_loss[-1] <= self.target:
            self.seconds, self.step = history.seconds, history.val_steps[-1] + 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=180.0, help="training time budget (CPU; default 180)")
    p.add_argument("--quick", action="store_true", help="a 20 s smoke run")
    p.add_argument("--steps", type=int, help="run exactly this many steps, whatever the time")
    p.add_argument("--device", default=None, help="cpu or cuda (default: the best there is)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: the preset's)")
    p.add_argument("--peak-tflops", type=float, help="peak TFLOP/s for MFU (default: from the table)")
    p.add_argument("--batch-size", type=int, help="sequences per step (default: the preset's)")
    p.add_argument("--lr", type=float, help="peak learning rate (default: the preset's; min_lr is a tenth)")
    p.add_argument("--eval-batches", type=int, default=100, help="validation batches in the final evaluation")
    p.add_argument("--vs-nanogpt", metavar="DIR", type=Path,
                   help="a checkout of karpathy/nanoGPT (e.g. ../shared/anchors/nanoGPT): run its README CPU recipe "
                        "for the same wall time right after, and compare")
    p.add_argument("--runs", type=int, default=1, help="with --vs-nanogpt: alternate this many pairs of runs")
    args = p.parse_args(argv)
    if args.quick:
        args.seconds = 20.0
    if args.vs_nanogpt is not None:
        return versus_nanogpt(args)

    device = torch.device(args.device) if args.device else tutor_device()
    text_data = data.shakespeare_data(SHAKESPEARE if SHAKESPEARE.is_file() else None)
    name = "gpu" if device.type == "cuda" else "cpu"
    config = replace(long_run.preset(name, device), vocab_size=text_data.vocab.vocab_size)
    if args.threads:
        config = replace(config, cpu_threads=args.threads)
    if args.batch_size:
        config = replace(config, batch_size=args.batch_size)
    if args.lr:
        config = replace(config, max_lr=args.lr, min_lr=args.lr / 10)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    threads = config.cpu_threads or torch.get_num_threads()
    threads = tr.cpu_cores() if threads == "auto" else threads
    print(f"torch {torch.__version__} on {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else f", {threads} thread(s), "
             f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"))

    budget = None
    if device.type != "cuda":
        if args.steps:
            config = replace(config, steps=args.steps)
        else:  # plan the schedule to end when the time is up
            per_step = time_per_step(config, text_data, device)
            # four evaluations of eval_batches forward passes (a third of a step each) fit in the budget too
            steps = max(20, int(args.seconds / per_step) - (4 * config.eval_batches) // 3 - 2)
            config = replace(config, steps=steps, warmup_steps=min(config.warmup_steps, steps // 10),
                             eval_every=max(steps // 4, 1))
            budget = args.seconds
            print(f"about {per_step * 1000:.0f} ms per step here: planning {steps} steps for {args.seconds:.0f} s")
    elif args.steps:
        config = replace(config, steps=args.steps)
    print(f"config: {config.describe()}, bf16={config.bf16}, compile={config.compile}")

    target = TimeToTarget(GPU_TARGET)
    cpu_before = cpu_seconds()
    run = long_run.train(config, text_data=text_data, device=device, seconds=budget, plot=target,
                      progress=sys.stderr.isatty(), peak_tflops=args.peak_tflops)
    cpu_used = cpu_seconds() - cpu_before
    h = run.history
    final = tr.evaluate(run.model, tr.fixed_batches(text_data.val, config.block_size, config.batch_size,
                                                    args.eval_batches, seed=99), long_run.IGNORE_NONE)
    print()
    print(f"{'training':<36}{h.seconds:>9.1f} s wall, {cpu_used:.1f} s CPU, {run.step} steps, "
          f"{long_run.n_params(run.model):,} parameters")
    print(f"{'tokens':<36}{h.tokens:>12,} ({h.tokens / max(run.step, 1):,.0f} per step)")
    print(f"{'tokens per second':<36}{run.tokens_per_second:>12,.0f} wall, "
          f"{h.tokens / max(cpu_used, 1e-9):,.0f} per CPU-second")
    print(f"{'MFU':<36}{100 * run.mfu:>11.1f}% of {run.peak_note}")
    print(f"{'validation loss':<36}{final:>12.4f} ({args.eval_batches} batches of {config.batch_size} x "
          f"{config.block_size} characters)")
    if device.type == "cuda":
        print(f"{'peak GPU memory':<36}{torch.cuda.max_memory_allocated(device) / 2**30:>11.2f} GiB")
        if target.seconds is not None:
            print(f"{'time to val <= 1.47':<36}{target.seconds:>11.1f} s (step {target.step})")
        met = target.seconds is not None and target.seconds < NANOGPT_A100_SECONDS
        got = f"{target.seconds:.0f} s" if target.seconds is not None else "not reached"
        print(f"goal (GPU): val <= {GPU_TARGET} sooner than nanoGPT's ~{NANOGPT_A100_SECONDS:.0f} s on an A100: "
              f"{'met' if met else 'NOT met'} ({got})")
    else:
        idle = cpu_used / min(threads, os.cpu_count() or 1)
        print(f"{'estimated idle wall time':<36}{idle:>11.1f} s (CPU time / {min(threads, os.cpu_count() or 1)} "
              f"thread(s); compare with the budget on a busy machine)")
        in_budget = h.seconds <= args.seconds + 5 if not args.steps else idle <= args.seconds
        print(f"goal (CPU): val <= {CPU_GOAL} within {args.seconds:.0f} s on an idle 2-core CPU: "
              f"{'met' if final <= CPU_GOAL and in_budget else 'NOT met'} (val {final:.3f})")
    return 0


# Measured elsewhere (issue 22, on 0acc2a8, an idle 2-core machine, one after the other): what --vs-nanogpt measures.
MEASURED_ELSEWHERE = [
    ("nanoGPT's README CPU recipe, 2,000 iters", "60 s", 1.880),
    ("nanoGPT's README CPU recipe, 6,000 iters", "180 s", 1.604),
    ("the course, notebook 10's preset then (1 thread)", "180 s", 1.653),
]


def versus_nanogpt(args) -> int:
    """The course's run and nanoGPT's README CPU recipe, each for ``args.seconds`` of wall time, alternated
    ``args.runs`` times on this machine; both final models evaluated on the same validation windows."""
    import statistics

    from nanogpt_anchor import check_same_split, nanogpt_run, prepare

    checkout = args.vs_nanogpt
    if not (checkout / "train.py").is_file():
        print(f"{checkout} is not a nanoGPT checkout (no train.py). Figures measured elsewhere, not here:")
        for what, wall, loss in MEASURED_ELSEWHERE:
            print(f"  {what:<52} {wall:>6}  val {loss:.3f}")
        return 2
    device = torch.device("cpu")
    text_data = data.shakespeare_data(SHAKESPEARE if SHAKESPEARE.is_file() else None)
    config = replace(long_run.preset("cpu", device), vocab_size=text_data.vocab.vocab_size)
    batches = tr.fixed_batches(text_data.val, config.block_size, config.batch_size, args.eval_batches, seed=99)
    work = prepare(checkout, text_data.text)
    check_same_split(work, text_data.train, text_data.val)
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"{args.seconds:.0f} s each; validation: the same {args.eval_batches} x {config.batch_size} windows of "
          f"{config.block_size} characters of the last 10% for both")
    ours, theirs = [], []
    for r in range(args.runs):
        course = course_run(config, text_data, args.seconds, batches, seed=r)
        ours.append(course)
        print(f"run {r + 1}: course  val {course['val']:.4f}  {course['tps']:>7,.0f} tok/s  {course['wall']:.0f} s "
              f"({course['steps']} steps, {course['note']})", flush=True)
        anchor = nanogpt_run(checkout, args.seconds, text_data.text, batches, work=work)
        theirs.append(anchor)
        print(f"run {r + 1}: nanoGPT val {anchor.val_loss:.4f}  {anchor.tokens_per_second:>7,.0f} tok/s  "
              f"{anchor.seconds:.0f} s ({anchor.iters} iters of {anchor.ms_per_iter:.1f} ms; its own estimate "
              f"{anchor.val_loss_own:.4f})", flush=True)
    mean_ours = statistics.mean(c["val"] for c in ours)
    mean_theirs = statistics.mean(a.val_loss for a in theirs)
    print(f"\nmean of {args.runs}: course {mean_ours:.4f}, nanoGPT {mean_theirs:.4f}, difference "
          f"{mean_ours - mean_theirs:+.4f} (goal: -0.05 or lower); tokens/s course "
          f"{statistics.mean(c['tps'] for c in ours):,.0f}, nanoGPT "
          f"{statistics.mean(a.tokens_per_second for a in theirs):,.0f}")
    print(f"goal (CPU): course <= nanoGPT - 0.05 at equal wall time: "
          f"{'met' if mean_ours <= mean_theirs - 0.05 else 'NOT met'}")
    return 0


def course_run(config, text_data, seconds, batches, seed=0) -> dict:
    """Notebook 10's preset for about ``seconds`` of wall time, start-up included: its steps planned from the
    speed of its first steps, as nanoGPT's are; its validation loss on ``batches``."""
    start = time.perf_counter()
    config = replace(config, seed=seed)
    per_step = time_per_step(config, text_data, torch.device("cpu"))
    spent = time.perf_counter() - start
    steps = max(20, int((seconds - spent) / per_step) - (4 * config.eval_batches) // 3 - 2)
    config = replace(config, steps=steps, warmup_steps=min(config.warmup_steps, steps // 10),
                     eval_every=max(steps // 4, 1))
    # as nanoGPT's run, the planned schedule runs to its end (not cut at the budget): both walls are printed
    run = long_run.train(config, text_data=text_data, device=torch.device("cpu"), progress=False)
    wall = time.perf_counter() - start
    val = tr.evaluate(run.model, batches, long_run.IGNORE_NONE)
    return {"val": val, "tps": run.history.tokens / max(wall, 1e-9), "wall": wall, "steps": run.step,
            "note": config.describe()}


def time_per_step(config, text_data, device, warmup=5, steps=20):
    """Mean seconds of one training step of ``config`` after a few warm-up steps (no evaluation)."""
    threads = torch.get_num_threads()
    if device.type == "cpu" and config.cpu_threads:  # "auto" chooses while training: time the most it may use
        torch.set_num_threads(tr.cpu_cores() if config.cpu_threads == "auto" else config.cpu_threads)
    model = tr.make_model(config, device)
    optimizer = tr.make_optimizer(model, config)
    stream = tr.RandomWindows(text_data.train, config.block_size, config.batch_size, seed=123, device=device)
    for i in range(warmup + steps):
        if i == warmup:
            start = time.perf_counter()
        tr.accumulate_step(model, next(stream), optimizer, long_run.IGNORE_NONE)
    seconds = (time.perf_counter() - start) / steps
    torch.set_num_threads(threads)
    return seconds


def tutor_device():
    from tutor.device import get_device

    return get_device()


if __name__ == "__main__":
    sys.exit(main())

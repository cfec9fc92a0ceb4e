"""Train the course's GPT on tiny Shakespeare, from a laptop to a GPU cluster (notebook 10).

One process (a CPU, or one GPU)::

    python -m tutor.scale --preset cpu                 # about 3 minutes on a laptop CPU
    python -m tutor.scale --preset gpu                 # one GPU: bf16 autocast, torch.compile
    python -m tutor.scale --preset cpu --max-steps 50  # a short run

Several processes on one machine (data parallel, ``DistributedDataParallel``; NCCL between GPUs,
Gloo between CPU processes)::

    torchrun --standalone --nproc_per_node=8 -m tutor.scale --preset gpu
    torchrun --standalone --nproc_per_node=2 -m tutor.scale --preset cpu     # two CPU processes

Several machines: run the same command on every node, with the number of nodes, this node's rank
and a rendezvous point that every node can reach (the first node's address and a free port)::

    torchrun --nnodes=2 --nproc_per_node=8 --node_rank=0 \
             --rdzv_backend=c10d --rdzv_endpoint=node0.example:29500 --rdzv_id=shakespeare \
             -m tutor.scale --preset gpu
    # (the same on node 1 with --node_rank=1; a scheduler such as SLURM can fill these in)

Each process trains on its own stream of random windows; every step their gradients are
averaged (the ``average_gradients`` of notebook 10, done by DDP in buckets while the backward
pass runs), so every process holds the same weights. Only rank 0 prints, evaluates for the log,
samples and writes checkpoints.

Checkpoints (``--out-dir``, default ``runs/shakespeare``) hold the model, the optimizer, the step,
every random generator and every rank's position in its data stream: ``--resume`` continues
exactly where the run stopped, bit for bit on a CPU. They are written atomically (a crash while
writing leaves the previous one intact, kept as ``last.prev.pt``). Ctrl-C saves and exits.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from tutor import trainer as tr
from tutor.reference.model import GPTConfig


@dataclass
class ScaleConfig(tr.TrainConfig):
    """``TrainConfig`` plus what a run on a long text needs."""

    block_size: int = 128  # characters of context (the model's max_len)
    vocab_size: int = 65  # set from the text's vocabulary
    grad_accum: int = 1  # micro-batches per step: the batch of a step is grad_accum x batch_size per process
    model: str = "gpt"  # the model class: "gpt", "modern" (notebook 09's ModernGPT) or "module:Class"
    checkpoint_every: int = 0  # steps between checkpoints (0: only at the end and on Ctrl-C)
    eval_batch_size: int = 0  # 0: batch_size

    def model_config(self) -> GPTConfig:
        return GPTConfig(vocab_size=self.vocab_size, max_len=self.block_size, d_model=self.d_model,
                         n_heads=self.n_heads, n_layers=self.n_layers, dropout=self.dropout)

    def describe(self) -> str:
        accum = f" x {self.grad_accum} accumulated" if self.grad_accum > 1 else ""
        return (f"{self.model} d_model={self.d_model}, {self.n_layers} layers, {self.n_heads} heads, "
                f"context {self.block_size}, batch {self.batch_size}{accum}, {self.steps} steps, "
                f"lr {self.max_lr:g} → {self.min_lr:g}")


# The CPU preset is sized for about 3 minutes on one laptop core (1,700 steps of 16 x 64 characters: on a
# loaded machine, 1,600 such steps reached val 1.78 in about 165 s of CPU time); the GPU preset is nanoGPT's
# shakespeare-char recipe (val ≈ 1.47), with bf16 autocast and torch.compile.
PRESETS = {
    "cpu": ScaleConfig(d_model=128, n_heads=4, n_layers=4, dropout=0.0, block_size=64, batch_size=16,
                       steps=1700, max_lr=3e-3, min_lr=3e-4, warmup_steps=100, eval_every=250,
                       eval_batches=16, cpu_threads=1),
    "gpu": ScaleConfig(d_model=384, n_heads=6, n_layers=6, dropout=0.2, block_size=256, batch_size=64,
                       steps=5000, max_lr=1e-3, min_lr=1e-4, warmup_steps=100, eval_every=250,
                       eval_batches=20, bf16=True, compile=True, checkpoint_every=1000),
    # for tests and smoke runs: a few seconds
    "tiny": ScaleConfig(d_model=32, n_heads=2, n_layers=2, dropout=0.1, block_size=16, batch_size=8,
                        steps=20, max_lr=3e-3, min_lr=3e-4, warmup_steps=4, eval_every=10, eval_batches=2,
                        cpu_threads=1),
}

IGNORE_NONE = -100  # every target of a text window is real: nothing to ignore


@dataclass
class RunResult:
    """What ``train`` returns."""

    model: torch.nn.Module
    history: tr.History
    config: ScaleConfig
    vocab: object
    step: int  # steps done (the next step to run)
    stopped_early: bool  # Ctrl-C, --stop-after or the time budget
    tokens_per_second: float  # over all processes
    mfu: float
    peak_note: str
    checkpoint: Path | None


def preset(name: str, device=None) -> ScaleConfig:
    """A copy of preset ``name``; on a device that is not CUDA, bf16 and compile are switched off."""
    config = replace(PRESETS[name])
    if device is not None and torch.device(device).type != "cuda":
        config = replace(config, bf16=False, compile=False)
    return config


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


# --- distributed set-up ---------------------------------------------------------------------


@dataclass
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def on(self) -> bool:
        return self.world_size > 1


def init_distributed(device_arg=None) -> tuple[Dist, torch.device]:
    """Under ``torchrun`` (``RANK`` in the environment): join the process group, NCCL on GPUs and
    Gloo on CPUs, and pick this process's GPU. Otherwise one process on the best device."""
    import torch.distributed as dist

    if "RANK" not in os.environ:
        from tutor.device import get_device

        return Dist(), torch.device(device_arg) if device_arg else get_device()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = torch.cuda.is_available() and (device_arg is None or device_arg.startswith("cuda"))
    if use_cuda:
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if use_cuda else "gloo")
    return Dist(rank, world, local), device


def _all_gather(obj, d: Dist):
    if not d.on:
        return [obj]
    import torch.distributed as dist

    out = [None] * d.world_size
    dist.all_gather_object(out, obj)
    return out


def _any(flag: bool, d: Dist) -> bool:
    """True on every process when ``flag`` is true on any (so all stop at the same step)."""
    if not d.on:
        return flag
    import torch.distributed as dist

    t = torch.tensor([1.0 if flag else 0.0])
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t)
    return bool(t.item() > 0)


def weights_identical(model, d: Dist) -> bool:
    """Whether every process holds exactly the same weights (compares a checksum of all of them)."""
    flat = torch.cat([p.detach().float().flatten().cpu() for p in model.parameters()])
    digest = (flat.double() * torch.arange(1, len(flat) + 1, dtype=torch.float64).sin()).sum().item()
    return len(set(_all_gather(digest, d))) == 1


# --- the run -----------------------------------------------------------------------------------


class _StopFlag:
    """Ctrl-C (SIGINT) or SIGTERM (what a cluster's scheduler sends before it kills a job) sets the
    flag: the step in progress finishes, a checkpoint is written, the run stops. A second Ctrl-C
    interrupts at once."""

    def __init__(self):
        self.set = False
        self.previous = None

    def install(self):
        import threading

        if threading.current_thread() is not threading.main_thread():
            return self
        self.previous = signal.getsignal(signal.SIGINT)
        self.previous_term = signal.getsignal(signal.SIGTERM)

        def handler(signum, frame):
            if self.set:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                raise KeyboardInterrupt
            self.set = True
            print("\nCtrl-C: finishing this step, saving a checkpoint and stopping "
                  "(press Ctrl-C again to stop at once)", file=sys.stderr, flush=True)

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)
        return self

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
          plot=None, seconds=None, stop_after=None, peak_tflops=None, step_fn=None, eval_fn=None, lr_fn=None,
          get_batch_fn=None, dist_info: Dist | None = None, log=print, handle_ctrl_c=False) -> RunResult:
    """Train ``config`` on ``text_data`` (a ``tutor.data.ShakespeareData``; loaded if None).

    ``resume`` is a checkpoint to continue from; ``out_dir`` gets ``last.pt`` (every
    ``config.checkpoint_every`` steps, at the end, and when stopped early). ``seconds`` is a time
    budget and ``stop_after`` a number of steps after which to stop (and save) without changing the
    learning-rate schedule. ``step_fn``, ``eval_fn``, ``lr_fn`` and ``get_batch_fn`` are the
    learner's own functions, when given.
    """
    from tutor import data as tdata
    from tutor.reference.scaling import flops_per_token

    d = dist_info or Dist()
    device = torch.device(device) if device is not None else torch.device("cpu")
    if text_data is None:
        text_data = tdata.shakespeare_data(verbose=d.main)
    vocab = text_data.vocab
    config = replace(config, vocab_size=vocab.vocab_size)
    saved = None
    if resume is not None:
        saved = tr.load_training_state(resume)
        if saved["vocab"] != getattr(vocab, "chars", None):
            raise ValueError(f"{resume} was trained on another vocabulary ({len(saved['vocab'])} characters)")
        config = replace(config, **{k: v for k, v in saved["config"].items()
                                    if k not in ("steps", "checkpoint_every", "cpu_threads", "compile")})
    model = tr.make_model(config, device)
    optimizer = tr.make_optimizer(model, config)
    stream = tr.RandomWindows(text_data.train, config.block_size, config.batch_size, seed=config.seed, rank=d.rank,
                              accum_steps=config.grad_accum, get_batch_fn=get_batch_fn, device=device)
    val_batches = tr.fixed_batches(text_data.val, config.block_size, config.eval_batch_size or config.batch_size,
                                   config.eval_batches)
    history, start = tr.History(), 0
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        start = saved["step"]
        history = tr.History(**saved["history"])
        if len(saved["streams"]) != d.world_size:
            raise ValueError(f"{resume} was written by {len(saved['streams'])} process(es); resume it with as many "
                             f"(this run has {d.world_size})")
        stream.load_state_dict(saved["streams"][d.rank])
        tr.set_rng_states(saved["rng"][d.rank])
    else:
        torch.manual_seed(config.seed + d.rank)  # dropout masks differ from rank to rank
    runner = None
    if d.on:
        from torch.nn.parallel import DistributedDataParallel as DDP

        runner = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    fpt = flops_per_token(n_params(model), config.n_layers, config.d_model, config.block_size)
    threads_before = torch.get_num_threads()
    if device.type == "cpu" and isinstance(config.cpu_threads, int):  # fit sets it too; peak_flops reads it here
        torch.set_num_threads(config.cpu_threads)
    peak, peak_note = tr.peak_flops(device, peak_tflops)

    out_dir = Path(out_dir) if out_dir is not None else None
    last_path = out_dir / "last.pt" if out_dir is not None else None
    flag = _StopFlag().install() if handle_ctrl_c else _StopFlag()
    state = {"stopped": False, "step": start, "checkpoint": None}
    wall_start = time.perf_counter()

    def speed(h):
        tps = h.tokens * d.world_size / max(h.seconds, 1e-9)
        return tps, tps * fpt / peak

    def metrics(h):
        tps, u = speed(h)
        return {"tok/s": f"{tps:,.0f}", "mfu": f"{100 * u:.1f}%"}

    def save(step, h):
        streams = _all_gather(stream.state_dict(), d)
        rngs = _all_gather(tr.rng_states(), d)
        if d.main and last_path is not None:
            tr.save_training_state(last_path, checkpoint_state(model, optimizer, config, step, h, streams, rngs,
                                                               getattr(vocab, "chars", None)))
            state["checkpoint"] = last_path

    def callback(step, h):
        done = step + 1
        state["step"] = done
        stop = flag.set or (stop_after is not None and done - start >= stop_after) or \
            (seconds is not None and time.perf_counter() - wall_start >= seconds)
        stop = _any(stop, d)
        if stop and done < config.steps:
            state["stopped"] = True
            save(done, h)
            return True
        if config.checkpoint_every and done % config.checkpoint_every == 0 and done < config.steps:
            save(done, h)
        return False

    try:
        history = tr.fit(model, stream, val_batches, config, step_fn=step_fn or tr.accumulate_step,
                         eval_fn=eval_fn, lr_fn=lr_fn, ignore_index=IGNORE_NONE, optimizer=optimizer,
                         progress=progress and d.main, plot=plot if d.main else None, start_step=start,
                         history=history, callback=callback, metrics=metrics, runner=runner)
    finally:
        flag.uninstall()
        torch.set_num_threads(threads_before)
    if not state["stopped"]:
        state["step"] = config.steps
        save(config.steps, history)
    tps, u = speed(history)
    return RunResult(model, history, config, vocab, state["step"], state["stopped"], tps, u, peak_note,
                     state["checkpoint"])


def sample_text(model, vocab, prompt="\n", n_chars=300, temperature=0.8, top_k=None, seed=0, generate_fn=None):
    """``n_chars`` characters generated after ``prompt``, in chunks of the model's context."""
    from tutor.reference.model import generate

    generate_fn = generate_fn or generate
    device = next(model.parameters()).device
    ids = torch.tensor([vocab.encode(prompt)], dtype=torch.long, device=device)
    with tr.seeded(seed):
        out = generate_fn(model, ids, n_chars, temperature=temperature, top_k=top_k)
    return vocab.decode(out[0, len(prompt):])


# --- the command line ----------------------------------------------------------------------------


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tutor.scale",
                                description="Train the course's GPT on tiny Shakespeare: one CPU, one GPU, or "
                                            "many under torchrun.",
                                epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default=None,
                   help="model and optimisation settings (default: gpu on CUDA, cpu elsewhere)")
    p.add_argument("--max-steps", type=int, help="total steps of the run (the learning-rate schedule ends there)")
    p.add_argument("--stop-after", type=int, metavar="N", help="stop (and save) after N steps of this session, "
                   "keeping the schedule of --max-steps: resume later with --resume")
    p.add_argument("--seconds", type=float, help="stop (and save) after this many seconds of training")
    p.add_argument("--batch-size", type=int, help="sequences per micro-batch and process")
    p.add_argument("--grad-accum", type=int, help="micro-batches accumulated per step")
    p.add_argument("--block-size", type=int, help="characters of context")
    p.add_argument("--lr", type=float, help="peak learning rate")
    p.add_argument("--dropout", type=float, help="dropout probability")
    p.add_argument("--eval-every", type=int, help="steps between evaluations")
    p.add_argument("--model", help="gpt, modern (notebook 09's ModernGPT, when present) or module:Class")
    p.add_argument("--device", help="cuda, mps or cpu (default: the best there is)")
    p.add_argument("--threads", type=int, help="CPU threads per process")
    p.add_argument("--no-compile", action="store_true", help="don't torch.compile (CUDA)")
    p.add_argument("--no-bf16", action="store_true", help="don't use bf16 autocast (CUDA)")
    p.add_argument("--seed", type=int)
    p.add_argument("--data", help="a text file to train on instead of tiny Shakespeare")
    p.add_argument("--out-dir", default="runs/shakespeare", help="where checkpoints go (default runs/shakespeare)")
    p.add_argument("--resume", nargs="?", const="auto", metavar="CHECKPOINT",
                   help="continue from a checkpoint (default: OUT_DIR/last.pt)")
    p.add_argument("--checkpoint-every", type=int, metavar="N")
    p.add_argument("--peak-tflops", type=float, help="the hardware's peak TFLOP/s for MFU (default: from a table)")
    p.add_argument("--sample", type=int, default=300, metavar="CHARS", help="characters to generate at the end (0: none)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def config_from_args(args, device) -> ScaleConfig:
    name = args.preset or ("gpu" if device.type == "cuda" else "cpu")
    config = preset(name, device)
    updates = {"steps": args.max_steps, "batch_size": args.batch_size, "grad_accum": args.grad_accum,
               "block_size": args.block_size, "max_lr": args.lr, "dropout": args.dropout, "eval_every": args.eval_every, "model": args.model,
               "cpu_threads": args.threads, "seed": args.seed, "checkpoint_every": args.checkpoint_every}
    config = replace(config, **{k: v for k, v in updates.items() if v is not None})
    if args.max_steps is not None:
        config = replace(config, warmup_steps=min(config.warmup_steps, max(args.max_steps // 10, 0)),
                         eval_every=min(config.eval_every, max(args.max_steps, 1)))
    if args.lr is not None:
        config = replace(config, min_lr=args.lr / 10)
    if args.no_compile:
        config = replace(config, compile=False)
    if args.no_bf16:
        config = replace(config, bf16=False)
    return config


def main(argv=None) -> int:
    args = make_parser().parse_args(argv)
    from tutor import data as tdata

    d, device = init_distributed(args.device)
    try:
        config = config_from_args(args, device)
        say = print if d.main else (lambda *a, **k: None)
        text_data = tdata.shakespeare_data(args.data, verbose=d.main)
        resume = None
        if args.resume:
            resume = Path(args.out_dir) / "last.pt" if args.resume == "auto" else Path(args.resume)
            if not resume.exists():
                if args.resume != "auto":
                    raise SystemExit(f"no checkpoint at {resume}")
                say(f"no checkpoint at {resume}: starting from scratch")
                resume = None
        where = f"{d.world_size} processes ({'NCCL' if device.type == 'cuda' else 'Gloo'})" if d.on else "1 process"
        say(f"device: {device} x {where}; preset: {config.describe()}"
            + ("; bf16 autocast, torch.compile" if device.type == "cuda" and config.bf16 and config.compile else ""))
        if resume is not None:
            say(f"resuming from {resume}")
        try:
            result = train(config, text_data=text_data, device=device, out_dir=args.out_dir, resume=resume,
                           progress=not args.quiet, seconds=args.seconds, stop_after=args.stop_after,
                           peak_tflops=args.peak_tflops, dist_info=d, handle_ctrl_c=True)
        except tr.CheckpointError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        h = result.history
        if d.on:
            same = weights_identical(result.model, d)
            say(f"weights identical on all {d.world_size} processes: {'yes' if same else 'NO'}")
        val = f"{h.val_loss[-1]:.4f}" if h.val_loss else "n/a"
        say(f"step {result.step}/{result.config.steps}: train loss {h.train_loss[-1]:.4f}, val loss {val}; "
            f"{result.tokens_per_second:,.0f} tokens/s, MFU {100 * result.mfu:.1f}% of {result.peak_note}")
        if device.type == "cuda" and d.main:
            say(f"peak GPU memory: {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB")
        if result.checkpoint is not None:
            say(("stopped early; " if result.stopped_early else "") + f"checkpoint: {result.checkpoint}"
                + (" (continue with --resume)" if result.stopped_early else ""))
        if d.main and args.sample and not result.stopped_early:
            say("--- a sample (temperature 0.8) ---")
            say(sample_text(result.model, result.vocab, n_chars=args.sample))
        return 0
    finally:
        if d.on:
            import torch.distributed as dist

            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())


# --- data parallelism by hand, for notebook 10 ------------------------------------------------------


def _dp_worker(rank, world_size, store, out_dir, fn, source, name, config, x, y, lr):
    """One rank of ``data_parallel_step``: its slice of the batch, backward, the learner's
    ``average_gradients``, one SGD step; saves its weights."""
    import torch.distributed as dist

    from tutor.checks.nb10_scaling_up import _function_from_source
    from tutor.reference.training import lm_loss

    result = {"rank": rank}
    try:
        torch.set_num_threads(1)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo0" if sys.platform == "darwin" else "lo")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world_size)
        if fn is None:
            fn = _function_from_source(source, name)
        model = tr.make_model(config)
        per_rank = len(x) // world_size
        xs, ys = x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]
        loss = lm_loss(model(xs), ys, IGNORE_NONE)
        loss.backward()
        fn(model)
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p -= lr * p.grad
        result.update(loss=loss.item(), weights={k: v.clone() for k, v in model.state_dict().items()})
        dist.destroy_process_group()
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}"
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))


def data_parallel_step(average_gradients_fn, config: ScaleConfig, x, y, world_size=2, lr=0.5, timeout=120.0):
    """One SGD step of ``config``'s model on the batch ``(x, y)`` split over ``world_size`` Gloo
    processes, which average their gradients with ``average_gradients_fn``; and the same step in
    this process on the whole batch.

    Returns ``{"ranks": [weights of every rank], "single": weights of the one process,
    "losses": [each rank's loss]}``. Raises ``RuntimeError`` with the reason when no process
    group can start here.
    """
    import inspect
    import multiprocessing
    import tempfile
    import textwrap

    from tutor.checks.nb10_scaling_up import start_method
    from tutor.reference.training import lm_loss

    method = start_method()
    fn, source, name = average_gradients_fn, None, None
    if method == "spawn":
        source = textwrap.dedent(inspect.getsource(average_gradients_fn))
        fn, name = None, average_gradients_fn.__name__
    ctx = multiprocessing.get_context(method)
    with tempfile.TemporaryDirectory(prefix="tutor-dp-") as tmp:
        procs = [ctx.Process(target=_dp_worker, daemon=True,
                             args=(r, world_size, os.path.join(tmp, "store"), tmp, fn, source, name, config, x, y, lr))
                 for r in range(world_size)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
        results = [torch.load(os.path.join(tmp, f"rank{r}.pt"), weights_only=False)
                   if os.path.exists(os.path.join(tmp, f"rank{r}.pt")) else {"error": "did not finish"}
                   for r in range(world_size)]
    errors = [f"rank {r}: {res['error']}" for r, res in enumerate(results) if "error" in res]
    if errors:
        raise RuntimeError("; ".join(errors))
    model = tr.make_model(config)
    lm_loss(model(x), y, IGNORE_NONE).backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= lr * p.grad
    return {"ranks": [r["weights"] for r in results], "single": {k: v.clone() for k, v in model.state_dict().items()},
            "losses": [r["loss"] for r in results]}


def max_difference(a: dict, b: dict) -> float:
    """The largest absolute difference between two state dicts."""
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)

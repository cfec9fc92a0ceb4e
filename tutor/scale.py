r"""Train the course's GPT on tiny Shakespeare, from a laptop to a GPU cluster (notebook 10).

One process (a CPU, or one GPU)::

    python -m tutor.scale --preset cpu                 # about 3 minutes on a laptop CPU
    python -m tutor.scale --preset gpu                 # one GPU: bf16 autocast, torch.compile
    python -m tutor.scale --preset cpu --max-steps 50  # a short run
    python -m tutor.scale --preset gpu --device cpu --bf16 --compile --max-steps 4 --batch-size 4
                                                       # the GPU's code path, tried on a CPU

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
import sys
from dataclasses import replace
from pathlib import Path

import torch

from tutor import distributed
from tutor.data import shakespeare_data
from tutor.train import long_run
from tutor.train.checkpoint import CheckpointError

# This module is the command line only: the run is tutor.train.long_run.train, the process group tutor.distributed.


# --- the command line ----------------------------------------------------------------------------


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tutor.scale",
                                description="Train the course's GPT on tiny Shakespeare: one CPU, one GPU, or "
                                            "many under torchrun.",
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(long_run.PRESETS), default=None,
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
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the model (default: the preset's; --compile on a CPU runs the GPU code path)")
    p.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                   help="bf16 autocast (default: the preset's; on a CPU it pays with AMX or AVX512-BF16)")
    p.add_argument("--seed", type=int)
    p.add_argument("--data", help="a text file to train on instead of tiny Shakespeare")
    p.add_argument("--out-dir", default="runs/shakespeare", help="where checkpoints go (default runs/shakespeare)")
    p.add_argument("--resume", nargs="?", const="auto", metavar="CHECKPOINT",
                   help="continue from a checkpoint (default: OUT_DIR/last.pt)")
    p.add_argument("--checkpoint-every", type=int, metavar="N")
    p.add_argument("--peak-tflops", type=float, help="the hardware's peak TFLOP/s for MFU (default: from a table)")
    p.add_argument("--sample", type=int, default=300, metavar="CHARS",
                   help="characters to generate at the end (0: none)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def config_from_args(args, device) -> long_run.ScaleConfig:
    name = args.preset or ("gpu" if device.type == "cuda" else "cpu")
    config = long_run.preset(name, device)
    updates = {"steps": args.max_steps, "batch_size": args.batch_size, "grad_accum": args.grad_accum,
               "block_size": args.block_size, "max_lr": args.lr, "dropout": args.dropout, "eval_every": args.eval_every,
               "model": args.model, "cpu_threads": args.threads, "seed": args.seed,
               "checkpoint_every": args.checkpoint_every}
    config = replace(config, **{k: v for k, v in updates.items() if v is not None})
    if args.max_steps is not None:
        config = replace(config, warmup_steps=min(config.warmup_steps, max(args.max_steps // 10, 0)),
                         eval_every=min(config.eval_every, max(args.max_steps, 1)))
    if args.lr is not None:
        config = replace(config, min_lr=args.lr / 10)
    if args.compile is not None:  # given on the command line: on any device, the GPU's code path on a CPU too
        config = replace(config, compile=args.compile)
    if args.bf16 is not None:
        config = replace(config, bf16=args.bf16)
    return config


def main(argv=None) -> int:
    args = make_parser().parse_args(argv)
    d, device = distributed.init_distributed(args.device)
    try:
        config = config_from_args(args, device)
        say = print if d.main else (lambda *a, **k: None)
        text_data = shakespeare_data(args.data, verbose=d.main)
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
            + "".join(f"; {what}" for what, on in (("bf16 autocast", config.bf16), ("torch.compile", config.compile))
                      if on))
        if resume is not None:
            say(f"resuming from {resume}")
        try:
            result = long_run.train(config, text_data=text_data, device=device, out_dir=args.out_dir, resume=resume,
                                progress=not args.quiet, seconds=args.seconds, stop_after=args.stop_after,
                                peak_tflops=args.peak_tflops, dist_info=d, handle_ctrl_c=True)
        except CheckpointError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        h = result.history
        if d.on:
            same = distributed.weights_identical(result.model, d)
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
            say(long_run.sample_text(result.model, result.vocab, n_chars=args.sample))
        return 0
    finally:
        distributed.finish(d)


if __name__ == "__main__":
    sys.exit(main())

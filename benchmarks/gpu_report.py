"""Every GPU figure of the course from one command, for one short window on one GPU (about 8 minutes).

    python benchmarks/gpu_report.py --out gpu-report          # on a GPU: the figures docs/benchmarks.md's tables want
    python benchmarks/gpu_report.py --tiny --out /tmp/report  # on a CPU: every section, a few steps each (CI)

It writes ``report.json`` and ``report.md`` (a Markdown table for docs/benchmarks.md) to ``--out``, and prints
each section as it ends. A section that fails is written with its error and the report goes on: a short GPU window
is never lost to one mistake. The sections, each measured in this one run on this one machine:

1. the device, and the matrix-product peak measured on it (float32 and bfloat16): the denominator of MFU;
2. notebook 10's GPU preset on tiny Shakespeare (``long_run``, bf16 autocast, ``torch.compile``): the time at which
   validation first reaches 1.47 (nanoGPT's recipe's loss), the best and the final loss, tokens/s, MFU, peak memory;
3. nanoGPT's own shakespeare-char recipe on the same GPU and text (``--nanogpt DIR``, a checkout), its log read line by
   line as it comes (``--log_interval=1``): the same figures; without a checkout, its published figure, labelled as
   quoted. ``versus_nanogpt`` then gives the course's time over nanoGPT's, to 1.47 if both reached it, and to the
   common loss (the higher of the two best losses) in any case. Two clocks each: wall time from the start (compile and
   evaluations included), and training time (evaluations left out);
4. notebook 08's GPU preset on the names: loss excluding the first letter, time, peak memory;
5. ``torchrun --nproc-per-node 1 -m tutor.scale``: the data-parallel path (NCCL on a GPU, Gloo on a CPU), one process;
6. the KV cache: generation with and without it on notebook 09's ModernGPT, and GPT-2 small's shape (random weights)
   generating 64 tokens: tokens/s (after a few untimed tokens) and memory; and GPT-2 small's shape with the fixed-size
   cache and one compiled decoding step (``tutor.train.decoding``, CUDA graphs on a GPU): tokens/s, against the
   cache's, and whether its greedy tokens equal ``generate_cached``'s;
7. Colab's T4 stood in for: notebook 10's GPU preset (600 steps) and notebook 08's (a quarter of its steps) with
   float16 and loss scaling forced, the path a T4 gets (``tutor.train.precision``): the loss falls, the step time,
   the MFU of that path here, and the T4's time for each whole preset estimated from its FLOPs and 65 TFLOP/s;
8. notebook 13's path on the device (its base model, a LoRA adaptation, sampling after the instruction, the merge).

``--tiny`` shrinks every run to a few steps (and the models of section 6), so that CI proves the code runs on a CPU;
its figures mean nothing.

Its first run on a GPU (2026-11-27, one H200, PyTorch 2.11; ``gpu_runs/2026-11-27-h200``) took 456 s with every
section passing. That machine's Python had everything but ``platformdirs``, carried as a wheel. The second
(``gpu_runs/2026-11-27-h200-2``, the GPU table of docs/benchmarks.md) ran every section but the names in 260 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import nanogpt_anchor

from tutor import data
from tutor import reference as ref
from tutor import train as tr
from tutor.train import long_run
from tutor.train.decoding import StaticKVCache, decode, generate_static

TARGET = 1.47  # nanoGPT's shakespeare-char recipe: "the best validation loss is 1.4697" (its README)
NANOGPT_QUOTED = "about 3 minutes on one A100 (nanoGPT's README, quoted, not measured here)"
SHAKESPEARE_CAP_S = 300  # a safety cap, so that one slow section cannot use up a short GPU window


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory(device) -> float | None:
    """GiB allocated at the most since the last reset (CUDA), or None."""
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def reset_memory(device):
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


# --- the sections ---------------------------------------------------------------------------------------------------


def device_section(device, tiny):
    row = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {tr.cpu_cores()} cores",
           "torch": torch.__version__, "cuda": torch.version.cuda}
    size = 256 if tiny else 8192
    row["matmul_fp32_tflops"] = tr.measure_matmul_flops(device, torch.float32, size=size) / 1e12
    if (device.type == "cuda" and torch.cuda.is_bf16_supported()) or device.type == "cpu":
        row["matmul_bf16_tflops"] = tr.measure_matmul_flops(device, torch.bfloat16, size=size) / 1e12
    return row


class TimeToTarget:
    """The ``plot`` of ``long_run.train``: called after every evaluation, it notes each validation loss with two clocks:
    the wall time from the start (model, compile and evaluations included) and the training loop's time with the
    evaluations left out (``History.eval_seconds``), as ``benchmarks/train_shakespeare.py`` counts it."""

    def __init__(self, target):
        self.target, self.start = target, time.perf_counter()
        self.points = []  # (step, val, wall seconds, training seconds) after every evaluation

    def update(self, history):
        self.points.append((history.val_steps[-1] + 1, history.val_loss[-1], time.perf_counter() - self.start,
                            history.seconds - history.eval_seconds))


def first_reached(points, loss):
    """The first ``(step, val, wall, training)`` of ``points`` at or below ``loss``, or None."""
    return next((point for point in points if point[1] <= loss), None)


def trajectory_figures(points, target) -> dict:
    """The figures both Shakespeare rows give from their validation points: when ``target`` was first reached (on
    both clocks), the best loss and when, and the points themselves (in the JSON only)."""
    reached = first_reached(points, target)
    best = min(points, key=lambda point: point[1]) if points else None
    return {"target": target, "reached_at_step": reached[0] if reached else None,
            "reached_after_s": reached[2] if reached else None,
            "reached_training_s": reached[3] if reached else None,
            "best_val": best[1] if best else None, "best_at_step": best[0] if best else None,
            "best_after_s": best[2] if best else None, "val_points": points}


def steady_step_seconds(points) -> float | None:
    """The median training time of one step between consecutive evaluations: the stretch before the first one, with
    the compile, is left out."""
    stretches = [(b[3] - a[3]) / (b[0] - a[0]) for a, b in zip(points, points[1:]) if b[0] > a[0]]
    return statistics.median(stretches) if stretches else None


def shakespeare_section(device, tiny):
    text_data = data.shakespeare_data(verbose=False)
    config = long_run.preset("gpu" if device.type == "cuda" else "cpu", device)
    if tiny:
        config = replace(long_run.PRESETS["tiny"], steps=6, eval_every=2, eval_batches=2)
    reset_memory(device)
    clock = TimeToTarget(TARGET if not tiny else 10.0)
    with tempfile.TemporaryDirectory() as folder:
        run = long_run.train(config, text_data=text_data, device=device, out_dir=folder, progress=False, plot=clock,
                             seconds=None if tiny else SHAKESPEARE_CAP_S)
    steady = steady_step_seconds(clock.points)
    return {"preset": config.describe(), "bf16": config.bf16, "compile": config.compile, "steps": run.step,
            "stopped_by_cap": run.step < config.steps,
            "seconds": run.history.seconds, "final_val": run.history.val_loss[-1],
            **trajectory_figures(clock.points, clock.target),
            "clock": ("reached_after_s, best_after_s: wall time from the call (model, compile and evaluations "
                      "included); reached_training_s: evaluations left out"),
            "tokens_per_s": run.tokens_per_second, "mfu": run.mfu, "mfu_of": run.peak_note,
            "tokens_per_s_mfu_clock": "the whole run: compile and evaluations included",
            "ms_per_step": steady * 1000 if steady else None,
            "steady_tokens_per_s": config.batch_size * config.block_size / steady if steady else None,
            "peak_memory_gib": peak_memory(device)}


def run_streaming(command, cwd, timeout) -> list[tuple[float, str]]:
    """Run ``command``, noting the wall time (seconds from the launch) at which each line of its output came;
    raises with the output's end if it fails or outlives ``timeout``."""
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=dict(os.environ, PYTHONUNBUFFERED="1"))
    timer = threading.Timer(timeout, process.kill)
    timer.start()
    try:
        lines = [(time.perf_counter() - start, line.rstrip("\n")) for line in process.stdout]
    finally:
        timer.cancel()
    code = process.wait()
    if code != 0:
        tail = "\n".join(line for _, line in lines[-40:])
        raise RuntimeError(f"{command[1]} failed ({code}{', killed after ' + str(timeout) + ' s' if code < 0 else ''}):"
                           f"\n{tail[-3000:]}")
    return lines


def nanogpt_points(lines) -> tuple[list[tuple[int, float, float, float]], float]:
    """nanoGPT's validation points ``(step, val, wall, training)`` and its median iteration time (seconds, iterations
    without an evaluation), from its log (``--log_interval=1``, each line with its wall time).

    ``wall``: from the launch to the line (start-up, compile, evaluations and checkpoints included). ``training``: its
    own per-iteration times summed up to that step, the iterations that began with an evaluation counted at the
    median iteration time, so that its evaluations (200 batches of each split) and checkpoint saves are left out;
    iteration 0's time, with its compile, stays in."""
    dts, vals = {}, []
    for seconds, line in lines:
        if m := nanogpt_anchor.ITER_LINE.match(line):
            dts[int(m.group(1))] = float(m.group(2)) / 1000
        elif m := nanogpt_anchor.VAL_LINE.match(line):
            vals.append((int(m.group(1)), float(m.group(3)), seconds))
    evaluated = {step for step, _, _ in vals}
    plain = [dt for step, dt in dts.items() if step >= 10 and step not in evaluated]
    median = statistics.median(plain) if plain else 0.0
    counted = {step: (median if step in evaluated and step > 0 else dt) for step, dt in dts.items()}
    return [(step, val, wall, sum(dt for s, dt in counted.items() if s < step)) for step, val, wall in vals], median


def nanogpt_section(device, tiny, checkout):
    if checkout is None:
        return {"quoted": NANOGPT_QUOTED}
    work = nanogpt_anchor.prepare(checkout, data.load_shakespeare(verbose=False))
    extra = (["--device=cpu", "--compile=False", "--dtype=float32", "--max_iters=4", "--eval_interval=2",
              "--eval_iters=2", "--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=32",
              "--batch_size=4"] if tiny else ["--device=cuda"])
    start = time.perf_counter()
    lines = run_streaming([sys.executable, "train.py", "config/train_shakespeare_char.py", *extra,
                           "--log_interval=1", "--out_dir=out"], cwd=work, timeout=120 if tiny else 300)
    points, median = nanogpt_points(lines)
    iterations = [int(m.group(1)) for _, line in lines if (m := nanogpt_anchor.ITER_LINE.match(line))]
    return {"recipe": "config/train_shakespeare_char.py" + (" (tiny)" if tiny else "") + ", --log_interval=1",
            "iterations": max(iterations) + 1 if iterations else 0, "ms_per_iter": median * 1000 or None,
            "wall_s": time.perf_counter() - start, "final_val": points[-1][1] if points else None,
            **trajectory_figures(points, TARGET if not tiny else 10.0),
            "clock": ("reached_after_s, best_after_s: wall time from the launch (start-up, compile, evaluations "
                      "included); reached_training_s: its own iteration times summed, evaluations left out, compile "
                      "in")}


def names_section(device, tiny):
    import train_names

    names = train_names.load()
    train_names_, val_names = data.split_names(names, val_fraction=0.1, seed=0)
    val_loader = data.make_loader(val_names, batch_size=512, shuffle=False)
    config = tr.config_for(device)
    if tiny:
        config = train_names.with_steps(replace(config, bf16=False, compile=False, batch_size=32, eval_every=5), 10)
    reset_memory(device)
    run = train_names.train(config, device, train_names_, val_loader)
    return {"preset": config.describe(), "steps": config.steps, "seconds": run["seconds"],
            "ms_per_step_overall": run["seconds"] / config.steps * 1000,  # evaluations and compile included
            "loader_ms_per_batch": loader_seconds(config, train_names_) * 1000,
            "val_excluding_first": run["excl"], "val_all": run["all"], "tokens_per_s": run["tokens_per_s"],
            "peak_memory_gib": peak_memory(device)}


def loader_seconds(config, names, batches=20) -> float:
    """Seconds a batch of the preset's loader takes to arrive, its workers included (``config.loader_workers``): a step
    of the names GPU preset waits for it when it is late (without workers: 31 ms a step on the H200 of 2026-11-27,
    8.5 ms a padded batch of 512 on one core of a 2-core EPYC)."""
    import train_names

    batches_left, start = batches, time.perf_counter()
    for _ in train_names.training_loader(config, names):
        batches_left -= 1
        if batches_left == 0:
            break
    return (time.perf_counter() - start) / (batches - batches_left)


def torchrun_section(device, tiny):
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
                   "-m", "tutor.scale", "--preset", "tiny" if tiny or device.type != "cuda" else "gpu",
                   "--max-steps", "4" if tiny else "50", "--device", device.type, "--sample", "0", "--quiet",
                   "--out-dir", folder]
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        start = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    if done.returncode != 0:
        raise RuntimeError(f"torchrun failed ({done.returncode}):\n{done.stdout[-1500:]}{done.stderr[-2500:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith(("device:", "step "))]
    return {"backend": "NCCL" if device.type == "cuda" else "Gloo", "seconds": time.perf_counter() - start,
            "log": lines}


def finetune_section(device, tiny):
    """Notebook 13's path on this device: the base model, one LoRA adaptation (r = 4, ``WordPositions``), sampling
    after the instruction, and the merge, each timed (the notebook's sizes, steps cut down)."""
    from tutor.train import finetune as ft

    names = data.load_names()
    train_names_, val_names = data.split_names(names, val_fraction=0.1, seed=0)
    names_val = ft.names_val_loader(val_names)
    base_steps, adapt_steps = (20, 10) if tiny else (ft.FINETUNE_BASE_CONFIG.steps, ft.FINETUNE_CONFIG.steps)
    start = time.perf_counter()
    base, history = ft.train_base(train_names_, names_val, replace(ft.FINETUNE_BASE_CONFIG, steps=base_steps),
                                  device=device, progress=False)
    base_s = time.perf_counter() - start
    instructions = ft.Instructions.of(train_names_)
    start = time.perf_counter()
    lora = ft.adapt(base, "LoRA r=4", instructions, names_val, config=replace(ft.FINETUNE_CONFIG, steps=adapt_steps),
                    per_length=20 if tiny else 100)
    adapt_s = time.perf_counter() - start
    merged = ft.merge_all(lora.model)
    ids = torch.tensor([ref.encode(ft.prompt(5))], device=device)
    with torch.no_grad():
        difference = (ft.WordPositions(merged)(ids) - ft.WordPositions(lora.model)(ids)).abs().max().item()
    return {"base_steps": base_steps, "base_s": base_s, "base_val": history.val_loss[-1], "adapt_steps": adapt_steps,
            "adapt_and_sample_s": adapt_s, "asked_length": lora.success, "merged_logit_difference": difference,
            "five_letters": ", ".join(ft.sample_lengths(merged, 5, 8, seed=1))}


T4_TFLOPS = 65.0  # Colab's free T4: dense float16 on its tensor cores (the data sheet); no bfloat16 in hardware
T4_STEPS = 600  # the stand-in's steps: enough for a steady step time, short for a GPU window


def t4_section(device, tiny):
    """Colab's T4 stands in: notebook 10's GPU preset with float16 and loss scaling forced (``config.half``), the path
    ``tutor.train.precision`` chooses on a T4 (compute capability 7.5), trained for ``T4_STEPS`` steps on this GPU.
    Its steady step gives the MFU of this path here, in float16; the T4's time for the whole preset is then estimated
    as its FLOPs over 65 TFLOP/s at that MFU (a T4 is slower and less launch-bound, so its MFU is if anything
    higher: the estimate is an upper bound in that respect)."""
    text_data = data.shakespeare_data(verbose=False)
    full = long_run.preset("gpu", "cuda")
    config = replace(full, half="float16", steps=T4_STEPS, eval_every=200, checkpoint_every=0)
    if tiny:
        config = replace(long_run.PRESETS["tiny"], bf16=True, half="float16", steps=6, eval_every=2, eval_batches=2)
    precision = tr.choose_precision(config, device)
    reset_memory(device)
    clock = TimeToTarget(10.0)
    with tempfile.TemporaryDirectory() as folder:
        run = long_run.train(config, text_data=text_data, device=device, out_dir=folder, progress=False, plot=clock,
                             seconds=None if tiny else SHAKESPEARE_CAP_S)
    steady = steady_step_seconds(clock.points)
    fpt = ref.flops_per_token(sum(p.numel() for p in run.model.parameters()), config.n_layers, config.d_model,
                              config.block_size)
    tokens = config.batch_size * config.block_size
    peak, peak_note = tr.peak_flops(device, dtype=torch.float16)
    mfu = tokens * fpt / steady / peak if steady else None
    total_flops = full.steps * tokens * fpt
    return {"precision": precision.describe(), "steps": run.step, "val_points": clock.points,
            "final_val": run.history.val_loss[-1], "ms_per_step": steady * 1000 if steady else None,
            "mfu_fp16_here": mfu, "mfu_of": peak_note,
            "preset_tflop": total_flops / 1e12,
            "t4_seconds_at_full_mfu": total_flops / (T4_TFLOPS * 1e12),
            "t4_seconds_at_this_mfu": total_flops / (T4_TFLOPS * 1e12 * mfu) if mfu else None,
            "peak_memory_gib": peak_memory(device)}


def names_fp16_section(device, tiny):
    """Notebook 08's GPU preset with float16 and loss scaling forced (the T4's path), for a quarter of its steps: the
    loss is finite and falls, and how long a step takes."""
    import train_names

    names = train_names.load()
    train_names_, val_names = data.split_names(names, val_fraction=0.1, seed=0)
    val_loader = data.make_loader(val_names, batch_size=512, shuffle=False)
    full = tr.config_for(device)
    config = train_names.with_steps(replace(full, half="float16", bf16=True), full.steps // 4)
    if tiny:
        config = train_names.with_steps(replace(config, compile=False, batch_size=32, eval_every=5), 10)
    reset_memory(device)
    run = train_names.train(config, device, train_names_, val_loader)
    fpt = ref.flops_per_token(sum(p.numel() for p in tr.make_model(config, "cpu").parameters()), config.n_layers,
                              config.d_model, 16)
    return {"precision": tr.choose_precision(config, device).describe(), "steps": config.steps,
            "seconds": run["seconds"], "ms_per_step_overall": run["seconds"] / config.steps * 1000,
            "val_excluding_first": run["excl"], "val_all": run["all"],
            "full_preset_tflop": full.steps * full.batch_size * 16 * fpt / 1e12,
            "t4_seconds_at_full_mfu": full.steps * full.batch_size * 16 * fpt / (T4_TFLOPS * 1e12),
            "peak_memory_gib": peak_memory(device)}


def generation_section(device, tiny):
    def tokens_per_second(fn, model, prompt, n):
        """Tokens/s of ``fn`` making ``n`` tokens, after a few untimed tokens: the first calls on a GPU load kernels
        and make cuBLAS's handles (the 2026-11-27 report timed them, and gave the first function timed the cost)."""
        with torch.no_grad():
            fn(model, prompt, min(4, n))
        torch.manual_seed(0)
        sync(device)
        start = time.perf_counter()
        with torch.no_grad():
            fn(model, prompt, n)
        sync(device)
        return n / (time.perf_counter() - start)

    row = {}
    modern = ref.ModernConfig(max_len=64 if tiny else 256, d_model=64, n_heads=4, n_layers=4)
    model = ref.ModernGPT(modern).to(device).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long, device=device)
    n = modern.max_len - 1
    row["modern_no_cache_tok_s"] = tokens_per_second(ref.generate, model, prompt, n)
    row["modern_cache_tok_s"] = tokens_per_second(ref.generate_cached, model, prompt, n)
    row["modern_speedup"] = row["modern_cache_tok_s"] / row["modern_no_cache_tok_s"]
    config = ref.GPTConfig.gpt2(d_model=64, n_heads=2, n_layers=2) if tiny else ref.GPTConfig.gpt2()
    del model
    reset_memory(device)
    gpt2 = ref.GPT(config).to(device).eval()
    prompt = torch.randint(0, config.vocab_size, (1, 16), device=device)
    new = 8 if tiny else 64
    row["gpt2_shape"] = f"d_model {config.d_model}, {config.n_layers} layers" + (" (tiny)" if tiny else " (small)")
    row["gpt2_cache_tok_s"] = tokens_per_second(ref.generate_cached, gpt2, prompt, new)
    row["gpt2_no_cache_tok_s"] = tokens_per_second(ref.generate, gpt2, prompt, new)
    # the fixed-size cache and one compiled step (CUDA graphs on a GPU): compiled in the untimed warm-up call
    cache = StaticKVCache.for_model(gpt2, 1)
    step = torch.compile(decode, mode="reduce-overhead", fullgraph=True)

    def static(model, ids, n):
        return generate_static(model, ids, n, step=step, cache=cache)

    start = time.perf_counter()
    with torch.no_grad():
        static(gpt2, prompt, 4)
        static(gpt2, prompt, 4)  # CUDA graphs record on a later call than the first
    row["gpt2_static_compile_s"] = time.perf_counter() - start
    row["gpt2_static_compiled_tok_s"] = tokens_per_second(static, gpt2, prompt, new)
    row["gpt2_static_speedup_vs_cache"] = row["gpt2_static_compiled_tok_s"] / row["gpt2_cache_tok_s"]
    with torch.no_grad():
        row["gpt2_static_tokens_equal"] = bool(torch.equal(static(gpt2, prompt, new),
                                                           ref.generate_cached(gpt2, prompt, new, top_k=1)))
    row["gpt2_peak_memory_gib"] = peak_memory(device)
    return row


SECTIONS = [("device", device_section), ("shakespeare", shakespeare_section), ("nanogpt", nanogpt_section),
            ("names", names_section), ("torchrun", torchrun_section), ("generation", generation_section),
            ("t4", t4_section), ("names_fp16", names_fp16_section), ("finetune", finetune_section)]


# --- the report ---------------------------------------------------------------------------------------------------


def versus_nanogpt(report: dict) -> dict | None:
    """The course's time to nanoGPT's loss as a share of nanoGPT's, on both clocks: to the target when both reached
    it, and to the common loss (the higher of the two best losses, which both reached) in any case."""
    ours, theirs = report.get("shakespeare", {}), report.get("nanogpt", {})
    if not ours.get("val_points") or not theirs.get("val_points"):
        return None
    row = {}
    for clock, name in (("reached_after_s", "ratio_wall"), ("reached_training_s", "ratio_training")):
        if ours.get(clock) and theirs.get(clock):
            row[name] = ours[clock] / theirs[clock]
    common = max(ours["best_val"], theirs["best_val"])
    mine, its = first_reached(ours["val_points"], common), first_reached(theirs["val_points"], common)
    row.update({"common_loss": common, "course_wall_s": mine[2], "nanogpt_wall_s": its[2],
                "ratio_wall_at_common": mine[2] / its[2] if its[2] else None,
                "course_training_s": mine[3], "nanogpt_training_s": its[3],
                "ratio_training_at_common": mine[3] / its[3] if its[3] else None})
    return row


def _fmt(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, list):
        return "<br>".join(map(str, value))
    return str(value)


def markdown(report: dict) -> str:
    """One table: a row per figure, sections in order; an error is one row saying so."""
    head = report["device"].get("device", "?") if isinstance(report.get("device"), dict) else "?"
    rows = [f"GPU report: {head}, {report['date']}{' (--tiny: the figures mean nothing)' if report['tiny'] else ''}",
            "", "| section | figure | value |", "|---|---|---|"]
    for name in [n for n, _ in SECTIONS] + ["versus_nanogpt"]:
        section = report.get(name) or {}
        if "error" in section:
            rows.append(f"| {name} | error | {section['error'].splitlines()[0][:200]} |")
            continue
        for key, value in section.items():
            if key in ("val_points", "traceback"):  # in the JSON only
                continue
            rows.append(f"| {name} | {key} | {_fmt(value)} |")
    return "\n".join(rows) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("gpu-report"), help="folder for report.json and report.md")
    p.add_argument("--tiny", action="store_true", help="a few steps of everything (CI, on a CPU)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when there is one)")
    p.add_argument("--nanogpt", type=Path, default=None, metavar="DIR",
                   help="a nanoGPT checkout, run on the same GPU (default: ../shared/anchors/nanoGPT if present)")
    p.add_argument("--only", nargs="*", help="only these sections: " + ", ".join(n for n, _ in SECTIONS))
    args = p.parse_args(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    checkout = args.nanogpt or (ROOT.parent / "shared" / "anchors" / "nanoGPT")
    checkout = checkout if (checkout / "train.py").exists() else None
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    report = {"date": time.strftime("%Y-%m-%d"), "tiny": args.tiny, "device_type": device.type}
    args.out.mkdir(parents=True, exist_ok=True)
    for name, section in SECTIONS:
        if args.only and name not in args.only:
            continue
        start = time.perf_counter()
        try:
            extra = (checkout,) if name == "nanogpt" else ()
            report[name] = section(device, args.tiny, *extra)
        except Exception as error:  # noqa: BLE001 - one failed section must not cost the rest of a GPU window
            report[name] = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-3000:]}
        report[name]["section_s"] = time.perf_counter() - start
        print(f"{name}: {json.dumps(report[name], default=str)[:600]}", flush=True)
        (args.out / "report.json").write_text(json.dumps(report, indent=1, default=str))  # after every section
    if (versus := versus_nanogpt(report)) is not None:
        report["versus_nanogpt"] = versus
        (args.out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    (args.out / "report.md").write_text(markdown(report))
    print(markdown(report))
    failed = [n for n, _ in SECTIONS if "error" in report.get(n, {})]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Why notebook 08's names GPU preset takes 31 ms a step on an H200 (2026-11-27's report), and what one step of
GPT-2 small's generation costs at batch 1. Run from the repository root, before ``gpu_report.py``:

    python benchmarks/gpu_runs/2026-11-27-h200-2/names_steps.py --out OUT      # on the GPU (about 4 minutes)
    python benchmarks/gpu_runs/2026-11-27-h200-2/names_steps.py --tiny --out /tmp/x   # a smoke test on a CPU

1. The preset (``tutor.train.GPU_CONFIG``: padded batches of 512 made in the training process, bf16, compile) and four
   variants, each trained ``STEPS`` steps by ``tutor.train.fit``, one after the other in this process: the median
   time of a step between steps 100 and the end (each step ends in ``loss.item()``, so the clock is honest), and the
   whole run's seconds (compile included). The variants: the loader in 4 worker processes; packed rows; both; the
   loader in workers without ``torch.compile``.
2. The fastest variant trains the whole preset (4,000 steps): validation loss excluding the first letter, seconds.
3. GPT-2 small's shape (random weights) generating with the KV cache at batch 1: tokens/s after a warm-up, and from
   ``torch.profiler``, the kernels launched, the CPU time and the GPU's kernel time per token.

It writes ``names_steps.json`` to ``--out`` and prints each figure as it comes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
from torch.utils.data import DataLoader

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import train_names

from tutor import data
from tutor import reference as ref
from tutor import train as tr
from tutor.data.batching import NamesDataset, collate, pack_names

STEPS = 300
VARIANTS = [  # label, packed, loader workers, compile
    ("the preset: padded, loader in the training process", False, 0, True),
    ("padded, loader in 4 workers", False, 4, True),
    ("packed rows", True, 0, True),
    ("packed rows, loader in 4 workers", True, 4, True),
    ("padded, loader in 4 workers, no compile", False, 4, False),
]


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def loader(config, names, workers):
    """The preset's training batches (same order as ``train_names.training_loader``), made by ``workers`` processes."""
    if workers == 0:
        return train_names.training_loader(config, names)
    from functools import partial
    collate_fn = partial(pack_names, width=data.PACK_WIDTH) if config.packed else collate
    return DataLoader(NamesDataset(names), batch_size=config.batch_size, shuffle=True,
                      generator=torch.Generator().manual_seed(config.seed), collate_fn=collate_fn,
                      num_workers=workers, persistent_workers=True, pin_memory=True, prefetch_factor=4)


def timed_run(config, device, names, val_loader, workers, first_timed):
    stamps = []

    def stamp(step, history):
        stamps.append(time.perf_counter())
        return False

    model = tr.make_model(config, device)
    start = time.perf_counter()
    history = tr.fit(model, loader(config, names, workers), val_loader, config, progress=False,
                     hooks=tr.Hooks(callback=stamp))
    sync(device)
    seconds = time.perf_counter() - start
    deltas = [b - a for a, b in zip(stamps[first_timed:-2], stamps[first_timed + 1:-1])]  # the last step evaluates
    return model, {"seconds": seconds, "steps": config.steps, "median_ms_per_step": statistics.median(deltas) * 1000,
                   "p90_ms_per_step": sorted(deltas)[int(0.9 * (len(deltas) - 1))] * 1000,
                   "val_last": history.val_loss[-1]}


def generation_profile(device, tiny):
    from torch.profiler import ProfilerActivity, profile

    config = ref.GPTConfig.gpt2(d_model=64, n_heads=2, n_layers=2) if tiny else ref.GPTConfig.gpt2()
    model = ref.GPT(config).to(device).eval()
    prompt = torch.randint(0, config.vocab_size, (1, 16), device=device)
    n = 8 if tiny else 64
    with torch.no_grad():
        ref.generate_cached(model, prompt, 4)  # warm-up
        sync(device)
        start = time.perf_counter()
        ref.generate_cached(model, prompt, n)
        sync(device)
        tok_s = n / (time.perf_counter() - start)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        k = 8
        with profile(activities=activities) as prof:
            ref.generate_cached(model, prompt, k)
            sync(device)
    events = prof.key_averages()
    launches = sum(e.count for e in events if "LaunchKernel" in e.key)
    ops = sum(e.count for e in events if e.key.startswith("aten::"))
    kernels = [e for e in events if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA]
    gpu_us = sum(e.self_device_time_total for e in kernels)
    wall_ms = 1000 / tok_s
    return {"tokens_per_s": tok_s, "ms_per_token": wall_ms, "kernel_launches_per_token": launches / k,
            "kernels_per_token": sum(e.count for e in kernels) / k,
            "aten_ops_per_token": ops / k, "gpu_kernel_ms_per_token": gpu_us / 1000 / k,
            "table": events.table(sort_by="self_cpu_time_total", row_limit=15)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tiny", action="store_true")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    names = train_names.load()
    train_, val_names = data.split_names(names, val_fraction=0.1, seed=0)
    val_loader = data.make_loader(val_names, batch_size=512, shuffle=False)
    preset = tr.config_for(device)
    if args.tiny:
        preset = replace(preset, d_model=32, n_layers=1, n_heads=2, batch_size=64, bf16=False)
    steps, first_timed = (12, 4) if args.tiny else (STEPS, 100)
    report = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "preset": preset.describe(), "variants": []}

    def save():
        (args.out / "names_steps.json").write_text(json.dumps(report, indent=1))

    for label, packed, workers, compile_ in VARIANTS:
        config = replace(preset, packed=packed, compile=compile_ and preset.compile, steps=steps,
                         warmup_steps=min(preset.warmup_steps, steps // 5), eval_every=10**9, eval_batches=2)
        torch.compiler.reset()
        _, row = timed_run(config, device, train_, val_loader, workers, first_timed)
        row.update(label=label, packed=packed, workers=workers, compile=config.compile)
        report["variants"].append(row)
        print(f"{label:<48} {row['median_ms_per_step']:7.2f} ms a step (p90 {row['p90_ms_per_step']:.2f}), "
              f"{row['seconds']:6.1f} s for {steps} steps", flush=True)
        save()

    best = min(report["variants"], key=lambda r: r["median_ms_per_step"])
    full = replace(preset, packed=best["packed"], compile=best["compile"])
    if args.tiny:
        full = replace(full, steps=20, warmup_steps=4, eval_every=10)
    torch.compiler.reset()
    sync(device)
    model, row = timed_run(full, device, train_, val_loader, best["workers"], min(first_timed, full.steps // 4))
    losses = tr.val_losses(model, val_loader)
    row.update(label=best["label"], val_excluding_first=losses["excluding_first"], val_all=losses["all"])
    report["full_run"] = row
    print(f"full preset, {best['label']}: {losses['excluding_first']:.3f} excluding the first letter "
          f"({losses['all']:.3f} all), {row['seconds']:.1f} s for {full.steps} steps, "
          f"{row['median_ms_per_step']:.2f} ms a step", flush=True)
    save()

    del model
    gen = generation_profile(device, args.tiny)
    report["generation"] = {k: v for k, v in gen.items() if k != "table"}
    print(f"GPT-2 small shape, KV cache, batch 1: {gen['tokens_per_s']:.0f} tokens/s ({gen['ms_per_token']:.2f} ms a "
          f"token): {gen['kernel_launches_per_token']:.0f} kernel launches, {gen['aten_ops_per_token']:.0f} aten ops, "
          f"{gen['gpu_kernel_ms_per_token']:.3f} ms of GPU kernels a token", flush=True)
    print(gen["table"])
    save()


if __name__ == "__main__":
    main()

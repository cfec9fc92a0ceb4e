"""Issue 44 ("GPU training ahead of nanoGPT on the same card"): notebook 10's Shakespeare GPU preset in variants, one
after the other in one process, each timed to the losses nanoGPT reached (the same clocks as benchmarks/gpu_report.py).

    python3 benchmarks/gpu_runs/2026-11-28-h100/variants.py --out $OUT --report $OUT/report/report.json --until EPOCH
    python benchmarks/gpu_runs/2026-11-28-h100/variants.py --tiny --out /tmp/variants   # on a CPU: a few steps each

Each variant is ``replace(long_run.preset("gpu", device), eval_every=100, checkpoint_every=0, **changes)`` trained by
``long_run.train`` with ``gpu_report.TimeToTarget`` as its ``plot``: the validation loss (20 batches) every 100 steps,
with the wall time from just before the model is built (compile and evaluations included) and the training time
(evaluations left out). ``variants.json`` is written again after each variant, so that a window that runs out keeps
what was done. ``--report`` (gpu_report.py's JSON of the same call) adds, for each variant, its time to the common
loss (the higher of its best and nanoGPT's best) over nanoGPT's, on both clocks.

Each variant gets a wall-clock cap (``long_run.train(seconds=...)``): at most ``--cap`` seconds, less if ``--until``
(a Unix time) would otherwise be passed. A capped run stops without its learning rate having decayed. The last
variant (the preset itself, seed 1) runs only if time is left: it says how far a second seed moves the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from gpu_report import TimeToTarget, first_reached, peak_memory, reset_memory, steady_step_seconds

from tutor import data
from tutor.train import long_run

LOSSES = (1.495, 1.472)  # the course's and nanoGPT's best on the H200 of 2026-11-27: the losses timed here
MUON = {"optimizer": "muon", "max_lr": 3e-3, "min_lr": 3e-4}
VARIANTS = [  # (name, changes to the preset, needed: False for the optional last one)
    ("modern_adamw", {"model": "modern"}, True),
    ("modern_muon", {"model": "modern", **MUON}, True),
    ("gpt_muon", {"model": "gpt", **MUON}, True),
    ("gpt_adamw_seed1", {"seed": 1}, False),
]


def at(points, loss):
    """``{"step", "wall_s", "training_s"}`` when ``points`` first reached ``loss``, or None."""
    point = first_reached(points, loss)
    return None if point is None else {"step": point[0], "val": point[1], "wall_s": point[2], "training_s": point[3]}


def versus(points, nanogpt) -> dict | None:
    """This variant's time over nanoGPT's (same call) to the common loss, and to each of ``LOSSES`` both reached."""
    if not points or not nanogpt or not nanogpt.get("val_points"):
        return None
    theirs = [tuple(p) for p in nanogpt["val_points"]]
    common = max(min(p[1] for p in points), nanogpt["best_val"])
    row = {"common_loss": common}
    for name, loss in [("common", common)] + [(f"{loss:.3f}", loss) for loss in LOSSES]:
        mine, its = first_reached(points, loss), first_reached(theirs, loss)
        if mine is None or its is None:
            row[name] = None
            continue
        row[name] = {"variant_wall_s": mine[2], "nanogpt_wall_s": its[2], "ratio_wall": mine[2] / its[2],
                     "variant_training_s": mine[3], "nanogpt_training_s": its[3],
                     "ratio_training": mine[3] / its[3] if its[3] else None}
    return row


def run_variant(name, changes, base, text_data, device, cap, nanogpt):
    config = replace(base, eval_every=100, checkpoint_every=0, **changes)
    if torch.cuda.is_available() and device.type == "cuda":
        torch.cuda.empty_cache()
    torch._dynamo.reset()  # a fresh compile per model (inductor's on-disk cache stays: later compiles may be quicker)
    reset_memory(device)
    clock = TimeToTarget(LOSSES[0])
    with tempfile.TemporaryDirectory() as folder:
        run = long_run.train(config, text_data=text_data, device=device, out_dir=folder, progress=False, plot=clock,
                             seconds=cap)
    points = clock.points
    steady = steady_step_seconds(points)
    best = min(points, key=lambda p: p[1]) if points else None
    return {"variant": name, "changes": changes, "preset": config.describe(), "optimizer": config.optimizer,
            "model": config.model, "dropout": config.dropout if config.model == "gpt" else "none (ModernGPT)",
            "seed": config.seed, "cap_s": cap, "steps": run.step, "stopped_by_cap": run.step < config.steps,
            "seconds": run.history.seconds, "wall_s": time.perf_counter() - clock.start,
            "best_val": best[1] if best else None, "best_at_step": best[0] if best else None,
            "best_wall_s": best[2] if best else None, "best_training_s": best[3] if best else None,
            "final_val": run.history.val_loss[-1] if run.history.val_loss else None,
            **{f"reached_{loss:.3f}": at(points, loss) for loss in LOSSES},
            "ms_per_step": steady * 1000 if steady else None,
            "steady_tokens_per_s": config.batch_size * config.block_size / steady if steady else None,
            "tokens_per_s_whole_run": run.tokens_per_second, "mfu_whole_run": run.mfu,
            "peak_memory_gib": peak_memory(device), "versus_nanogpt": versus(points, nanogpt),
            "train_loss_last": run.history.train_loss[-1] if run.history.train_loss else None,
            "val_points": points}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for variants.json")
    p.add_argument("--report", type=Path, default=None, help="gpu_report.py's report.json of the same call")
    p.add_argument("--until", type=float, default=None, help="Unix time by which every variant must have ended")
    p.add_argument("--cap", type=float, default=90.0, help="seconds at most for one variant (wall clock)")
    p.add_argument("--tiny", action="store_true", help="the tiny preset, a few steps (CPU smoke test)")
    p.add_argument("--only", nargs="*", help="only these variants: " + ", ".join(v[0] for v in VARIANTS))
    args = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    base = long_run.preset("gpu", device)
    if args.tiny:
        base = replace(long_run.PRESETS["tiny"], steps=300, eval_batches=2)
    nanogpt = None
    if args.report is not None and args.report.exists():
        nanogpt = json.loads(args.report.read_text()).get("nanogpt")
        if nanogpt is not None and "error" in nanogpt:
            nanogpt = None
    text_data = data.shakespeare_data(verbose=False)
    out = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU", "torch": torch.__version__,
           "tiny": args.tiny, "losses": LOSSES, "base": base.describe(),
           "nanogpt_of_this_call": {k: nanogpt.get(k) for k in ("best_val", "best_at_step", "ms_per_iter")}
           if nanogpt else None,
           "clock": "wall_s: from just before the model is built (compile, evaluations included); training_s: "
                    "evaluations left out", "variants": []}
    args.out.mkdir(parents=True, exist_ok=True)
    chosen = [v for v in VARIANTS if not args.only or v[0] in args.only]
    for i, (name, changes, needed) in enumerate(chosen):
        cap = args.cap
        if args.until is not None:
            left = args.until - time.time() - 5
            still_needed = sum(1 for v in chosen[i:] if v[2])
            if not needed:
                if left < 60:
                    print(f"{name}: skipped ({left:.0f} s left)", flush=True)
                    out["variants"].append({"variant": name, "skipped": f"{left:.0f} s left"})
                    continue
                cap = min(cap, left)
            else:
                cap = min(cap, left / max(1, still_needed))
            if cap < 20:
                print(f"{name}: skipped ({left:.0f} s left)", flush=True)
                out["variants"].append({"variant": name, "skipped": f"{left:.0f} s left"})
                continue
        start = time.perf_counter()
        try:
            row = run_variant(name, changes, base, text_data, device, cap, nanogpt)
        except Exception as error:  # noqa: BLE001 - one failed variant must not cost the others
            row = {"variant": name, "error": f"{type(error).__name__}: {error}",
                   "traceback": traceback.format_exc()[-3000:]}
        row["section_s"] = time.perf_counter() - start
        out["variants"].append(row)
        (args.out / "variants.json").write_text(json.dumps(out, indent=1, default=str))
        print(f"{name}: {json.dumps({k: v for k, v in row.items() if k != 'val_points'}, default=str)[:900]}",
              flush=True)
        if "val_points" in row:
            print(f"{name} val: {[(p[0], round(p[1], 3), round(p[2], 1), round(p[3], 1)) for p in row['val_points']]}",
                  flush=True)
    (args.out / "variants.json").write_text(json.dumps(out, indent=1, default=str))
    return 1 if any("error" in v for v in out["variants"]) else 0


if __name__ == "__main__":
    sys.exit(main())

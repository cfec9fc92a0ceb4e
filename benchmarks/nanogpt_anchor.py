"""nanoGPT as the anchor of benchmarks/train_shakespeare.py: its README's CPU recipe on tiny Shakespeare,
for a given wall time, on this machine.

    run = nanogpt_run(Path("../shared/anchors/nanoGPT"), seconds=180, text=text)

The checkout is copied to a temporary folder (it is never written to). ``data/shakespeare_char/prepare.py``
makes nanoGPT's ``train.bin``/``val.bin`` from the same text (the first 90% and the last 10%, as the course).
A short calibration run measures its time per iteration, and the real run gets as many iterations as fit
in the budget (its learning-rate schedule ending there, as the course's does). The final model is then
evaluated in this process on the validation windows the course's model is evaluated on.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

# nanoGPT's README, "I only have a macbook": the CPU recipe (1.88 in about 3 minutes on the author's laptop)
README_CPU_RECIPE = ["--device=cpu", "--compile=False", "--eval_iters=20", "--log_interval=1", "--block_size=64",
                     "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128", "--dropout=0.0"]
ITER_LINE = re.compile(r"^iter (\d+): loss [\d.]+, time ([\d.]+)ms")
VAL_LINE = re.compile(r"^step (\d+): train loss ([\d.]+), val loss ([\d.]+)")


@dataclass
class NanoGPTRun:
    iters: int
    seconds: float  # wall time of the training run (start-up, evaluations and checkpoint included)
    ms_per_iter: float
    train_seconds: float  # the sum of its iterations' times as it logs them (no start-up, evaluation or saving)
    tokens_per_second: float  # training tokens (batch 12 x block 64 per iteration) per second of wall time
    val_loss: float  # on the windows given to ``nanogpt_run`` (None: not evaluated)
    val_loss_own: float  # nanoGPT's own estimate at the last step (20 random batches)
    log: str


def _train(work: Path, extra: list[str], timeout: float) -> tuple[str, float]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "train.py", "config/train_shakespeare_char.py", *README_CPU_RECIPE,
                           *extra], cwd=work, capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"nanoGPT's train.py failed ({done.returncode}):\n"
                           f"{done.stdout[-2000:]}{done.stderr[-3000:]}")
    return done.stdout, seconds


def prepare(checkout: Path, text: str) -> Path:
    """A temporary copy of ``checkout`` with nanoGPT's shakespeare_char data made from ``text``."""
    work = Path(tempfile.mkdtemp(prefix="nanogpt-")) / "nanoGPT"
    shutil.copytree(checkout, work, ignore=shutil.ignore_patterns(".git", "out*", "*.bin", "*.pkl"))
    data_dir = work / "data" / "shakespeare_char"
    (data_dir / "input.txt").write_text(text, encoding="utf-8")
    subprocess.run([sys.executable, "prepare.py"], cwd=data_dir, check=True, capture_output=True, timeout=300)
    return work


def nanogpt_run(checkout: Path, seconds: float, text: str, val_batches=None, *, calibration_iters: int = 100,
                work: Path | None = None) -> NanoGPTRun:
    """nanoGPT's README CPU recipe for about ``seconds`` of wall time; ``val_batches`` ``[(x, y), ...]`` (the
    course's character ids, which are nanoGPT's too) are used for the final evaluation."""
    work = work or prepare(checkout, text)
    # calibrate: time per iteration (after the first few) and the fixed cost of a run (start-up, two evaluations)
    log, wall = _train(work, [f"--max_iters={calibration_iters}", f"--lr_decay_iters={10 * calibration_iters}",
                              f"--eval_interval={calibration_iters}", "--out_dir=out-calibrate"], timeout=600)
    times = [float(m.group(2)) for m in map(ITER_LINE.match, log.splitlines()) if m and int(m.group(1)) >= 10]
    per_iter = statistics.median(times) / 1000
    fixed = max(0.0, wall - calibration_iters * per_iter)
    iters = max(50, int((seconds - fixed) / per_iter))
    log, wall = _train(work, [f"--max_iters={iters}", f"--lr_decay_iters={iters}", f"--eval_interval={iters}",
                              "--always_save_checkpoint=True", "--out_dir=out"], timeout=seconds * 3 + 300)
    every = [float(m.group(2)) for m in map(ITER_LINE.match, log.splitlines()) if m]
    times = [float(m.group(2)) for m in map(ITER_LINE.match, log.splitlines()) if m and int(m.group(1)) >= 5]
    own = [float(m.group(3)) for m in map(VAL_LINE.match, log.splitlines()) if m]
    val = evaluate(work, work / "out" / "ckpt.pt", val_batches) if val_batches is not None else None
    return NanoGPTRun(iters, wall, statistics.median(times), sum(every) / 1000, 12 * 64 * iters / wall, val,
                      own[-1] if own else None, log)


def evaluate(work: Path, checkpoint: Path, batches) -> float:
    """The mean cross-entropy of nanoGPT's saved model on ``batches`` (the same windows the course uses)."""
    spec = importlib.util.spec_from_file_location("nanogpt_model", work / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    saved = torch.load(checkpoint, map_location="cpu", weights_only=False)
    model = module.GPT(module.GPTConfig(**saved["model_args"]))
    state = {k.removeprefix("_orig_mod."): v for k, v in saved["model"].items()}
    model.load_state_dict(state)
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for x, y in batches:
            _, loss = model(x, y)
            total += loss.item() * y.numel()
            count += y.numel()
    return total / count


def check_same_split(work: Path, train_ids, val_ids) -> None:
    """nanoGPT's train.bin/val.bin hold exactly the course's split (raises otherwise)."""
    import numpy as np

    folder = work / "data" / "shakespeare_char"
    for name, ids in (("train", train_ids), ("val", val_ids)):
        theirs = np.fromfile(folder / f"{name}.bin", dtype=np.uint16)
        if len(theirs) != len(ids) or not (torch.from_numpy(theirs.astype("int64")) == ids.cpu()).all():
            raise RuntimeError(f"nanoGPT's {name}.bin is not the course's {name} split")

"""The GPU presets' code path, run on a CPU: bf16 autocast, torch.compile, fused kernels, checkpoints and
resume, so that the first run on a real GPU meets no Python error. Sizes are cut down (a batch of 4); the
code that runs is the GPU preset's. About two minutes, most of it torch.compile generating C++ kernels."""

import os
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from conftest import ROOT, SHARED
from tutor import data
from tutor import train as tr
from tutor.reference import vocab_size

pytestmark = [
    pytest.mark.skipif(not torch._dynamo.is_dynamo_supported(), reason="torch.compile is not supported here"),
    pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                       reason="torch.compile on a CPU needs a C++ compiler (g++): .ci/run installs it"),
]

SHAKESPEARE = SHARED / "data" / "tinyshakespeare.txt"


def scale(*args, out_dir):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if SHAKESPEARE.exists():
        env["TUTOR_SHAKESPEARE"] = str(SHAKESPEARE)  # else the package's copy
    done = subprocess.run([sys.executable, "-m", "tutor.scale", "--preset", "gpu", "--device", "cpu", "--bf16",
                           "--compile", "--batch-size", "4", "--max-steps", "4", "--eval-every", "2", "--sample", "0",
                           "--quiet", "--out-dir", str(out_dir), *args],
                          capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_scale_gpu_preset_on_a_cpu_compiles_autocasts_checkpoints_and_resumes(tmp_path):
    first = scale("--stop-after", "2", out_dir=tmp_path)
    assert "preset: gpt d_model=384, 6 layers" in first and "bf16 autocast; torch.compile" in first
    assert "step 2/4" in first and "stopped early" in first and (tmp_path / "last.pt").exists()
    assert "bfloat16" in first  # the MFU divides by the measured bf16 peak
    second = scale("--resume", out_dir=tmp_path)
    assert "resuming from" in second and "step 4/4" in second
    saved = tr.load_training_state(tmp_path / "last.pt")
    assert saved["step"] == 4 and saved["config"]["bf16"] and saved["config"]["compile"]
    assert all(torch.isfinite(v).all() for v in saved["model"].values() if v.is_floating_point())


def test_names_gpu_preset_of_notebook_08_on_a_cpu(tmp_path):
    """Notebook 08's GPU preset (bf16 autocast, torch.compile, fused kernels, batches from loader workers) trains and
    checkpoints on a CPU."""
    config = replace(tr.GPU_CONFIG, steps=3, batch_size=16, eval_every=2, eval_batches=1, warmup_steps=1)
    assert config.bf16 and config.compile and config.fused_kernels
    names = ["laika", "maximilian", "zoe", "bo", "anna", "theodore", "ines", "kai"] * 8
    model = tr.make_model(config, "cpu")
    workers = config.loader_workers or 1  # as notebook 08 passes it; at least one, even on a 1-core machine
    history = tr.fit(model, data.make_loader(names, batch_size=config.batch_size, seed=0, num_workers=workers),
                     data.make_loader(names[:16], batch_size=16, shuffle=False), config, progress=False)
    assert len(history.train_loss) == 3 and all(torch.isfinite(torch.tensor(history.train_loss)))
    assert history.val_loss and history.val_loss[-1] < 2 * torch.log(torch.tensor(float(vocab_size)))
    path = tr.save_checkpoint(tmp_path / "names.pt", model, config, history)
    loaded, loaded_config = tr.load_checkpoint(path, "cpu")
    assert loaded_config.bf16 and loaded_config.compile
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))

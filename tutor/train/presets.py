"""The presets of notebook 08's run, as data: one ``TrainConfig`` per machine (as nanoGPT's ``config/`` folder).

Sized for about 90 seconds on a laptop CPU (2 cores; the goal is 120 s) and for one modern GPU. With a fixed time,
the CPU preset is the GPT of notebook 07 with 2 layers instead of 4 (a step takes about half as long, so it makes
about twice as many, and ends lower), on packed batches (``tutor.data.make_packed_loader``: a step computes about
40% fewer positions), trained by Muon and AdamW (``MuonAdamW``: lower after the same number of steps), in batches
of 256 names (Muon costs about as much per step whatever the batch holds). benchmarks/train_names.py measures it,
--ablate each change alone.
"""

from dataclasses import replace

import torch

from tutor.train.config import TrainConfig

CPU_CONFIG = TrainConfig(d_model=64, n_heads=4, n_layers=2, batch_size=256, steps=3000, max_lr=1.8e-2, min_lr=5e-4,
                         warmup_steps=100, eval_every=250, eval_batches=10, cpu_threads="auto", packed=True,
                         optimizer="muon")
# The preset before packing and Muon (issue 9, first round): 1.832 (excluding the first letter) in about 110 s.
PADDED_CPU_CONFIG = TrainConfig(d_model=64, n_heads=4, n_layers=2, batch_size=128, steps=5800, max_lr=8e-3,
                                min_lr=5e-4, warmup_steps=100, eval_every=500, eval_batches=10, cpu_threads="auto")
# The CPU preset as issue 9 found it: 1.893 (excluding the first letter) in 105.6 s on an idle 2-core CPU, on one
# thread. Kept by name so that benchmarks compare against it.
OLD_CPU_CONFIG = TrainConfig(d_model=64, n_heads=4, n_layers=4, batch_size=128, steps=2200, max_lr=8e-3,
                             min_lr=5e-4, warmup_steps=100, cpu_threads=1)
GPU_CONFIG = TrainConfig(d_model=256, n_heads=8, n_layers=6, dropout=0.1, batch_size=512, steps=4000,
                         max_lr=1e-3, min_lr=1e-4, warmup_steps=200, eval_every=500, eval_batches=20,
                         bf16=True, compile=True)


def config_for(device) -> TrainConfig:
    """The preset for ``device``: ``GPU_CONFIG`` on CUDA, a CPU-sized one elsewhere (MPS included,
    without bf16 autocast or compile)."""
    device = torch.device(device)
    if device.type == "cuda":
        return replace(GPU_CONFIG)
    if device.type == "mps":
        return replace(GPU_CONFIG, bf16=False, compile=False, steps=2000)
    return replace(CPU_CONFIG)

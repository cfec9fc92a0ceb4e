"""Every preset of the course's runs, as data (as nanoGPT's ``config/`` folder): notebook 08's names (``CPU_CONFIG``,
``GPU_CONFIG``), notebook 10's long text (``SHAKESPEARE_PRESETS``), notebook 11's payoff (``CHAR_CONFIG``,
``BPE_CONFIG``). The classes are in ``config``; the presets that only benchmarks compare against are in the benchmarks.

Notebook 08's are sized for about 90 seconds on a laptop CPU (2 cores; the goal is 120 s) and for one modern GPU.
With a fixed time, the CPU preset is the GPT of notebook 07 with 2 layers instead of 4 (a step takes about half as
long, so it makes about twice as many, and ends lower), on packed batches (``tutor.data.make_packed_loader``: a step
computes about 40% fewer positions), trained by Muon and AdamW (``MuonAdamW``: lower after the same number of steps),
in batches of 256 names (Muon costs about as much per step whatever the batch holds). benchmarks/train_names.py
measures it, --ablate each change alone.
"""

from dataclasses import replace

import torch

from tutor.train.config import PayoffConfig, ScaleConfig, TrainConfig
from tutor.train.threads import cpu_cores

CPU_CONFIG = TrainConfig(d_model=64, n_heads=4, n_layers=2, batch_size=256, steps=3000, max_lr=1.8e-2, min_lr=5e-4,
                         warmup_steps=100, eval_every=250, eval_batches=10, cpu_threads="auto", packed=True,
                         optimizer="muon")
# The GPU preset's batches come from up to 4 background processes (one core is left to the training process): on an
# H200 (2026-11-27, benchmarks/gpu_runs/2026-11-27-h200-2) a step took a median 20.2 ms with the batches made between
# steps and 12.7 ms with 4 workers, measured side by side; the whole preset then trained in 85 s (1.756), with the
# compiled kernels cached and the workers kept alive between passes (here they start again with each pass, about 22
# times a run, so that the batches keep their order: not measured on a GPU).
GPU_CONFIG = TrainConfig(d_model=256, n_heads=8, n_layers=6, dropout=0.1, batch_size=512, steps=4000,
                         max_lr=1e-3, min_lr=1e-4, warmup_steps=200, eval_every=500, eval_batches=20,
                         bf16=True, compile=True, loader_workers=min(4, cpu_cores() - 1))


def config_for(device) -> TrainConfig:
    """The preset for ``device``: ``GPU_CONFIG`` on CUDA, a CPU-sized one elsewhere (MPS included,
    without bf16 autocast, compile or loader workers, none of them measured on a Mac)."""
    device = torch.device(device)
    if device.type == "cuda":
        return replace(GPU_CONFIG)
    if device.type == "mps":
        return replace(GPU_CONFIG, bf16=False, compile=False, steps=2000, loader_workers=0)
    return replace(CPU_CONFIG)


# --- notebook 10: tiny Shakespeare (``long_run``, ``python -m tutor.scale``) --------------------------------------

# The CPU preset is sized for about 3 minutes on a 2-core laptop: notebook 07's GPT (4 layers, d_model 128, 64
# characters of context), batches of 16 windows, trained by Muon + AdamW (as notebook 08's preset), on the threads
# that are fastest while it trains ("auto", as notebook 08). benchmarks/train_shakespeare.py --vs-nanogpt measures it
# against nanoGPT's README CPU recipe at equal wall time, and its docstring has what each lever bought (bf16 autocast
# and torch.compile did not pay on a CPU). The GPU preset is nanoGPT's shakespeare-char recipe (its model, batch,
# dropout and learning rates), with bf16 autocast and torch.compile, for 1,800 steps instead of its 5,000: this model
# overfits sooner (it differs from nanoGPT's in places, e.g. no dropout after the attention's output projection, an
# untied head; which of them matters is not measured). Measured on one H200 (2026-11-27, benchmarks/gpu_report.py,
# then two runs in one process, one each): 5,000 steps ended at 2.150 (nanoGPT's own recipe, same GPU and text:
# 1.701); 2,500 steps were lowest at step 1,500 (1.499) and ended at 1.560; 1,800 steps were lowest at 1,600 (1.487)
# and ended at 1.496, in 26 s (torch.compile's cache already warm).
SHAKESPEARE_PRESETS = {
    "cpu": ScaleConfig(d_model=128, n_heads=4, n_layers=4, dropout=0.0, block_size=64, batch_size=16,
                       steps=2400, max_lr=5e-3, min_lr=5e-4, warmup_steps=100, eval_every=300,
                       eval_batches=16, cpu_threads="auto", optimizer="muon"),
    "gpu": ScaleConfig(d_model=384, n_heads=6, n_layers=6, dropout=0.2, block_size=256, batch_size=64,
                       steps=1800, max_lr=1e-3, min_lr=1e-4, warmup_steps=100, eval_every=200,
                       eval_batches=20, bf16=True, compile=True, checkpoint_every=1000),
    # for tests and smoke runs: a few seconds
    "tiny": ScaleConfig(d_model=32, n_heads=2, n_layers=2, dropout=0.1, block_size=16, batch_size=8,
                        steps=20, max_lr=3e-3, min_lr=3e-4, warmup_steps=4, eval_every=10, eval_batches=2,
                        cpu_threads=1),
}


def shakespeare_preset(name: str, device=None) -> ScaleConfig:
    """A copy of preset ``name``; on a device that is not CUDA, bf16 and compile are switched off (on a CPU
    neither paid for this model: benchmarks/train_shakespeare.py; ``--bf16``/``--compile`` switch them on)."""
    config = replace(SHAKESPEARE_PRESETS[name])
    if device is not None and torch.device(device).type != "cuda":
        config = replace(config, bf16=False, compile=False)
    return config


# --- notebook 11: characters against BPE tokens at the same compute (``bpe_vs_chars``) -------------------------

# ``bpe_vs_chars.sweep`` (its table is in notebook 11) picks the block, batch and learning rate; between 512, 1024
# and 2048 tokens it cannot decide at the notebook's budget (seeds differ more).
BPE_VOCAB = 1024
CHAR_CONFIG = PayoffConfig(block_size=64, batch_size=16, max_lr=3e-3, min_lr=3e-4)
BPE_CONFIG = PayoffConfig(block_size=32, batch_size=16, max_lr=3e-3, min_lr=3e-4)


# --- notebook 13: adapting a names model to an instruction (``finetune``) ------------------------------------------

# The base model is notebook 08's CPU preset, trained for fewer steps. Notebook 13 trains on one thread, not "auto":
# the thread count changes the sums' rounding, and the notebook's text quotes its figures; and one thread never waits
# for a second one that another program keeps off its core. The notebook sets one thread for everything else too
# (sampling, evaluation). On 2 cores with one kept busy by another process, notebook 13 took 66.6 s against 64.4 s
# idle; with 2 threads it had stalled more than 11x, and notebook 08 ("auto") took 218 s against 73 s idle.
FINETUNE_BASE_CONFIG = replace(CPU_CONFIG, steps=1000, eval_every=250, cpu_threads=1)
# Adapting it: AdamW, the same steps and batches for every method; only the learning rate differs by method.
FINETUNE_CONFIG = TrainConfig(d_model=64, n_heads=4, n_layers=2, batch_size=64, steps=300, max_lr=1e-3, min_lr=1e-4,
                              warmup_steps=20, weight_decay=0.0, eval_every=100, eval_batches=2, cpu_threads=1)
FINETUNE_LRS = {"full fine-tuning": 1e-3, "LoRA": 3e-3, "head alone": 3e-3}

"""The training engine: the loop that notebooks 08-11, ``benchmarks/`` and ``python -m tutor.scale`` share,
one job per module.

| module | what is in it |
|---|---|
| ``config`` | ``TrainConfig``: model size and optimisation settings of a run; ``ScaleConfig``, ``PayoffConfig`` |
| ``presets`` | every preset: ``CPU_CONFIG``, ``GPU_CONFIG``, ``config_for``; ``SHAKESPEARE_PRESETS``; ``CHAR_CONFIG`` |
| ``models`` | ``BigramModel`` (baseline), ``make_model``, ``use_fused_kernels``, ``PackedNames``, ``AutocastBF16`` |
| ``optim`` | ``make_optimizer``: AdamW, or ``MuonAdamW`` for the ``block_matrices`` |
| ``precision`` | ``choose_precision``: bfloat16, float16 with loss scaling or float32, and compile, by device |
| ``loop`` | ``fit``, ``Hooks`` (what a longer run plugs in), ``History``, ``accumulate_step`` (accumulation, DDP) |
| ``validation`` | ``position_losses``, ``val_losses``, ``losses_from_positions``; ``mean_loss`` over a long text |
| ``progress_bar`` | the bar, ``expected_seconds``, ``format_duration``, ``time_report`` (is this machine slow?) |
| ``threads`` | ``cpu_cores``, ``ThreadChooser`` (``cpu_threads="auto"``) |
| ``checkpoint`` | ``save_checkpoint``/``load_checkpoint``; ``save_training_state``/``load_training_state`` (resume) |
| ``streams`` | ``RandomWindows``, ``fixed_batches``: batches of windows of a long text (notebook 10) |
| ``metrics`` | ``peak_flops``, ``cpu_peak_flops``, ``cpu_has_fast_bf16``, ``mfu``, ``parameter_bytes`` |
| ``sampling`` | ``sample_names``, ``seeded`` |
| ``long_run`` | notebook 10's run on a long text: ``train``, ``data_parallel_step``, its ``PRESETS`` |
| ``bpe_vs_chars`` | notebook 11's payoff: characters against BPE tokens at the same compute |
| ``finetune`` | notebook 13's payoff: a names model adapted to an instruction by full fine-tuning, LoRA, the head |
| ``induction`` | notebook 14's experiment: an attention-only model trained until an induction head forms, ablated |

The four things a learner writes in notebook 08 (``lm_loss``, ``lr_schedule``, ``train_step``, ``evaluate``)
are in ``tutor.reference.training``; ``fit`` uses them unless the notebook passes the learner's own (they are
re-exported here). ``long_run``, ``bpe_vs_chars``, ``finetune`` and ``induction`` are imported by name
(``from tutor.train import long_run``); everything else is here: ``from tutor.train import fit, CPU_CONFIG``.
"""

from tutor.reference.training import evaluate, lm_loss, lr_schedule, train_step
from tutor.train.checkpoint import (
    CHECKPOINT_MAGIC,
    CheckpointError,
    load_checkpoint,
    load_training_state,
    previous_checkpoint,
    rng_states,
    save_checkpoint,
    save_training_state,
    set_rng_states,
)
from tutor.train.config import PayoffConfig, ScaleConfig, TrainConfig
from tutor.train.loop import History, Hooks, accumulate_step, fit
from tutor.train.metrics import (
    PEAK_TFLOPS,
    cpu_has_fast_bf16,
    cpu_peak_flops,
    measure_matmul_flops,
    mfu,
    parameter_bytes,
    peak_flops,
)
from tutor.train.models import (
    AutocastBF16,
    BigramModel,
    PackedNames,
    make_model,
    model_class,
    use_fused_attention,
    use_fused_kernels,
)
from tutor.train.optim import MuonAdamW, block_matrices, make_optimizer
from tutor.train.precision import Autocast, Precision, ScaledBackward, ScaledOptimizer
from tutor.train.precision import choose as choose_precision
from tutor.train.presets import CPU_CONFIG, GPU_CONFIG, config_for
from tutor.train.progress_bar import (
    CPU_SECONDS_PER_STEP,
    SLOW_FACTOR,
    TIMING_STEPS,
    PlainProgress,
    expected_seconds,
    format_duration,
    time_report,
)
from tutor.train.sampling import sample_names, seeded
from tutor.train.streams import RandomWindows, fixed_batches
from tutor.train.threads import ThreadChooser, cpu_cores
from tutor.train.validation import losses_from_positions, mean_loss, position_losses, val_losses

__all__ = [
    # config, presets
    "TrainConfig", "ScaleConfig", "PayoffConfig", "CPU_CONFIG", "GPU_CONFIG", "config_for",
    # models
    "BigramModel", "model_class", "make_model", "use_fused_attention", "use_fused_kernels", "PackedNames",
    "AutocastBF16",
    # precision
    "Precision", "choose_precision", "Autocast", "ScaledBackward", "ScaledOptimizer",
    # optim
    "MuonAdamW", "block_matrices", "make_optimizer",
    # loop
    "History", "Hooks", "fit", "accumulate_step",
    # validation
    "position_losses", "val_losses", "losses_from_positions", "mean_loss",
    # progress
    "PlainProgress", "CPU_SECONDS_PER_STEP", "SLOW_FACTOR", "TIMING_STEPS", "expected_seconds", "format_duration",
    "time_report",
    # threads
    "cpu_cores", "ThreadChooser",
    # checkpoint
    "save_checkpoint", "load_checkpoint", "CheckpointError", "CHECKPOINT_MAGIC", "save_training_state",
    "previous_checkpoint", "load_training_state", "rng_states", "set_rng_states",
    # streams, metrics, sampling
    "RandomWindows", "fixed_batches", "PEAK_TFLOPS", "cpu_peak_flops", "cpu_has_fast_bf16", "measure_matmul_flops",
    "peak_flops", "mfu", "parameter_bytes",
    "sample_names", "seeded",
    # notebook 08's four exercises (tutor.reference.training), fit's defaults
    "lm_loss", "lr_schedule", "train_step", "evaluate",
]

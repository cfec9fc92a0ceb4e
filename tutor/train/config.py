"""What a training run is, as data: ``TrainConfig`` (notebooks 08-09), and the two that extend it, ``ScaleConfig``
(notebook 10's long text) and ``PayoffConfig`` (notebook 11's characters against BPE). Their chosen values are in
``presets``."""

from dataclasses import dataclass

from tutor.reference.characters import vocab_size
from tutor.reference.model import GPTConfig


@dataclass
class TrainConfig:
    """Model size and optimisation settings of one training run."""

    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 4
    dropout: float = 0.0
    batch_size: int = 128
    steps: int = 2200
    max_lr: float = 8e-3
    min_lr: float = 5e-4
    warmup_steps: int = 100
    weight_decay: float = 0.1
    clip: float = 1.0
    eval_every: int = 200  # steps between two evaluations on ``eval_batches`` validation batches
    eval_batches: int = 10
    # mixed precision: the forward pass under torch.autocast in a half type the device has in hardware (bfloat16 from
    # compute capability 8.0, float16 with loss scaling on 7.x; tutor.train.precision decides and says why)
    bf16: bool = False
    half: str = "auto"  # with bf16: "auto", or force "bfloat16" or "float16" (a T4's float16 on another GPU or a CPU)
    compile: bool = False  # torch.compile the model (CUDA or CPU; its compile time counts in a run's wall time)
    # threads for training on a CPU: a number, None (PyTorch's default, one per core), or "auto" (``ThreadChooser``:
    # the fastest of 1, 2, 4, ... measured while training, again every few hundred steps); see fit
    cpu_threads: int | str | None = 1
    fused_kernels: bool = True  # F.scaled_dot_product_attention and F.layer_norm instead of the hand-written ones
    # with fused_kernels, False keeps the hand-written attention (F.layer_norm still): the same sums, and on a CPU
    # faster for packed names once d_model is 96 (their [B, T, T] masks; benchmarks/train_names.py, 9-11 % a step at
    # batches of 512)
    fused_attention: bool = True
    # train on the packed rows of ``tutor.data.make_packed_loader``: fit then wraps the model in ``PackedNames``
    packed: bool = False
    # background processes that make the training batches (``tutor.data.worker_options``): 0 makes them in the
    # training process, between steps, which a GPU waits for
    loader_workers: int = 0
    optimizer: str = "adamw"  # or "muon": Muon for the matrices inside the blocks, AdamW for the rest (``MuonAdamW``)
    muon_ns_steps: int = 5  # Muon's Newton-Schulz iterations per matrix and step (torch.optim.Muon's default: 5)
    seed: int = 0

    def model_config(self) -> GPTConfig:
        return GPTConfig(vocab_size=vocab_size, max_len=16, d_model=self.d_model, n_heads=self.n_heads,
                         n_layers=self.n_layers, dropout=self.dropout)

    def describe(self) -> str:
        packed = " (packed rows)" if self.packed else ""
        optimizer = "Muon + AdamW" if self.optimizer == "muon" else "AdamW"
        return (f"d_model={self.d_model}, {self.n_layers} layers, {self.n_heads} heads, batch {self.batch_size}"
                f"{packed}, {self.steps} steps, {optimizer}, lr {self.max_lr:g} → {self.min_lr:g}")


@dataclass
class ScaleConfig(TrainConfig):
    """Notebook 10's run on a long text (``long_run``, ``python -m tutor.scale``): ``TrainConfig`` plus what it
    needs."""

    block_size: int = 128  # characters of context (the model's max_len)
    vocab_size: int = 65  # set from the text's vocabulary
    grad_accum: int = 1  # micro-batches per step: the batch of a step is grad_accum x batch_size per process
    model: str = "gpt"  # the model class: "gpt", "modern" (notebook 09's ModernGPT) or "module:Class"
    checkpoint_every: int = 0  # steps between checkpoints (0: only at the end and on Ctrl-C)
    eval_batch_size: int = 0  # 0: batch_size
    # seconds of training (evaluations not counted) for one process: the learning-rate schedule follows the share of
    # the steps or of this time that is spent, whichever is further along, and the run ends when either is; so a run
    # on a machine slower than planned still decays its learning rate before the time is up (0: steps only)
    time_budget: float = 0.0

    def model_config(self) -> GPTConfig:
        return GPTConfig(vocab_size=self.vocab_size, max_len=self.block_size, d_model=self.d_model,
                         n_heads=self.n_heads, n_layers=self.n_layers, dropout=self.dropout)

    def describe(self) -> str:
        accum = f" x {self.grad_accum} accumulated" if self.grad_accum > 1 else ""
        return (f"{self.model} d_model={self.d_model}, {self.n_layers} layers, {self.n_heads} heads, "
                f"context {self.block_size}, batch {self.batch_size}{accum}, {self.steps} steps, "
                f"lr {self.max_lr:g} → {self.min_lr:g}")


@dataclass
class PayoffConfig(TrainConfig):
    """Notebook 11's payoff (``bpe_vs_chars``): ``TrainConfig`` with the comparison's sizes and what a run on tokens
    needs; the model is the same for both tokenizers. ``bpe_vs_chars.train`` sets the steps (from the FLOP budget) and
    the evaluations."""

    block_size: int = 128  # tokens of context
    batch_size: int = 32
    max_lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 50
    d_model: int = 128
    eval_points: int = 8  # evaluations along the run
    eval_batches: int = 8

"""What a run shows while it trains: the progress bar (a notebook line, a terminal bar, or plain log lines), and
how long the run should take (``expected_seconds``) against how long it is taking (``time_report``)."""

import sys
import time

import torch
from tqdm import tqdm

from tutor.reference.model import GPT
from tutor.train.presets import CPU_CONFIG

# Seconds per step of ``CPU_CONFIG``'s model and batch size on an idle 2-core CPU (2 threads, chosen by
# ``ThreadChooser``), evaluations included, on packed batches (the preset packs several names into each row), as
# notebook 08 runs it (its live plot included).
CPU_SECONDS_PER_STEP = 95 / 3000  # benchmarks/train_names.py on an idle machine: 3,000 steps in 86-100 s (3 runs)
SLOW_FACTOR = 1.5  # projected / expected time above which the progress bar says the machine is slow
TIMING_STEPS = (15, 65)  # the steps between which the speed of the machine is measured (after ThreadChooser's first)


class NotebookLine:
    """A file for tqdm that shows the bar as one line of notebook output, replaced in place.

    The saved output keeps the bar's last state, so a notebook opened on GitHub or after a headless
    run shows the finished bar, not the 0% a progress widget would leave there.
    """

    encoding = "utf-8"  # tells tqdm it may draw the bar with Unicode blocks

    def __init__(self):
        from IPython.display import display  # only inside a notebook, where IPython is there

        self.handle = display({"text/plain": ""}, raw=True, display_id=True)

    def write(self, text):
        text = text.replace("\r", "").strip()
        if text:
            self.handle.update({"text/plain": text}, raw=True)

    def flush(self):
        pass


class PlainProgress:
    """The progress bar's interface, written as one plain line every ``every`` steps (and at the end)."""

    def __init__(self, total, initial=0, every=None, file=None):
        self.total, self.n = total, initial
        self.every = every or max(1, total // 20)
        self.file = file or sys.stderr
        self.postfix = {}
        self.desc = "training"
        self.start = time.perf_counter()

    def update(self, n=1):
        self.n += n
        if self.n % self.every == 0 or self.n == self.total:
            fields = " ".join(f"{k} {v}" for k, v in self.postfix.items())
            seconds = time.perf_counter() - self.start
            line = f"{self.desc}: step {self.n}/{self.total} ({seconds:.0f} s) {fields}"
            print(line.rstrip(), file=self.file, flush=True)

    def set_postfix(self, postfix, refresh=False):
        self.postfix = dict(postfix)

    def set_description(self, desc, refresh=False):
        self.desc = desc

    def write(self, text):
        print(text, flush=True)  # on stdout, as tqdm.write does

    def close(self):
        pass


def in_notebook() -> bool:
    """Whether this code runs in a Jupyter kernel."""
    try:
        from IPython import get_ipython  # optional: absent outside Jupyter
    except ImportError:  # pragma: no cover
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def progress_bar(total, initial=0, expected=None):
    """A tqdm bar: in a notebook one line of output updated in place, on a terminal the usual one on
    stderr, and plain lines (``PlainProgress``) when stderr is not a terminal (a log file, CI).

    It shows the elapsed and remaining time; ``expected`` (seconds, if known) is shown as the expected total.
    """
    desc = "training" if expected is None else f"training (expected {format_duration(expected)})"
    if in_notebook():
        return tqdm(total=total, initial=initial, desc=desc, unit="step", mininterval=0.5,
                    file=NotebookLine(), ncols=130)
    if not sys.stderr.isatty():
        return PlainProgress(total, initial)
    return tqdm(total=total, initial=initial, desc=desc, unit="step", mininterval=0.5)


def expected_seconds(config, device="cpu") -> float | None:
    """The wall time a run of ``config`` should take on an idle 2-core CPU, or ``None`` when there is no
    calibrated figure for it (another model or batch size, or not a CPU)."""
    same = ("d_model", "n_heads", "n_layers", "batch_size", "cpu_threads", "fused_kernels", "packed", "optimizer")
    if torch.device(device).type != "cpu" or any(getattr(config, k, None) != getattr(CPU_CONFIG, k) for k in same):
        return None
    return config.steps * CPU_SECONDS_PER_STEP


def preset_sized(model, config) -> bool:
    """Whether ``model`` has exactly as many parameters as the preset's GPT for ``config`` (the model the
    expected time was measured with)."""
    try:
        with torch.device("meta"):
            preset = GPT(config.model_config())
        return sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in preset.parameters())
    except Exception:  # noqa: BLE001 - a config without a GPT shape (notebook 10's), or an unusual model: no figure
        return False


def format_duration(seconds: float) -> str:
    """``95`` -> ``'1 min 35 s'``, ``40`` -> ``'40 s'``."""
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def time_report(total_steps: int, steps_timed: int, seconds: float, expected: float | None,
                slow_factor: float = SLOW_FACTOR) -> tuple[str, str | None]:
    """From ``seconds`` measured over ``steps_timed`` steps: ``(label, warning)``.

    ``label`` is what the progress bar shows as the expected total; ``warning`` is ``None``, or, when
    the run is on course to take more than ``slow_factor`` times ``expected``, one sentence saying so
    and how to shorten the run. The run itself is never shortened.
    """
    projected = seconds / max(steps_timed, 1) * total_steps
    if expected is None:
        return f"expected {format_duration(projected)}", None
    if projected <= slow_factor * expected:
        return f"expected {format_duration(expected)}", None
    label = f"on course for {format_duration(projected)}; idle 2-core CPU: {format_duration(expected)}"
    warning = (f"This machine is running about {projected / expected:.1f}x slower than an idle 2-core CPU "
               f"(busy, or a slower processor): the {total_steps} steps will take about "
               f"{format_duration(projected)} instead of {format_duration(expected)}. Training goes on. To "
               "shorten it, interrupt the kernel and set config.steps lower (the validation loss will be "
               "higher), or set TUTOR_QUICK=1 before starting Jupyter for a smoke test of 60 steps.")
    return label, warning

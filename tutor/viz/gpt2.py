"""Pictures of notebook 12 (GPT-2 in your own model): the two GELUs and how far they move the logits, generation
speed with and without the KV cache, and bits per byte on tiny Shakespeare."""

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
import torch.nn as nn

from tutor.viz.core import interactive


def gelu_figure(lo: float = -5.0, hi: float = 5.0):
    """The exact GELU and GPT-2's tanh approximation side by side, and their difference."""
    x = torch.linspace(lo, hi, 1001)
    exact, approx = nn.GELU()(x), nn.GELU(approximate="tanh")(x)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
    left.plot(x, exact, label="exact, x·Φ(x)")
    left.plot(x, approx, "--", label="tanh approximation (GPT-2)")
    left.set(title="GELU: exact and GPT-2's approximation", xlabel="x", ylabel="GELU(x)")
    left.legend()
    right.plot(x, approx - exact, color="tab:red")
    right.axhline(0, color="gray", linewidth=0.5)
    right.set(title="their difference", xlabel="x", ylabel="tanh − exact")
    fig.tight_layout()
    return fig


def _labelled_bars(rows: dict, colors, digits: int, title: str, xlabel: str, ylabel: str, size=(7, 2.4)):
    """One horizontal bar per row, its value written at its end, the first row on top."""
    fig, ax = plt.subplots(figsize=size)
    names, values = list(rows), list(rows.values())
    ax.barh(names, values, color=colors)
    for k, v in enumerate(values):
        ax.text(v, k, f" {v:.{digits}f}", va="center")
    ax.invert_yaxis()
    ax.set_xlim(0, max(values) * 1.2)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    fig.tight_layout()
    return fig


def speed_bars(tokens_per_second: dict, title: str):
    """Tokens per second of each way of generating, one bar each, with its value."""
    colors = ["tab:gray", "tab:blue", "tab:green"][:len(tokens_per_second)]
    return _labelled_bars(tokens_per_second, colors, 1, title, "new tokens per second", "generation")


def bits_per_byte_bars(rows: dict, highlight: str, title: str):
    """Bits per byte of several models on one text, one bar each (``highlight`` in blue), lower is better."""
    colors = ["tab:blue" if n == highlight else "tab:gray" for n in rows]
    return _labelled_bars(rows, colors, 2, title, "bits per byte (lower is better)", "model", size=(7.5, 2.8))


def gelu_gap_figure(std: float, gap: float, stds, gaps, tolerance: float = 1e-4):
    """How far the exact GELU moves the logits against the std of the weights (log-log), the checks' tolerance, and
    a marker at ``std``."""
    fig, ax = plt.subplots(figsize=(7, 3.4))
    ax.loglog(stds, gaps, marker=".", color="tab:red", label="exact GELU instead of tanh")
    ax.axhline(tolerance, color="gray", linestyle="--", label=f"the checks' tolerance, {tolerance:g}")
    ax.axvline(0.02, color="tab:green", linewidth=0.8, label="GPT-2's initial std, 0.02")
    ax.plot([std], [gap], "o", color="black", markersize=8)
    ax.set(title=f"weights with std {std:.3g}: the logits differ by {gap:.1e}", xlabel="std of the weights",
           ylabel="largest |logit difference|")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def gelu_gap_explorer(gap_fn, std: float = 0.02, tolerance: float = 1e-4):
    """A slider for the std of the weights: ``gap_fn(std)`` (the largest logit difference between the two GELUs)
    against the checks' tolerance (static picture at ``std``)."""
    stds = torch.logspace(-2.3, 0, 12).tolist()
    gaps = [gap_fn(s) for s in stds]
    slider = widgets.FloatLogSlider(value=std, base=10, min=-2.3, max=0, step=0.05, description="std of the weights",
                                    continuous_update=False)
    return interactive(lambda std: gelu_gap_figure(std, gap_fn(std), stds, gaps, tolerance), {"std": std}, std=slider)

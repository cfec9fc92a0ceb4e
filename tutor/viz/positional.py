"""Pictures for notebook 05: sinusoidal encodings, their similarities, and RoPE rotations."""

import math

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch

from tutor.viz.core import heatmap, interactive


def sinusoid_waves(pe, dims=(0, 1, 4, 10), ax=None):
    """Columns of a positional-encoding table as curves over the positions."""
    pe = pe.detach().float().cpu()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3))
    positions = torch.arange(pe.shape[0])
    for j in dims:
        kind = "sin" if j % 2 == 0 else "cos"
        ax.plot(positions, pe[:, j], marker=".", label=f"dimension {j} ({kind}, pair {j // 2})")
    ax.set_xlabel("position p")
    ax.set_ylabel("PE[p, dimension]")
    ax.set_title("Each dimension of the encoding is a wave; later pairs are slower")
    ax.legend(loc="upper right", fontsize=8)
    return ax


def encoding_heatmap(pe, title="Sinusoidal encoding table", tick_every=4):
    """The whole table: one row per position, one column per dimension."""
    pe = pe.detach().float().cpu()
    max_len, d_model = pe.shape
    fig, ax = plt.subplots(figsize=(min(12, 2 + 0.22 * d_model), min(8, 1.5 + 0.16 * max_len)))
    heatmap(pe, [str(p) for p in range(max_len)], [str(j) for j in range(d_model)], ax=ax, title=title,
            xlabel="dimension (even: sin, odd: cos)", ylabel="position", annotate=False, cmap="RdBu_r",
            vmin=-1, vmax=1)
    ax.set_xticks(range(0, d_model, tick_every), [str(j) for j in range(0, d_model, tick_every)])
    ax.set_yticks(range(0, max_len, tick_every), [str(p) for p in range(0, max_len, tick_every)])
    fig.tight_layout()
    return fig


def position_similarity(pe, p, q=None):
    """PE[p] · PE[q'] for every position q', with p (and optionally q) marked."""
    pe = pe.detach().float().cpu()
    scores = pe @ pe[p]
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.plot(range(len(scores)), scores, marker=".", color="tab:blue")
    ax.axvline(p, color="tab:red", linestyle="--", label=f"p = {p}")
    title = f"Similarity of position {p} with every position (d_model = {pe.shape[1]})"
    if q is not None:
        ax.plot([q], [scores[q]], "o", color="tab:orange", markersize=9, label=f"q = {q}")
        title += f"\nPE[{p}] · PE[{q}] = {scores[q]:.2f}   (offset q - p = {q - p})"
    ax.set_xlabel("position q")
    ax.set_ylabel("PE[p] · PE[q]")
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


def position_similarity_explorer(pe, p=20, q=25):
    """Sliders for p and q: the dot product PE[p] · PE[q] against q (static picture of p, q as fallback)."""
    n = pe.shape[0] - 1
    p_slider = widgets.IntSlider(value=p, min=0, max=n, description="p")
    q_slider = widgets.IntSlider(value=q, min=0, max=n, description="q")
    return interactive(lambda p, q: position_similarity(pe, p, q), {"p": p, "q": q}, p=p_slider, q=q_slider)


def rope_pair_rotation(pair=(1.0, 0.4), frequency=0.5, positions=range(6), ax=None):
    """One pair (x0, x1) drawn as an arrow, rotated by position × frequency for each position."""
    if ax is None:
        _, ax = plt.subplots(figsize=(4.5, 4.5))
    x0, x1 = pair
    colours = plt.cm.viridis(torch.linspace(0, 0.9, len(list(positions))).numpy())
    for colour, p in zip(colours, positions):
        a = p * frequency
        r0, r1 = x0 * math.cos(a) - x1 * math.sin(a), x0 * math.sin(a) + x1 * math.cos(a)
        ax.annotate("", xy=(r0, r1), xytext=(0, 0),
                    arrowprops=dict(arrowstyle="->", color=colour, lw=2))
        ax.text(1.12 * r0, 1.12 * r1, f"p={p}", ha="center", va="center", fontsize=8, color=colour)
    radius = math.hypot(x0, x1)
    t = torch.linspace(0, 2 * math.pi, 100)
    ax.plot(radius * torch.cos(t), radius * torch.sin(t), color="lightgray", linestyle=":", zorder=0)
    lim = 1.35 * radius
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_aspect("equal")
    ax.axhline(0, color="gray", lw=0.5)
    ax.axvline(0, color="gray", lw=0.5)
    ax.set_xlabel("x0 (first of the pair)")
    ax.set_ylabel("x1 (second of the pair)")
    ax.set_title(f"RoPE turns the pair ({x0}, {x1})\nby p × {frequency} radians at position p")
    return ax


def offset_curves(offsets, curves: dict, title: str, ax=None, ylabel="q · k"):
    """Several curves (label -> values over ``offsets``) on one plot, e.g. scores against n - m."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.2))
    offsets = list(offsets)
    styles = ["-", "--", ":", "-."]
    for j, (label, values) in enumerate(curves.items()):
        values = values.detach().float().cpu() if isinstance(values, torch.Tensor) else values
        ax.plot(offsets, values, linestyle=styles[j % len(styles)], lw=2, label=label)
    ax.set_xlabel("offset n - m (key position - query position)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    return ax

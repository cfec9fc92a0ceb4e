"""Pictures for notebook 04: how the width is split into heads, and what each head attends to."""

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from matplotlib.patches import FancyArrowPatch, Rectangle

from tutor.viz.core import grid_for, heatmap, interactive

HEAD_COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f"]


def _colour(h):
    return HEAD_COLOURS[h % len(HEAD_COLOURS)]


def mha_diagram(n_heads: int = 4, T: int = 5, d_model: int = 8):
    """A schematic of multi-head attention: split the width into slices, attend per slice, merge, project."""
    d_head = d_model // n_heads
    fig, ax = plt.subplots(figsize=(11, 3.6))
    ax.set_xlim(0, 11.2)
    ax.set_ylim(0.1, 3.6)
    ax.axis("off")
    cell = 0.28

    def grid(x0, y0, cols, colour_of_col, label):
        for t in range(T):
            for c in range(cols):
                ax.add_patch(Rectangle((x0 + c * cell, y0 + (T - 1 - t) * cell * 0.9), cell, cell * 0.9,
                                       facecolor=colour_of_col(c), edgecolor="white", lw=0.8))
        ax.text(x0 + cols * cell / 2, y0 - 0.35, label, ha="center", va="top", fontsize=9)

    def arrow(x0, y0, x1, y1, text=None):
        ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=12, color="#555"))
        if text:
            ax.text((x0 + x1) / 2, (y0 + y1) / 2 + 0.12, text, ha="center", va="bottom", fontsize=8, color="#333")

    y = 1.2
    grid(0.1, y, d_model, lambda c: "#bbbbbb", f"x  [T={T}, C={d_model}]")
    arrow(2.45, y + 0.6, 3.05, y + 0.6, "q_proj\nk_proj\nv_proj")
    grid(3.1, y, d_model, lambda c: _colour(c // d_head), "q, k, v  [T, C]\ncolours = heads")
    arrow(5.45, y + 0.6, 6.0, y + 0.6, "split")
    for h in range(n_heads):
        yy = 3.0 - h * (3.3 / n_heads)
        ax.add_patch(Rectangle((6.1, yy - 0.1), 1.2, 0.55 * 3.0 / n_heads, facecolor=_colour(h), alpha=0.85))
        ax.text(6.7, yy - 0.1 + 0.275 * 3.0 / n_heads, f"head {h}: attention\non [T, {d_head}]",
                ha="center", va="center", fontsize=7.5, color="white")
    arrow(7.4, y + 0.6, 7.95, y + 0.6, "merge")
    grid(8.0, y, d_model, lambda c: _colour(c // d_head), "heads' outputs\nside by side [T, C]")
    arrow(10.3, y + 0.6, 10.85, y + 0.6, "out_proj")
    ax.text(11.05, y + 0.6, "y", ha="center", va="center", fontsize=12)
    ax.set_title(f"Multi-head attention with H = {n_heads} heads of width d_head = C / H = {d_head}")
    return fig


def split_picture(T: int = 4, C: int = 8, n_heads: int = 2):
    """Which head each number of x = arange(T*C).view(T, C) goes to: view+transpose vs view alone."""
    d_head = C // n_heads
    x = torch.arange(T * C).view(1, T, C)
    right = torch.zeros(T, C, dtype=torch.long)
    wrong = torch.zeros(T, C, dtype=torch.long)
    right_heads = x.view(1, T, n_heads, d_head).transpose(1, 2)
    wrong_heads = x.view(1, n_heads, T, d_head)
    for h in range(n_heads):
        for value in right_heads[0, h].flatten().tolist():
            right[value // C, value % C] = h
        for value in wrong_heads[0, h].flatten().tolist():
            wrong[value // C, value % C] = h
    # constrained layout leaves room for the main title above the two-line subplot titles
    fig, axes = plt.subplots(1, 2, figsize=(2 * (0.6 * C + 1.5), 0.55 * T + 1.7), layout="constrained")
    cmap = plt.matplotlib.colors.ListedColormap([_colour(h) for h in range(n_heads)])
    rows = [f"t={t}" for t in range(T)]
    cols = [str(c) for c in range(C)]
    for ax, owner, title in [
        (axes[0], right, "✓ x.view(B, T, H, d).transpose(1, 2)\nhead h = columns h·d … (h+1)·d − 1"),
        (axes[1], wrong, "✗ x.view(B, H, T, d)  (no transpose)\nhead h = a block of memory, positions mixed"),
    ]:
        heatmap(owner, rows, cols, ax=ax, annotate=False, colorbar=False, cmap=cmap, vmin=-0.5,
                vmax=n_heads - 0.5, title=title, xlabel="column c of x (the width C)", ylabel="position t")
        for t in range(T):
            for c in range(C):
                ax.text(c, t, str(t * C + c), ha="center", va="center", fontsize=8, color="white")
    handles = [Rectangle((0, 0), 1, 1, color=_colour(h)) for h in range(n_heads)]
    fig.legend(handles, [f"head {h}" for h in range(n_heads)], loc="outside lower center", ncol=n_heads,
               frameon=False)
    fig.suptitle(f"Which head gets each number of x = arange({T * C}).view(1, {T}, {C}), H = {n_heads}",
                 fontweight="bold")
    fig.get_layout_engine().set(h_pad=0.1)  # a clear gap between the main title and the subplot titles
    return fig


def head_patterns(weights, tokens, *, titles=None, suptitle="attention weights of every head", highlight=None):
    """One heatmap per head: ``weights`` is [H, T, T], ``tokens`` labels the queries and keys."""
    weights = weights.detach().float().cpu()
    H, T, _ = weights.shape
    heads = list(range(H)) if highlight is None else [highlight]
    rows, cols, size = grid_for(len(heads), T, per_token=0.42, extra=1.3)  # long names wrap, not shrink
    fig, axes = plt.subplots(rows, cols, figsize=(cols * size + 0.4, rows * (size - 1.0) + 1.3), squeeze=False)
    for ax in axes.flat[len(heads):]:
        ax.axis("off")
    for ax, h in zip(axes.flat, heads):
        title = titles[h] if titles else f"head {h}"
        heatmap(weights[h], tokens, tokens, ax=ax, title=title, vmin=0, vmax=1, colorbar=False,
                annotate=T <= 8, fmt=".1f", xlabel="key (attended to)", ylabel="query (position)")
    fig.tight_layout()
    fig.suptitle(suptitle, y=1.03)
    return fig


def head_explorer(weights_of, name: str = "laika", n_heads: int = 4, titles=None):
    """Type a name and pick a head. ``weights_of(name)`` returns (weights [H, T, T], tokens).

    The static fallback shows every head for ``name``.
    """
    def draw(name, head):
        name = "".join(ch for ch in name.lower() if ch.isalpha())[:14] or "a"
        weights, tokens = weights_of(name)
        return head_patterns(weights, tokens, titles=titles, highlight=None if head < 0 else head,
                             suptitle=f"what each head of the attention layer looks at in {name!r}")

    text = widgets.Text(value=name, description="name:", continuous_update=False)
    options = [("all heads", -1)] + [(titles[h] if titles else f"head {h}", h) for h in range(n_heads)]
    pick = widgets.Dropdown(options=options, value=-1, description="head:")
    return interactive(draw, {"name": name, "head": -1}, name=text, head=pick)

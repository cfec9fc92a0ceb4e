"""Pictures for notebook 07: the GPT's architecture, the residual stream at init, and sampling."""

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from matplotlib.patches import FancyBboxPatch

from tutor.reference import GPTConfig
from tutor.viz.core import interactive

# --- the architecture ------------------------------------------------------------------------


def architecture_diagram(config=None):
    """The GPT from ids to logits, one box per module, with the shapes of ``config``."""
    if config is None:
        config = GPTConfig()
    V, M, d, L = config.vocab_size, config.max_len, config.d_model, config.n_layers
    fig, ax = plt.subplots(figsize=(7.5, 6.6))
    ax.set_xlim(0, 10)
    ax.set_ylim(0.75, 14.45)
    ax.axis("off")

    def box(x, y, w, h, text, colour, size=9):
        ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.05,rounding_size=0.15",
                                    facecolor=colour, edgecolor="#444444", linewidth=1))
        ax.text(x, y, text, ha="center", va="center", fontsize=size)

    def arrow(x0, y0, x1, y1, text=None):
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=dict(arrowstyle="->", color="#444444", lw=1.2))
        if text:
            ax.text(x0 + 0.15 + (x1 - x0) / 2, (y0 + y1) / 2, text, fontsize=8, color="#555555", va="center")

    box(5, 14.0, 4.2, 0.7, f"ids  [B, T]   (T ≤ max_len = {M})", "#eeeeee")
    box(3.0, 12.5, 3.6, 0.8, f"tok_emb(ids)\nEmbedding({V}, {d})", "#d7e8fa")
    box(7.2, 12.5, 3.8, 0.8, f"pos_emb(arange(T))\nEmbedding({M}, {d})", "#d7e8fa")
    arrow(4.2, 13.65, 3.2, 12.92)
    arrow(5.8, 13.65, 7.0, 12.92)
    box(5, 11.1, 2.6, 0.7, "+ , then dropout", "#f3f3f3")
    arrow(3.2, 12.08, 4.6, 11.47)
    arrow(7.0, 12.08, 5.4, 11.47)
    # the stack of blocks
    ax.add_patch(FancyBboxPatch((1.2, 5.0), 7.6, 5.0, boxstyle="round,pad=0.05,rounding_size=0.2",
                                facecolor="#fff8e1", edgecolor="#c9a227", linewidth=1.2, linestyle="--"))
    ax.text(8.65, 5.2, f"× n_layers = {L}", ha="right", fontsize=9, color="#8a6d00")
    ax.text(1.45, 9.7, "TransformerBlock (notebook 06)", ha="left", fontsize=9, color="#8a6d00")
    arrow(5, 10.74, 5, 9.25)
    ax.text(5.2, 10.45, f"x  [B, T, {d}]: the residual stream", fontsize=8, color="#555555", va="center")
    box(5, 8.95, 2.8, 0.55, "ln1 → attn (causal, mask)", "#e8f5e9", 8)
    box(5, 7.95, 0.9, 0.45, "+", "#ffffff")
    arrow(5, 8.66, 5, 8.18)
    box(5, 6.95, 2.8, 0.55, "ln2 → mlp", "#e8f5e9", 8)
    arrow(5, 7.72, 5, 7.23)
    box(5, 5.95, 0.9, 0.45, "+", "#ffffff")
    arrow(5, 6.66, 5, 6.18)
    for top, bottom in [(9.45, 7.95), (7.45, 5.95)]:  # the skip connections around each branch
        ax.plot([5, 2.6, 2.6], [top, top, bottom], color="#999999", lw=1)
        arrow(2.6, bottom, 4.55, bottom)
    ax.text(1.45, 6.95, "residual\n(skip)", fontsize=8, color="#777777", ha="left")
    arrow(5, 5.78, 5, 4.43)
    box(5, 4.05, 3.0, 0.7, f"ln_f: LayerNorm({d})", "#e8f5e9")
    arrow(5, 3.68, 5, 3.03)
    box(5, 2.65, 4.2, 0.7, f"head: Linear({d}, {V}, bias=False)", "#fde2e2")
    arrow(5, 2.28, 5, 1.63)
    box(5, 1.25, 5.4, 0.7, f"logits  [B, T, {V}]: a score for every possible next token", "#eeeeee")
    ax.set_title("The GPT: token ids in, next-token logits out", fontsize=11)
    return fig


# --- the residual stream at initialisation ---------------------------------------------------------


def residual_growth(curves: dict, title="The residual stream at initialisation"):
    """``curves`` maps a label to the std of the residual stream after each block (index 0: the embeddings)."""
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for label, values in curves.items():
        values = [float(v) for v in values]
        ax.plot(range(len(values)), values, marker="o", markersize=3, label=label)
    ax.set_xlabel("blocks applied (0 = the embeddings)")
    ax.set_ylabel("std of the residual stream x")
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


# --- sampling -----------------------------------------------------------------------------------


def sampling_probs(logits, temperature=1.0, top_k=None):
    """softmax(logits / temperature) over the top_k largest logits (ties with the k-th kept)."""
    z = torch.as_tensor(logits, dtype=torch.float32) / temperature
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    return torch.softmax(z, dim=-1)


def _token_labels(tokens, n):
    if tokens is None:
        return [str(i) for i in range(n)]
    return [repr(t) if t in (" ", ".") else str(t) for t in tokens]


def sampling_distribution(logits, temperature=1.0, top_k=None, tokens=None, ax=None, title=None):
    """Bar chart of the next-token distribution for one vector of logits."""
    probs = sampling_probs(logits, temperature, top_k)
    n = probs.shape[-1]
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(max(5.0, 0.32 * n + 1.5), 3.2))
    else:
        fig = ax.figure
    kept = probs > 0
    colours = ["#1f77b4" if k else "#cccccc" for k in kept.tolist()]
    ax.bar(range(n), probs.tolist(), color=colours)
    ax.set_xticks(range(n), _token_labels(tokens, n), fontsize=8 if n > 12 else 10)
    ax.set_ylim(0, 1)
    ax.set_xlabel("next token")
    ax.set_ylabel("probability")
    k_text = "all" if top_k is None or top_k >= n else str(top_k)
    ax.set_title(title or f"temperature = {temperature:.3g}, top_k = {k_text}")  # as the slider reads it
    if own:
        fig.tight_layout()
    return fig


def temperature_bars(logits, temperatures=(0.5, 1.0, 2.0), tokens=None, top_k=None):
    """One bar chart per temperature, side by side: low T sharpens, high T flattens."""
    fig, axes = plt.subplots(1, len(temperatures), figsize=(4.2 * len(temperatures), 3.2), sharey=True)
    for ax, t in zip(axes, temperatures):
        sampling_distribution(logits, t, top_k, tokens, ax=ax)
    fig.suptitle("softmax(logits / temperature) for the same logits")
    fig.tight_layout()
    return fig


def sampling_explorer(logits, tokens=None, temperature=1.0, top_k=None):
    """Sliders for the temperature and top_k; a static picture at ``temperature``/``top_k`` as fallback."""
    n = torch.as_tensor(logits).shape[-1]
    k0 = n if top_k is None else min(top_k, n)
    t_slider = widgets.FloatLogSlider(value=temperature, base=10, min=-1, max=1, step=0.05,
                                      description="temperature", continuous_update=False)
    k_slider = widgets.IntSlider(value=k0, min=1, max=n, description="top_k", continuous_update=False)
    return interactive(lambda temperature, top_k: sampling_distribution(logits, temperature, top_k, tokens),
                       {"temperature": temperature, "top_k": k0}, temperature=t_slider, top_k=k_slider)

"""Pictures of notebook 09: RoPE's relative scores, the key/value cache filling up, generation speed
with and without the cache, and two training runs side by side."""

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from matplotlib.colors import ListedColormap

from tutor.viz.core import interactive

EMPTY, READ, COMPUTED = 0, 1, 2


def cache_grid(step: int, T: int, cached: bool) -> torch.Tensor:
    """[T, T]: row s is generation step s, column t position t; COMPUTED where keys and values are
    computed at that step, READ where they are read from the cache, EMPTY elsewhere (up to ``step``)."""
    grid = torch.full((T, T), EMPTY)
    for s in range(min(step, T - 1) + 1):
        grid[s, : s + 1] = READ if cached else COMPUTED
        grid[s, s] = COMPUTED
    return grid


def cache_filling(step: int = 7, T: int = 12):
    """Two grids, without and with a cache, after ``step`` generation steps (step 0: the first token)."""
    cmap = ListedColormap(["white", "#9ecae1", "#de2d26"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    for ax, cached in zip(axes, (False, True)):
        grid = cache_grid(step, T, cached)
        ax.imshow(grid.numpy(), cmap=cmap, vmin=0, vmax=2)
        ax.set_xticks(range(T))
        ax.set_yticks(range(T))
        ax.set_xticks([x - 0.5 for x in range(1, T)], minor=True)
        ax.set_yticks([y - 0.5 for y in range(1, T)], minor=True)
        ax.grid(which="minor", color="lightgrey", linewidth=0.5)
        ax.tick_params(which="minor", length=0)
        computed = int((grid == COMPUTED).sum())
        kind = "with a KV cache" if cached else "without a cache"
        ax.set_title(f"{kind}: {computed} positions computed", fontsize=10)
        ax.set_xlabel("position (key and value)")
    axes[0].set_ylabel("generation step")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in ("#de2d26", "#9ecae1")]
    fig.legend(handles, ["k, v computed at this step", "k, v read from the cache"], loc="lower center", ncol=2,
               fontsize=9)
    fig.suptitle(f"Generating token by token: steps 0 to {min(step, T - 1)}")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def cache_explorer(step: int = 7, T: int = 12):
    """``cache_filling`` with a slider for the step (static picture: ``step``)."""
    return interactive(lambda step: cache_filling(step, T),
                       step=widgets.IntSlider(value=step, min=0, max=T - 1, description="step"))


def rope_offset_scores(scores: dict, title="RoPE: the score of a query and a key depends on their offset only"):
    """``scores``: {label: (offsets, values)}; one curve per absolute query position."""
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for (label, (offsets, values)), style in zip(scores.items(), ["-", "--", ":", "-."]):
        ax.plot(offsets, values, style, marker="o", markersize=3, label=label)
    ax.set_xlabel("offset m - n (query position - key position)")
    ax.set_ylabel("score q_m · k_n")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def generation_speed(lengths, without_ms, with_ms, title="Time to produce one new token"):
    """Milliseconds per new token against the context length, without and with the cache."""
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    ax.plot(lengths, without_ms, "o-", color="tab:red", label="without cache: a pass over all T positions")
    ax.plot(lengths, with_ms, "o-", color="tab:blue", label="with a KV cache: one new position")
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths)
    ax.set_xticklabels([str(n) for n in lengths])
    ax.set_xlabel("context length T (tokens already generated)")
    ax.set_ylabel("milliseconds per new token")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def compare_runs(histories: dict, baselines: dict | None = None,
                 title="Validation loss: GPT-2-style GPT vs modern GPT (same steps, same batches)"):
    """The validation curves of several ``History`` objects (``tutor.train.fit``) in one plot."""
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for (label, history), colour in zip(histories.items(), ["tab:red", "tab:blue", "tab:green"]):
        ax.plot(history.val_steps, history.val_loss, "o-", color=colour, markersize=3,
                label=f"{label}: {history.val_loss[-1]:.3f}")
    for (name, value), style in zip((baselines or {}).items(), [":", "--"]):
        ax.axhline(value, color="grey", linestyle=style, label=f"{name}: {value:.3f}")
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (nats per character)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig

"""Pictures of notebook 14 (what a model learned): one head's attention pattern on a sequence (and a widget to pick
the layer and the head), the scores of every head, an induction head forming while the model trains, and the losses
with one head ablated."""

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch

from tutor.viz.core import heatmap, interactive


def pattern_figure(pattern: torch.Tensor, tokens, title: str, n: int | None = None):
    """One head's pattern ``[T, T]``: queries down, keys across; ``n``: draw the diagonal where an induction head
    looks (key ``i - n + 1``) and the one of the previous token."""
    pattern = pattern.detach().float().cpu()
    T = pattern.shape[-1]
    fig, ax = plt.subplots(figsize=(6.4, 5.6) if T > 12 else (4.8, 4.2))
    heatmap(pattern, tokens, tokens, ax=ax, title=title, vmin=0, vmax=1, annotate=T <= 10, fmt=".1f",
            xlabel="key (attended to)", ylabel="query (position)")
    if T > 12:
        ax.tick_params(labelsize=7)
        ax.tick_params(axis="x", labelrotation=90)
    if n is not None:
        i = torch.arange(n, T)
        ax.plot((i - n + 1).tolist(), i.tolist(), "w:", linewidth=1.2, label="i - n + 1: induction")
        ax.plot(list(range(T - 1)), list(range(1, T)), "r:", linewidth=1.0, label="i - 1: previous token")
        ax.legend(loc="lower left", fontsize=7, framealpha=0.8)
    fig.tight_layout()
    return fig


def pattern_explorer(patterns, tokens, n: int | None = None, layer: int = 0, head: int = 0, what: str = ""):
    """Pick a layer and a head and see its pattern on the first sequence of ``patterns`` (a list of ``[B, H, T, T]``,
    one per layer). The static picture shows ``layer``, ``head``."""
    L, H = len(patterns), patterns[0].shape[1]

    def draw(layer, head):
        return pattern_figure(patterns[layer][0, head], tokens, f"{what}layer {layer}, head {head}", n)

    pick_layer = widgets.Dropdown(options=list(range(L)), value=layer, description="layer:")
    pick_head = widgets.Dropdown(options=list(range(H)), value=head, description="head:")
    return interactive(draw, layer=pick_layer, head=pick_head)


def scores_figure(previous: torch.Tensor, induction: torch.Tensor, title: str):
    """The previous-token and induction scores ``[L, H]`` of every head, side by side."""
    L, H = induction.shape
    big = H > 6
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2) if big else (9, 0.7 * L + 2.2))
    for ax, scores, name in zip(axes, (previous, induction), ("previous-token score", "induction score")):
        heatmap(scores, [str(h) for h in range(L)], [str(h) for h in range(H)], ax=ax, title=name, vmin=0, vmax=1,
                annotate=True, fmt=".2f" if not big else ".1f", xlabel="head", ylabel="layer")
        if big:
            for text in ax.texts:
                text.set_fontsize(6)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def formation_figure(run):
    """The loss on the fixed batch (first half, repeated half) and the best scores, against the training step: the
    loss on the repeated half falls when the induction score rises."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    top.plot(run.steps, run.loss_first, label="first half (new random tokens)", color="tab:gray")
    top.plot(run.steps, run.loss_repeated, label="repeated half (each token seen before)", color="tab:blue")
    top.set(title="the loss on n random tokens repeated twice", xlabel="training step", ylabel="loss (nats)")
    top.tick_params(labelbottom=True)
    top.legend(fontsize=8)
    bottom.plot(run.steps, run.best_induction, label="induction score (best head of the last layer)",
                color="tab:green")
    bottom.plot(run.steps, run.best_previous, label="previous-token score (best head of layer 0)", color="tab:orange")
    bottom.set(title="the scores of the heads", xlabel="training step", ylabel="score", ylim=(0, 1))
    bottom.legend(fontsize=8)
    for ax in (top, bottom):
        ax.axvline(run.formed_at, color="tab:red", linestyle="--", linewidth=1)
    bottom.annotate(f"step {run.formed_at}", (run.formed_at, 0.95), xytext=(5, -4), textcoords="offset points",
                    color="tab:red", fontsize=8, va="top")
    fig.tight_layout()
    return fig


def position_loss_figure(losses: torch.Tensor, n: int, title: str):
    """The loss of each prediction on ``n`` tokens repeated twice: high on the first half, low after position ``n``
    once the model copies."""
    fig, ax = plt.subplots(figsize=(9, 3.2))
    targets = list(range(1, len(losses) + 1))
    ax.plot(targets, losses.tolist(), marker=".", color="tab:blue")
    ax.axvline(n - 0.5, color="gray", linestyle="--", linewidth=1)
    ax.annotate("the repeat starts", (n - 0.5, ax.get_ylim()[1]), xytext=(4, -12), textcoords="offset points",
                fontsize=8)
    ax.set(title=title, xlabel="position of the token predicted", ylabel="loss (nats)")
    fig.tight_layout()
    return fig


def ablation_figure(table: torch.Tensor, clean: float, title: str):
    """The loss on the repeated half with each head ablated, ``[L, H]``, beside the model's own."""
    L, H = table.shape
    fig, ax = plt.subplots(figsize=(0.9 * H + 2.5, 0.7 * L + 2.0))
    heatmap(table, [str(layer) for layer in range(L)], [str(h) for h in range(H)], ax=ax,
            title=f"{title}\n(the model's own: {clean:.2f})", annotate=True, fmt=".2f", cmap="magma",
            xlabel="head ablated", ylabel="layer")
    fig.tight_layout()
    return fig


def composition_figure(result: dict, layer: int, head: int):
    """The last layer's induction scores as trained and with head ``head`` of layer ``layer`` ablated."""
    clean, ablated = result["clean"][-1], result["ablated"][-1]
    H = len(clean)
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    x = torch.arange(H)
    ax.bar((x - 0.2).tolist(), clean.tolist(), width=0.4, label="as trained", color="tab:green")
    ax.bar((x + 0.2).tolist(), ablated.tolist(), width=0.4, label=f"head {layer}.{head} ablated", color="tab:red")
    ax.set_xticks(x.tolist(), [f"{len(result['clean']) - 1}.{h}" for h in range(H)])
    ax.set(title=f"the last layer's induction heads, without head {layer}.{head} under them", xlabel="head",
           ylabel="induction score", ylim=(0, 1))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def gpt2_figure(scores: torch.Tensor, named: list[str], title: str):
    """GPT-2's induction scores ``[L, H]`` as a heatmap, the heads ``named`` ("layer.head") in the literature
    outlined."""
    from matplotlib.patches import Rectangle

    L, H = scores.shape
    fig, ax = plt.subplots(figsize=(7.5, 6.2))
    heatmap(scores, [str(layer) for layer in range(L)], [str(h) for h in range(H)], ax=ax, title=title, vmin=0,
            annotate=False, xlabel="head", ylabel="layer")
    for name in named:
        layer, head = (int(v) for v in name.split("."))
        ax.add_patch(Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, edgecolor="white", linewidth=2))
    ax.annotate("outlined: the heads the literature names", (0, 1.0), xycoords="axes fraction",
                xytext=(0, 4), textcoords="offset points", fontsize=8)
    fig.tight_layout()
    return fig

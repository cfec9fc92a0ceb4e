"""Pictures for notebook 03: the future a causal mask hides, what leaks without it, padding masks."""

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Rectangle

from tutor import reference as ref
from tutor.reference.characters import LETTERS
from tutor.viz.core import heatmap, interactive


def _clean(word: str) -> str:
    return "".join(ch for ch in word.lower() if ch in ref.stoi) or " "


def shade_future(ax, T: int):
    """Hatch the cells above the diagonal of a [T, T] heatmap: the keys a query must not see."""
    for t in range(T):
        for s in range(t + 1, T):
            ax.add_patch(Rectangle((s - 0.5, t - 0.5), 1, 1, fill=False, hatch="///", edgecolor="red", lw=0))
    return ax


def attention_with_future(word: str = "laika", *, ax=None):
    """softmax(x xᵀ) of the one-hot ``word`` with the cells that look into the future hatched in red."""
    word = _clean(word)
    x = ref.one_hot(torch.tensor(ref.encode(word)), ref.vocab_size)
    w = ref.softmax(ref.similarity(x), dim=-1)
    ax = heatmap(w, list(word), list(word), ax=ax, vmin=0, vmax=1,
                 title=f"softmax(x xᵀ) of {word!r}, no mask:\nthe red hatched weights look into the future",
                 xlabel="key (the character attended to)", ylabel="query (position)")
    shade_future(ax, len(word))
    return ax.figure


def mask_heatmap(mask, row_tokens=None, col_tokens=None, *, title="mask (1 = may attend)", ax=None,
                 xlabel="key", ylabel="query"):
    """A boolean mask drawn as a 0/1 heatmap with tokens on both axes."""
    m = torch.as_tensor(mask).detach().cpu().float()
    col_tokens = row_tokens if col_tokens is None else col_tokens
    return heatmap(m, row_tokens, col_tokens, ax=ax, title=title, fmt=".0f", vmin=0, vmax=1,
                   xlabel=xlabel, ylabel=ylabel, colorbar=False)


def batch_masks(masks, names, *, title="", suptitle=None):
    """One mask heatmap per name of a batch: ``masks`` is [B, T, T] (or broadcastable to it)."""
    T = max(len(n) for n in names)
    masks = torch.as_tensor(masks).detach().cpu()
    masks = torch.broadcast_to(masks, (len(names), T, T))
    fig, axes = plt.subplots(1, len(names), figsize=(2.6 * len(names) + 0.5, 3.2))
    axes = [axes] if len(names) == 1 else list(axes)
    for b, (name, ax) in enumerate(zip(names, axes)):
        tokens = list(name.ljust(T))
        mask_heatmap(masks[b], tokens, tokens, ax=ax, title=f"{name!r} {title}".strip())
    if suptitle:
        fig.suptitle(suptitle)
    fig.tight_layout()
    return fig


# --- what leaks without a mask -------------------------------------------------------------------


def _toy_attention_inputs(ids: torch.Tensor, d: int = 16, seed: int = 0):
    """q, k, v for ``ids`` from a fixed random embedding and random projections (no training needed)."""
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(ref.vocab_size, d, generator=g)
    wq, wk, wv = (torch.randn(d, d, generator=g) / d ** 0.5 for _ in range(3))
    x = emb[ids]
    return x @ wq, x @ wk, x @ wv


def output_changes(name: str, position: int, letter: str, attention=None, *, causal: bool):
    """How far each position's attention output moves when ``name[position]`` becomes ``letter``.

    Returns a tensor [T] of distances ||out_new[t] - out_old[t]||.
    """
    attention = attention or ref.scaled_dot_product_attention
    name = _clean(name)
    changed = name[:position] + letter + name[position + 1:]
    mask = ref.causal_mask(len(name)) if causal else None
    outs = []
    for word in (name, changed):
        q, k, v = _toy_attention_inputs(torch.tensor(ref.encode(word)))
        outs.append(attention(q, k, v, mask) if mask is not None else attention(q, k, v))
    return (outs[1] - outs[0]).norm(dim=-1)


def leak_plot(name: str = "laika", position: int = 2, letter: str = "z", attention=None):
    """Two bar charts: how much each output moves when one character changes, without and with the mask."""
    name = _clean(name)
    position = max(0, min(int(position), len(name) - 1))
    changed = name[:position] + letter + name[position + 1:]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
    for ax, causal in zip(axes, (False, True)):
        change = output_changes(name, position, letter, attention, causal=causal).detach()
        colours = ["tab:red" if t < position else ("tab:orange" if t == position else "tab:gray")
                   for t in range(len(name))]
        ax.bar(range(len(name)), change.numpy(), color=colours)
        ax.axvline(position - 0.5, color="black", ls="--", lw=1)
        ax.set_xticks(range(len(name)), [f"{t}\n{a!r}→{b!r}" if a != b else f"{t}\n{a!r}"
                                         for t, (a, b) in enumerate(zip(name, changed))])
        ax.set_xlabel("output position (and its character)")
        leaked = bool((change[:position] > 1e-6).any())
        verdict = "earlier outputs move: the future leaks" if leaked else "earlier outputs stay put"
        ax.set_title(f"{'with' if causal else 'without'} a causal mask:\n{verdict}")
    axes[0].set_ylabel("how far the output moved\n‖new − old‖")
    fig.suptitle(f"{name!r} → {changed!r}: which attention outputs change? (red = positions before the change)")
    fig.tight_layout()
    return fig


def leak_explorer(name: str = "laika", attention=None, position: int = 2, letter: str = "z"):
    """Widget: pick a position of ``name`` and a new letter; see which outputs move, without and with a mask."""
    name = _clean(name)
    pos = widgets.IntSlider(value=position, min=0, max=len(name) - 1, description="position:",
                            continuous_update=False)
    let = widgets.Dropdown(options=list(LETTERS), value=letter, description="new letter:")
    return interactive(lambda position, letter: leak_plot(name, position, letter, attention),
                       {"position": position, "letter": letter}, position=pos, letter=let)

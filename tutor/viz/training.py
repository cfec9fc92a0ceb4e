"""Pictures and widgets for notebook 08: the schedule, live loss curves, samples, attention.

Every widget comes with a static picture (see ``tutor.viz.core.interactive``), so the notebook
reads the same on GitHub and in a headless run.
"""

from __future__ import annotations

import math

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from IPython import get_ipython
from IPython.display import display
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from tutor import reference as ref
from tutor.data import PAD_Y, name_starts, padding_fraction, same_name_mask
from tutor.train import sample_names
from tutor.viz.core import grid_for, heatmap, interactive

CONTEXT_CHARS = ref.alphabet[:-1]  # ' ' (a name's start and end) and a-z: the alphabet without the target padding '.'


# --- the data and the baseline -------------------------------------------------------------------


def bigram_counts(model, title="bigram counts: how often the column letter follows the row letter"):
    """The 27 x 27 count table of a ``BigramModel`` (' ' marks the start and the end of a name)."""
    counts = model.counts[:27, :27]
    fig, ax = plt.subplots(figsize=(9, 8))
    heatmap(counts.log1p(), CONTEXT_CHARS, CONTEXT_CHARS, ax=ax, annotate=False, colorbar=False,
            title=title, xlabel="next character", ylabel="current character")
    fig.colorbar(ax.images[0], ax=ax, fraction=0.046, pad=0.04, label="log(1 + count)")
    fig.tight_layout()
    return fig


def _typical_batch(loader, n_batches):
    """Of ``loader``'s first ``n_batches`` batches, the ``(x, y)`` whose share of padding is closest to the share
    over all of them (which is returned too): a batch the picture can show as typical."""
    batches = [batch for batch, _ in zip(loader, range(n_batches))]
    share = padding_fraction(batches)
    typical = min(batches, key=lambda b: abs((b[1] == PAD_Y).float().mean().item() - share))
    return typical, share


def padding_picture(plain_loader, packed_loader, rows=32, n_batches=100,
                    title="what a batch computes: real characters and padding"):
    """One typical batch of each loader side by side (``rows`` of its rows, evenly spaced): real targets (in a
    packed row, its names in alternating shades), padding (computed, then ignored by the loss), and white where
    the batch ends. Each panel's title gives the share of padding over ``n_batches`` batches; the batch shown is
    the one whose own share is closest to it. Also works with a sortish loader as the second one."""
    panels = [("plain shuffled batches", plain_loader), ("packed batches", packed_loader)]
    typical = [_typical_batch(loader, n_batches) for _, loader in panels]
    width = max(y.shape[1] for (_, y), _ in typical)
    # outside the batch, padding, a real target, a real target of the next name in the row
    colours = ListedColormap(["white", "#f4a582", "tab:blue", "#92c5de"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, (name, _), ((x, y), share) in zip(axes, panels, typical):
        picked = torch.linspace(0, y.shape[0] - 1, min(rows, y.shape[0])).long()
        shown_x, shown_y = x[picked], y[picked]
        nth_name = name_starts(shown_x).cumsum(dim=-1)  # 1 for the first name of a row, 2 for the second, ...
        cells = torch.zeros(shown_y.shape[0], width)
        real = (shown_y != PAD_Y).float()
        cells[:, :y.shape[1]] = 1.0 + real * (1.0 + (nth_name % 2 == 0).float())
        ax.imshow(cells.numpy(), cmap=colours, vmin=0, vmax=3, aspect="auto", interpolation="nearest")
        names = int((name_starts(x) & (y != PAD_Y)).sum())
        ax.set_title(f"{name}: {names} names in {y.shape[0]} rows x {y.shape[1]} positions\n"
                     f"{share:.0%} of the computed positions are padding ({n_batches} batches)", fontsize=10)
        ax.set_xlabel("position in the row (one column per character)")
        ax.set_xticks(range(0, width, 2))
    axes[0].set_ylabel(f"{min(rows, typical[0][0][1].shape[0])} rows of the batch, evenly spaced")
    fig.legend(handles=[Patch(facecolor="tab:blue", label="a name's targets"),
                        Patch(facecolor="#92c5de", label="the next name in the same row"),
                        Patch(facecolor="#f4a582", label="padding: computed, then ignored by the loss"),
                        Patch(facecolor="white", edgecolor="grey", label="not computed: the batch ends")],
               loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def packed_mask_picture(x, title="one packed row: which positions each position may attend to"):
    """The attention mask of one packed row ``x [T]``: ``same_name_mask`` AND the causal mask, with the row's
    characters on both axes (``' '`` drawn as ␣). Each name is a triangle of its own."""
    T = x.shape[-1]
    mask = same_name_mask(x.unsqueeze(0))[0] & torch.ones(T, T, dtype=torch.bool).tril()
    labels = list(ref.decode(x).replace(" ", "␣"))
    fig, ax = plt.subplots(figsize=(4.6, 4.6))
    ax.imshow(mask.numpy(), cmap="Blues", vmin=0, vmax=1.3, interpolation="nearest")
    ax.set_xticks(range(T), labels)
    ax.set_yticks(range(T), labels)
    ax.set_xlabel("key: the position looked at")
    ax.set_ylabel("query: the position looking")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def lr_curve(lr_fn, max_lr, warmup_steps, total_steps, min_lr=0.0, title=None):
    """The learning rate at every step of a run."""
    steps = list(range(0, total_steps + max(1, total_steps // 10)))
    lrs = [lr_fn(s, max_lr, warmup_steps, total_steps, min_lr) for s in steps]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot(steps, lrs, color="tab:blue")
    ax.axvline(warmup_steps, color="grey", linestyle=":", label=f"end of warm-up (step {warmup_steps})")
    ax.axvline(total_steps, color="grey", linestyle="--", label=f"total_steps = {total_steps}")
    ax.axhline(min_lr, color="tab:orange", linestyle=":", label=f"min_lr = {min_lr:g}")
    ax.set_xlabel("step")
    ax.set_ylabel("learning rate")
    ax.set_title(title or f"warm-up then cosine decay (max_lr = {max_lr:g})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# --- loss curves ------------------------------------------------------------------------------------


def _smooth(values, window):
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def loss_curves(history, baselines: dict | None = None, title="training and validation loss"):
    """Training loss (raw and smoothed) and validation loss against the step; ``baselines`` are
    horizontal lines, e.g. ``{"bigram": 2.45}``."""
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    if history.train_loss:
        ax.plot(history.steps, history.train_loss, color="tab:blue", alpha=0.25, linewidth=0.8)
        window = max(1, len(history.train_loss) // 50)
        label = f"training loss (mean of {window} steps)" if window > 1 else "training loss"
        ax.plot(history.steps, _smooth(history.train_loss, window), color="tab:blue", label=label)
    if history.val_loss:
        ax.plot(history.val_steps, history.val_loss, "o-", color="tab:red", label="validation loss")
    for (name, value), style in zip((baselines or {}).items(), [":", "--", "-."]):
        ax.axhline(value, color="grey", linestyle=style, label=f"{name}: {value:.3f}")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per character)")
    ax.set_title(title)
    if history.train_loss:
        low = min(min(history.train_loss), *(history.val_loss or [9]), *(baselines or {"": 9}).values())
        ax.set_ylim(max(0.0, low - 0.2), min(4.0, max(history.train_loss) + 0.1))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


class LivePlot:
    """A loss plot that redraws itself in place after every evaluation.

    It uses an IPython display handle (``display(..., display_id=True)`` and ``update``), which
    every Jupyter front end understands; a headless run simply keeps the last picture. Outside
    IPython it does nothing.
    """

    def __init__(self, baselines: dict | None = None, title="training and validation loss (live)"):
        self.baselines = baselines
        self.title = title
        self.handle = None
        if get_ipython() is not None:
            self.handle = display(_Placeholder(), display_id=True)

    def update(self, history):
        if self.handle is None:
            return
        fig = loss_curves(history, self.baselines, self.title)
        self.handle.update(fig)
        plt.close(fig)


class _Placeholder:
    def __repr__(self):
        return "(the loss plot appears after the first evaluation)"


def loss_by_position(sums, counts, title="validation loss at each position of a name"):
    """Mean loss per position: position 0 guesses the first letter from nothing but ' '."""
    n = int((counts > 0).sum())
    means = (sums[:n] / counts[:n]).tolist()
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.bar(range(n), means, color=["tab:red"] + ["tab:blue"] * (n - 1))
    ax.set_xticks(range(n), ["1st"] + [f"{i + 1}" for i in range(1, n)], fontsize=8)
    ax.set_xlabel("predicted character: 1st, 2nd, ... letter of the name (the end of a name counts as one)")
    ax.set_ylabel("mean loss (nats)")
    ax.set_title(title)
    fig.tight_layout()
    return fig


# --- sampling ---------------------------------------------------------------------------------------


def samples_figure(model, temperature=1.0, n=12, seed=0, sample_fn=None):
    """Left: the distribution of the first letter at this temperature. Right: ``n`` sampled names."""
    if sample_fn is None:
        sample_fn = sample_names
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits = model(torch.zeros(1, 1, dtype=torch.long, device=device))[0, -1, :27].float().cpu()
    model.train(was_training)
    probs = torch.softmax(logits / temperature, dim=-1)
    names = sample_fn(model, n=n, temperature=temperature, seed=seed)
    fig, (ax, text) = plt.subplots(1, 2, figsize=(10, 3.4), gridspec_kw={"width_ratios": [2.2, 1]})
    ax.bar(range(27), probs.tolist(), color="tab:blue")
    ax.set_xticks(range(27), ["end"] + CONTEXT_CHARS[1:], fontsize=8)
    ax.set_xlabel("first letter")
    ax.set_ylabel("probability")
    ax.set_title(f"P(first letter) at temperature {temperature:.3g}")  # as the slider reads it
    text.axis("off")
    text.set_title(f"{n} samples (temperature {temperature:.3g})")
    text.text(0.05, 0.95, "\n".join(name or "(empty)" for name in names), va="top", family="monospace",
              fontsize=10, transform=text.transAxes)
    fig.tight_layout()
    return fig


def sampler(model, temperature=1.0, n=12, sample_fn=None):
    """A temperature slider: samples and the first-letter distribution (static picture at ``temperature``)."""
    slider = widgets.FloatLogSlider(value=temperature, base=10, min=-1, max=0.7, step=0.05,
                                    description="temperature", continuous_update=False)
    draw = lambda temperature: samples_figure(model, temperature, n, seed=0, sample_fn=sample_fn)  # noqa: E731
    return interactive(draw, {"temperature": temperature}, temperature=slider)


# --- attention of the trained model -----------------------------------------------------------------


def _weights_from_input(attn, x, mask):
    """Recompute softmax(q kᵀ / sqrt(d_head) + mask) of a ``MultiHeadAttention`` from its input x."""
    q = ref.split_heads(attn.q_proj(x), attn.n_heads)
    k = ref.split_heads(attn.k_proj(x), attn.n_heads)
    T = x.shape[1]
    if mask is not None:
        mask = mask.unsqueeze(-3)
    if attn.causal:
        causal = ref.causal_mask(T, device=x.device)
        mask = causal if mask is None else mask & causal
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores.float(), dim=-1)


@torch.no_grad()
def attention_weights(model, ids):
    """The attention weights of every block for ``ids [B, T]``: a list of ``[B, H, T, T]``, one per layer.

    Forward pre-hooks on each ``block.attn`` see its input and recompute the weights, so the model's
    API stays as it is (and the fused kernel, which never forms the weights, works too).
    """
    captured = []

    def hook(module, args):
        x = args[0]
        mask = args[1] if len(args) > 1 else None
        captured.append(_weights_from_input(module, x, mask).cpu())

    handles = [block.attn.register_forward_pre_hook(hook) for block in model.blocks]
    was_training = model.training
    model.eval()
    try:
        model(ids)
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return captured


def _clean(word):
    word = "".join(ch for ch in word.lower() if "a" <= ch <= "z")
    return word[:15] or "laika"


def attention_figure(model, word="laika", layer=0):
    """One heatmap per head of block ``layer`` for the input ' ' + word, letters on both axes."""
    word = _clean(word)
    device = next(model.parameters()).device
    ids = torch.tensor([ref.encode(" " + word)], device=device)
    weights = attention_weights(model, ids)[layer][0]  # [H, T, T]
    H = weights.shape[0]
    tokens = ["␣"] + list(word)
    rows, cols, size = grid_for(H, len(tokens), per_token=0.45, extra=1.2)  # long names wrap, not shrink
    fig, axes = plt.subplots(rows, cols, figsize=(cols * size + 0.5, rows * size + 0.6), squeeze=False)
    for h in range(rows * cols):
        ax = axes[h // cols][h % cols]
        if h >= H:
            ax.axis("off")
            continue
        heatmap(weights[h], tokens, tokens, ax=ax, vmin=0, vmax=1, colorbar=False,
                annotate=len(tokens) <= 8, fmt=".1f", title=f"head {h}",
                xlabel="key (attended to)", ylabel="query")
    fig.suptitle(f"attention weights of block {layer} on {word!r}: each query row predicts the next letter\n"
                 f"(␣ = the start token ' ')")
    fig.tight_layout()
    return fig


def attention_explorer(model, word="laika", layer=0):
    """Type a name and pick a block: see every head's attention (static picture of ``word`` as fallback)."""
    text = widgets.Text(value=word, description="name:", continuous_update=False)
    block = widgets.IntSlider(value=layer, min=0, max=len(model.blocks) - 1, description="block")
    return interactive(lambda word, layer: attention_figure(model, word, layer), {"word": word, "layer": layer},
                       word=text, layer=block)

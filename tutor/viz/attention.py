"""Pictures for notebooks 01-02: similarity and attention matrices of a word, the softmax, the
soft lookup of queries, keys and values, and why attention scores are scaled by 1/sqrt(d_k)."""

import math

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch

from tutor import reference as ref
from tutor.viz.core import MAX_WIDTH, heatmap, interactive


def similarity_and_attention(word: str, *, scale: bool = False):
    """Side by side: x xᵀ and softmax(x xᵀ) of the one-hot encoded ``word``, letters on both axes."""
    word = "".join(ch for ch in word.lower() if ch in ref.stoi) or " "
    x = ref.one_hot(torch.tensor(ref.encode(word)), ref.vocab_size)
    s = ref.similarity(x)
    if scale:
        s = s / x.shape[-1] ** 0.5
    w = ref.softmax(s, dim=-1)
    panel = 2 + 0.55 * len(word)  # inches; a long word stacks the two panels instead of shrinking them
    if 2 * panel <= MAX_WIDTH:
        fig, axes = plt.subplots(1, 2, figsize=(2 * panel, 1.5 + 0.5 * len(word)))
    else:
        fig, axes = plt.subplots(2, 1, figsize=(panel, 2 * (1.5 + 0.5 * len(word))))
    heatmap(s, list(word), list(word), ax=axes[0], title=f"similarity x xᵀ of {word!r}", fmt=".0f")
    heatmap(w, list(word), list(word), ax=axes[1], title="attention weights softmax(x xᵀ)", vmin=0, vmax=1)
    fig.tight_layout()
    return fig


def word_explorer(word: str = "laika"):
    """Type a word and see its similarity and attention matrices (static picture of ``word`` as fallback)."""
    text = widgets.Text(value=word, description="word:", continuous_update=False)
    return interactive(lambda word: similarity_and_attention(word), {"word": word}, word=text)


# --- the softmax ---------------------------------------------------------------------------


def _floats(values) -> list[float]:
    return [float(v) for v in torch.as_tensor(values, dtype=torch.float32).flatten()]


def softmax_bars(scores, labels=None, scale: float = 1.0):
    """Two bar charts: the scores (times ``scale``) and their softmax, one bar per label."""
    s = torch.as_tensor(scores, dtype=torch.float32).flatten() * scale
    w = ref.softmax(s, dim=-1)
    labels = [repr(t) if t in (" ", ".") else str(t) for t in (labels or range(len(s)))]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3))
    positions = range(len(labels))  # positions, not labels: a word may repeat a letter
    left.bar(positions, s.tolist(), color="tab:gray")
    left.set_xticks(positions, labels)
    left.axhline(0, color="black", linewidth=0.8)
    left.set_title(f"scores × {scale:.3g}")
    left.set_xlabel("key")
    left.set_ylabel("score")
    bars = right.bar(positions, w.tolist(), color="tab:blue")
    right.set_xticks(positions, labels)
    for bar, value in zip(bars, w.tolist()):
        right.text(bar.get_x() + bar.get_width() / 2, value + 0.02, f"{value:.2f}", ha="center", fontsize=8)
    right.set_ylim(0, 1.1)
    right.set_title(f"softmax(scores × {scale:.3g}): weights that sum to 1")
    right.set_xlabel("key")
    right.set_ylabel("weight")
    fig.tight_layout()
    return fig


def softmax_explorer(scores, labels=None, scale: float = 1.0):
    """A slider that multiplies ``scores`` before the softmax: small scales flatten the weights,
    large ones push all the weight onto the largest score (static picture at ``scale`` as fallback)."""
    slider = widgets.FloatLogSlider(value=scale, base=10, min=-1, max=1.5, step=0.05, description="scale:")
    return interactive(lambda scale: softmax_bars(scores, labels, scale), {"scale": scale}, scale=slider)


# --- 02: the soft lookup -------------------------------------------------------------------


def soft_lookup(query, keys, values, key_labels, *, title: str = "a soft dictionary lookup"):
    """Three panels: 2-D keys and the query as arrows, the weights softmax(q · k), and the values
    with their weighted average (the result of the lookup)."""
    q = torch.as_tensor(query, dtype=torch.float32).flatten()
    k = torch.as_tensor(keys, dtype=torch.float32)
    v = torch.as_tensor(values, dtype=torch.float32).flatten()
    assert q.shape == (2,) and k.dim() == 2 and k.shape[1] == 2, "soft_lookup draws 2-D queries and keys"
    assert len(v) == len(k) == len(key_labels), "one value and one label per key"
    w = ref.softmax(k @ q, dim=-1)
    result = float(w @ v)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))

    ax = axes[0]
    reach = max(float(k.abs().max()), float(q.abs().max())) * 1.6
    for (kx, ky), label in zip(k.tolist(), key_labels):
        ax.annotate("", (kx, ky), (0, 0), arrowprops=dict(arrowstyle="->", color="tab:gray", lw=1.5))
        norm = math.hypot(kx, ky) or 1.0
        ux, uy = kx / norm, ky / norm  # write the label just beyond the tip, away from the origin
        if abs(uy) < 0.1:  # a flat arrow: beyond its tip the label would sit on the axis line, in line with it
            ax.annotate(label, (kx, ky), xytext=(0, 7), textcoords="offset points", color="tab:gray",
                        ha="center", va="bottom")
            continue
        ax.annotate(label, (kx, ky), xytext=(10 * ux, 10 * uy), textcoords="offset points", color="tab:gray",
                    ha="left" if ux > 0.3 else "right" if ux < -0.3 else "center",
                    va="bottom" if uy > 0.3 else "top" if uy < -0.3 else "center")
    ax.annotate("", tuple(q.tolist()), (0, 0), arrowprops=dict(arrowstyle="->", color="tab:red", lw=2.5))
    ax.text(float(q[0]) * 0.5, float(q[1]) * 0.5 - 0.1 * reach, "query", color="tab:red", ha="center", va="top")
    ax.set_xlim(-reach, reach)
    ax.set_ylim(-reach, reach)
    ax.set_aspect("equal")
    ax.axhline(0, color="black", linewidth=0.5)
    ax.axvline(0, color="black", linewidth=0.5)
    ax.set_title("keys (gray) and the query (red)")
    ax.set_xlabel("dimension 0")
    ax.set_ylabel("dimension 1")

    ax = axes[1]
    positions = range(len(key_labels))
    bars = ax.bar(positions, w.tolist(), color="tab:blue")
    ax.set_xticks(positions, key_labels)
    for bar, value in zip(bars, w.tolist()):
        ax.text(bar.get_x() + bar.get_width() / 2, value + 0.02, f"{value:.2f}", ha="center", fontsize=8)
    ax.set_ylim(0, 1.1)
    ax.set_title("weights = softmax(query · key)")
    ax.set_xlabel("key")
    ax.set_ylabel("weight")

    ax = axes[2]
    ax.bar(positions, v.tolist(), color="tab:green", alpha=0.7)
    ax.set_xticks(positions, key_labels)
    ax.axhline(result, color="tab:red", linestyle="--", label=f"result = Σ weight × value = {result:.2f}")
    ax.set_title("values, and the weighted average")
    ax.set_xlabel("key")
    ax.set_ylabel("value")
    ax.legend(loc="upper left", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def soft_lookup_explorer(query, keys, values, key_labels):
    """Sliders for the query's direction (degrees) and length: a short query averages the values,
    a long one picks the best-matching key (static picture of ``query``, rounded to the sliders)."""
    q = torch.as_tensor(query, dtype=torch.float32).flatten()
    angle0 = int(5 * round(math.degrees(math.atan2(float(q[1]), float(q[0]))) / 5))
    length0 = max(0.1, round(float(q.norm()), 1))
    angle = widgets.IntSlider(value=angle0, min=-180, max=180, step=5, description="direction (°)",
                              continuous_update=False)
    length = widgets.FloatSlider(value=length0, min=0.1, max=5.0, step=0.1, description="length",
                                 continuous_update=False)

    def draw(angle, length):
        q = torch.tensor([math.cos(math.radians(angle)), math.sin(math.radians(angle))]) * length
        return soft_lookup(q, keys, values, key_labels, title=f"a query at {angle}°, of length {length:.1f}")

    return interactive(draw, {"angle": angle0, "length": length0}, angle=angle, length=length)


# --- 02: why divide by sqrt(d_k) -------------------------------------------------------------


def dot_product_variance(d_ks, variances, scaled_variances=None):
    """Log-log plot of the measured variance of q · k against d_k, with the line y = d_k (and,
    when given, the variance of q · k / sqrt(d_k) with the line y = 1)."""
    d_ks = _floats(d_ks)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(d_ks, d_ks, color="tab:gray", linestyle="--", label="y = d_k")
    ax.plot(d_ks, _floats(variances), "o", color="tab:red", label="measured variance of q · k")
    if scaled_variances is not None:
        ax.plot(d_ks, [1.0] * len(d_ks), color="tab:gray", linestyle=":", label="y = 1")
        ax.plot(d_ks, _floats(scaled_variances), "s", color="tab:blue", label="measured variance of q · k / √d_k")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_title("The variance of a dot product grows with d_k")
    ax.set_xlabel("d_k (width of the query and key vectors)")
    ax.set_ylabel("variance of the score")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def softmax_saturation(d_ks, unscaled, scaled, T: int):
    """The largest attention weight of a row (averaged over rows) against d_k, without and with
    the 1/sqrt(d_k) scaling; 1/T is a uniform row, 1 a one-hot row (a saturated softmax)."""
    d_ks = _floats(d_ks)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(d_ks, _floats(unscaled), "o-", color="tab:red", label="softmax(q kᵀ), unscaled")
    ax.plot(d_ks, _floats(scaled), "s-", color="tab:blue", label="softmax(q kᵀ / √d_k), scaled")
    ax.axhline(1.0, color="tab:gray", linestyle="--", linewidth=0.8)
    ax.axhline(1.0 / T, color="tab:gray", linestyle=":", linewidth=0.8)
    ax.text(d_ks[0], 1.0 - 0.06, "one-hot: all weight on one key", fontsize=8, color="tab:gray")
    ax.text(d_ks[0], 1.0 / T + 0.02, f"uniform: 1/T = 1/{T}", fontsize=8, color="tab:gray")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1.05)
    ax.set_title(f"The softmax saturates without scaling (T = {T} keys)")
    ax.set_xlabel("d_k (width of the query and key vectors)")
    ax.set_ylabel("largest weight in a row (mean)")
    ax.legend(fontsize=8, loc="center right")
    fig.tight_layout()
    return fig

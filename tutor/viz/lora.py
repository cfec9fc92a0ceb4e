"""Pictures of notebook 13 (adapting a pretrained model): LoRA's two thin factors beside the frozen weight, which
targets the loss of instruction tuning counts, and the methods side by side (what trains, what it learnt, what it
forgot)."""

import ipywidgets as widgets
import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

from tutor.reference.characters import PAD_Y, decode
from tutor.viz.core import interactive


def lora_picture(d_in: int = 64, d_out: int = 64, r: int = 4):
    """The frozen weight W [out, in] and the update B A drawn to scale: B [out, r] times A [r, in]."""
    fig, ax = plt.subplots(figsize=(8, 3.2))
    unit = 2.4 / max(d_in, d_out)
    w, h, rr = d_in * unit, d_out * unit, max(r * unit, 0.06)
    ax.add_patch(Rectangle((0, 0), w, h, color="lightgray"))
    ax.text(w / 2, h / 2, f"W\n[{d_out}, {d_in}]\nfrozen", ha="center", va="center")
    ax.text(w + 0.35, h / 2, "+  α/r ·", ha="center", va="center", fontsize=12)
    x0 = w + 0.95
    ax.add_patch(Rectangle((x0, 0), rr, h, color="tab:blue"))
    ax.text(x0 + rr / 2, -0.25, f"B [{d_out}, {r}]\nstarts at 0", ha="center", va="top", fontsize=8)
    ax.add_patch(Rectangle((x0 + rr + 0.25, h - rr), w, rr, color="tab:orange"))
    ax.text(x0 + rr + 0.25 + w / 2, h + 0.12, f"A [{r}, {d_in}], random", ha="center", va="bottom", fontsize=8)
    trained = r * (d_in + d_out)
    ax.set_title(f"LoRA: W x + (α/r)·B A x. {trained:,} numbers train instead of {d_in * d_out:,} "
                 f"({100 * trained / (d_in * d_out):.0f}%)")
    ax.set_xlim(-0.2, x0 + rr + w + 0.5)
    ax.set_ylim(-0.9, h + 0.5)
    ax.set_aspect("equal")
    ax.set_xlabel("input features (in)")
    ax.set_ylabel("output features (out)")
    ax.set_xticks([])
    ax.set_yticks([])
    fig.tight_layout()
    return fig


def labels_picture(x, y, title: str = "one instruction example: which targets the loss counts"):
    """The inputs ``x`` and targets ``y`` of one example as two rows of characters; an ignored target (``PAD_Y``) is
    grey, a counted one green."""
    x, y = x.tolist(), y.tolist()
    fig, ax = plt.subplots(figsize=(0.5 * len(x) + 1.5, 1.9))
    for i, (a, b) in enumerate(zip(x, y)):
        ax.add_patch(Rectangle((i, 1), 0.95, 0.9, color="whitesmoke"))
        ax.text(i + 0.47, 1.45, decode([a]).replace(" ", "␣"), ha="center", va="center", family="monospace")
        counted = b != PAD_Y
        ax.add_patch(Rectangle((i, 0), 0.95, 0.9, color="tab:green" if counted else "lightgray"))
        shown = decode([b]).replace(" ", "␣") if counted else "ign"
        ax.text(i + 0.47, 0.45, shown, ha="center", va="center", family="monospace",
                color="white" if counted else "gray", fontsize=9 if counted else 7)
    ax.set_xlim(0, len(x))
    ax.set_ylim(0, 2)
    ax.set_yticks([0.45, 1.45], ["target y", "input x"])
    ax.set_xticks([i + 0.47 for i in range(len(x))], range(len(x)), fontsize=7)
    ax.set_xlabel("position (green: counted by the loss; grey: ignore_index; ␣ is the start and end token ' ')")
    ax.set_title(title)
    for side in ax.spines.values():
        side.set_visible(False)
    fig.tight_layout()
    return fig


def comparison_figure(results, baseline, title: str):
    """Each method as a point: trainable parameters (log scale) against the share of names of the asked length; and
    the loss on plain names before and after (what it forgot)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    for result in results:
        left.scatter(max(result.trainable, 1), result.success, s=40)
        left.annotate(result.method, (max(result.trainable, 1), result.success), textcoords="offset points",
                      xytext=(5, -12 if "counted" in result.method else 4), fontsize=8)
    left.axhline(baseline.success, color="gray", linestyle="--", label=f"base model: {baseline.success:.0%}")
    left.set_xscale("log")
    left.set_xlim(min(max(r.trainable, 1) for r in results) / 2, max(r.trainable for r in results) * 6)
    left.set_ylim(0, 1.05)
    left.set(title="what it learnt", xlabel="parameters that train (log scale)",
             ylabel="names of the asked length")
    left.legend(loc="lower right", fontsize=8)
    names = [r.method for r in results]
    right.barh(names, [r.names_loss for r in results], color="tab:red", alpha=0.7, label="after")
    right.axvline(baseline.names_loss, color="gray", linestyle="--", label=f"before: {baseline.names_loss:.3f}")
    right.invert_yaxis()
    low = min([baseline.names_loss] + [r.names_loss for r in results])
    right.set_xlim(low - 0.1, max(r.names_loss for r in results) + 0.1)
    right.set(title="what it forgot", xlabel="loss on plain held-out names (nats)", ylabel="")
    right.legend(loc="lower right", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def lengths_figure(names, n_letters: int, label: str):
    """How long the names a model wrote after the instruction for ``n_letters`` letters are, with a few of them."""
    lengths = [len(n) for n in names]
    top = max(lengths + [n_letters, 10])
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    counts = [lengths.count(k) for k in range(top + 1)]
    ax.bar(range(top + 1), counts, color=["tab:green" if k == n_letters else "tab:gray" for k in range(top + 1)])
    share = lengths.count(n_letters) / max(len(lengths), 1)
    ax.set(title=f"{label}, asked for {n_letters} letters: {share:.0%} of {len(names)} names have them",
           xlabel="letters in the name written (e.g. " + ", ".join(names[:6]) + ")", ylabel="names")
    ax.set_xticks(range(top + 1))
    fig.tight_layout()
    return fig


def length_explorer(models: dict, sample_fn, n_letters: int = 5, count: int = 100):
    """Pick an asked length and a model (``models``: label -> model); ``sample_fn(model, n_letters, count)`` gives the
    names it writes, shown as a histogram of their lengths (static picture: the first model, ``n_letters``)."""
    slider = widgets.IntSlider(value=n_letters, min=3, max=8, description="asked for (letters)",
                               continuous_update=False)
    choice = widgets.Dropdown(options=list(models), value=list(models)[0], description="model")

    def draw(n_letters, label):
        return lengths_figure(sample_fn(models[label], n_letters, count), n_letters, label)

    return interactive(draw, n_letters=slider, label=choice)

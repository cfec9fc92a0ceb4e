"""Pictures for notebook 06: block diagrams, normalisation, activation functions, and what
pre-norm, post-norm and the normalised-stream bug do to a deep stack of blocks."""

import functools
import math

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F
from matplotlib.patches import Circle, FancyBboxPatch

from tutor import reference as ref
from tutor.viz.core import interactive

# --- three ways to place the LayerNorms -----------------------------------------------------


class PostNormBlock(ref.TransformerBlock):
    """The 2017 Transformer: normalise after adding, x = ln(x + f(x))."""

    def forward(self, x, mask=None):
        x = self.ln1(x + self.attn(x, mask))
        return self.ln2(x + self.mlp(x))


class NormalisedStreamBlock(ref.TransformerBlock):
    """The bug: the residual stream itself is normalised, x = ln(x); x = x + f(x)."""

    def forward(self, x, mask=None):
        x = self.ln1(x)
        x = x + self.attn(x, mask)
        x = self.ln2(x)
        return x + self.mlp(x)


class NoResidualBlock(ref.TransformerBlock):
    """No residual connections: x = attn(ln1(x)); x = mlp(ln2(x))."""

    def forward(self, x, mask=None):
        x = self.attn(self.ln1(x), mask)
        return self.mlp(self.ln2(x))


PLACEMENTS = {
    "pre-norm": ref.TransformerBlock,
    "post-norm": PostNormBlock,
    "normalised stream (bug)": NormalisedStreamBlock,
    "no residual connections": NoResidualBlock,
}
COLOURS = {"pre-norm": "tab:green", "post-norm": "tab:blue", "normalised stream (bug)": "tab:red",
           "no residual connections": "tab:grey"}


@functools.lru_cache(maxsize=64)
def depth_statistics(placement="pre-norm", n_layers=24, d_model=64, n_heads=4, T=8, batch=8, seed=0,
                     block_class=None):
    """Push random vectors through ``n_layers`` fresh blocks and backpropagate a language-model loss.

    Linear weights get std 1/sqrt(fan_in), so each sublayer's output is about as large as its input
    (as in a trained network; PyTorch's default init makes every branch small). Returns
    ``stream_rms`` and ``input_cosine`` (the residual stream after each layer: its size and its
    cosine similarity with the input, ``n_layers + 1`` values) and ``grad_norm`` (the gradient norm
    of each block's parameters, ``n_layers`` values). Results are cached (they are deterministic).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is fastest, and much faster on a busy machine
    try:
        return _depth_statistics(block_class or PLACEMENTS[placement], n_layers, d_model, n_heads, T, batch, seed)
    finally:
        torch.set_num_threads(threads)


def _depth_statistics(block_class, n_layers, d_model, n_heads, T, batch, seed):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        blocks = nn.ModuleList([block_class(d_model, n_heads) for _ in range(n_layers)])
        with torch.no_grad():
            for name, p in blocks.named_parameters():
                if p.dim() == 2:
                    p.normal_(0, 1 / math.sqrt(p.shape[1]))
                elif name.endswith("bias") and ".ln" not in f".{name}":
                    p.zero_()
        ln_f, head = ref.LayerNorm(d_model), nn.Linear(d_model, ref.vocab_size)
        x0 = torch.randn(batch, T, d_model)
        targets = torch.randint(0, ref.vocab_size, (batch, T))
    x, rms, cos = x0, [1.0], [1.0]
    for block in blocks:
        x = block(x)
        rms.append(x.detach().pow(2).mean().sqrt().item())
        cos.append(F.cosine_similarity(x.detach().flatten(), x0.flatten(), dim=0).item())
    loss = F.cross_entropy(head(ln_f(x)).flatten(0, 1), targets.flatten())
    loss.backward()
    grads = [torch.sqrt(sum(p.grad.pow(2).sum() for p in b.parameters())).item() for b in blocks]
    return {"stream_rms": tuple(rms), "input_cosine": tuple(cos), "grad_norm": tuple(grads)}


PANELS = {
    "stream_rms": dict(title="size of the residual stream", xlabel="layer (0 = input)",
                       ylabel="RMS of x after the layer"),
    "input_cosine": dict(title="how much of the input is still there", xlabel="layer (0 = input)",
                         ylabel="cosine(x after the layer, input)"),
    "grad_norm": dict(title="gradient at initialisation", xlabel="layer",
                      ylabel="‖grad‖ of the block's parameters"),
}


def depth_figure(n_layers=24, placements=("pre-norm", "post-norm", "normalised stream (bug)"),
                 panels=tuple(PANELS), d_model=64):
    """One panel per statistic (see ``depth_statistics``), one line per placement of the norms."""
    fig, axes = plt.subplots(1, len(panels), figsize=(4.7 * len(panels), 3.8), squeeze=False)
    axes = axes[0]
    for placement in placements:
        s = depth_statistics(placement, n_layers, d_model=d_model)
        style = dict(color=COLOURS.get(placement), marker=".", label=placement)
        for ax, panel in zip(axes, panels):
            start = 1 if panel == "grad_norm" else 0
            ax.plot(range(start, n_layers + 1), s[panel], **style)
    for ax, panel in zip(axes, panels):
        ax.set(**PANELS[panel])
        ax.grid(alpha=0.3)
        if panel == "input_cosine":
            ax.axhline(0, color="grey", lw=0.5)
    axes[0].legend()
    if len(panels) > 1:
        fig.suptitle(f"{n_layers} fresh blocks, d_model = {d_model}", y=1.02)
    else:
        axes[0].set_title(f"{PANELS[panels[0]]['title']} ({n_layers} blocks)")
    fig.tight_layout()
    return fig


def depth_explorer(n_layers=24):
    """A slider for the depth of the stack (static picture of ``n_layers`` layers as fallback)."""
    slider = widgets.IntSlider(value=n_layers, min=2, max=48, step=2, description="layers:",
                               continuous_update=False)
    return interactive(lambda n_layers: depth_figure(n_layers), {"n_layers": n_layers}, n_layers=slider)


# --- diagrams --------------------------------------------------------------------------------


def _box(ax, x, y, text, colour, w=1.5, h=0.5):
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.05",
                                facecolor=colour, edgecolor="black", lw=1))
    ax.text(x, y, text, ha="center", va="center", fontsize=9)


def _plus(ax, x, y):
    ax.add_patch(Circle((x, y), 0.17, facecolor="white", edgecolor="black", lw=1, zorder=3))
    ax.text(x, y, "+", ha="center", va="center", fontsize=11, zorder=4)


def _arrow(ax, points, colour="black"):
    xs, ys = zip(*points)
    ax.plot(xs[:-1], ys[:-1], color=colour, lw=1.3)
    ax.annotate("", xy=points[-1], xytext=points[-2], arrowprops=dict(arrowstyle="->", color=colour, lw=1.3))


NORM, ATTN, MLPC = "#fde8b0", "#cfe2f3", "#d9ead3"


def _draw_layout(ax, steps, title):
    """``steps``: ("stream_norm", label) puts a box on the stream; ("branch", [(label, colour), ...])
    branches off to the right through the boxes and adds back with a +."""
    y = 0.0
    ax.text(0, y - 0.35, "x (the residual stream)", ha="center", va="top", fontsize=9)
    for kind, content in steps:
        if kind == "stream_norm":
            _arrow(ax, [(0, y), (0, y + 0.35)])
            _box(ax, 0, y + 0.6, content, NORM, w=1.2)
            y += 0.85
        else:
            top = y + 0.75 + 0.8 * len(content)
            _arrow(ax, [(0, y), (0, top - 0.17)])
            _arrow(ax, [(0, y + 0.15), (1.8, y + 0.15), (1.8, y + 0.5)])
            by = y + 0.75
            for i, (label, colour) in enumerate(content):
                _box(ax, 1.8, by, label, colour)
                if i + 1 < len(content):
                    _arrow(ax, [(1.8, by + 0.25), (1.8, by + 0.55)])
                by += 0.8
            _arrow(ax, [(1.8, by - 0.55), (1.8, top), (0.17, top)])
            _plus(ax, 0, top)
            y = top + 0.17
    _arrow(ax, [(0, y), (0, y + 0.4)])
    ax.text(0, y + 0.45, "output", ha="center", va="bottom", fontsize=9)
    ax.set_xlim(-1.3, 3.0)
    ax.set_ylim(-0.9, y + 1.0)
    ax.set_aspect("equal")
    ax.set_title(title, fontsize=10)
    ax.axis("off")


def block_diagrams(which=("pre-norm", "post-norm", "normalised stream (bug)")):
    """Pre-norm (what we build), post-norm (the 2017 Transformer) and the normalised-stream bug."""
    layouts = {
        "pre-norm": ([("branch", [("ln1", NORM), ("attention", ATTN)]), ("branch", [("ln2", NORM), ("MLP", MLPC)])],
                     "pre-norm (this course, GPT-2, Llama)\neach sublayer reads a normalised copy"),
        "post-norm": ([("branch", [("attention", ATTN)]), ("stream_norm", "ln1"),
                       ("branch", [("MLP", MLPC)]), ("stream_norm", "ln2")],
                      "post-norm (the 2017 Transformer)\nx = ln1(x + attn(x)); x = ln2(x + mlp(x))"),
        "normalised stream (bug)": ([("stream_norm", "ln1"), ("branch", [("attention", ATTN)]),
                                     ("stream_norm", "ln2"), ("branch", [("MLP", MLPC)])],
                                    "the bug: normalising the stream itself\nx = ln1(x); x = x + attn(x); ..."),
    }
    fig, axes = plt.subplots(1, len(which), figsize=(max(6.5, 4 * len(which)), 4.6), squeeze=False)
    for ax, name in zip(axes[0], which):
        _draw_layout(ax, *layouts[name])
    fig.suptitle("The vertical line on the left is the residual stream; each sublayer adds to it", y=0.98, fontsize=11)
    fig.tight_layout()
    return fig


# --- normalisation and activations -------------------------------------------------------------


def normalisation_bars(x, layer_norm, rms_norm):
    """One vector before and after LayerNorm and RMSNorm, as bars, with its mean and RMS."""
    x = x.detach().float().flatten()
    outs = [("input x", x), ("after LayerNorm", layer_norm(x[None])[0].detach().float()),
            ("after RMSNorm", rms_norm(x[None])[0].detach().float())]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.2), sharey=True)
    for ax, (title, v) in zip(axes, outs):
        ax.bar(range(len(v)), v.numpy(), color="tab:blue")
        ax.axhline(v.mean().item(), color="tab:red", lw=1.5, label=f"mean {v.mean().item():.2f}")
        ax.axhline(0, color="black", lw=0.6)
        ax.set(title=f"{title}: RMS {v.pow(2).mean().sqrt().item():.2f}, std {v.std(unbiased=False).item():.2f}",
               xlabel="feature index", ylabel="value")
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return fig


def activation_functions():
    """GELU, ReLU and SiLU side by side, and how far the tanh approximation is from the exact GELU."""
    z = torch.linspace(-4, 4, 401)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    axes[0].plot(z, F.relu(z), label="ReLU: max(0, z)", color="grey", ls="--")
    axes[0].plot(z, F.gelu(z), label="GELU: z·Φ(z)", color="tab:blue", lw=2)
    axes[0].plot(z, F.silu(z), label="SiLU (Swish): z·sigmoid(z)", color="tab:orange")
    axes[0].set(title="activation functions", xlabel="input z", ylabel="activation(z)", ylim=(-1, 4))
    axes[0].grid(alpha=0.3)
    axes[0].legend()
    axes[1].plot(z, F.gelu(z) - F.gelu(z, approximate="tanh"), color="tab:purple")
    axes[1].set(title="exact GELU − its tanh approximation", xlabel="input z", ylabel="difference")
    axes[1].grid(alpha=0.3)
    fig.tight_layout()
    return fig


def precision_picture(x, exact, in_half, in_float32, dtype_name="bfloat16"):
    """The error of two ways to compute a norm of half-precision ``x``, against the exact result."""
    e = exact.detach().double()
    fig, ax = plt.subplots(figsize=(7, 4.6), layout="constrained")
    for label, y, colour, marker in [(f"computed in {dtype_name}", in_half, "tab:red", "o"),
                                     ("computed in float32, rounded at the end", in_float32, "tab:green", "s")]:
        err = y.detach().double() - e
        ax.scatter(e.flatten(), err.flatten(), s=14, color=colour, marker=marker, alpha=0.75,
                   label=f"{label} (largest error {err.abs().max().item():.3f})")
    ax.axhline(0, color="black", lw=0.8)
    ax.set(title=f"LayerNorm of {dtype_name} values near {x.float().mean().item():.0f}: error of each output",
           xlabel="exact output (float64)", ylabel="computed − exact")
    # the legend sits under the axes: inside, it hid the lowest red points
    fig.legend(loc="outside lower center", fontsize=8, frameon=False)
    ax.grid(alpha=0.3)
    return fig

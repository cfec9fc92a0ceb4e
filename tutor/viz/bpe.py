"""Pictures and a widget for notebook 11: text coloured by token, the first merges, compression
against vocabulary size, and characters vs BPE in bits per byte.

Every widget comes with a static picture (``tutor.viz.core.interactive``)."""

from __future__ import annotations

from collections import Counter

import ipywidgets as widgets
import matplotlib.pyplot as plt

from tutor.viz.core import interactive

PALETTE = ["#fde2e4", "#dbe7f6", "#e2f0cb", "#fff1c1", "#e8dff5", "#cdeee8", "#ffd8be"]


def _shown(piece: str) -> str:
    """A token's text with its white space made visible: '·' a space, '↵' a line end, '→' a tab."""
    return piece.replace(" ", "·").replace("\n", "↵").replace("\t", "→")


def token_figure(tokenizer, text: str, title: str | None = None, width: int = 64):
    """``text`` drawn token by token, each on its own colour, wrapped at about ``width`` characters."""
    ids = tokenizer.encode(text)
    pieces = [tokenizer.decode([i]) for i in ids]
    lines, line, used = [], [], 0
    for i, piece in zip(ids, pieces):
        shown = _shown(piece)
        if used + len(shown) > width and line:
            lines.append(line)
            line, used = [], 0
        line.append((i, shown))
        used += len(shown)
        if piece.endswith("\n"):
            lines.append(line)
            line, used = [], 0
    if line:
        lines.append(line)
    fig, ax = plt.subplots(figsize=(0.13 * width + 1, 0.42 * len(lines) + 0.9))
    for row, line in enumerate(lines):
        x = 0.0
        for k, (i, shown) in enumerate(line):
            ax.text(x, -row, shown, family="monospace", fontsize=11, va="center",
                    bbox=dict(boxstyle="square,pad=0.15", facecolor=PALETTE[(hash(i) + k) % len(PALETTE)],
                              edgecolor="#888888", linewidth=0.5))
            x += len(shown) + 0.5
    ax.set_xlim(-0.5, width * 1.15)
    ax.set_ylim(-len(lines) + 0.4, 0.6)
    ax.set_xlabel("each box is one token (· a space, ↵ a line end)")
    ax.set_ylabel("line")
    ax.set_yticks([])
    ax.set_xticks([])
    ax.set_title(title or f"{len(text.encode('utf-8'))} bytes → {len(ids)} tokens "
                          f"({len(text.encode('utf-8')) / max(1, len(ids)):.2f} bytes per token)")
    fig.tight_layout()
    return fig


def token_explorer(tokenizer, text: str = "Hello, world! 12345 naïve café 😀"):
    """Type text, see its tokens. A static picture of the first text where widgets cannot run."""
    box = widgets.Text(value=text, description="text:", continuous_update=False,
                       layout=widgets.Layout(width="90%"))
    return interactive(lambda text: token_figure(tokenizer, text), text=box)


def merges_figure(merges, counts=None, n: int = 24, title="the first merges learned on tiny Shakespeare"):
    """The first ``n`` merges, in the order learned, with how often each new token occurs (if ``counts``)."""
    merges = merges[:n]
    labels = [f"{k:>2}. {_shown(a.decode('utf-8', 'replace'))!s} + {_shown(b.decode('utf-8', 'replace'))} "
              f"→ {_shown((a + b).decode('utf-8', 'replace'))}" for k, (a, b) in enumerate(merges)]
    values = [counts.get(a + b, 0) if counts else len(a + b) for a, b in merges]
    fig, ax = plt.subplots(figsize=(8, 0.28 * len(merges) + 1.2))
    ax.barh(range(len(merges)), values, color="tab:blue")
    ax.set_yticks(range(len(merges)), labels, family="monospace", fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel("occurrences of the new token in the encoded training text" if counts else "bytes in the token")
    ax.set_ylabel("merge (in the order learned)")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def token_counts(tokenizer, ids) -> Counter:
    """How often each token's bytes occur in ``ids``."""
    return Counter(tokenizer.vocab[i] for i in ids)


def compression_figure(sizes, bytes_per_token, title="compression: longer tokens with a larger vocabulary"):
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot(sizes, bytes_per_token, marker="o", color="tab:blue")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(s) for s in sizes], rotation=45)
    ax.set_xlabel("vocabulary size (256 bytes + merges)")
    ax.set_ylabel("bytes per token (validation text)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def timing_bars(labels, seconds, title):
    fig, ax = plt.subplots(figsize=(6, 2.4))
    ax.barh(labels, seconds, color=["tab:red", "tab:green"][:len(labels)])
    for k, s in enumerate(seconds):
        ax.text(s, k, f" {s:.2f} s", va="center")
    ax.set_xlabel("seconds (one run on this machine)")
    ax.set_ylabel("trainer")
    ax.set_title(title)
    ax.set_xlim(0, max(seconds) * 1.3)
    fig.tight_layout()
    return fig


def payoff_figure(runs, title="the same compute, two tokenizers: validation loss in bits per byte"):
    """Validation bits per byte against bytes of training text seen, one curve per run."""
    fig, ax = plt.subplots(figsize=(7.5, 4))
    for run, colour in zip(runs, ["tab:orange", "tab:blue", "tab:green"]):
        mb = [b / 1e6 for b in run.bytes_seen]
        ax.plot(mb, run.val_bits_per_byte, marker="o", color=colour,
                label=f"{run.tokenized.name} (final {run.final:.2f})")
    ax.set_xlabel("bytes of training text seen (millions)")
    ax.set_ylabel("validation loss (bits per byte)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig

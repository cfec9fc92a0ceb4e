"""Pictures for notebooks 01-02: similarity and attention matrices of a word."""

import matplotlib.pyplot as plt

from tutor import reference as ref
from tutor.viz.core import heatmap, interactive


def similarity_and_attention(word: str, *, scale: bool = False):
    """Side by side: x xᵀ and softmax(x xᵀ) of the one-hot encoded ``word``, letters on both axes."""
    word = "".join(ch for ch in word.lower() if ch in ref.stoi) or " "
    x = ref.one_hot(__import__("torch").tensor(ref.encode(word)), ref.vocab_size)
    s = ref.similarity(x)
    if scale:
        s = s / x.shape[-1] ** 0.5
    w = ref.softmax(s, dim=-1)
    fig, axes = plt.subplots(1, 2, figsize=(4 + 1.1 * len(word), 1.5 + 0.5 * len(word)))
    heatmap(s, list(word), list(word), ax=axes[0], title=f"similarity x xᵀ of {word!r}", fmt=".0f")
    heatmap(w, list(word), list(word), ax=axes[1], title="attention weights softmax(x xᵀ)", vmin=0, vmax=1)
    fig.tight_layout()
    return fig


def word_explorer(word: str = "laika"):
    """Type a word and see its similarity and attention matrices (static picture of ``word`` as fallback)."""
    import ipywidgets as widgets

    text = widgets.Text(value=word, description="word:", continuous_update=False)
    return interactive(lambda word: similarity_and_attention(word), {"word": word}, word=text)

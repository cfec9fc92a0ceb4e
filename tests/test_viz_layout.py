"""Layout defects seen in a real browser: readable heatmaps for long names, titles that read like
their sliders, no "mean of 1 steps", emoji difficulty dots of one size."""

import json
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch

from conftest import ROOT
from tutor import reference as ref
from tutor import train
from tutor.viz import training as vt
from tutor.viz.attention import similarity_and_attention, soft_lookup_explorer, softmax_bars
from tutor.viz.core import MAX_WIDTH, grid_for
from tutor.viz.model import sampling_distribution


@pytest.mark.parametrize("name", ["laika", "maximilian", "bartholomew"])
def test_attention_explorer_keeps_labels_readable_for_long_names(name):
    torch.manual_seed(0)
    model = ref.GPT(ref.GPTConfig(vocab_size=28, max_len=16, d_model=16, n_heads=4, n_layers=1))
    fig = vt.attention_figure(model, name, 0)
    width, _ = fig.get_size_inches()
    assert width <= MAX_WIDTH + 0.6, f"{width:.1f} inches wide: JupyterLab would shrink its labels"
    heads = [ax for ax in fig.axes if ax.get_title().startswith("head")]
    assert len(heads) == 4
    tokens = len(name) + 1
    inches_per_label = min(ax.get_position().width * width / tokens for ax in heads)
    assert inches_per_label >= 0.2, f"{inches_per_label:.2f} inch per tick label is unreadable"
    plt.close("all")


def test_grid_wraps_instead_of_shrinking():
    assert grid_for(4, 5)[:2] == (2, 2)
    rows, cols, size = grid_for(4, 16)
    assert cols * size <= MAX_WIDTH and rows * cols >= 4
    assert grid_for(1, 30)[:2] == (1, 1)


def test_titles_read_like_the_slider():
    fig = softmax_bars([2.0, 1.0], ["a", "b"], scale=10 ** 1.5)
    titles = [ax.get_title() for ax in fig.axes]
    assert "scores × 31.6" in titles and not any("31.6228" in t for t in titles)
    fig = sampling_distribution(torch.tensor([1.0, 2.0]), temperature=10 ** -0.25)
    assert fig.axes[0].get_title().startswith("temperature = 0.562,")
    plt.close("all")


def test_loss_legend_in_quick_mode():
    history = train.History()
    for step, loss in enumerate([3.0, 2.9, 2.8]):
        history.steps.append(step)
        history.train_loss.append(loss)
    labels = [t.get_text() for t in vt.loss_curves(history).axes[0].get_legend().get_texts()]
    assert "training loss" in labels and not any("mean of 1 steps" in t for t in labels)
    plt.close("all")


def test_difficulty_dots_are_all_emoji():
    """'⚪' alone renders as a small outline glyph next to the red emoji: it needs U+FE0F."""
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            source = "".join(cell["source"])
            bare = re.findall("⚪(?!\ufe0f)", source)
            assert not bare, (f"{path.name} cell {i}: write the white dot as '⚪\\ufe0f' (⚪️); "
                              f"fix: sed -i 's/⚪\\([^\\xef]\\)/⚪️\\1/g' or re.sub('⚪(?!\\ufe0f)', '⚪\\ufe0f', s)")


def test_word_explorer_stacks_long_words():
    for word, columns in (("laika", 2), ("maximilian", 1)):
        fig = similarity_and_attention(word)
        assert fig.get_size_inches()[0] <= MAX_WIDTH
        lefts = {round(ax.get_position().x0, 2) for ax in fig.axes if ax.get_title()}
        assert len(lefts) == columns, (word, lefts)
        plt.close("all")


def test_soft_lookup_explorer_starts_at_the_query():
    keys = torch.tensor([[1.0, 0.2], [0.9, 0.4], [0.2, 1.0], [-1.0, 0.0]])
    shown = soft_lookup_explorer(torch.tensor([1.0, 0.3]), keys, torch.tensor([1.0, 1.5, 0.5, 3.0]),
                                 ["apple", "pear", "lemon", "bread"])
    angle, length = shown.widget.children[0].children
    assert (angle.value, length.value) == (15, 1.0)
    assert shown._repr_mimebundle_()["image/png"].startswith(b"\x89PNG")
    plt.close("all")

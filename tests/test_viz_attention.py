"""The pictures of notebooks 01-02 (tutor.viz.attention): every figure has titles and labelled axes."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch

from tutor.viz import attention as va
from tutor.viz.core import WithFallback

KEYS = torch.tensor([[1.0, 0.2], [0.9, 0.4], [0.2, 1.0], [-1.0, 0.0]])
VALUES = torch.tensor([1.0, 1.5, 0.5, 3.0])
LABELS = ["apple", "pear", "lemon", "bread"]
D_KS = [4, 16, 64, 256, 1024]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def plot_axes(fig):
    """The axes that hold a plot (not colorbars)."""
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def assert_labelled(fig, n_axes):
    assert isinstance(fig, matplotlib.figure.Figure)
    axes = plot_axes(fig)
    assert len(axes) == n_axes
    for ax in axes:
        assert ax.get_title(), "every plot has a title"
        assert ax.get_xlabel() and ax.get_ylabel(), f"unlabelled axis in {ax.get_title()!r}"


def test_similarity_and_attention_has_letters_on_both_axes():
    fig = va.similarity_and_attention("laika")
    assert_labelled(fig, 2)
    for ax in plot_axes(fig):
        assert [t.get_text() for t in ax.get_xticklabels()] == list("laika")
        assert [t.get_text() for t in ax.get_yticklabels()] == list("laika")


def test_softmax_bars_keeps_repeated_labels_and_sums_to_one():
    fig = va.softmax_bars([0.0, 1.0, 0.0, 0.0, 1.0], list("laika"), scale=2.0)
    assert_labelled(fig, 2)
    left, right = plot_axes(fig)
    assert [t.get_text() for t in right.get_xticklabels()] == list("laika")  # both 'a's get a bar
    heights = [bar.get_height() for bar in right.patches]
    assert len(heights) == 5 and sum(heights) == pytest.approx(1.0, abs=1e-5)
    assert [bar.get_height() for bar in left.patches] == pytest.approx([0.0, 2.0, 0.0, 0.0, 2.0])
    assert "2" in left.get_title()


def test_softmax_bars_without_labels():
    assert_labelled(va.softmax_bars(torch.randn(4)), 2)


def test_softmax_explorer_has_a_static_picture():
    widget = va.softmax_explorer(torch.tensor([0.0, 1.0, 0.0]), list("abc"))
    assert isinstance(widget, WithFallback)
    bundle = widget._repr_mimebundle_()
    assert bundle["image/png"].startswith(b"\x89PNG")


def test_soft_lookup_weights_and_result():
    query = torch.tensor([1.0, 0.3])
    fig = va.soft_lookup(query, KEYS, VALUES, LABELS, title="a lookup")
    assert_labelled(fig, 3)
    assert fig._suptitle.get_text() == "a lookup"
    weights = torch.softmax(KEYS @ query, dim=-1)
    bars = [bar.get_height() for bar in plot_axes(fig)[1].patches]
    assert bars == pytest.approx(weights.tolist(), abs=1e-6)
    legend = plot_axes(fig)[2].get_legend().get_texts()[0].get_text()
    assert f"{float(weights @ VALUES):.2f}" in legend


def test_soft_lookup_rejects_keys_that_are_not_2d():
    with pytest.raises(AssertionError):
        va.soft_lookup(torch.ones(3), torch.ones(4, 3), VALUES, LABELS)


@pytest.mark.parametrize("scaled", [None, [1.0] * len(D_KS)])
def test_dot_product_variance(scaled):
    fig = va.dot_product_variance(D_KS, [float(d) for d in D_KS], scaled)
    assert_labelled(fig, 1)
    ax = plot_axes(fig)[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "y = d_k" in labels
    assert ("y = 1" in labels) == (scaled is not None)


def test_softmax_saturation():
    fig = va.softmax_saturation(D_KS, [0.4, 0.6, 0.8, 0.9, 0.97], [0.25] * 5, T=16)
    assert_labelled(fig, 1)
    ax = plot_axes(fig)[0]
    assert "16" in ax.get_title()
    assert len(ax.get_legend().get_texts()) == 2

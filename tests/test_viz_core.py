"""Heatmaps carry labels; widgets carry a static picture for GitHub and headless runs."""

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets
import matplotlib.pyplot as plt
import pytest
import torch

from tutor import viz
from tutor.viz.attention import similarity_and_attention, word_explorer


def test_heatmap_labels_every_row_and_column():
    ax = viz.heatmap(torch.rand(3, 4), list("abc"), list(" xy."), title="weights", xlabel="key", ylabel="query")
    assert ax.get_title() == "weights" and ax.get_xlabel() == "key" and ax.get_ylabel() == "query"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["' '", "x", "y", "'.'"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert len(ax.texts) == 12  # every value written in
    plt.close("all")


def test_heatmap_skips_numbers_on_big_matrices():
    ax = viz.heatmap(torch.rand(20, 20), title="big")
    assert len(ax.texts) == 0
    plt.close("all")


def test_similarity_and_attention_figure():
    fig = similarity_and_attention("Laika!")
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert any("similarity" in t for t in titles) and any("attention" in t for t in titles)
    first = fig.axes[0]
    assert [t.get_text() for t in first.get_xticklabels()] == list("laika")
    plt.close("all")


def test_interactive_has_widget_and_static_png():
    slider = widgets.IntSlider(value=2, min=1, max=5)

    def draw(n):
        fig, ax = plt.subplots()
        ax.plot(range(n))
        ax.set_title(f"n = {n}")
        return fig

    shown = viz.interactive(draw, {"n": 2}, n=slider)
    bundle = shown._repr_mimebundle_()
    assert bundle["image/png"].startswith(b"\x89PNG")
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "static picture" in bundle["text/plain"]


def test_word_explorer_has_a_fallback():
    bundle = word_explorer("laika")._repr_mimebundle_()
    assert bundle["image/png"].startswith(b"\x89PNG")


def test_viz_exports_the_core_and_one_module_per_topic():
    assert viz.heatmap and viz.interactive and viz.figure_png and viz.WithFallback
    for topic in ("attention", "masking", "heads", "positional", "blocks", "model", "training", "modern", "bpe",
                  "gpt2"):
        assert getattr(viz, topic).__name__ == f"tutor.viz.{topic}"
    assert sorted(viz.__all__) == sorted(name for name in vars(viz) if not name.startswith("_"))


def test_a_name_that_is_not_there_is_an_attribute_error():
    with pytest.raises(AttributeError):
        viz.no_such_picture

"""The pictures of notebook 09 carry titles and labels; the cache widget has a static picture."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import torch

from tutor.train import History
from tutor.viz import modern


def test_cache_grid_counts_the_work():
    T = 6
    without, cached = modern.cache_grid(T - 1, T, cached=False), modern.cache_grid(T - 1, T, cached=True)
    assert int((without == modern.COMPUTED).sum()) == T * (T + 1) // 2  # 1 + 2 + ... + T: quadratic
    assert int((cached == modern.COMPUTED).sum()) == T                  # one per step: linear
    assert int((cached == modern.READ).sum()) == T * (T - 1) // 2
    assert torch.equal(modern.cache_grid(2, T, cached=True)[3:], torch.zeros(T - 3, T, dtype=torch.long))


def test_cache_filling_figure_is_labelled():
    fig = modern.cache_filling(step=4, T=8)
    titles = [ax.get_title() for ax in fig.axes]
    assert "without a cache: 15 positions computed" in titles and "with a KV cache: 5 positions computed" in titles
    assert all(ax.get_xlabel() for ax in fig.axes)
    plt.close("all")


def test_cache_explorer_has_a_static_picture():
    w = modern.cache_explorer(step=3, T=6)
    bundle = w._repr_mimebundle_()
    assert bundle["image/png"][:4] == b"\x89PNG"
    plt.close("all")


def test_speed_and_runs_figures_are_labelled():
    fig = modern.generation_speed([8, 16, 32], [1.0, 2.0, 4.0], [0.5, 0.5, 0.6])
    ax = fig.axes[0]
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel() and len(ax.lines) == 2
    h = History(val_steps=[0, 1], val_loss=[3.0, 2.5])
    fig = modern.compare_runs({"a": h, "b": h}, {"bigram": 2.4})
    ax = fig.axes[0]
    assert ax.get_title() and ax.get_xlabel() == "step" and "2.500" in ax.get_legend().get_texts()[0].get_text()
    fig = modern.rope_offset_scores({"query at 5": ([0, 1], [1.0, 0.5])})
    assert fig.axes[0].get_xlabel().startswith("offset")
    plt.close("all")

"""The pictures of notebook 12: every axes titled and labelled, the values written on the bars."""

import matplotlib.pyplot as plt

from tutor.viz import gpt2 as vg


def _labelled(fig):
    for ax in fig.axes:
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel(), ax


def test_gelu_figure():
    fig = vg.gelu_figure()
    _labelled(fig)
    assert len(fig.axes) == 2 and "GPT-2" in fig.axes[0].get_title()
    plt.close(fig)


def test_speed_and_bits_per_byte_bars_show_their_values():
    fig = vg.speed_bars({"without a cache": 1.5, "with a KV cache": 12.0}, "8 new tokens")
    _labelled(fig)
    assert {t.get_text().strip() for t in fig.axes[0].texts} == {"1.5", "12.0"}
    plt.close(fig)
    fig = vg.bits_per_byte_bars({"notebook 10": 2.57, "GPT-2": 1.9}, highlight="GPT-2", title="tiny Shakespeare")
    _labelled(fig)
    bars = fig.axes[0].patches
    assert bars[1].get_facecolor() != bars[0].get_facecolor()
    plt.close(fig)


def test_gelu_gap_explorer_has_a_picture_and_redraws():
    calls = []

    def gap(std):
        calls.append(std)
        return std ** 2 / 100

    widget = vg.gelu_gap_explorer(gap, std=0.02)
    assert widget._repr_mimebundle_()["image/png"].startswith(b"\x89PNG")
    fig = vg.gelu_gap_figure(0.3, gap(0.3), [0.01, 0.1, 1.0], [1e-6, 1e-4, 1e-2])
    _labelled(fig)
    assert "std 0.3" in fig.axes[0].get_title()
    plt.close("all")

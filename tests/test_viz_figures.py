"""Figures whose text used to hide data or crowd other text (issue 7, item 6).

Each test draws the figure, renders it, and compares the pixel boxes of the pieces involved.
"""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch

from tutor.viz.attention import soft_lookup
from tutor.viz.blocks import precision_picture
from tutor.viz.heads import split_picture


def _boxes_overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _plain_layer_norm(x):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5)


def test_precision_picture_legend_hides_no_point():
    torch.manual_seed(0)
    x16 = (100 + 2 * torch.randn(4, 16)).to(torch.bfloat16)
    fig = precision_picture(x16, _plain_layer_norm(x16.double()), _plain_layer_norm(x16),
                            _plain_layer_norm(x16.float()).to(torch.bfloat16))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (ax,) = fig.axes
    legend = fig.legends[0] if fig.legends else ax.get_legend()
    box = legend.get_window_extent(renderer)
    assert not _boxes_overlap(box, ax.get_window_extent(renderer)), "the legend must sit outside the axes"
    assert len(legend.get_texts()) == 2
    plt.close(fig)


def test_split_picture_main_title_does_not_touch_the_subplot_titles():
    fig = split_picture()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    main = fig._suptitle.get_window_extent(renderer)
    for ax in fig.axes:
        title = ax.title.get_window_extent(renderer)
        assert main.y0 - title.y1 >= 5, f"only {main.y0 - title.y1:.1f} px between the main and a subplot title"
    plt.close(fig)


def test_soft_lookup_labels_stay_off_their_arrows_and_the_axis():
    keys = torch.tensor([[1.0, 0.2], [0.9, 0.4], [0.2, 1.0], [-1.0, 0.0]])
    fig = soft_lookup(torch.tensor([1.0, 0.3]), keys, torch.tensor([1.0, 1.5, 0.5, 3.0]),
                      ["apple", "pear", "lemon", "bread"])
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    labels = {t.get_text(): t for t in ax.texts if t.get_text() in ("apple", "pear", "lemon", "bread")}
    assert set(labels) == {"apple", "pear", "lemon", "bread"}
    bread = labels["bread"].get_window_extent(renderer)
    _, axis_y = ax.transData.transform((0, 0))  # the horizontal axis line, on which the bread arrow lies
    assert bread.y0 > axis_y + 2, "the 'bread' label sits on its arrow / the axis line"
    boxes = [t.get_window_extent(renderer) for t in labels.values()]
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            assert not _boxes_overlap(boxes[i], boxes[j]), "two key labels overlap"
    plt.close(fig)

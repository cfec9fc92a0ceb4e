"""Plots and widgets. Every widget displays with a static picture for GitHub and headless runs."""

import matplotlib

from tutor.viz.core import WithFallback, figure_png, heatmap, interactive  # noqa: F401
from tutor.viz.attention import (  # noqa: F401
    dot_product_variance, similarity_and_attention, soft_lookup, softmax_bars, softmax_explorer,
    softmax_saturation, word_explorer,
)
from tutor.viz.masking import attention_with_future, batch_masks, leak_explorer, leak_plot, mask_heatmap, output_changes  # noqa: F401,E501
from tutor.viz.positional import encoding_heatmap, offset_curves, position_similarity, position_similarity_explorer, rope_pair_rotation, sinusoid_waves  # noqa: F401,E501
from tutor.viz.blocks import activation_functions, block_diagrams, depth_explorer, depth_figure, normalisation_bars, precision_picture  # noqa: F401,E501
from tutor.viz.model import architecture_diagram, residual_growth, sampling_distribution, sampling_explorer, temperature_bars  # noqa: F401,E501
from tutor.viz.heads import head_explorer, head_patterns, mha_diagram, split_picture  # noqa: F401

matplotlib.rcParams.setdefault("figure.dpi", 90)

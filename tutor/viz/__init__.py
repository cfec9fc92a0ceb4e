"""Plots and widgets, one module per notebook topic. Every figure has a title and labelled axes;
every widget displays with a static picture for GitHub, nbviewer and headless runs."""

from tutor.viz.core import WithFallback, figure_png, heatmap, interactive  # noqa: F401
from tutor.viz.attention import (  # noqa: F401  (01-02)
    dot_product_variance, similarity_and_attention, soft_lookup, soft_lookup_explorer, softmax_bars, softmax_explorer,
    softmax_saturation, word_explorer,
)
from tutor.viz.masking import (  # noqa: F401  (03)
    attention_with_future, batch_masks, leak_explorer, leak_plot, mask_heatmap, output_changes,
)
from tutor.viz.heads import head_explorer, head_patterns, mha_diagram, split_picture  # noqa: F401  (04)
from tutor.viz.positional import (  # noqa: F401  (05)
    encoding_heatmap, offset_curves, position_similarity, position_similarity_explorer, rope_pair_rotation,
    sinusoid_waves,
)
from tutor.viz.blocks import (  # noqa: F401  (06)
    activation_functions, block_diagrams, depth_explorer, depth_figure, normalisation_bars, precision_picture,
)
from tutor.viz.model import (  # noqa: F401  (07)
    architecture_diagram, residual_growth, sampling_distribution, sampling_explorer, temperature_bars,
)
from tutor.viz import training  # noqa: F401,E402  (08: live loss plot, samples, attention of the trained model)
from tutor.viz import modern  # noqa: F401,E402  (09: the KV cache, generation speed, two training runs)
from tutor.viz import tokens  # noqa: F401,E402  (11: text coloured by token, merges, compression, bits per byte)

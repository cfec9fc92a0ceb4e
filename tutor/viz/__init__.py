"""Plots and widgets, one module per notebook topic. Every figure has a title and labelled axes;
every widget displays with a static picture for GitHub, nbviewer and headless runs.

``tutor.viz`` itself holds only the helpers every notebook uses (``heatmap``, ``interactive``, ``figure_png``,
``WithFallback``, from ``core``); a picture is imported from its topic module, e.g.
``from tutor.viz.masking import mask_heatmap``.

| module | notebook | pictures |
|---|---|---|
| ``attention`` | 01-02 | softmax, similarity and attention, the soft lookup, the variance of dot products |
| ``masking`` | 03 | masks, attention that sees the future, leaks |
| ``heads`` | 04 | the multi-head diagram, splitting, the patterns of every head |
| ``positional`` | 05 | sinusoids, the encoding table, position similarity, RoPE |
| ``blocks`` | 06 | block layouts, normalisation, activations, precision, depth |
| ``model`` | 07 | the architecture, the residual stream, sampling with temperature and top-k |
| ``training`` | 08, 10 | the schedule, live loss curves, padding and packing, samples, attention |
| ``modern`` | 09 | the KV cache, generation speed, two training runs |
| ``bpe`` | 11 | text coloured by token, merges, compression, bits per byte |
| ``gpt2`` | 12 | the two GELUs, generation speed with and without the cache, bits per byte |
| ``lora`` | 13 | LoRA's factors beside the frozen weight, the targets instruction tuning counts, the methods compared |
| ``interpretability`` | 14 | a head's pattern (and a widget), every head's scores, induction forming, ablation |
"""

from tutor.viz import (
    attention,
    blocks,
    bpe,
    gpt2,
    heads,
    interpretability,
    lora,
    masking,
    model,
    modern,
    positional,
    training,
)
from tutor.viz.core import WithFallback, figure_png, heatmap, interactive

__all__ = ["heatmap", "interactive", "figure_png", "WithFallback", "core", "attention", "masking", "heads",
           "positional", "blocks", "model", "training", "modern", "bpe", "gpt2", "lora", "interpretability"]

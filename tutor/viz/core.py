"""Plotting helpers every notebook uses: labelled heatmaps, and widgets with a static fallback."""

import io

import matplotlib.pyplot as plt
import torch


def _labels(tokens, n):
    if tokens is None:
        return [str(i) for i in range(n)]
    tokens = list(tokens)
    return [repr(t) if t in (" ", ".") else str(t) for t in tokens]


def heatmap(matrix, row_tokens=None, col_tokens=None, *, title="", xlabel="key", ylabel="query",
            ax=None, fmt=".2f", annotate=None, cmap="viridis", vmin=None, vmax=None, colorbar=True):
    """Draw a 2-D matrix with a token label on every row and column, and its values written in.

    ``annotate`` defaults to True for matrices up to 12x12.
    """
    m = matrix.detach().float().cpu() if isinstance(matrix, torch.Tensor) else torch.as_tensor(matrix, dtype=torch.float32)
    assert m.dim() == 2, f"heatmap needs a 2-D matrix, got shape {tuple(m.shape)}"
    rows, cols = m.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(max(3.0, 0.55 * cols + 1.5), max(2.5, 0.5 * rows + 1.0)))
    image = ax.imshow(m.numpy(), cmap=cmap, vmin=vmin, vmax=vmax)
    ax.set_xticks(range(cols), _labels(col_tokens, cols))
    ax.set_yticks(range(rows), _labels(row_tokens if row_tokens is not None else col_tokens, rows))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if annotate is None:
        annotate = rows <= 12 and cols <= 12
    if annotate:
        for i in range(rows):
            for j in range(cols):
                value = float(m[i, j])
                r, g, b, _ = image.cmap(image.norm(value))  # the colour drawn under the number
                dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5
                ax.text(j, i, format(value, fmt), ha="center", va="center", fontsize=8,
                        color="white" if dark else "black")
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return ax


def figure_png(fig) -> bytes:
    """The PNG bytes of a matplotlib figure (and close it)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight", dpi=90)
    plt.close(fig)
    return buffer.getvalue()


class WithFallback:
    """A widget that also carries a static PNG of its first state.

    Jupyter shows the live widget; places that cannot run widgets (GitHub, nbviewer, a headless
    run, a notebook reopened without its kernel) show the picture instead, because the output
    holds both in one display bundle.
    """

    def __init__(self, widget, png: bytes):
        self.widget = widget
        self.png = png

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = _widget_bundle(self.widget) if self.widget is not None else {}
        bundle["image/png"] = self.png
        bundle["text/plain"] = "(interactive widget: run the notebook to use it; showing a static picture)"
        return bundle


def _widget_bundle(widget) -> dict:
    """The display bundle of an ipywidget, in ipywidgets 8 and in 7 (Colab ships 7.7).

    ipywidgets 7 has no ``_repr_mimebundle_``: its ``_ipython_display_`` sends this same view
    reference (and runs the widget's on-displayed callbacks, which we run too).
    """
    if hasattr(widget, "_repr_mimebundle_"):
        return dict(widget._repr_mimebundle_() or {})
    if getattr(widget, "_view_name", None) is None:
        return {}
    if hasattr(widget, "_handle_displayed"):
        widget._handle_displayed()
    return {"application/vnd.jupyter.widget-view+json":
            {"version_major": 2, "version_minor": 0, "model_id": widget.model_id}}


def interactive(draw, static_kwargs: dict | None = None, **controls):
    """``draw(**values)`` makes a matplotlib figure; ``controls`` are ipywidgets, by argument name.

    Returns an object that displays as the live widget, with a static picture of the first state
    (drawn with ``static_kwargs``, by default the controls' initial values) as the fallback.
    The figure is redrawn only when a control changes, so a headless run shows it once.
    """
    if static_kwargs is None:
        static_kwargs = {name: control.value for name, control in controls.items()}
    png = figure_png(draw(**static_kwargs))
    try:
        import ipywidgets as widgets
        from IPython.display import Image, clear_output, display
    except ImportError:  # pragma: no cover
        return WithFallback(None, png)

    out = widgets.Output()
    out.append_display_data(Image(png))

    def redraw(change=None):
        values = {name: control.value for name, control in controls.items()}
        with out:
            clear_output(wait=True)
            fig = draw(**values)
            display(fig)
            plt.close(fig)

    for control in controls.values():
        control.observe(redraw, names="value")
    return WithFallback(widgets.VBox([widgets.HBox(list(controls.values())), out]), png)

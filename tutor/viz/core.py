"""Plotting helpers every notebook uses: labelled heatmaps, and widgets with a static fallback."""

import io

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from IPython.display import Image, clear_output, display


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
    if isinstance(matrix, torch.Tensor):
        m = matrix.detach().float().cpu()
    else:
        m = torch.as_tensor(matrix, dtype=torch.float32)
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


# Every picture, the static one and each redraw of a widget, is rendered the same way, so the
# picture keeps its size when a control first moves.
DPI = 90
# The widest figure (inches) a widget should draw: JupyterLab scales a wider picture down to the
# notebook's width (about 10-11 inches at 90 dpi), and its labels with it.
MAX_WIDTH = 12.0

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def grid_for(n_panels: int, n_tokens: int, per_token: float = 0.42, extra: float = 1.3,
             max_width: float = MAX_WIDTH) -> tuple[int, int, float]:
    """(rows, cols, inches per panel) for ``n_panels`` square heatmaps with ``n_tokens`` labels each.

    Panels go 4 or 2 to a row when that fits in ``max_width`` inches (at ``per_token``, else at
    0.3 inch per label), otherwise one to a row: a long name wraps onto more rows instead of
    shrinking the picture, since JupyterLab scales a picture wider than the notebook down, labels
    and all.
    """
    for per in (per_token, 0.3):
        size = per * n_tokens + extra
        for cols in (4, 2):
            if cols <= n_panels and cols * size <= max_width:
                return -(-n_panels // cols), cols, size
    return n_panels, 1, min(per_token * n_tokens + extra, max_width)


def figure_png(fig) -> bytes:
    """The PNG bytes of a matplotlib figure (and close it)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight", dpi=DPI)
    plt.close(fig)
    return buffer.getvalue()


def widget_view(widget) -> dict:
    """The ``application/vnd.jupyter.widget-view+json`` data of a widget, for ipywidgets 7 and 8.

    (ipywidgets 8 has ``_repr_mimebundle_``; 7.x, which Colab ships, only ``_ipython_display_``.)
    """
    bundle = getattr(widget, "_repr_mimebundle_", None)
    if callable(bundle):
        data = bundle() or {}
        if WIDGET_VIEW in data:
            return dict(data[WIDGET_VIEW])
    return {"version_major": 2, "version_minor": 0, "model_id": widget.model_id}


class WithFallback:
    """A widget that also carries a static PNG of its first state, in one display bundle.

    While a kernel is connected, Jupyter shows the live widget. Every saved copy shows the picture:
    ``python -m tutor run`` and the Jupyter server extension ``tutor_jupyter`` (installed with the
    package, it runs when JupyterLab or Notebook saves) drop the live widget view from a bundle
    that also holds a picture, so a notebook reopened without its kernel, GitHub and nbviewer
    show the picture instead of "Error displaying widget: model not found". See CONTRIBUTING.md.
    """

    def __init__(self, widget, png: bytes):
        self.widget = widget
        self.png = png

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = {}
        if self.widget is not None:
            if not hasattr(self.widget, "_repr_mimebundle_") and hasattr(self.widget, "_handle_displayed"):
                self.widget._handle_displayed()  # ipywidgets 7 runs its on-displayed callbacks on display
            bundle[WIDGET_VIEW] = widget_view(self.widget)
        bundle["image/png"] = self.png
        bundle["text/plain"] = "(interactive widget: run the notebook to use it; showing a static picture)"
        return bundle


def interactive(draw, static_kwargs: dict | None = None, **controls):
    """``draw(**values)`` makes a matplotlib figure; ``controls`` are ipywidgets, by argument name.

    Returns an object that displays as the live widget, with a static picture of the first state
    (drawn with ``static_kwargs``, by default the controls' initial values) as the fallback.
    The figure is redrawn only when a control changes, so a headless run shows it once; each
    redraw is rendered like the static picture (:func:`figure_png`), so it keeps its size.
    Controls get room for their whole label (``description_width: initial``).
    """
    if static_kwargs is None:
        static_kwargs = {name: control.value for name, control in controls.items()}
    png = figure_png(draw(**static_kwargs))
    for control in controls.values():
        if hasattr(control, "style") and hasattr(control.style, "description_width"):
            control.style.description_width = "initial"  # "temperature", not "temperat…"
    out = widgets.Output()
    out.append_display_data(Image(png))

    def redraw(change=None):
        values = {name: control.value for name, control in controls.items()}
        with out:
            clear_output(wait=True)
            display(Image(figure_png(draw(**values))))

    for control in controls.values():
        control.observe(redraw, names="value")
    return WithFallback(widgets.VBox([widgets.HBox(list(controls.values())), out]), png)

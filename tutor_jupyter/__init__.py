"""The course's Jupyter server extension: a notebook is saved with the pictures of its widgets.

``tutor.viz.interactive`` displays each widget as one bundle holding the live widget view *and*
a static PNG. While the kernel runs, JupyterLab shows the widget. A saved copy must not keep the
widget view: reopened without that kernel, JupyterLab would still prefer it over the picture and
show "Error displaying widget: model not found". So, before a notebook is written to disk, this
extension drops the widget view from every output that also holds a picture
(:func:`strip_widget_views`). The live session is untouched; the file, GitHub, nbviewer, VS Code
and a reopened JupyterLab show the picture.

It is enabled by ``etc/jupyter/jupyter_server_config.d/tutor_jupyter.json``, which installing the
package puts into the environment, so ``jupyter lab`` loads it without any setup. Check with
``jupyter server extension list``; switch it off with ``jupyter server extension disable tutor_jupyter``.
``python -m tutor run`` applies the same function to the executed solution notebooks.

Only the standard library is imported here: the server loads this module at start-up.
"""

from __future__ import annotations

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "widgets"  # notebook metadata key of ipywidgets' saved widget state
PICTURES = ("image/png", "image/svg+xml", "image/jpeg")


def strip_widget_views(nb) -> int:
    """Drop the live widget view from every output of ``nb`` that also carries a picture.

    ``nb`` is a notebook as a dict (or ``NotebookNode``), changed in place. Outputs that hold only
    a widget view are left alone (they have nothing else to show). Returns how many were changed.
    """
    changed = 0
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", None) or []:
            data = output.get("data") if isinstance(output, dict) else None
            if data and WIDGET_VIEW in data and any(kind in data for kind in PICTURES):
                del data[WIDGET_VIEW]
                changed += 1
    return changed


def pre_save_hook(model, path=None, contents_manager=None, **kwargs):
    """A Jupyter server pre-save hook: strip widget views from a notebook before it is written."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    strip_widget_views(model["content"])


def _jupyter_server_extension_points():
    return [{"module": "tutor_jupyter"}]


def _load_jupyter_server_extension(serverapp):
    manager = serverapp.contents_manager
    if hasattr(manager, "register_pre_save_hook"):  # jupyter_server >= 2: several hooks can coexist
        manager.register_pre_save_hook(pre_save_hook)
    elif getattr(manager, "pre_save_hook", None) is None:  # older servers hold a single hook
        manager.pre_save_hook = pre_save_hook
    else:
        serverapp.log.warning("tutor_jupyter: another pre-save hook is set; widgets are saved as they are")
        return
    serverapp.log.info("tutor_jupyter: notebooks are saved with the pictures of their widgets")

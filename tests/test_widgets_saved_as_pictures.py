"""Widgets are saved as their pictures: by `python -m tutor run` (nbclient) and by the Jupyter
server's pre-save hook (`tutor_jupyter`), so that a reopened notebook, GitHub and nbviewer show a
picture instead of "Error displaying widget: model not found", and re-running an unchanged
notebook rewrites no widget model ids. The widget bundle works with ipywidgets 7 and 8."""

import json
import logging

import nbformat
import pytest

import tutor_jupyter
from conftest import ROOT
from tutor.course import run

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _output(data):
    return {"output_type": "display_data", "data": data, "metadata": {}}


def _notebook():
    return {"cells": [
        {"cell_type": "code", "source": "", "metadata": {}, "execution_count": 1, "outputs": [
            _output({WIDGET_VIEW: {"model_id": "abc", "version_major": 2, "version_minor": 0},
                     "image/png": "iVBOR", "text/plain": "(interactive widget ...)"}),
            _output({WIDGET_VIEW: {"model_id": "only", "version_major": 2, "version_minor": 0},
                     "text/plain": "VBox()"}),
            {"output_type": "stream", "name": "stdout", "text": "hi"}]},
        {"cell_type": "markdown", "source": "text", "metadata": {}}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_strip_drops_the_widget_view_where_a_picture_stands_in():
    nb = _notebook()
    assert tutor_jupyter.strip_widget_views(nb) == 1
    first, only_widget, stream = nb["cells"][0]["outputs"]
    assert set(first["data"]) == {"image/png", "text/plain"}
    assert WIDGET_VIEW in only_widget["data"], "a widget without a picture has nothing else to show"
    assert stream["text"] == "hi"
    assert tutor_jupyter.strip_widget_views(nb) == 0  # idempotent


def test_pre_save_hook_in_a_real_contents_manager(tmp_path):
    """The hook runs inside jupyter_server's own save, as JupyterLab's Save does."""
    from jupyter_server.services.contents.filemanager import FileContentsManager

    manager = FileContentsManager(root_dir=str(tmp_path))

    class App:  # what the extension loader is given
        contents_manager = manager
        log = logging.getLogger("test")

    tutor_jupyter._load_jupyter_server_extension(App)
    manager.save({"type": "notebook", "format": "json", "content": _notebook()}, "saved.ipynb")
    saved = json.loads((tmp_path / "saved.ipynb").read_text())
    data = saved["cells"][0]["outputs"][0]["data"]
    assert WIDGET_VIEW not in data and "image/png" in data
    # non-notebook files are left alone
    manager.save({"type": "file", "format": "text", "content": WIDGET_VIEW}, "notes.txt")
    assert (tmp_path / "notes.txt").read_text() == WIDGET_VIEW


def test_the_package_enables_the_extension_where_it_is_installed():
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    # the package's wheel (pip install from PyPI or git) and, for the editable install of
    # requirements.txt and Binder, the small jupyter-config/ distribution place the same file
    for folder in (ROOT, ROOT / "jupyter-config"):
        project = tomllib.loads((folder / "pyproject.toml").read_text())
        (source,) = project["tool"]["setuptools"]["data-files"]["etc/jupyter/jupyter_server_config.d"]
        config = json.loads((folder / source).read_text())
        assert config["ServerApp"]["jpserver_extensions"] == {"tutor_jupyter": True}
    assert "./jupyter-config" in (ROOT / "requirements.txt").read_text().splitlines()
    assert "pip install --no-cache-dir ./jupyter-config" in (ROOT / "binder" / "postBuild").read_text()
    assert tutor_jupyter._jupyter_server_extension_points() == [{"module": "tutor_jupyter"}]


def test_the_widget_bundle_without_repr_mimebundle():
    """ipywidgets 7 (Colab) has no Widget._repr_mimebundle_: the view is built from model_id."""
    import ipywidgets as widgets

    from tutor.viz.core import WithFallback, widget_view

    slider = widgets.IntSlider()
    modern = widget_view(slider)
    assert modern["model_id"] == slider.model_id and modern["version_major"] == 2

    class Widget7:  # what an ipywidgets 7.7 widget offers: _ipython_display_ and model_id
        model_id = "0123abcd"

        def _ipython_display_(self):
            raise AssertionError("not used")

    assert widget_view(Widget7()) == {"version_major": 2, "version_minor": 0, "model_id": "0123abcd"}
    bundle = WithFallback(Widget7(), b"\x89PNG")._repr_mimebundle_()
    assert bundle[WIDGET_VIEW]["model_id"] == "0123abcd" and bundle["image/png"] == b"\x89PNG"


def test_controls_get_room_for_their_labels():
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    from tutor import viz

    slider = widgets.FloatLogSlider(value=1.0, description="temperature")
    viz.interactive(lambda temperature: plt.figure(), temperature=slider)
    assert slider.style.description_width == "initial"


NOTEBOOK_WITH_WIDGETS = [
    "from tutor.viz.attention import softmax_explorer, word_explorer\nimport torch",
    "softmax_explorer(torch.tensor([2.0, 1.0, 0.1]), list('abc'), scale=1.0)",
    "word_explorer('laika')",
]


@pytest.fixture
def executed(tmp_path, monkeypatch):
    """A small solution notebook with two widgets, executed twice with `tutor run`'s own function."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in NOTEBOOK_WITH_WIDGETS]
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i}"
    path = tmp_path / "99_widgets.ipynb"
    nbformat.write(nb, path)
    run.execute_solution(path, timeout=300)
    first = path.read_bytes()
    run.execute_solution(path, timeout=300)
    return first, path.read_bytes()


def test_tutor_run_stores_pictures_and_no_widget_state(executed):
    first, second = executed
    nb = json.loads(first)
    assert "widgets" not in nb["metadata"], "no widget state with random model ids"
    for cell in nb["cells"][1:]:
        (output,) = cell["outputs"]
        assert WIDGET_VIEW not in output["data"]
        assert output["data"]["image/png"]
        assert "static picture" in "".join(output["data"]["text/plain"])
    assert second == first, "re-running an unchanged notebook must give the same bytes"


def test_a_saved_notebook_renders_its_pictures_without_javascript(executed):
    """What GitHub and nbviewer do: nbconvert's HTML, no widget JavaScript."""
    nbconvert = pytest.importorskip("nbconvert")
    body, _ = nbconvert.HTMLExporter().from_notebook_node(nbformat.reads(executed[0].decode(), as_version=4))
    assert body.count("data:image/png;base64") >= 2
    assert "Error displaying widget" not in body


def test_the_committed_solutions_will_be_saved_as_pictures():
    """Every widget output in solutions/ carries a picture for the hook to keep."""
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            for output in cell.get("outputs", []):
                if WIDGET_VIEW in output.get("data", {}):
                    assert "image/png" in output["data"], f"{path.name}: a widget output without a picture"
        copy = nbformat.from_dict(json.loads(json.dumps(nb)))
        run.save_widgets_as_pictures(copy)
        assert "widgets" not in copy.metadata
        assert not [o for c in copy.cells for o in c.get("outputs", []) if WIDGET_VIEW in o.get("data", {})]


def test_tutor_run_stores_figures_as_pictures_even_under_mplbackend_agg(tmp_path, monkeypatch):
    """With MPLBACKEND=Agg inherited (conftest, CI), a kernel would store "<Figure size ...>" text."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.title('a line')")]
    nb.cells[0].id = "cell-0"
    path = tmp_path / "98_figure.ipynb"
    nbformat.write(nb, path)
    run.execute_solution(path, timeout=300)
    outputs = json.loads(path.read_bytes())["cells"][0]["outputs"]
    assert any("image/png" in o.get("data", {}) for o in outputs), outputs


def test_no_solution_notebook_stores_a_figure_as_text():
    """A figure stored as "<Figure size 640x480 with 1 Axes>" shows nothing on GitHub: re-run with `tutor run`."""
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            for output in cell.get("outputs", []):
                text = "".join(output.get("data", {}).get("text/plain", ""))
                assert not (text.startswith("<Figure size") and "image/png" not in output.get("data", {})), \
                    f"{path.name} cell {i} stores a figure as text: re-run it with `python -m tutor run`"

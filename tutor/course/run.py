"""Execute the solution notebooks in place: ``python -m tutor run``.

Each solution notebook runs in a fresh kernel (nbclient) with ``TUTOR_STRICT=1``, so a check that
does not pass fails the run; its outputs are stored only when every cell ran. Widgets are stored as
their pictures and keep stable ids, so that re-running an unchanged notebook changes nothing. Then
the learner notebooks of the notebooks that ran are rebuilt (``tutor.course.build``).

Public API: :func:`run_solutions`, :func:`execute_solution`, :func:`save_widgets_as_pictures`,
:func:`stable_widget_ids`, :func:`data_needed` and :func:`data_source_problem`.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import tempfile
import uuid

import nbformat

from tutor import env
from tutor.course import catalog
from tutor.course.build import build, display_path, notebook_bytes, notebook_files, select
from tutor.errors import TutorError
from tutor.files import write_atomically
from tutor_jupyter import WIDGET_STATE, strip_widget_views

INLINE_BACKEND = "module://matplotlib_inline.backend_inline"  # Jupyter's own: figures become PNG outputs


@contextlib.contextmanager
def _environment(name: str, value: str):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def execute_solution(path, timeout: int = 600, kernel_name: str = "python3") -> None:
    """Execute the solution notebook at ``path`` in place, with ``TUTOR_STRICT=1`` and cwd its folder.

    Outputs are stored in the file only when every cell ran; on an error the exception
    (nbclient's ``CellExecutionError``, naming the cell) propagates and the file is untouched.
    """
    from nbclient import NotebookClient  # imported here: an optional dependency (the dev extra) only `tutor run` needs

    path = pathlib.Path(path)
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=kernel_name,
        record_timing=False,  # no timestamps in cell metadata: smaller diffs
        store_widget_state=False,  # no widget state (random model ids) in the metadata
        resources={"metadata": {"path": str(path.parent.resolve())}},
    )
    # Progress (tutor.course.progress) goes to a throw-away file: the stored output of the notebook's
    # progress cell shows this run only, and the user's own progress is left alone.
    # Figures are stored as pictures: the kernel uses Jupyter's inline backend even when the caller's
    # environment says MPLBACKEND=Agg (as the tests' conftest and many CI setups do), which would store
    # "<Figure size ...>" text instead.
    with tempfile.TemporaryDirectory(prefix="tutor-run-") as tmp, _environment(env.STRICT, "1"), \
            _environment(env.PROGRESS_FILE, os.path.join(tmp, "progress.json")), \
            _environment("MPLBACKEND", INLINE_BACKEND):
        client.execute()
    save_widgets_as_pictures(nb)
    stable_widget_ids(nb, path.stem)  # any widget left (one without a picture) keeps its id
    write_atomically(path, notebook_bytes(nb))


def save_widgets_as_pictures(nb) -> int:
    """Store each ``tutor.viz`` widget of an executed notebook as its static picture.

    Drops the live widget view (whose random model id would change on every run, and which shows
    "Error displaying widget" once the kernel is gone) from outputs that also carry a picture, and
    ipywidgets' saved widget state from the metadata. The same function runs as a Jupyter pre-save
    hook (``tutor_jupyter``). Returns how many outputs changed.
    """
    nb.metadata.pop(WIDGET_STATE, None)
    return strip_widget_views(nb)


def stable_widget_ids(nb, salt: str) -> None:
    """Give the notebook's widget models ids derived from ``salt`` and their order, in place.

    Jupyter gives every widget model a random id on each run, so re-running an unchanged notebook
    would rewrite hundreds of lines (outputs' ``model_id``, the saved widget state and the
    ``IPY_MODEL_<id>`` references inside it). Renamed in order of first appearance, an unchanged
    notebook keeps its ids and its diff stays small.
    """
    state = nb.get("metadata", {}).get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    ids = []
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []) or []:
            view = (output.get("data") or {}).get("application/vnd.jupyter.widget-view+json") or {}
            if isinstance(view.get("model_id"), str):
                ids.append(view["model_id"])
    ids += list((state.get("state") or {}).keys())
    ids = list(dict.fromkeys(i for i in ids if i))
    if not ids:
        return
    new = {old: uuid.uuid5(uuid.NAMESPACE_URL, f"tutor-widget:{salt}:{k}").hex for k, old in enumerate(ids)}
    pattern = re.compile("|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True)))

    def rename(value):
        if isinstance(value, str):
            return pattern.sub(lambda m: new[m.group(0)], value)
        if isinstance(value, list):
            return [rename(v) for v in value]
        if isinstance(value, dict):
            return type(value)((rename(k), rename(v)) for k, v in value.items())
        return value

    for cell in nb.get("cells", []):
        if cell.get("outputs"):
            cell["outputs"] = rename(cell["outputs"])
    if state.get("state"):
        state["state"] = rename(state["state"])


def run_solutions(solutions_dir, notebooks_dir, only=None, force: bool = False, timeout: int = 600,
                  kernel_name: str = "python3", log=print) -> int:
    """Execute the solution notebooks (all, or those in ``only``), then rebuild their learner notebooks.

    Returns an exit status: 0 when all ran and were rebuilt, non-zero otherwise.
    """
    solutions_dir = pathlib.Path(solutions_dir)
    paths, unmatched = select(notebook_files(solutions_dir), only)
    for word in unmatched:
        log(f"error: no solution notebook in {solutions_dir} matches {word!r}")
    if unmatched:
        return 2
    if not paths:
        log(f"no solution notebooks in {solutions_dir}")
        return 0

    ran, failed = [], []
    for path in paths:
        log(f"running {display_path(path)} ...")
        try:
            execute_solution(path, timeout=timeout, kernel_name=kernel_name)
        except Exception as error:  # noqa: BLE001 - report and go on with the next notebook
            failed.append(path)
            log(f"FAILED {display_path(path)} (left unchanged):\n{error}")
        else:
            ran.append(path)
            log(f"ok     {display_path(path)}")

    status = 1 if failed else 0
    if ran:
        report = build(solutions_dir, notebooks_dir, force=force, only=[p.stem for p in ran])
        for line in report.lines():
            log(line)
        status = max(status, report.exit_code)
    if failed:
        log(f"{len(failed)} solution notebook(s) failed: " + ", ".join(p.name for p in failed))
    return status


def data_needed(paths) -> list[str]:
    """The data sets the solution notebooks at ``paths`` load (``"names"``, ``"shakespeare"``), from the
    catalog; a notebook the catalog does not know (by its number) may load any of them."""
    needed = set()
    for path in paths:
        prefix = pathlib.Path(path).name.split("_", 1)[0]
        known = [n for n in catalog.NOTEBOOKS if prefix.isdigit() and n.number == int(prefix)]
        needed.update(known[0].data if known else ("names", "shakespeare"))
    return sorted(needed)


def data_source_problem(paths=None) -> str | None:
    """Why the notebooks at ``paths`` (default: all of them) would not run on the full data sets they
    load, with what to do about it; None when they would.

    ``tutor run`` stores outputs in the solution notebooks, which everyone reads: outputs from a small
    names file, or from another text than tiny Shakespeare, would replace the real figures. Only the data
    sets the chosen notebooks load are looked at: notebook 10 does not care about the names.
    """
    needed = data_needed(paths) if paths is not None else ["names", "shakespeare"]
    problems = [problem for name in needed if (problem := _problem_with(name))]
    return ". Also: ".join(problems) or None


def _problem_with(name: str) -> str | None:
    """Why the data set ``name`` is not the full checksummed one, with the fix; None when it is."""
    from tutor import data  # imported here: it imports torch (seconds), which no other job of this module needs

    try:
        if name == "names":
            names = data.load_names_with_source(verbose=False)
            if data.is_full_data_set(names):
                return None
            where = names.notice.split(" ", 2)[2].split(" — ")[0]  # "from few.txt (TUTOR_NAMES)"
            return (f"the notebooks would train on {len(names.names):,} names {where}, not the full data set of "
                    f"{data.NUM_NAMES:,} names, and their stored outputs would change. To fix it: "
                    f"{data.full_list_hint()}")
        text = data.load_shakespeare_with_source(verbose=False)
        if text.verified:
            return None
        where = text.notice.split(" ", 3)[3].split(" — ")[0]  # "from mine.txt (TUTOR_SHAKESPEARE)"
        return (f"the notebooks would train on {len(text.text):,} characters {where}, not the full tiny "
                f"Shakespeare ({data.SHAKESPEARE_LENGTH:,} characters, checksummed), and their stored outputs would "
                f"change. To fix it: unset {env.SHAKESPEARE} (the course ships the text) or set "
                f"{env.SHAKESPEARE}=/path/to/{data.SHAKESPEARE_FILENAME}")
    except TutorError as error:  # a bad file of yours, or no data at all: its own one line says what to do
        return error.one_line()

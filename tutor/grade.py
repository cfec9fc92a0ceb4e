"""Grade learner notebooks: ``python -m tutor grade SUBMISSION...``.

For every exercise of every submitted notebook the grader recomputes the result in a fresh
Jupyter kernel that it controls (nbclient), and believes nothing the notebook stored:

1. It builds a grading notebook of its own: a preamble (memory cap, settings, a snapshot of
   ``torch`` and ``builtins``), the *course's* setup cell, then in the notebook's order the
   learner's exercise cells and the cells the learner added, and of the course's other cells only
   their imports, functions, classes and ``yours_or_reference(...)`` bindings (no plots, widgets or
   training). Check cells, stored outputs and the learner's copies of course cells are left out.
2. After the learner's code has run it resets IPython's event hooks, restores anything the
   learner's code changed in ``torch``, ``torch.Tensor``, ``torch.nn.functional``,
   ``torch.nn.Module`` and ``builtins``, throws away every ``tutor`` module the kernel imported
   and imports a pristine copy of the package that the grader writes to a new directory only
   now (so learner code never saw it), and verifies that every ``tutor`` module comes from it.
3. Each check then runs in its own cell and sends its result as a display message of the type
   ``application/vnd.tutor.grade+json`` tagged with a random nonce that exists only in that
   cell's source. The grader reads only that message; printed text, stored outputs and
   ``RESULTS`` count for nothing.

A learner cell that hangs or kills the kernel (``os._exit``, a segfault, memory) is left out
and the notebook is run again without it; a check that does so costs that exercise only. A
per-cell timeout, a total timeout per notebook and a memory cap (``RLIMIT_AS``) bound every run.
See the README's "Grading" section for the threat model.

Public API: :func:`grade`, :func:`grade_notebook`, :func:`find_submissions`, :class:`Options`,
the writers :func:`gradescope_results`, :func:`otter_results`, :func:`write_gradebook`,
:func:`feedback_markdown`, and :func:`write_outputs`.
"""

from __future__ import annotations

import ast
import contextlib
import csv
import html
import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

import nbformat

import tutor
from tutor import catalog
from tutor import points as _points
from tutor.build import find_root, make_learner_notebook, read_notebook

MIME = "application/vnd.tutor.grade+json"
MAX_NOTEBOOK_BYTES = 64 * 1024 * 1024

# What a submission's name looks like: 01_dot_product_attention.ipynb, alice-03_masking (1).ipynb ...
NUMBER = re.compile(r"(?<!\d)(\d{1,2})_[A-Za-z]")


@dataclass
class Options:
    cell_timeout: float = 60.0  # seconds per cell (learner cell or check)
    total_timeout: float = 300.0  # seconds per notebook, all attempts together
    memory_mb: int = 4096  # RLIMIT_AS of the kernel (address space, MiB); 0 = no cap
    workers: int = 1
    points: dict = field(default_factory=dict)  # overrides: exercise name -> points
    solutions_dir: pathlib.Path | None = None
    kernel_name: str = "python3"
    max_attempts: int = 8


@dataclass
class ExerciseGrade:
    name: str
    notebook: int
    max_points: float
    status: str  # "passed", "failed", "not done", "missing" or "error"
    summary: str
    details: list[str] = field(default_factory=list)

    @property
    def points(self) -> float:
        return self.max_points if self.status == "passed" else 0

    @property
    def icon(self) -> str:
        return {"passed": "✅", "not done": "⏳"}.get(self.status, "❌")

    def text(self) -> str:
        return "\n".join([f"{self.icon} {self.name}: {self.summary}"] + [f"   {d}" for d in self.details])


@dataclass
class NotebookGrade:
    number: int
    slug: str
    path: str
    exercises: list[ExerciseGrade] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what happened to the notebook as a whole
    seconds: float = 0.0
    attempts: int = 0

    @property
    def score(self) -> float:
        return sum(e.points for e in self.exercises)

    @property
    def max_score(self) -> float:
        return sum(e.max_points for e in self.exercises)


@dataclass
class StudentGrade:
    student: str
    source: str
    notebooks: list[NotebookGrade] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(n.score for n in self.notebooks)

    @property
    def max_score(self) -> float:
        return sum(n.max_score for n in self.notebooks)

    @property
    def exercises(self) -> list[ExerciseGrade]:
        return [e for n in self.notebooks for e in n.exercises]


# --------------------------------------------------------------------------------------
# Finding submissions


def match_notebook(path) -> catalog.Notebook | None:
    """The catalog notebook a file is a submission of: by name (``03_masking``), else by number."""
    stem = pathlib.Path(path).stem
    for nb in catalog.NOTEBOOKS:
        if nb.slug in stem:
            return nb
    m = NUMBER.search(stem)
    if m:
        return next((nb for nb in catalog.NOTEBOOKS if nb.number == int(m.group(1))), None)
    return None


def _safe_extract(archive: pathlib.Path, target: pathlib.Path) -> None:
    with zipfile.ZipFile(archive) as z:
        for member in z.infolist():
            name = pathlib.PurePosixPath(member.filename)
            if name.is_absolute() or ".." in name.parts or member.is_dir():
                continue
            if not name.name.endswith(".ipynb") or name.name.startswith(".") or "__MACOSX" in name.parts:
                continue
            if member.file_size > MAX_NOTEBOOK_BYTES:
                continue  # no notebook of this course is that big: a zip bomb, or data
            out = target / pathlib.Path(*name.parts)
            out.parent.mkdir(parents=True, exist_ok=True)
            with z.open(member) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, length=1 << 20)


def _notebooks_in(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in folder.rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts and not p.name.startswith("."))


def _student_from_file(path: pathlib.Path, nb: catalog.Notebook | None) -> str:
    stem = path.stem
    if nb is not None:
        stem = stem.replace(nb.slug, "")
    stem = re.sub(r"\(\d+\)", "", stem).strip(" _-.")
    return stem or path.resolve().parent.name


def _numbers_repeat(files) -> bool:
    numbers = [nb.number for nb in map(match_notebook, files) if nb is not None]
    return len(numbers) != len(set(numbers))


def _split(name: str, base: pathlib.Path, files: list[pathlib.Path]) -> list[tuple[str, list[pathlib.Path]]]:
    """One student, or several: a folder (or zip) with a subfolder per student, or with loose
    notebooks of which two are the same notebook (``alice_03_masking.ipynb``, ``bob_03_masking.ipynb``)."""
    groups: dict = {}
    for f in files:
        parts = f.relative_to(base).parts
        groups.setdefault(parts[0] if len(parts) > 1 else None, []).append(f)
    if len(groups) <= 1 and not _numbers_repeat(files):
        return [(name, files)]
    out = []
    for key, group in groups.items():
        if key is not None:
            out.append((key, group))
        elif _numbers_repeat(group):
            by_student: dict[str, list] = {}
            for f in group:
                by_student.setdefault(_student_from_file(f, match_notebook(f)), []).append(f)
            out += list(by_student.items())
        else:
            out.append((name, group))
    return out


def find_submissions(paths, workdir: pathlib.Path) -> list[tuple[str, str, list[pathlib.Path], list[str]]]:
    """``[(student, source, [notebook paths], [notes])]`` for the SUBMISSION arguments.

    A notebook file is one student (named after the file without the notebook's name, else its
    folder). A folder or a zip is one student named after it, holding any number of notebooks,
    unless it holds a subfolder per student or several copies of one notebook (one per student).
    """
    out = []
    for i, raw in enumerate(paths):
        path = pathlib.Path(raw)
        notes = []
        if path.is_dir():
            for student, files in _split(path.resolve().name, path, _notebooks_in(path)):
                out.append((student, str(raw), files, notes))
            continue
        if path.suffix.lower() == ".zip" and path.is_file():
            target = workdir / f"zip-{i}"
            try:
                _safe_extract(path, target)
            except (zipfile.BadZipFile, OSError) as error:
                notes.append(f"{path.name} cannot be opened as a zip file: {error}")
            found = _split(path.stem, target, _notebooks_in(target)) if target.exists() else []
            for student, files in found or [(path.stem, [])]:
                out.append((student, str(raw), files, notes))
            continue
        if path.suffix.lower() == ".ipynb" and path.is_file():
            files, student = [path], _student_from_file(path, match_notebook(path))
        else:
            files, student = [], path.stem or str(path)
            notes.append(f"{raw}: not a notebook, a folder or a zip file")
        out.append((student, str(raw), files, notes))
    # two submissions with one name (e.g. two files in one folder): keep both, numbered
    seen: dict[str, int] = {}
    result = []
    for student, source, files, notes in out:
        seen[student] = seen.get(student, 0) + 1
        result.append((student if seen[student] == 1 else f"{student}-{seen[student]}", source, files, notes))
    return result


# --------------------------------------------------------------------------------------
# The course's side: templates and a pristine copy of the tutor package


@dataclass
class Template:
    number: int
    code: list[str]  # the course's code cells (from the learner notebook built from the solution)
    ids: list  # their cell ids
    context: list[str]  # what of each course cell runs: imports, definitions, yours_or_reference(...)
    exercise_at: dict[int, str]  # index into code -> exercise name, for the exercise cells
    points: dict[str, float]


_TEMPLATES: dict = {}
_TEMPLATE_LOCK = threading.Lock()


def _normalise(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def _is_cheap_value(node) -> bool:
    """A value a course cell may bind for later cells: a constant, a name, ``ref.X``, or
    ``yours_or_reference(...)`` (and tuples of these)."""
    if isinstance(node, ast.Tuple):
        return bool(node.elts) and all(_is_cheap_value(e) for e in node.elts)
    if isinstance(node, (ast.Constant, ast.Name)):
        return True
    if isinstance(node, ast.Attribute):
        while isinstance(node, ast.Attribute):
            node = node.value
        return isinstance(node, ast.Name)
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return getattr(func, "attr", None) == "yours_or_reference" or getattr(func, "id", None) == "yours_or_reference"


def context_source(source: str) -> str:
    """What of a course cell the grader runs: its imports, functions and classes, and the names it
    binds to constants, names, ``ref.X`` or ``yours_or_reference(...)``; not its prints, plots,
    widgets or training loops."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    def names_only(targets):
        return all(isinstance(t, ast.Name) or (isinstance(t, ast.Tuple) and names_only(t.elts)) for t in targets)

    keep = [node for node in tree.body
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            or (isinstance(node, ast.Assign) and names_only(node.targets) and _is_cheap_value(node.value))]
    # each statement on its own: one that fails (a name the learner never defined) skips only itself
    guarded = [ast.Try(body=[node], handlers=[ast.ExceptHandler(type=ast.Name("Exception"), name=None,
                                                                 body=[ast.Pass()])], orelse=[], finalbody=[])
               for node in keep]
    return "\n".join(ast.unparse(ast.fix_missing_locations(node)) for node in guarded)


def load_template(number: int, options: Options) -> Template:
    solutions = pathlib.Path(options.solutions_dir or find_root() / "solutions")
    key = (number, str(solutions), tuple(sorted(options.points.items())))
    with _TEMPLATE_LOCK:
        if key in _TEMPLATES:
            return _TEMPLATES[key]
        nb_entry = catalog.notebook(number)
        solution = read_notebook(solutions / nb_entry.filename)
        learner = make_learner_notebook(solution, f"solutions/{nb_entry.filename}")
        where = {i: name for name, i in _points.exercise_cells(solution, number).items()}
        code_at = [i for i, c in enumerate(learner.cells) if c.cell_type == "code"]
        code = [learner.cells[i].source for i in code_at]
        template = Template(
            number=number,
            code=code,
            ids=[learner.cells[i].get("id") for i in code_at],
            context=[code[0] if k == 0 else context_source(src) for k, src in enumerate(code)],
            exercise_at={k: where[i] for k, i in enumerate(code_at) if i in where},
            points=_points.points_for(number, options.points, solutions),
        )
        _TEMPLATES[key] = template
        return template


def package_snapshot() -> dict[str, bytes]:
    """The ``tutor`` package's source files, read once: every kernel gets a fresh copy of these."""
    root = pathlib.Path(tutor.__file__).resolve().parent
    return {str(p.relative_to(root.parent)): p.read_bytes()
            for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts}


def _write_package(snapshot: dict[str, bytes], directory: pathlib.Path) -> pathlib.Path:
    for rel, data in snapshot.items():
        out = directory / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
    return directory


# --------------------------------------------------------------------------------------
# Planning what runs


@dataclass
class PlannedCell:
    role: str  # "grader", "setup", "course", "learner", "grader-load" or "check"
    source: str
    label: str  # for messages: "cell 7 (your `softmax`)"
    exercises: tuple = ()  # the exercises this learner cell defines, or the check's exercise
    nonce: str | None = None


def plan_cells(submission, template: Template) -> list[PlannedCell]:
    """What runs, in order: the course's setup cell, then for each of the course's code cells its
    context (see :func:`context_source`) or, for an exercise cell, the learner's version, each
    followed by the cells the learner added after it. The learner's copies of the course's cells
    and every check cell are left out."""
    learner_names: dict[str, list[str]] = {}
    for e in catalog.exercises(template.number):
        learner_names.setdefault(e.learner_name, []).append(e.name)
    by_id = {cid: k for k, cid in enumerate(template.ids) if cid}
    by_source = {}
    for k, src in enumerate(template.code):
        by_source.setdefault(_normalise(src), k)

    replaced: dict[int, list[PlannedCell]] = {}  # exercise cell k -> the learner's version(s)
    after: dict[int, list[PlannedCell]] = {}  # course cell k -> learner cells that follow it
    anchor = 0
    for index, cell in enumerate(submission.cells):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        if not source.strip():
            continue
        k = by_id.get(cell.get("id"))
        if k is None:
            k = by_source.get(_normalise(source))
        defined = tuple(sorted({ex for n in _points.top_level_definitions(source) if n in learner_names
                                for ex in learner_names[n]}))
        if k is not None and k in template.exercise_at and not defined:
            defined = tuple(learner_names[catalog.BY_NAME[template.exercise_at[k]].learner_name])
        if k is not None and not defined:
            anchor = k  # one of the course's cells: its own copy (context) runs in its place
            continue
        if not defined and re.search(r"^\s*[%!]", source, re.M) and not _parses(source):
            continue  # shell escapes and magics in cells of the learner's own (pip install ...) are not run
        if defined:
            what = f"`{catalog.BY_NAME[defined[0]].learner_name}`"
            planned = PlannedCell("learner", source, f"cell {index + 1} (your {what})", defined)
        else:
            planned = PlannedCell("learner", source, f"cell {index + 1} (a cell you added)")
        cells = [planned]
        if defined:
            names = sorted({catalog.BY_NAME[d].learner_name for d in defined})
            cells.append(PlannedCell("capture", f"__tutor_grade_capture({names!r}, globals())",
                                     "the grader's record of your definitions"))
        if k is not None and k in template.exercise_at:
            anchor = k
            replaced.setdefault(k, []).extend(cells)
        else:
            after.setdefault(anchor, []).extend(cells)

    out = []
    for k, src in enumerate(template.code):
        if k == 0:
            out.append(PlannedCell("setup", src, "the course's setup cell"))
        elif k in template.exercise_at:
            out += replaced.get(k, [])
        elif template.context[k]:
            out.append(PlannedCell("course", template.context[k], f"the course's cell {k + 1}"))
        out += after.get(k, [])
    return out


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
        return True
    except SyntaxError:
        return False


PREAMBLE = '''\
# tutor grade: preamble (the grader's cell)
import builtins, os, sys
try:
    import resource
    if {memory} > 0:
        resource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))
except Exception as error:
    print("tutor grade: no memory cap:", error)
import torch, torch.nn, torch.nn.functional
def __tutor_grade_snapshot():
    targets = {{"torch": torch, "torch.Tensor": torch.Tensor, "torch.nn.functional": torch.nn.functional,
               "torch.nn.Module": torch.nn.Module, "builtins": builtins}}
    if hasattr(torch._C, "TensorBase"):
        targets["torch._C.TensorBase"] = torch._C.TensorBase
    saved = {{name: (obj, dict(vars(obj))) for name, obj in targets.items()}}
    meta_path, path_hooks = list(sys.meta_path), list(sys.path_hooks)
    def restore():
        changed = []
        for name, (obj, attrs) in saved.items():
            for key, value in attrs.items():
                if name == "builtins" and key in ("input", "raw_input", "getpass", "_", "__", "___"):
                    continue  # ipykernel sets these for every cell
                try:
                    now = vars(obj).get(key, None)
                    if now is not value:
                        setattr(obj, key, value)
                        changed.append(f"{{name}}.{{key}}")
                except Exception:
                    pass
            for key in [k for k in list(vars(obj)) if k not in attrs]:
                if type(vars(obj)[key]).__name__ == "module" or (name == "builtins" and key in ("_", "__", "___")):
                    continue  # a submodule imported since (torch.fx ...)
                try:
                    delattr(obj, key)
                    changed.append(f"{{name}}.{{key}}")
                except Exception:
                    pass
        sys.meta_path[:], sys.path_hooks[:] = meta_path, path_hooks
        return changed
    return restore
__tutor_grade_restore = __tutor_grade_snapshot()
del __tutor_grade_snapshot
def __tutor_grade_make_capture():
    captured = {{}}
    def capture(names=None, namespace=None):
        """Keep the learner's definitions as their exercise cell left them (later cells may rebind the names)."""
        if names is None:
            return dict(captured)
        for name in names:
            if name in namespace:
                captured[name] = namespace[name]
    return capture
__tutor_grade_capture = __tutor_grade_make_capture()
del __tutor_grade_make_capture
'''

RESET = '''\
# tutor grade: forget the learner's hooks (the grader's cell)
import IPython as __tutor_IPython
__tutor_ip = __tutor_IPython.get_ipython()
for __tutor_event in list(__tutor_ip.events.callbacks):
    __tutor_ip.events.callbacks[__tutor_event] = []
__tutor_ip.input_transformers_post[:] = []
__tutor_ip.ast_transformers[:] = []
'''

LOAD = '''\
# tutor grade: load a pristine copy of the checks (the grader's cell)
def __tutor_grade_load(nonce, package, captured):
    import importlib, json, os, sys
    from IPython.display import publish_display_data
    changed = __tutor_grade_restore()
    os.environ.update({env})
    for name in [m for m in list(sys.modules) if m == "tutor" or m.startswith("tutor.")]:
        del sys.modules[name]
    sys.path.insert(0, package)
    importlib.invalidate_caches()
    import tutor.checks
    foreign = sorted(name for name, module in list(sys.modules.items())
                     if (name == "tutor" or name.startswith("tutor."))
                     and not os.path.realpath(getattr(module, "__file__", "") or "").startswith(os.path.realpath(package)))
    checks = tutor.checks
    def emit(payload, _publish=publish_display_data, _mime="{mime}"):
        _publish({{_mime: payload}})
    def grade(nonce, name, learner_name):
        if learner_name not in captured:
            emit({{"nonce": nonce, "exercise": name, "status": "missing",
                  "summary": f"`{{learner_name}}` is not defined", "details": []}})
            return
        obj = captured[learner_name]
        if str(getattr(obj, "__module__", "") or "").split(".")[0] == "tutor":
            emit({{"nonce": nonce, "exercise": name, "status": "failed",
                  "summary": f"`{{learner_name}}` is the course's model answer ({{obj.__module__}}), not your code",
                  "details": []}})
            return
        result = getattr(checks, name)(obj)
        if type(result) is not checks.CheckResult:
            emit({{"nonce": nonce, "exercise": name, "status": "error", "summary": "the check was tampered with", "details": []}})
            return
        emit({{"nonce": nonce, "exercise": name, "status": str(result.status), "summary": str(result.summary),
              "details": [str(d) for d in result.details]}})
    emit({{"nonce": nonce, "load": True, "changed": changed, "foreign": foreign}})
    return grade
__tutor_grade = __tutor_grade_load({nonce!r}, {package!r}, __tutor_grade_capture())
del __tutor_grade_load
'''

CHECK = '''\
# tutor grade: check {name} (the grader's cell)
__tutor_grade({nonce!r}, {name!r}, {learner_name!r})
'''


def kernel_env(package_dir: pathlib.Path, workdir: pathlib.Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JPY_", "TUTOR_", "PYTHON"))}
    env.update(
        PYTHONPATH=str(package_dir),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONHASHSEED="0",
        MPLBACKEND="Agg",
        TUTOR_STRICT="0",
        TUTOR_PROGRESS="0",
        TUTOR_PROGRESS_FILE=str(workdir / "progress.json"),
        TUTOR_OFFLINE="1",
        TUTOR_QUICK="1",
        TUTOR_DEVICE="cpu",
        CUDA_VISIBLE_DEVICES="",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
    )
    for key in ("TUTOR_NAMES",):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


# --------------------------------------------------------------------------------------
# Running one attempt in a fresh kernel


@dataclass
class Attempt:
    results: dict = field(default_factory=dict)  # exercise -> payload
    cell_errors: dict = field(default_factory=dict)  # label -> "NameError: ..."
    fatal: tuple | None = None  # (planned cell index, reason)
    out_of_time: bool = False
    load: dict | None = None


def _error_text(cell) -> str | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            value = str(output.get("evalue", ""))[:300]
            return f"{output.get('ename', 'Error')}: {value}" if value else output.get("ename", "Error")
    return None


def _payload(cell, nonce: str) -> dict | None:
    found = None
    for output in cell.get("outputs", []):
        data = output.get("data", {}) if output.get("output_type") in ("display_data", "execute_result") else {}
        payload = data.get(MIME)
        if isinstance(payload, str):
            with contextlib.suppress(ValueError):
                payload = json.loads(payload)
        if isinstance(payload, dict) and payload.get("nonce") == nonce:
            if found is not None:
                return None  # two answers to one question: forged
            found = payload
    return found


def _death_reason(client) -> str:
    code = None
    with contextlib.suppress(Exception):
        process = client.km.provisioner.process
        code = process.wait(timeout=2)
    if code is None:
        return "the Python process running your notebook died"
    if code < 0:
        name = {signal.SIGSEGV: "a segmentation fault (SIGSEGV)", signal.SIGKILL: "SIGKILL (usually: out of memory)",
                signal.SIGABRT: "an abort (SIGABRT)"}.get(-code, f"signal {-code}")
        return f"the Python process running your notebook was killed by {name}"
    return f"the Python process running your notebook exited with code {code} (os._exit or sys.exit in a thread?)"


def run_attempt(planned: list[PlannedCell], snapshot: dict, options: Options, deadline: float) -> Attempt:
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    attempt = Attempt()
    with tempfile.TemporaryDirectory(prefix="tutor-grade-") as tmp:
        tmp = pathlib.Path(tmp)
        workdir = tmp / "work"
        workdir.mkdir()
        setup_pkg = _write_package(snapshot, tmp / f"setup-{secrets.token_hex(4)}")
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(p.source) for p in planned]
        client = NotebookClient(nb, timeout=int(options.cell_timeout), kernel_name=options.kernel_name,
                                allow_errors=True, record_timing=False, startup_timeout=120,
                                resources={"metadata": {"path": str(workdir)}})
        env = kernel_env(setup_pkg, workdir)
        try:
            with client.setup_kernel(env=env, cwd=str(workdir), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL):
                for index, (cell, plan) in enumerate(zip(nb.cells, planned)):
                    remaining = deadline - time.monotonic()
                    if remaining <= 1:
                        attempt.out_of_time = True
                        attempt.fatal = (index, "the notebook ran out of its total time limit "
                                                f"({options.total_timeout:.0f} s)")
                        break
                    if plan.role == "grader-load":
                        package = _write_package(snapshot, tmp / f"checks-{secrets.token_hex(8)}")
                        cell.source = plan.source.replace("@PACKAGE@", str(package))
                    # the grader's and the course's own cells (imports) get at least 2 minutes
                    limit = options.cell_timeout if plan.role in ("learner", "check") else max(options.cell_timeout, 120)
                    client.timeout = max(1, int(min(limit, remaining)))
                    try:
                        client.execute_cell(cell, index)
                    except CellTimeoutError:
                        if client.timeout < limit:
                            attempt.out_of_time = True
                            attempt.fatal = (index, "the notebook ran out of its total time limit "
                                                    f"({options.total_timeout:.0f} s)")
                        else:
                            attempt.fatal = (index, f"it ran for more than {options.cell_timeout:.0f} s and was stopped")
                        break
                    except DeadKernelError:
                        attempt.fatal = (index, _death_reason(client))
                        break
                    error = _error_text(cell)
                    if plan.role == "learner":
                        if error:
                            attempt.cell_errors[index] = error
                        cell.outputs = []  # keep memory small: only the error matters
                    elif plan.role == "check":
                        payload = _payload(cell, plan.nonce)
                        if payload is not None:
                            attempt.results[plan.exercises[0]] = payload
                        else:
                            attempt.results[plan.exercises[0]] = {
                                "status": "error", "summary": "the check gave no result",
                                "details": [error] if error else []}
                    elif plan.role == "grader-load":
                        attempt.load = _payload(cell, plan.nonce)
                        if attempt.load is None:
                            attempt.fatal = (index, "the checks could not be loaded after your code ran"
                                                    + (f" ({error})" if error else ""))
                            break
                    elif plan.role in ("course", "capture"):
                        cell.outputs = []
                    elif error and plan.role in ("grader", "setup"):
                        attempt.fatal = (index, f"the grader's setup failed: {error}")
                        break
        except DeadKernelError:
            attempt.fatal = (None, "the kernel died")
        except Exception as error:  # noqa: BLE001 - a kernel that does not start, a broken client
            if attempt.fatal is None:
                attempt.fatal = (None, f"the kernel could not run the notebook: {type(error).__name__}: {error}")
    return attempt


# --------------------------------------------------------------------------------------
# Grading one notebook


def _uses_model_answer(name: str, cells) -> str | None:
    """``tutor.reference.<answer>`` when a cell defining exercise ``name`` uses the exercise's model answer."""
    answer = catalog.BY_NAME[name].reference
    pattern = re.compile(rf"\b(?:ref|reference|tutor\.reference)\.{answer}\b"
                         rf"|from\s+tutor(?:\.reference)?\s+import\s[^\n]*\b{answer}\b")
    for cell in cells:
        if cell.role == "learner" and name in cell.exercises and pattern.search(cell.source):
            return f"tutor.reference.{answer}"
    return None


def _grader_cells(template: Template, options: Options) -> tuple[list[PlannedCell], list[PlannedCell]]:
    memory = int(options.memory_mb) * 1024 * 1024
    head = [PlannedCell("grader", PREAMBLE.format(memory=memory), "the grader's preamble")]
    env = {"TUTOR_STRICT": "0", "TUTOR_PROGRESS": "0"}
    nonce = secrets.token_hex(16)
    load = LOAD.format(env=env, mime=MIME, nonce=nonce, package="@PACKAGE@")
    tail = [PlannedCell("grader", RESET, "the grader's reset"),
            PlannedCell("grader-load", load, "loading the checks", nonce=nonce)]
    return head, tail


def grade_notebook(path, number: int, options: Options | None = None, snapshot=None) -> NotebookGrade:
    """Grade one learner notebook (``path``) as a submission of catalog notebook ``number``."""
    options = options or Options()
    snapshot = snapshot or package_snapshot()
    start = time.monotonic()
    deadline = start + options.total_timeout
    entry = catalog.notebook(number)
    template = load_template(number, options)
    grade = NotebookGrade(number, entry.slug, str(path))
    exercises = catalog.exercises(number)

    def finish(results: dict[str, dict], default: tuple[str, str]) -> NotebookGrade:
        for e in exercises:
            payload = results.get(e.name) or {"status": "error", "summary": default[0],
                                              "details": [default[1]] if default[1] else []}
            grade.exercises.append(ExerciseGrade(e.name, number, template.points[e.name], payload["status"],
                                                 payload["summary"], list(payload.get("details", []))))
        grade.seconds = time.monotonic() - start
        return grade

    try:
        submission = nbformat.reads(pathlib.Path(path).read_text(encoding="utf-8"), as_version=4)
    except Exception as error:  # noqa: BLE001 - not JSON, not a notebook
        grade.notes.append(f"the notebook cannot be read: {type(error).__name__}: {str(error)[:200]}")
        return finish({}, ("not graded: the notebook file cannot be read", grade.notes[-1]))

    learner = plan_cells(submission, template)  # (with the course's setup and context cells)
    head, tail = _grader_cells(template, options)
    results: dict[str, dict] = {}
    excluded: dict[int, str] = {}  # index into `learner` -> why it was left out
    for attempt_number in range(1, options.max_attempts + 1):
        remaining = [e for e in exercises if e.name not in results]
        if not remaining:
            break
        grade.attempts = attempt_number
        checks = []
        for e in remaining:
            nonce = secrets.token_hex(16)
            checks.append(PlannedCell("check", CHECK.format(name=e.name, nonce=nonce, learner_name=e.learner_name),
                                      f"the check of {e.name}", (e.name,), nonce))
        kept = [i for i in range(len(learner)) if i not in excluded]
        planned = head + [learner[i] for i in kept] + tail + checks
        attempt = run_attempt(planned, snapshot, options, deadline)

        learner_at = {len(head) + k: i for k, i in enumerate(kept)}  # planned index -> learner index
        # results first: the checks that ran are final
        for name, payload in attempt.results.items():
            details = list(payload.get("details", []))
            if payload["status"] != "passed":
                for planned_index, error in attempt.cell_errors.items():
                    cell = learner[learner_at[planned_index]]
                    if name in cell.exercises:
                        details.append(f"{cell.label} raised {error}")
                for i, why in excluded.items():
                    if name in learner[i].exercises:
                        details.append(f"{learner[i].label} was not run: {why}")
            copied = _uses_model_answer(name, [learner[i] for i in kept])
            if payload["status"] == "passed" and copied:
                payload = {"status": "failed", "summary": f"your code calls the model answer {copied} instead of "
                                                          "computing the result itself"}
                details = [f"the check passed, but only because {copied} did the work"]
            results[name] = {**payload, "details": details}
        if attempt.load:
            if attempt.load.get("changed"):
                note = ("your code changed " + ", ".join(attempt.load["changed"][:8])
                        + "; the grader put the originals back before checking")
                if note not in grade.notes:
                    grade.notes.append(note)
            if attempt.load.get("foreign"):
                grade.notes.append("the checks did not load cleanly: " + ", ".join(attempt.load["foreign"][:5]))
                return finish(results, ("not graded: the grader could not load a pristine copy of the checks", ""))
        if attempt.fatal is None:
            continue
        index, why = attempt.fatal
        if attempt.out_of_time:
            grade.notes.append(why)
            return finish(results, ("not graded: " + why, ""))
        if index is not None and index in learner_at and learner[learner_at[index]].role != "setup":
            learner_index = learner_at[index]
            excluded[learner_index] = why
            cell = learner[learner_index]
            grade.notes.append(f"{cell.label} was left out: {why}")
            continue  # run again without it
        if index is not None and planned[index].role == "check":
            name = planned[index].exercises[0]
            results[name] = {"status": "failed", "summary": f"checking your code failed: {why}",
                             "details": ["does your code loop forever, crash Python or use too much memory?"]}
            continue
        if index is not None:
            why = f"{planned[index].label}: {why}"
        grade.notes.append(why)
        return finish(results, ("not graded: " + why, ""))
    else:
        if any(e.name not in results for e in exercises):
            grade.notes.append(f"gave up after {options.max_attempts} attempts")
    return finish(results, ("not graded: too many faults in this notebook", ""))


# --------------------------------------------------------------------------------------
# Grading many


def grade(paths, options: Options | None = None, assignment=None, progress: bool = True) -> list[StudentGrade]:
    """Grade every SUBMISSION in ``paths``; returns one :class:`StudentGrade` per submission.

    ``assignment`` lists the notebook numbers every student should hand in (a missing one scores
    0); by default it is every notebook found in any submission.
    """
    options = options or Options()
    snapshot = package_snapshot()
    with tempfile.TemporaryDirectory(prefix="tutor-grade-in-") as workdir:
        found = find_submissions(paths, pathlib.Path(workdir))
        students, jobs = [], []
        for student, source, files, notes in found:
            s = StudentGrade(student, source, notes=list(notes))
            students.append(s)
            for f in files:
                nb = match_notebook(f)
                if nb is None:
                    s.notes.append(f"{f.name}: not a notebook of this course (expected a name like 03_masking.ipynb)")
                elif any(j[1] == nb.number for j in jobs if j[0] is s):
                    s.notes.append(f"{f.name}: a second copy of notebook {nb.number:02d}; only the first was graded")
                else:
                    jobs.append((s, nb.number, f))
        wanted = sorted(set(assignment) if assignment else {number for _, number, _ in jobs})
        for number in wanted:
            load_template(number, options)  # once, before the threads start

        bar = None
        if progress:
            from tqdm.auto import tqdm
            bar = tqdm(total=len(jobs), desc="grading", unit="notebook", file=sys.stderr)
        done: dict[tuple, NotebookGrade] = {}
        with ThreadPoolExecutor(max_workers=max(1, options.workers)) as pool:
            futures = {pool.submit(_grade_job, f, number, options, snapshot): (s, number) for s, number, f in jobs}
            for future in as_completed(futures):
                s, number = futures[future]
                done[(id(s), number)] = future.result()
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix_str(f"{s.student} {number:02d}: {done[(id(s), number)].score:g}")
        if bar is not None:
            bar.close()
        for s in students:
            for number in wanted:
                if (id(s), number) in done:
                    s.notebooks.append(done[(id(s), number)])
                else:
                    s.notebooks.append(_missing(number, options))
            extra = sorted(n for (sid, n) in done if sid == id(s) and n not in wanted)
            for number in extra:
                s.notebooks.append(done[(id(s), number)])
            s.notebooks.sort(key=lambda nb: nb.number)
    return students


def _grade_job(path, number, options, snapshot) -> NotebookGrade:
    try:
        return grade_notebook(path, number, options, snapshot)
    except Exception as error:  # noqa: BLE001 - a bug here must not stop the batch
        template = load_template(number, options)
        g = NotebookGrade(number, catalog.notebook(number).slug, str(path))
        g.notes.append(f"the grader failed on this notebook: {type(error).__name__}: {error}")
        g.exercises = [ExerciseGrade(e.name, number, template.points[e.name], "error",
                                     "not graded: the grader failed", []) for e in catalog.exercises(number)]
        return g


def _missing(number: int, options: Options) -> NotebookGrade:
    template = load_template(number, options)
    entry = catalog.notebook(number)
    g = NotebookGrade(number, entry.slug, "")
    g.notes.append(f"{entry.filename} was not submitted")
    g.exercises = [ExerciseGrade(e.name, number, template.points[e.name], "missing",
                                 f"{entry.filename} was not submitted", []) for e in catalog.exercises(number)]
    return g


# --------------------------------------------------------------------------------------
# Writing results


def _score(x: float):
    return int(x) if float(x).is_integer() else round(float(x), 4)


def gradescope_results(student: StudentGrade) -> dict:
    """Gradescope's autograder results.json: score, and one test per exercise."""
    tests = []
    for nb in student.notebooks:
        for e in nb.exercises:
            tests.append({
                "name": f"{nb.number:02d} {e.name}",
                "score": _score(e.points),
                "max_score": _score(e.max_points),
                "status": "passed" if e.status == "passed" else "failed",
                "output": e.text(),
                "visibility": "visible",
            })
    notes = [f"{nb.slug}: {note}" for nb in student.notebooks for note in nb.notes] + student.notes
    out = {
        "score": _score(student.score),
        "output": (f"{_score(student.score)} / {_score(student.max_score)} points"
                   + ("\n" + "\n".join(notes) if notes else "")),
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }
    return out


def otter_results(student: StudentGrade) -> dict:
    """Otter-grader's results: one entry per question (exercise), like ``GradingResults.to_dict()``."""
    out = {}
    for nb in student.notebooks:
        for e in nb.exercises:
            case = {"name": f"{e.name} check", "body": f"checks.{e.name}({catalog.BY_NAME[e.name].learner_name})",
                    "hidden": False, "points": _score(e.max_points),
                    "success_message": None, "failure_message": None}
            out[e.name] = {
                "name": e.name,
                "path": nb.slug + ".ipynb",
                "score": _score(e.points),
                "possible": _score(e.max_points),
                "passed_all": e.status == "passed",
                "all_or_nothing": True,
                "test_cases": [case],
                "test_case_results": [{"test_case": case, "message": e.text(), "passed": e.status == "passed"}],
            }
    return out


def gradebook_rows(students: list[StudentGrade]) -> tuple[list[str], list[list]]:
    columns: list[str] = []
    for s in students:
        for e in s.exercises:
            key = f"{e.notebook:02d} {e.name}"
            if key not in columns:
                columns.append(key)
    header = ["student", "score", "max_score"] + columns + ["notes"]
    rows = []
    for s in students:
        by = {f"{e.notebook:02d} {e.name}": _score(e.points) for e in s.exercises}
        notes = "; ".join([f"{nb.slug}: {n}" for nb in s.notebooks for n in nb.notes] + s.notes)
        rows.append([s.student, _score(s.score), _score(s.max_score)] + [by.get(c, "") for c in columns] + [notes])
    return header, rows


def write_gradebook(students: list[StudentGrade], path) -> None:
    header, rows = gradebook_rows(students)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def feedback_markdown(student: StudentGrade) -> str:
    """A report for the learner: the score, then every exercise with the check's message."""
    lines = [f"# Feedback for {student.student}", "",
             f"**Score: {_score(student.score)} / {_score(student.max_score)} points**", ""]
    lines += [f"- {note}" for note in student.notes]
    for nb in student.notebooks:
        entry = catalog.notebook(nb.number)
        lines += ["", f"## {nb.number:02d} — {entry.title}: {_score(nb.score)} / {_score(nb.max_score)}", ""]
        lines += [f"> {note}" for note in nb.notes]
        if nb.notes:
            lines.append("")
        lines += ["| exercise | points | result |", "|---|---|---|"]
        for e in nb.exercises:
            summary = e.summary.replace("|", "\\|")
            lines.append(f"| `{e.name}` | {_score(e.points)} / {_score(e.max_points)} | {e.icon} {summary} |")
        for e in nb.exercises:
            if e.status != "passed":
                lines += ["", f"### {e.icon} `{e.name}`", "", "```", e.text(), "```"]
    return "\n".join(lines) + "\n"


def feedback_html(student: StudentGrade) -> str:
    body = []
    for nb in student.notebooks:
        entry = catalog.notebook(nb.number)
        body.append(f"<h2>{nb.number:02d} — {html.escape(entry.title)}: {_score(nb.score)} / {_score(nb.max_score)}</h2>")
        body += [f"<p><em>{html.escape(n)}</em></p>" for n in nb.notes]
        body.append("<table><tr><th>exercise</th><th>points</th><th>result</th></tr>")
        for e in nb.exercises:
            body.append(f"<tr><td><code>{html.escape(e.name)}</code></td><td>{_score(e.points)} / "
                        f"{_score(e.max_points)}</td><td><pre>{html.escape(e.text())}</pre></td></tr>")
        body.append("</table>")
    notes = "".join(f"<p><em>{html.escape(n)}</em></p>" for n in student.notes)
    return (f"<!doctype html><meta charset='utf-8'><title>Feedback: {html.escape(student.student)}</title>"
            "<style>body{font-family:sans-serif;max-width:60em;margin:auto}td,th{border:1px solid #ccc;"
            "padding:4px;vertical-align:top;text-align:left}table{border-collapse:collapse}pre{margin:0;"
            "white-space:pre-wrap}</style>"
            f"<h1>Feedback for {html.escape(student.student)}</h1>"
            f"<p><b>Score: {_score(student.score)} / {_score(student.max_score)} points</b></p>{notes}{''.join(body)}")


def _safe_name(name: str) -> str:
    return re.sub(r"[^\w.\-]+", "_", name).strip("._") or "student"


def write_outputs(students: list[StudentGrade], out, formats=("gradescope",)) -> list[pathlib.Path]:
    """Write results into ``out``: with one submission directly there (Gradescope's layout), else
    one folder per student; plus ``gradebook.csv`` for every batch. Returns the files written."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    single = len(students) == 1
    for s in students:
        folder = out if single else out / _safe_name(s.student)
        folder.mkdir(parents=True, exist_ok=True)
        if "gradescope" in formats:
            written.append(folder / "results.json")
            written[-1].write_text(json.dumps(gradescope_results(s), indent=2, ensure_ascii=False), encoding="utf-8")
        if "otter" in formats:
            written.append(folder / "otter_results.json")
            written[-1].write_text(json.dumps(otter_results(s), indent=2, ensure_ascii=False), encoding="utf-8")
        written.append(folder / "feedback.md")
        written[-1].write_text(feedback_markdown(s), encoding="utf-8")
        written.append(folder / "feedback.html")
        written[-1].write_text(feedback_html(s), encoding="utf-8")
    if "csv" in formats or not single:
        written.append(out / "gradebook.csv")
        write_gradebook(students, written[-1])
    return written


def summary_table(students: list[StudentGrade]) -> str:
    width = max([len(s.student) for s in students] + [7])
    lines = [f"{'student':<{width}}  score"]
    for s in students:
        lines.append(f"{s.student:<{width}}  {_score(s.score)} / {_score(s.max_score)}")
    return "\n".join(lines)


__all__ = ["Options", "ExerciseGrade", "NotebookGrade", "StudentGrade", "grade", "grade_notebook",
           "find_submissions", "match_notebook", "gradescope_results", "otter_results", "write_gradebook",
           "feedback_markdown", "feedback_html", "write_outputs"]

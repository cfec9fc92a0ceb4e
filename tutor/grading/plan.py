"""What the grader runs in the kernel, cell by cell: :func:`plan_cells` and the grader's own cells.

A :class:`Template` is the course's side of one notebook, read from its solution notebook: its code
cells (as the learner notebook has them), what of each course cell runs (:func:`context_source`:
imports, definitions, ``yours_or_reference(...)`` bindings; no plots, widgets or training) and which
cells are exercises, with their titles. :func:`plan_cells` lays a submission over it:

1. the preamble (:func:`grader_cells`), which runs ``tutor.grading.kernel``, sent as its source text: it takes
   the channel to the judge and starts the server that will answer it;
2. the course's setup cell, then in the notebook's order the learner's exercise cells (each followed by
   a cell that captures its definitions), the cells the learner added, and the context of the course's
   other cells; check cells, stored outputs and the learner's copies of course cells are left out.

No cell runs after them: the judge then checks each exercise on the kernel's objects (``tutor.grading.judge``).
"""

from __future__ import annotations

import ast
import pathlib
import re
import threading
from dataclasses import dataclass

from tutor.course import catalog, points
from tutor.course.build import find_root, make_learner_notebook, read_notebook
from tutor.grading import kernel
from tutor.grading.grades import Options
from tutor.grading.host import PREAMBLE_PATH

KERNEL_SOURCE = pathlib.Path(kernel.__file__).read_text(encoding="utf-8")
KERNEL_FILE = "tutor/grading/kernel.py (the grader's code)"


# --------------------------------------------------------------------------------------
# The course's side of a notebook


@dataclass
class Template:
    number: int
    code: list[str]  # the course's code cells (from the learner notebook built from the solution)
    ids: list  # their cell ids
    context: list[str]  # what of each course cell runs: imports, definitions, yours_or_reference(...)
    exercise_at: dict[int, str]  # index into code -> exercise name, for the exercise cells
    points: dict[str, float]
    titles: dict[str, str]  # exercise name -> its header: "Exercise 2 — `scaled_dot_product_attention` with a mask"
    labels: dict[str, str]  # exercise name -> its gradebook column: "03.2 scaled_dot_product_attention"


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
    """The course's side of notebook ``number``, from its solution notebook; read once, then cached."""
    solutions = pathlib.Path(options.solutions_dir or find_root() / "solutions")
    key = (number, str(solutions), tuple(sorted(options.points.items())))
    with _TEMPLATE_LOCK:
        if key in _TEMPLATES:
            return _TEMPLATES[key]
        nb_entry = catalog.notebook(number)
        solution = read_notebook(solutions / nb_entry.filename)
        learner = make_learner_notebook(solution, f"solutions/{nb_entry.filename}")
        where = {i: name for name, i in points.exercise_cells(solution, number).items()}
        code_at = [i for i, c in enumerate(learner.cells) if c.cell_type == "code"]
        code = [learner.cells[i].source for i in code_at]
        template = Template(
            number=number,
            code=code,
            ids=[learner.cells[i].get("id") for i in code_at],
            context=[code[0] if k == 0 else context_source(src) for k, src in enumerate(code)],
            exercise_at={k: where[i] for k, i in enumerate(code_at) if i in where},
            points=points.points_for(number, options.points, solutions),
            **_titles(solution, number),
        )
        _TEMPLATES[key] = template
        return template


def _titles(solution, number: int) -> dict:
    """The exercises' titles and gradebook labels, from their headers in the solution notebook."""
    titles, labels = {}, {}
    for k, exercise in enumerate(catalog.exercises(number), start=1):
        header = points.header(solution, number, exercise.name) or ""
        match = re.search(r"^#+\s*(Exercise\s+(\d+)\b.*)$", header, re.M)
        titles[exercise.name] = match.group(1).strip() if match else f"Exercise {k} — `{exercise.learner_name}`"
        labels[exercise.name] = f"{number:02d}.{match.group(2) if match else k} {exercise.learner_name}"
    return {"titles": titles, "labels": labels}


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
        defined = tuple(sorted({ex for n in points.top_level_definitions(source) if n in learner_names
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


# --------------------------------------------------------------------------------------
# The grader's cell


def preamble_cell() -> str:
    """The first cell, before any learner code: executes tutor/grading/kernel.py's text into a module of its
    own and calls its ``start`` with the host's socket (``PREAMBLE_PATH``, put in by the host); binds
    ``__tutor_grade_capture``, the only name it leaves."""
    return ("# tutor grade: preamble (the grader's cell)\n"
            "__tutor_grade_kernel = __import__('types').ModuleType('__tutor_grade_kernel')\n"
            f"exec(compile({KERNEL_SOURCE!r}, {KERNEL_FILE!r}, 'exec'), __tutor_grade_kernel.__dict__)\n"
            f"__tutor_grade_capture = __tutor_grade_kernel.start({PREAMBLE_PATH!r})\n"
            "del __tutor_grade_kernel\n")


def grader_cells() -> list[PlannedCell]:
    """The grader's cells before the learner's: the preamble. (After them no cell runs: see the judge.)"""
    return [PlannedCell("grader", preamble_cell(), "the grader's preamble")]

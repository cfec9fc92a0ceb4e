"""Points per exercise, for ``python -m tutor grade``.

By default an exercise is worth its difficulty: the number of 🔴 in the ``**Difficulty:**`` line
of its markdown header in the solution notebook (``🔴🔴⚪⚪⚪`` is 2 points). New notebooks get
points without any table to update. An instructor overrides them with a small TOML file::

    # points.toml
    [points]
    softmax = 3
    MultiHeadAttention = 5

Public API: :func:`of` (one exercise's points, e.g. ``points.of("softmax")``), :func:`exercise_cells`,
:func:`header`, :func:`difficulties`, :func:`default_points`, :func:`load_overrides`, :func:`points_for`.
"""

from __future__ import annotations

import ast
import functools
import pathlib
import re
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from tutor.course import catalog
from tutor.course.build import find_root, read_notebook

DIFFICULTY = re.compile(r"\*\*Difficulty:\*\*\s*([🔴⚪]+)")
DEFAULT_POINTS = 1  # an exercise whose header has no difficulty line


def top_level_definitions(source: str) -> set[str]:
    """The names of the functions and classes a cell defines at top level (regex fallback on a syntax error)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set(re.findall(r"^(?:def|class)\s+(\w+)", source, re.M))
    return {node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def exercise_cells(nb, number: int, marker: str = "### BEGIN SOLUTION") -> dict[str, int]:
    """``{exercise name: index of its cell in nb.cells}`` for notebook ``number``.

    An exercise cell is a code cell that holds ``marker`` and defines the exercise's
    ``learner_name`` at top level; where several do (a function written again in a later
    exercise), the check that comes right after the cell decides.
    """
    found: dict[str, int] = {}
    for exercise in catalog.exercises(number):
        candidates = [i for i, cell in enumerate(nb.cells)
                      if cell.cell_type == "code" and marker in cell.source
                      and exercise.learner_name in top_level_definitions(cell.source)]
        if not candidates:
            continue
        checked = [i for i in candidates
                   if i + 1 < len(nb.cells) and f"checks.{exercise.name}(" in nb.cells[i + 1].source]
        found[exercise.name] = (checked or candidates)[0]
    return found


def header(nb, number: int, name: str) -> str | None:
    """The markdown header of exercise ``name`` (the markdown cell right before its exercise cell), or None."""
    index = exercise_cells(nb, number).get(name)
    if index is None:
        return None
    cell = next((c for c in reversed(nb.cells[:index]) if c.cell_type == "markdown"), None)
    return cell.source if cell is not None else None


def difficulties(nb, number: int) -> dict[str, int]:
    """``{exercise name: number of 🔴}`` read from each exercise's markdown header."""
    out = {}
    for exercise in catalog.exercises(number):
        match = DIFFICULTY.search(header(nb, number, exercise.name) or "")
        if match:
            out[exercise.name] = max(1, match.group(1).count("🔴"))
    return out


@functools.cache
def _solution_difficulties(number: int, solutions_dir: str | None) -> dict[str, int]:
    directory = pathlib.Path(solutions_dir) if solutions_dir else find_root() / "solutions"
    try:
        path = directory / catalog.notebook(number).filename
        return difficulties(read_notebook(path), number)
    except Exception:  # noqa: BLE001 - no solutions (an installed package): every exercise is worth 1
        return {}


def default_points(number: int, solutions_dir=None) -> dict[str, int]:
    """``{exercise name: points}`` for notebook ``number``: its difficulty, else ``DEFAULT_POINTS``."""
    found = _solution_difficulties(number, str(solutions_dir) if solutions_dir else None)
    return {e.name: found.get(e.name, DEFAULT_POINTS) for e in catalog.exercises(number)}


def of(name: str, solutions_dir=None) -> int:
    """The points of the exercise ``name`` (its difficulty, see :func:`default_points`), e.g. ``of("softmax")``."""
    return default_points(catalog.BY_NAME[name].notebook, solutions_dir)[name]


def load_overrides(path) -> dict[str, float]:
    """Read ``[points]`` from a TOML file: ``{exercise name: points}``. Unknown names are an error."""
    with open(path, "rb") as f:
        try:
            data = tomllib.load(f)
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"{path}: not valid TOML: {error}") from None
    table = data.get("points", data)
    if not isinstance(table, dict):
        raise ValueError(f"{path}: expected a [points] table of exercise = points")
    unknown = sorted(name for name in table if catalog.resolve(name) is None)
    if unknown:
        raise ValueError(f"{path}: no exercise is called {', '.join(unknown)} "
                         f"(see `python -m tutor catalog`: a check's name, or a label such as 03.2)")
    out = {}
    for name, value in table.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{path}: points for {name} must be a number >= 0, got {value!r}")
        out[catalog.resolve(name).name] = float(value) if isinstance(value, float) else value
    return out


def points_for(number: int, overrides=None, solutions_dir=None) -> dict[str, float]:
    """The points of every exercise of notebook ``number``, overrides applied."""
    points = default_points(number, solutions_dir)
    for name, value in (overrides or {}).items():
        if name in points:
            points[name] = value
    return points

"""The exercise catalog, the checks, the reference and the notebooks agree with each other."""

import re

import nbformat
import pytest
from checkkit import not_done, passes, stub

import tutor
from conftest import ROOT
from tutor import checks, reference
from tutor.course import catalog

EXERCISES = catalog.EXERCISES
NOTEBOOKS = catalog.NOTEBOOKS


def ids(items):
    return [getattr(i, "name", None) or i.slug for i in items]


def test_catalog_matches_the_curriculum_numbering():
    numbers = [n.number for n in NOTEBOOKS]
    assert numbers == sorted(set(numbers)) and numbers[:8] == list(range(1, 9))
    assert len({e.name for e in EXERCISES}) == len(EXERCISES) >= 28
    for n in NOTEBOOKS:
        assert n.slug.startswith(f"{n.number:02d}_")
        assert catalog.exercises(n.number), f"notebook {n.number} has no exercises"


@pytest.mark.parametrize("exercise", EXERCISES, ids=ids(EXERCISES))
def test_every_exercise_has_a_check_and_a_reference(exercise):
    check = getattr(checks, exercise.name)
    assert check.exercise == exercise
    assert hasattr(reference, exercise.reference)


@pytest.mark.parametrize("exercise", EXERCISES, ids=ids(EXERCISES))
def test_every_check_accepts_the_reference_and_reports_a_stub(exercise):
    check = getattr(checks, exercise.name)
    passes(check, getattr(reference, exercise.reference))
    not_done(check, stub)


def test_check_modules_mirror_the_notebooks():
    for n in NOTEBOOKS:
        module = __import__(f"tutor.checks.nb{n.slug}", fromlist=["__all__"])
        assert sorted(module.__all__) == sorted(e.name for e in catalog.exercises(n.number))
        for name in module.__all__:  # each one a check defined in its notebook's module
            check = vars(module).get(name)
            assert check is not None and check.exercise is catalog.BY_NAME[name], f"{n.slug} defines no check {name}"


def _solution(n):
    path = ROOT / "solutions" / n.filename
    assert path.exists(), f"missing solution notebook {path.name}"
    return nbformat.read(path, as_version=4)


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("n", NOTEBOOKS, ids=ids(NOTEBOOKS))
def test_solution_notebook_has_every_exercise_with_its_check(n):
    nb = _solution(n)
    cells = nb.cells
    for exercise in catalog.exercises(n.number):
        definition = re.compile(rf"^(def|class) {exercise.learner_name}\b", re.M)
        at = [i for i, c in enumerate(cells)
              if c.cell_type == "code" and definition.search(c.source) and "### BEGIN SOLUTION" in c.source]
        assert at, f"{n.filename}: no exercise cell defines {exercise.learner_name} with a solution region"
        i = at[-1] if exercise.name == "masked_attention" else at[0]
        header = next(c for c in reversed(cells[:i]) if c.cell_type == "markdown")
        for word in ("**Goal:**", "**Difficulty:**", "**Time:**", "<details>"):
            assert word in header.source, f"{n.filename}: the exercise {exercise.name} misses {word}"
        check_cell = cells[i + 1]
        assert check_cell.cell_type == "code" and f"checks.{exercise.name}(" in check_cell.source, (
            f"{n.filename}: the cell after the {exercise.name} exercise must run checks.{exercise.name}(...)")


@pytest.mark.parametrize("n", NOTEBOOKS, ids=ids(NOTEBOOKS))
def test_solution_notebook_setup_and_summary(n):
    nb = _solution(n)
    setup = _code_cells(nb)[0].source
    assert f'REPO_URL = "{tutor.REPO_URL}"' in setup, "the setup cell's REPO_URL must equal tutor.REPO_URL"
    assert f'VERSION = "{tutor.__version__}"' in setup, "the setup cell's VERSION must equal tutor.__version__"
    assert "google.colab" in setup
    assert 'print(f"(the course has no tag v{VERSION} yet' in setup, "say in one line when Colab falls back to main"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith(f"# {n.number:02d}")
    last = [c for c in nb.cells if c.cell_type == "markdown"][-1]  # (the progress cell comes after it)
    assert "## Summary" in last.source
    following = [m for m in NOTEBOOKS if m.number == n.number + 1]
    if following:
        assert following[0].filename in last.source, "link to the next notebook"


def test_readme_lists_every_notebook():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for n in NOTEBOOKS:
        assert n.filename in readme
    assert "python -m pytest" in readme


def _readme_time(minutes: int) -> str:
    hours, rest = divmod(minutes, 60)
    return f"{minutes} min" if not hours else f"{hours} h" + (f" {rest:02d}" if rest else "")


@pytest.mark.parametrize("n", NOTEBOOKS, ids=ids(NOTEBOOKS))
def test_time_estimates_agree_in_the_catalog_the_readme_and_the_notebook(n):
    """One estimate per notebook (tutor.course.catalog), shown in the README table and the title cell."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines()
               if line.startswith("|") and f"({'notebooks/' + n.filename})" in line)
    assert row.rstrip(" |").rsplit("|", 1)[1].strip() == _readme_time(n.minutes), row
    title = _solution(n).cells[0].source
    said = re.search(r"\*\*Time:\*\* about (an hour|\d+ minutes)", title)
    assert said, f"{n.filename}: the title cell must say **Time:** about N minutes"
    assert said.group(1) in ((f"{n.minutes} minutes", "an hour") if n.minutes == 60 else (f"{n.minutes} minutes",))

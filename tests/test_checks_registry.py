"""``tutor.checks.<name>``: the catalog is the registry of checks. Each exercise's check lives in the module of its
notebook, ``tutor.checks.nb{slug}``, whose ``__all__`` is exactly that notebook's exercises; a check module is
imported the first time one of its checks is looked up."""

import importlib
import subprocess
import sys

import pytest

from conftest import ROOT
from tutor import checks
from tutor.checks import harness
from tutor.course import catalog


@pytest.mark.parametrize("exercise", catalog.EXERCISES, ids=lambda e: e.name)
def test_every_exercise_resolves_to_the_check_in_its_notebooks_module(exercise):
    module = importlib.import_module(f"tutor.checks.nb{catalog.notebook(exercise.notebook).slug}")
    check = getattr(checks, exercise.name)  # what the grader calls
    assert check is getattr(module, exercise.name)
    assert check.exercise is exercise and callable(check)


@pytest.mark.parametrize("notebook", catalog.NOTEBOOKS, ids=lambda n: n.slug)
def test_every_public_check_of_a_module_resolves(notebook):
    module = checks.check_module(notebook.number)
    assert module.__name__ == checks.module_name(notebook) == f"tutor.checks.nb{notebook.slug}"
    assert getattr(checks, f"nb{notebook.slug}") is module
    for name in module.__all__:
        assert getattr(checks, name) is getattr(module, name), name
        assert catalog.BY_NAME[name].notebook == notebook.number, f"{name} is not an exercise of {notebook.slug}"


def test_the_harness_names_and_tab_completion():
    assert checks.CheckResult is harness.CheckResult and checks.CheckFailed is harness.CheckFailed
    assert checks.RESULTS is harness.RESULTS and checks.yours_or_reference is harness.yours_or_reference
    names = dir(checks)
    assert set(catalog.BY_NAME) <= set(names) and "yours_or_reference" in names and "nb03_masking" in names
    assert set(checks.__all__) == {"CheckFailed", "CheckResult", "RESULTS", "yours_or_reference", *catalog.BY_NAME}
    with pytest.raises(AttributeError, match="no attribute 'no_such_check'"):
        checks.no_such_check


def test_a_check_module_is_imported_on_first_use():
    code = ("import sys, tutor.checks as c\n"
            "assert not [m for m in sys.modules if m.startswith('tutor.checks.nb')]\n"
            "c.softmax\n"
            "print(sorted(m for m in sys.modules if m.startswith('tutor.checks.nb')))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['tutor.checks.nb01_dot_product_attention']"


def test_no_check_module_imports_another():
    """What two notebooks' checks share is in tutor.checks.common, so each nbNN module stands on its own."""
    for path in sorted((ROOT / "tutor" / "checks").glob("nb*.py")):
        text = path.read_text()
        assert "from tutor.checks.nb" not in text and "import tutor.checks.nb" not in text, path.name


def test_a_check_is_named_by_its_function_and_counts_its_cases():
    def softmax(fn):
        for label in ("a row", "a batch", "logits of 1000"):
            with harness.case(label):
                pass
        return "{cases} cases"

    quick = harness.check(softmax, timeout=5.0)
    assert quick.exercise.name == "softmax"
    assert str(quick(lambda x, dim=-1: x)) == "✅ softmax: passed (3 cases)"
    assert harness.CASES["softmax"] == ["a row", "a batch", "logits of 1000"]
    with pytest.raises(KeyError):
        harness.check(lambda fn: None)  # "<lambda>" is no exercise


def test_no_check_counts_its_cases_by_hand():
    # "8 cases" written after 9 labelled inputs drifted; "{cases} cases" is counted by the harness
    import re

    for path in sorted((ROOT / "tutor" / "checks").glob("nb*.py")):
        text = path.read_text(encoding="utf-8")
        assert not re.findall(r'"\d+ cases', text), f"{path.name}: write {{cases}} cases, the harness counts them"

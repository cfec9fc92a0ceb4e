"""The grader's code around the grading kernel, called directly: the snapshot and its restore
(tutor/grading/kernel.py), the model answer's footprint and fingerprints (answers.py), the static review
(review.py) and the channel's frames.

test_grade.py runs all of it in real kernels against real notebooks.
"""

import ast
import inspect
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT
from tutor import reference
from tutor.course import catalog, points
from tutor.course.build import read_notebook
from tutor.grading import answers, kernel, plan, review
from tutor.grading.grades import Options


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
    [preamble] = plan.grader_cells(Options(memory_mb=0), 3)
    tree = ast.parse(preamble.source)
    bound = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets}
    deleted = {t.id for node in tree.body if isinstance(node, ast.Delete) for t in node.targets}
    assert bound - deleted == {"__tutor_grade_capture"}
    assert plan.CHANNEL in preamble.source


def test_frames_round_trip_and_the_fork_message_is_one_frame():
    read, write = os.pipe()
    kernel.send(write, {"result": "softmax", "details": ["é", "→"]})
    os.close(write)
    assert kernel.recv(read) == {"result": "softmax", "details": ["é", "→"]}
    assert kernel.recv(read) is None
    os.close(read)
    assert kernel.FORK == kernel.encode("fork")


RESTORE = textwrap.dedent('''\
    import builtins, json, signal, sys, types
    import torch, torch.nn.functional as F, torch.testing
    from tutor.grading import plan
    k = types.ModuleType("k")
    exec(compile(plan.KERNEL_SOURCE, plan.KERNEL_FILE, "exec"), k.__dict__)
    snap = k.snapshot()
    originals = (torch.allclose, torch.Tensor.__eq__, json.loads, F.softmax.__code__, print, sys.meta_path[:])
    # what learner code does, in __main__ (this script)
    torch.allclose = lambda *a, **kw: True
    torch.Tensor.__eq__ = lambda self, other: torch.ones((), dtype=torch.bool)
    torch.Tensor.__tutor_added = lambda self: "added by the learner"
    torch.Tensor.__tutor_cache = "a library's own addition, removed silently"
    json.loads = lambda *a, **kw: {"forged": True}
    F.softmax.__code__ = (lambda *a, **kw: None).__code__
    torch.testing.cache = "a library's own change, put back silently"
    builtins.print = lambda *a, **kw: None
    sys.modules["torch.testing"] = types.ModuleType("torch.testing")  # what `import torch.testing` returns
    sys.meta_path.insert(0, type("Hook", (), {"find_spec": staticmethod(lambda *a: None)})())
    def alarm(*a): pass
    signal.signal(signal.SIGALRM, alarm)
    keep = []
    changed = k.restore(snap, keep)
    reset = k.reset_process(snap)
    sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)  # (reset_process sent it to the null device)
    now = (torch.allclose, torch.Tensor.__eq__, json.loads, F.softmax.__code__, print, sys.meta_path[:])
    same = [a is b if not isinstance(a, list) else a == b for a, b in zip(originals, now)]
    same.append(sys.modules["torch.testing"] is torch.testing)
    again = k.restore(snap, [])
    out = {"changed": changed, "reset": reset, "same": same, "again": again,
           "added": hasattr(torch.Tensor, "__tutor_added") or hasattr(torch.Tensor, "__tutor_cache"),
           "testing": hasattr(torch.testing, "cache")}
    open(sys.argv[1], "w").write(json.dumps(out))
''')


def test_restore_puts_back_every_module_class_and_function_and_names_what_the_learner_changed(tmp_path):
    result = tmp_path / "out.json"
    done = subprocess.run([sys.executable, "-c", RESTORE, str(result)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and result.exists(), done.stderr
    out = json.loads(result.read_text())
    assert all(out["same"]), out["same"]
    assert not out["added"] and not out["testing"]
    changed = set(out["changed"])
    assert {"torch.allclose", "torch.Tensor.__eq__", "torch.Tensor.__tutor_added", "json.loads",
            "builtins.print", "sys.meta_path", "sys.modules['torch.testing']"} <= changed, changed
    assert not any("cache" in c for c in changed), "a library's own changes are put back silently"
    assert any("softmax (its code)" in c for c in changed), changed
    assert out["reset"] == ["a handler of SIGALRM"]
    assert out["again"] == []  # nothing changed since


def test_capture_keeps_definitions_as_their_cell_left_them():
    capture = kernel.make_capture()
    namespace = {"softmax": "the learner's softmax", "other": 1}
    capture(["softmax", "missing"], namespace)
    namespace["softmax"] = "rebound in a later cell"
    assert capture() == {"softmax": "the learner's softmax"}


# --------------------------------------------------------------------------------------
# The model answer


def _footprints(names=None):
    modules = {name: module for name, module in sys.modules.items() if name.startswith("tutor.reference")}
    return answers.footprints(names or [e.name for e in catalog.EXERCISES], modules)


def test_a_footprint_holds_the_answer_and_the_private_helpers_only_it_uses():
    fp = _footprints(["load_gpt2", "train_bpe", "ModernGPT", "masked_attention"])
    labels = {name: set(f.places.values()) for name, f in fp.items()}
    assert {"tutor.reference.gpt2.load_gpt2", "tutor.reference.gpt2._fill"} <= labels["load_gpt2"]
    assert "tutor.reference.model.GPTConfig" not in labels["load_gpt2"]  # public: a tool learners are handed
    assert "tutor.reference.bpe._words" in labels["train_bpe"]
    assert not any("swiglu_hidden" in label for label in labels["ModernGPT"])
    assert labels["masked_attention"] == {"tutor.reference.attention.scaled_dot_product_attention"}
    # the answers of other exercises stay allowed: notebooks build on them
    assert not any("softmax" in label for label in labels["masked_attention"])


@pytest.mark.parametrize("exercise", catalog.EXERCISES, ids=lambda e: e.name)
def test_the_model_answer_compiled_alone_from_its_source_has_its_fingerprint(exercise):
    # exec(inspect.getsource(ref.X)) compiles it outside its module, which changes some instructions
    fp = _footprints([exercise.name])[exercise.name]
    obj = answers._unwrap(getattr(reference, exercise.reference))
    namespace = dict(vars(sys.modules[obj.__module__]))
    exec(compile(inspect.getsource(obj), "<string>", "exec"), namespace)
    codes = answers._codes_of(namespace[obj.__name__])
    assert codes and all(answers.fingerprint(c) in fp.contents for c in codes)


def test_identity_sees_aliases_partials_bound_methods_and_subclasses():
    import functools

    fp = _footprints(["padding_mask", "AttentionHead", "softmax"])
    assert answers.identity(reference.padding_mask, fp["padding_mask"]) == "tutor.reference.attention.padding_mask"
    assert answers.identity(functools.partial(reference.padding_mask, pad_id=0), fp["padding_mask"])
    assert answers.identity(type("Mine", (reference.AttentionHead,), {}), fp["AttentionHead"])
    assert answers.identity(lambda x, dim=-1: x.softmax(dim), fp["softmax"]) is None


def test_same_as_answer_sees_renamed_and_reformatted_copies_only():
    exercise = catalog.BY_NAME["padding_mask"]
    copy = inspect.getsource(reference.padding_mask).replace("ids", "tokens").replace("pad_id", "blank")
    copy = copy.replace('"""', '"""Mine.\n    ', 1) + "\n# my comment\n"
    assert answers.same_as_answer(copy, exercise, reference) == "tutor/reference/attention.py"
    other = "def padding_mask(ids, pad_id=0):\n    return (ids != pad_id)[:, None, :]\n"
    assert answers.same_as_answer(other, exercise, reference) is None


# --------------------------------------------------------------------------------------
# The static review


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
])
def test_the_review_flags_code_that_could_reach_the_grader(source, reason):
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

"""Two submissions of notebook 14 that forged a grade (a hostile student, stop 48), graded in one batch with the
solution: neither earns a point, and the solution earns all of them.

- ``equivalents``: no exercise written; each one calls a definition elsewhere in the package that does its work (a
  figure's helper, a parity test's, the ablation hook of the experiment). ``tutor.course.catalog.EQUIVALENTS`` hides
  them with the model answers while the exercises are graded.
- ``patched-helpers``: a ``capture_patterns`` that breaks the contract (hooks left, a graph kept, the model run
  twice), with the course's helpers that see it (``checks.beside.with_graph``, ``PatternCounter``) replaced in the
  notebook. The kernel keeps those helpers as they were before the learner's code ran, and refuses changed ones.
"""

import nbformat
import pytest

from conftest import ROOT
from tutor import grading
from tutor.course import catalog, points

EQUIVALENTS = {
    "attention_pattern": '''\
from tutor.viz.training import _weights_from_input


def attention_pattern(attn, x):
    return _weights_from_input(attn, x, None).to(x.dtype)
''',
    "capture_patterns": '''\
from tutor.viz.training import attention_weights


def capture_patterns(model, ids, pattern_fn):
    patterns = attention_weights(model, ids)
    for block in model.blocks:  # one call per layer, for the counter
        pattern_fn(block.attn, torch.zeros(1, 1, block.attn.q_proj.in_features))
    return patterns
''',
    "induction_scores": '''\
from tutor import huggingface as hf


def induction_scores(patterns, n):
    return torch.stack([hf.tutorial_induction_scores(p[:, :, 1:, 1:], n) for p in patterns])
''',
    "ablate_head": '''\
from tutor.reference.interpretability import ablated


def ablate_head(model, ids, layer, head, how="zero"):
    with ablated(model, layer, head, how), torch.no_grad():
        return model(ids)
''',
}

PATCHED_HELPERS = '''\
import tutor.checks.beside

_with_graph = checks.beside.with_graph


def _no_graph(fn, *args, **kwargs):  # "no graph", whatever the function returned
    out, _ = _with_graph(fn, *args, **kwargs)
    return out, False


checks.beside.with_graph = _no_graph


class _Counter:  # one call per layer, whatever happened
    def __init__(self, fn):
        self.fn, self.n, self.frozen = fn, 0, None

    def __call__(self, attn, x):
        self.n += 1
        return self.fn(attn, x)

    @property
    def calls(self):
        if self.frozen is None:
            self.frozen = self.n if self.n < 2 else 3 if self.n >= 6 else 2
        return self.frozen


checks.beside.PatternCounter = _Counter


def capture_patterns(model, ids, pattern_fn):
    patterns = []

    def keep(attn, args):
        patterns.append(pattern_fn(attn, args[0]))

    for block in model.blocks:  # never removed
        block.attn.register_forward_pre_hook(keep)
    model(ids)  # with a graph, and twice
    model(ids)
    return patterns[:len(model.blocks)]
'''


def _submission(folder, sources):
    name = catalog.notebook(14).filename
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    cells = points.exercise_cells(nbformat.read(ROOT / "solutions" / name, as_version=4), 14)
    for exercise, source in sources.items():
        nb.cells[cells[exercise]].source = source
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / name)
    return folder


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("attacks14")
    solution = root / "solution"
    solution.mkdir()
    name = catalog.notebook(14).filename
    (solution / name).write_bytes((ROOT / "solutions" / name).read_bytes())
    subs = [_submission(root / "equivalents", EQUIVALENTS),
            _submission(root / "patched-helpers", {"capture_patterns": PATCHED_HELPERS}), solution]
    students = grading.grade(subs, grading.Options(cell_timeout=60, total_timeout=300, workers=2), progress=False)
    return {s.student: s for s in students}


def test_calling_what_does_the_work_elsewhere_earns_nothing(graded):
    student = graded["equivalents"]
    for exercise in student.exercises:
        assert exercise.points == 0 and exercise.status != "passed", exercise.text()
        hidden = catalog.EQUIVALENTS[exercise.name][0]
        assert "calls the model answer" in exercise.summary and hidden in exercise.summary, exercise.text()


def test_replacing_the_helpers_that_see_a_broken_contract_earns_nothing(graded):
    exercise = next(e for e in graded["patched-helpers"].exercises if e.name == "capture_patterns")
    assert exercise.points == 0 and exercise.status != "passed", exercise.text()
    assert "which the course's check helpers rely on" in exercise.text(), exercise.text()


def test_the_solution_still_earns_every_point_with_the_equivalents_hidden(graded):
    student = graded["solution"]
    assert student.score == student.max_score > 0, [e.text() for e in student.exercises]

"""The grader's code that runs inside the grading kernel (tutor/grading/kernel.py), called directly.

test_grade.py runs it in real kernels against real notebooks; these tests call its functions one by one:
the snapshot of torch and builtins and its restore, the capture of the learner's definitions, the load of
a pristine package and the payloads that ``grade`` sends.
"""

import ast
import builtins
import json
import os
import subprocess
import sys
import textwrap

import torch

from conftest import ROOT
from tutor.course import catalog
from tutor.grading import kernel, plan
from tutor.grading.grades import Options


def test_the_kernel_module_imports_only_the_standard_library_at_its_top():
    # it runs in the learner's kernel before the pristine copy of tutor exists
    tree = ast.parse(plan.KERNEL_SOURCE)
    imported = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_restore_undoes_patches_of_torch_and_builtins_and_names_them():
    restore = kernel.snapshot()
    allclose, eq = torch.allclose, torch.Tensor.__eq__
    meta_path = list(sys.meta_path)
    try:
        torch.allclose = lambda *a, **k: True
        torch.Tensor.__eq__ = lambda self, other: torch.ones((), dtype=torch.bool)
        torch.Tensor.__tutor_test_added = "added by learner code"
        builtins.print = lambda *a, **k: None
        sys.meta_path.insert(0, object())
        changed = restore()
    finally:
        builtins.print = print
    assert torch.allclose is allclose and torch.Tensor.__eq__ is eq
    assert not hasattr(torch.Tensor, "__tutor_test_added")
    assert sys.meta_path == meta_path
    assert {"torch.allclose", "torch.Tensor.__eq__", "torch.Tensor.__tutor_test_added",
            "builtins.print"} <= set(changed)
    assert restore() == []  # nothing changed since


def test_capture_keeps_definitions_as_their_cell_left_them():
    capture = kernel.make_capture()
    namespace = {"softmax": "the learner's softmax", "other": 1}
    capture(["softmax", "missing"], namespace)
    namespace["softmax"] = "rebound in a later cell"
    assert capture() == {"softmax": "the learner's softmax"}


def test_the_grader_cells_parse_and_keep_the_nonce_in_its_own_cell():
    head, tail = plan.grader_cells(Options(memory_mb=0))
    check = plan.check_cell(catalog.BY_NAME["softmax"])
    for cell in head + tail + [check]:
        ast.parse(cell.source)
    load = tail[-1]
    assert load.nonce in load.source and plan.PACKAGE in load.source
    assert check.nonce in check.source and check.nonce not in load.source
    assert all(check.nonce not in cell.source for cell in head + tail)


def test_the_preamble_binds_only_the_graders_names():
    [preamble], _ = plan.grader_cells(Options(memory_mb=0))  # (no memory cap on the test process)
    namespace = {}
    exec(preamble.source, namespace)
    added = set(namespace) - {"__builtins__", "builtins", "os", "sys", "torch"}
    assert added == {"__tutor_grade_restore", "__tutor_grade_capture"}
    assert namespace["__tutor_grade_restore"]() == []


LOAD_AND_GRADE = textwrap.dedent('''\
    import json, pathlib, sys, tempfile, types
    import IPython.display
    from tutor.grading import plan, runner
    sent = []
    IPython.display.publish_display_data = lambda data: sent.append(data)
    kernel = types.ModuleType("__tutor_grade_kernel")
    exec(compile(plan.KERNEL_SOURCE, plan.KERNEL_FILE, "exec"), kernel.__dict__)
    restore, capture = kernel.snapshot(), kernel.make_capture()
    import torch
    from tutor import reference
    def causal_mask(T, device=None):
        return torch.ones(T, T, device=device).tril().bool()
    torch.allclose = lambda *a, **k: True  # learner code patches torch
    capture(["causal_mask", "padding_mask"], {"causal_mask": causal_mask, "padding_mask": reference.padding_mask})
    package = runner.write_package(runner.package_snapshot(), pathlib.Path(tempfile.mkdtemp()) / "pristine")
    grade = kernel.load("load-nonce", str(package), restore, capture(), {"TUTOR_STRICT": "0", "TUTOR_PROGRESS": "0"})
    loaded = [name for name in sys.modules if name.startswith("tutor.checks.nb")]  # every check, before any runs
    assert len(loaded) == len(sys.modules["tutor.checks"].catalog.NOTEBOOKS), loaded
    assert all(sys.modules[name].__file__.startswith(str(package)) for name in loaded), loaded
    grade("n1", "causal_mask", "causal_mask")
    grade("n2", "padding_mask", "padding_mask")
    grade("n3", "masked_attention", "scaled_dot_product_attention")
    print(json.dumps([list(d.values())[0] for d in sent]))
    print(json.dumps(sorted(set(list(d)[0] for d in sent))))
''')


def test_load_restores_imports_the_pristine_checks_and_grade_sends_the_payloads():
    done = subprocess.run([sys.executable, "-c", LOAD_AND_GRADE], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, env={**os.environ, "TUTOR_PROGRESS": "0"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    payloads, mimes = json.loads(lines[-2]), json.loads(lines[-1])
    assert mimes == [kernel.MIME]
    loaded, causal, padding, masked = payloads
    assert loaded["nonce"] == "load-nonce" and loaded["load"] is True
    assert "torch.allclose" in loaded["changed"] and loaded["foreign"] == []
    assert causal == {**causal, "nonce": "n1", "exercise": "causal_mask", "status": "passed"}
    assert padding["status"] == "failed" and "model answer" in padding["summary"]
    assert masked == {"nonce": "n3", "exercise": "masked_attention", "status": "missing",
                      "summary": "`scaled_dot_product_attention` is not defined", "details": []}

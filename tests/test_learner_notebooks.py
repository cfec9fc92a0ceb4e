"""The generated learner notebooks run top to bottom with every exercise blank.

Every check must then report "not done yet" and no cell may raise. TUTOR_QUICK=1 shortens the
training in notebook 08 (the solution notebook trains in full under nbval).

Each learner notebook is built in memory from its solution, exactly as `python -m tutor build`
writes it (test_build checks that notebooks/ holds that build), so a learner who saved work in
notebooks/ does not make this test fail.
"""

import re

import pytest
from nbclient import NotebookClient

from conftest import ROOT
from tutor.course import build, catalog

RESULT = re.compile(r"^(✅|❌|⏳) (\w+): (.*)$", re.M)


def check_results(nb):
    found = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            text = output.get("data", {}).get("text/plain", "") if "data" in output else output.get("text", "")
            found += RESULT.findall(text)
    return found


@pytest.mark.parametrize("n", catalog.NOTEBOOKS, ids=[n.slug for n in catalog.NOTEBOOKS])
def test_blank_learner_notebook_runs(n, monkeypatch):
    path = ROOT / "notebooks" / n.filename  # where it runs (its cwd), as in JupyterLab
    nb = build.make_learner_notebook(build.read_notebook(ROOT / "solutions" / n.filename),
                                     f"solutions/{n.filename}")
    monkeypatch.setenv("TUTOR_STRICT", "0")
    monkeypatch.setenv("TUTOR_QUICK", "1")
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError if any cell raises

    results = check_results(nb)
    expected = {e.name for e in catalog.exercises(n.number)}
    assert {name for _, name, _ in results} == expected
    for icon, name, summary in results:
        assert icon == "⏳" and summary == "not done yet", f"{name}: {icon} {summary}"

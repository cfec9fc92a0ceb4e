"""Tests of `python -m tutor build`: learner notebooks generated from solution notebooks."""

import json
import os
import pathlib
import subprocess
import sys

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tutor.course import build as b
from tutor.course import catalog, run

ROOT = pathlib.Path(__file__).resolve().parents[1]

FUNCTION_CELL = '''\
import math

def softmax(x, dim=-1):
    """A stable softmax."""
    ### BEGIN SOLUTION
    x = x - x.max(dim=dim, keepdim=True).values
    e = x.exp()
    return e / e.sum(dim=dim, keepdim=True)
    ### END SOLUTION

print("defined")'''

CLASS_CELL = '''\
class Head(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        ### BEGIN SOLUTION
        self.query = torch.nn.Linear(d, d)
        ### END SOLUTION

    def forward(self, x):
        if x.ndim == 3:
            ### BEGIN SOLUTION
            return self.query(x)
            ### END SOLUTION
        return x'''

MARKDOWN_CELL = '''\
### Question
Why subtract the maximum?

### BEGIN SOLUTION
Because exp overflows.
### END SOLUTION

That is all.'''

NBVAL_CELL = '''\
# NBVAL_CHECK_OUTPUT
print(round(1 / 3, 4))
  #NBVAL_IGNORE_OUTPUT
x = 1  # NBVAL_SKIP is only a directive on a line of its own'''


def solution_notebook(extra_cells=()):
    """A small solution notebook with outputs, execution counts and noisy metadata."""
    nb = new_notebook()
    nb.metadata = nbformat.from_dict({
        "kernelspec": {"display_name": "Python 3 (venv)", "language": "python", "name": "venv"},
        "language_info": {"name": "python", "version": "3.11.7", "mimetype": "text/x-python"},
        "widgets": {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2,
                                                                 "version_minor": 0}},
    })
    cells = [
        new_markdown_cell("# 01 — Softmax", metadata={"tags": ["title"]}),
        new_code_cell(FUNCTION_CELL, execution_count=1,
                      outputs=[new_output("stream", name="stdout", text="defined\n")],
                      metadata={"tags": ["exercise"], "execution": {"iopub.execute_input": "2024-01-01T00:00:00Z"},
                                "collapsed": False, "scrolled": True, "ExecuteTime": {"end_time": "x"}}),
        new_code_cell(CLASS_CELL, execution_count=2),
        new_markdown_cell(MARKDOWN_CELL),
        new_code_cell(NBVAL_CELL, execution_count=3, metadata={"tags": ["nbval-skip", "raises-exception"]},
                      outputs=[new_output("execute_result", data={"text/plain": "0.3333"}, execution_count=3)]),
        *extra_cells,
    ]
    nb.cells = cells
    return nb


def write_solution(directory, name="01_softmax.ipynb", nb=None):
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    nbformat.write(nb if nb is not None else solution_notebook(), path)
    return path


@pytest.fixture
def dirs(tmp_path):
    solutions, notebooks = tmp_path / "solutions", tmp_path / "notebooks"
    write_solution(solutions)
    return solutions, notebooks


def read(path):
    return nbformat.read(path, as_version=4)


def cli(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tutor", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=env, timeout=120)


# --- strip_solutions -------------------------------------------------------------------


def test_function_region_becomes_a_stub_at_its_indentation_and_the_code_around_is_kept():
    assert b.strip_solutions(FUNCTION_CELL) == '''\
import math

def softmax(x, dim=-1):
    """A stable softmax."""
    # YOUR CODE HERE
    raise NotImplementedError()

print("defined")'''


def test_several_regions_in_a_class_keep_each_markers_indentation():
    stripped = b.strip_solutions(CLASS_CELL)
    assert stripped == '''\
class Head(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        # YOUR CODE HERE
        raise NotImplementedError()

    def forward(self, x):
        if x.ndim == 3:
            # YOUR CODE HERE
            raise NotImplementedError()
        return x'''
    compile(stripped, "<stub>", "exec")  # still valid Python


def test_markdown_region_becomes_your_answer_here():
    assert b.strip_solutions(MARKDOWN_CELL, "markdown") == '''\
### Question
Why subtract the maximum?

YOUR ANSWER HERE

That is all.'''


def test_nbval_directive_lines_are_removed_from_code_but_not_code_mentioning_them():
    assert b.strip_solutions(NBVAL_CELL) == ('print(round(1 / 3, 4))\n'
                                             'x = 1  # NBVAL_SKIP is only a directive on a line of its own')


def test_source_without_markers_is_unchanged():
    source = "x = 1\n\n\ny = 2\n"
    assert b.strip_solutions(source) == source


@pytest.mark.parametrize("source, needle", [
    ("### END SOLUTION\nx = 1", "line 1"),
    ("def f():\n    ### BEGIN SOLUTION\n    return 1", "never closed"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n### END SOLUTION", "nested"),
    ("## BEGIN SOLUTION\nsecret = 42\n### END SOLUTION", "not a marker"),
])
def test_unbalanced_nested_or_misspelt_markers_raise(source, needle):
    with pytest.raises(b.MarkerError, match=needle):
        b.strip_solutions(source)


# --- make_learner_notebook ---------------------------------------------------------------


def test_learner_notebook_has_stubs_no_outputs_and_stable_metadata():
    solution = solution_notebook()
    learner = b.make_learner_notebook(solution, "solutions/01_softmax.ipynb")

    assert [c.source for c in learner.cells] == [
        "# 01 — Softmax",
        b.strip_solutions(FUNCTION_CELL),
        b.strip_solutions(CLASS_CELL),
        b.strip_solutions(MARKDOWN_CELL, "markdown"),
        b.strip_solutions(NBVAL_CELL),
    ]
    for cell in learner.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    assert learner.cells[1].metadata == {"tags": ["exercise"]}  # execution, collapsed, scrolled... dropped
    assert learner.cells[4].metadata == {"tags": ["raises-exception"]}  # nbval tags dropped
    assert [c.id for c in learner.cells] == [c.id for c in solution.cells]
    assert learner.nbformat == 4 and learner.nbformat_minor == solution.nbformat_minor
    assert learner.metadata == {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "tutor": {"source": "solutions/01_softmax.ipynb", "build_hash": b.cells_hash(learner)},
    }
    # the solution itself is untouched
    assert "### BEGIN SOLUTION" in solution.cells[1].source and solution.cells[1].outputs
    nbformat.validate(learner)


def test_learner_notebook_of_an_old_nbformat_without_ids_gets_no_ids():
    solution = solution_notebook()
    solution.nbformat_minor = 4
    for cell in solution.cells:
        del cell["id"]
    learner = b.make_learner_notebook(solution, "solutions/x.ipynb")
    assert learner.nbformat_minor == 4
    assert all("id" not in cell for cell in learner.cells)
    nbformat.validate(learner)


def test_missing_and_duplicate_cell_ids_are_derived_deterministically(tmp_path):
    """nbformat.read would give id-less cells random ids; the build must not."""
    solution = solution_notebook()
    solution.cells[2].id = solution.cells[1].id  # a duplicate
    data = json.loads(json.dumps(solution))  # not nbformat.writes: it would repair the ids
    del data["cells"][0]["id"]  # a missing id (hand-edited JSON)
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    (solutions / "01_ids.ipynb").write_text(json.dumps(data))

    b.build(solutions, tmp_path / "a")
    b.build(solutions, tmp_path / "b")
    first = (tmp_path / "a" / "01_ids.ipynb").read_bytes()
    assert (tmp_path / "b" / "01_ids.ipynb").read_bytes() == first
    ids = [c.id for c in read(tmp_path / "a" / "01_ids.ipynb").cells]
    assert len(set(ids)) == len(ids)
    assert ids[1] == solution.cells[1].id and ids[3:] == [c.id for c in solution.cells[3:]]


def test_bad_markers_name_the_notebook_and_cell_index():
    nb = solution_notebook(extra_cells=[new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1")])
    with pytest.raises(b.MarkerError) as info:
        b.make_learner_notebook(nb, "solutions/01_softmax.ipynb")
    assert "solutions/01_softmax.ipynb, cell 5" in str(info.value)
    assert "never closed" in str(info.value)


def test_cells_hash_sees_typed_code_and_outputs_but_not_view_metadata():
    learner = b.make_learner_notebook(solution_notebook(), "s")
    original = b.cells_hash(learner)
    learner.cells[1].metadata["collapsed"] = True
    assert b.cells_hash(learner) == original
    learner.cells[1].source += "\nx = 1"
    assert b.cells_hash(learner) != original
    learner.cells[1].source = b.strip_solutions(FUNCTION_CELL)
    learner.cells[2].execution_count = 1
    assert b.cells_hash(learner) != original


# --- build -------------------------------------------------------------------------------


def test_build_writes_learner_notebooks_and_a_second_build_changes_nothing(dirs):
    solutions, notebooks = dirs
    report = b.build(solutions, notebooks)
    target = notebooks / "01_softmax.ipynb"
    assert report.exit_code == 0 and report.status_of("01_softmax") == "created"
    first = target.read_bytes()
    learner = read(target)
    assert "# YOUR CODE HERE" in learner.cells[1].source and "x.exp()" not in first.decode()
    assert learner.metadata.tutor.source == "solutions/01_softmax.ipynb"
    assert learner.metadata.tutor.build_hash == b.cells_hash(learner)
    assert first.endswith(b"}\n")

    os.utime(target, ns=(1_000_000_000, 1_000_000_000))
    report = b.build(solutions, notebooks)
    assert report.exit_code == 0 and report.status_of("01_softmax") == "unchanged"
    assert target.read_bytes() == first
    assert target.stat().st_mtime_ns == 1_000_000_000  # not rewritten

    # a build into a fresh directory gives the very same bytes
    again = b.build(solutions, solutions.parent / "other")
    assert again.exit_code == 0
    assert (solutions.parent / "other" / "01_softmax.ipynb").read_bytes() == first


def test_build_updates_a_clean_learner_notebook_when_the_solution_changed(dirs):
    solutions, notebooks = dirs
    b.build(solutions, notebooks)
    nb = solution_notebook(extra_cells=[new_markdown_cell("## Summary")])
    write_solution(solutions, nb=nb)
    report = b.build(solutions, notebooks)
    assert report.exit_code == 0 and report.status_of("01_softmax") == "updated"
    assert read(notebooks / "01_softmax.ipynb").cells[-1].source == "## Summary"
    assert not list(notebooks.glob("*.backup*"))


def test_build_overwrites_a_notebook_only_opened_and_saved_in_jupyter(dirs):
    solutions, notebooks = dirs
    b.build(solutions, notebooks)
    target = notebooks / "01_softmax.ipynb"
    nb = read(target)
    nb.cells[1].metadata["collapsed"] = True  # view state, not work
    nb.metadata["language_info"]["version"] = "3.12.0"
    nbformat.write(nb, target)
    report = b.build(solutions, notebooks)
    assert report.status_of("01_softmax") == "updated" and report.exit_code == 0
    assert read(target).cells[1].metadata == {"tags": ["exercise"]}


@pytest.mark.parametrize("edit", ["typed code", "outputs"])
def test_a_learner_notebook_with_work_is_refused_then_backed_up_with_force(dirs, edit, capsys):
    solutions, notebooks = dirs
    b.build(solutions, notebooks)
    target = notebooks / "01_softmax.ipynb"
    nb = read(target)
    if edit == "typed code":
        nb.cells[1].source = nb.cells[1].source.replace("raise NotImplementedError()", "return x.softmax(dim)")
    else:
        nb.cells[2].execution_count = 1
        nb.cells[2].outputs = [new_output("stream", name="stdout", text="hello\n")]
    nbformat.write(nb, target)
    learner_work = target.read_bytes()
    write_solution(solutions, nb=solution_notebook(extra_cells=[new_markdown_cell("## New")]))

    report = b.build(solutions, notebooks)
    assert report.exit_code == 1 and report.status_of("01_softmax") == "refused"
    assert target.read_bytes() == learner_work
    refused = report.by_status("refused")[0]
    assert "--force" in refused.reason
    assert any("01_softmax.ipynb" in line and "--force" in line for line in report.lines())

    report = b.build(solutions, notebooks, force=True)
    assert report.exit_code == 0 and report.status_of("01_softmax") == "forced"
    backup = report.results[0].backup
    assert backup.parent == notebooks and backup.name.startswith("01_softmax.backup-")
    assert backup.match(b.BACKUP_GLOB)
    assert backup.read_bytes() == learner_work
    assert str(backup.name) in report.results[0].reason
    assert read(target).cells[-1].source == "## New"
    assert read(target).metadata.tutor.build_hash == b.cells_hash(read(target))
    # the backup is not an orphan, and everything is now up to date
    assert b.build(solutions, notebooks, check=True).exit_code == 0


def test_a_notebook_without_recorded_hash_that_differs_counts_as_edited(dirs):
    solutions, notebooks = dirs
    notebooks.mkdir()
    target = notebooks / "01_softmax.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("my own work")]), target)
    before = target.read_bytes()
    report = b.build(solutions, notebooks)
    assert report.status_of("01_softmax") == "refused" and report.exit_code == 1
    assert "no recorded build hash" in report.results[0].reason
    assert target.read_bytes() == before


def test_unbalanced_markers_are_an_error_and_nothing_is_written(dirs):
    solutions, notebooks = dirs
    bad = solution_notebook(extra_cells=[new_code_cell("x = 1\n### END SOLUTION")])
    write_solution(solutions, "02_bad.ipynb", bad)
    report = b.build(solutions, notebooks)
    assert report.exit_code == 2
    assert len(report.errors) == 1
    assert "solutions/02_bad.ipynb, cell 5" in report.errors[0]
    assert "END SOLUTION" in report.errors[0]
    assert not notebooks.exists() or not list(notebooks.iterdir())  # not even the good one


def test_only_builds_the_selected_notebooks(dirs):
    solutions, notebooks = dirs
    write_solution(solutions, "02_other.ipynb")
    report = b.build(solutions, notebooks, only=["2"])
    assert [r.name for r in report.results] == ["02_other.ipynb"]
    assert sorted(p.name for p in notebooks.iterdir()) == ["02_other.ipynb"]
    report = b.build(solutions, notebooks, only=["01_softmax"])
    assert [r.name for r in report.results] == ["01_softmax.ipynb"]
    report = b.build(solutions, notebooks, only=["nope"])
    assert report.exit_code == 2 and "nope" in report.errors[0]


# --- check -------------------------------------------------------------------------------


def test_check_is_clean_after_a_build_and_writes_nothing(dirs):
    solutions, notebooks = dirs
    report = b.build(solutions, notebooks, check=True)
    assert report.exit_code == 1 and report.status_of("01_softmax") == "missing"
    assert not notebooks.exists()
    b.build(solutions, notebooks)
    report = b.build(solutions, notebooks, check=True)
    assert report.exit_code == 0 and report.status_of("01_softmax") == "up to date"
    assert "up to date" in report.summary()


def test_check_finds_stale_and_orphan_notebooks(dirs):
    solutions, notebooks = dirs
    b.build(solutions, notebooks)
    before = (notebooks / "01_softmax.ipynb").read_bytes()
    write_solution(solutions, nb=solution_notebook(extra_cells=[new_markdown_cell("## Changed")]))
    report = b.build(solutions, notebooks, check=True)
    assert report.exit_code == 1 and report.status_of("01_softmax") == "stale"
    assert (notebooks / "01_softmax.ipynb").read_bytes() == before

    b.build(solutions, notebooks)
    nbformat.write(new_notebook(), notebooks / "09_gone.ipynb")
    report = b.build(solutions, notebooks, check=True)
    assert report.exit_code == 1 and report.status_of("09_gone") == "orphan"
    assert report.status_of("01_softmax") == "up to date"
    # a plain build leaves an orphan alone but warns about it
    report = b.build(solutions, notebooks)
    assert (notebooks / "09_gone.ipynb").exists()
    assert any("09_gone.ipynb" in w for w in report.warnings)


# --- CLI ---------------------------------------------------------------------------------


def test_cli_build_then_check(dirs):
    solutions, notebooks = dirs
    check = cli("build", "--check", "--solutions", solutions, "--notebooks", notebooks)
    assert check.returncode == 1, check.stderr
    assert "missing" in check.stdout and "01_softmax.ipynb" in check.stdout

    first = cli("build", "--solutions", solutions, "--notebooks", notebooks)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "1 created" in first.stdout
    data = (notebooks / "01_softmax.ipynb").read_bytes()

    check = cli("build", "--check", "--solutions", solutions, "--notebooks", notebooks)
    assert check.returncode == 0 and "1 up to date" in check.stdout
    assert (notebooks / "01_softmax.ipynb").read_bytes() == data


def test_cli_refuses_an_edited_notebook_and_force_backs_it_up(dirs):
    solutions, notebooks = dirs
    b.build(solutions, notebooks)
    target = notebooks / "01_softmax.ipynb"
    nb = read(target)
    nb.cells[1].source += "\nmy_answer = 1"
    nbformat.write(nb, target)
    work = target.read_bytes()

    refused = cli("build", "--solutions", solutions, "--notebooks", notebooks)
    assert refused.returncode != 0
    assert "01_softmax.ipynb" in refused.stdout and "--force" in refused.stdout
    assert target.read_bytes() == work

    forced = cli("build", "--force", "--solutions", solutions, "--notebooks", notebooks)
    assert forced.returncode == 0, forced.stdout + forced.stderr
    backups = list(notebooks.glob("01_softmax.backup-*.ipynb"))
    assert len(backups) == 1 and backups[0].read_bytes() == work
    assert backups[0].name in forced.stdout
    assert "my_answer" not in target.read_text()


def test_cli_reports_bad_markers_on_stderr(dirs):
    solutions, notebooks = dirs
    write_solution(solutions, "02_bad.ipynb", solution_notebook(extra_cells=[new_code_cell("### BEGIN SOLUTION")]))
    result = cli("build", "--solutions", solutions, "--notebooks", notebooks)
    assert result.returncode == 2
    assert "solutions/02_bad.ipynb, cell 5" in result.stderr and "never closed" in result.stderr
    assert not notebooks.exists()


def test_cli_without_arguments_prints_usage_and_fails_and_catalog_lists_exercises():
    result = cli()
    assert result.returncode == 2 and result.stderr.startswith("usage: python -m tutor")
    for command in ("build", "run", "catalog"):
        assert command in result.stderr
    result = cli("catalog")
    assert result.returncode == 0
    from tutor.course import catalog
    for nb in catalog.NOTEBOOKS:
        assert nb.filename in result.stdout
    for ex in catalog.EXERCISES:
        assert ex.name in result.stdout


# --- run ---------------------------------------------------------------------------------


def test_run_executes_a_solution_in_place_with_strict_checks_then_builds(tmp_path):
    solutions, notebooks = tmp_path / "solutions", tmp_path / "notebooks"
    (solutions).mkdir()
    (solutions / "data.txt").write_text("from the solutions folder")
    nb = new_notebook(cells=[
        new_code_cell("import os\nprint(os.environ['TUTOR_STRICT'], open('data.txt').read())"),
        new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\nf()"),
    ])
    write_solution(solutions, "01_run.ipynb", nb)
    lines = []
    status = run.run_solutions(solutions, notebooks, only=["1"], timeout=60, log=lines.append)
    assert status == 0, "\n".join(lines)
    ran = read(solutions / "01_run.ipynb")
    assert ran.cells[0].outputs[0].text == "1 from the solutions folder\n"
    assert ran.cells[1].outputs[0].data["text/plain"] == "1"
    assert "execution" not in ran.cells[0].metadata  # no timings: stable diffs
    learner = read(notebooks / "01_run.ipynb")
    assert learner.cells[1].outputs == [] and "raise NotImplementedError()" in learner.cells[1].source


def test_run_leaves_a_failing_solution_unchanged(tmp_path):
    solutions, notebooks = tmp_path / "solutions", tmp_path / "notebooks"
    path = write_solution(solutions, "01_fail.ipynb", new_notebook(cells=[new_code_cell("1 / 0")]))
    before = path.read_bytes()
    lines = []
    assert run.run_solutions(solutions, notebooks, timeout=60, log=lines.append) == 1
    assert path.read_bytes() == before
    assert "ZeroDivisionError" in "\n".join(lines)
    assert not notebooks.exists()


# --- the real repository -----------------------------------------------------------------


MAINTAINER_ENV = ("TUTOR_MAINTAINER", "CI")  # .ci/run sets TUTOR_MAINTAINER=1; CI services set CI


def _maintainer_mode() -> bool:
    return any(os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no") for name in MAINTAINER_ENV)


def repository_staleness(solutions, notebooks):
    """``(stale, learner_work)`` for the learner notebooks of a repository.

    ``stale``: notebooks that differ from a fresh build of ``solutions`` and hold no learner's
    edits (a maintainer changed a solution and did not rebuild), and missing or orphan ones.
    ``learner_work``: ``(name, why)`` of notebooks that hold a learner's edits: their cells no
    longer match the hash recorded when they were built. They are the learner's business.
    """
    report = b.build(solutions, notebooks, check=True)
    assert not report.errors, report.errors
    stale, learner_work = [], []
    for r in report.by_status("stale", "missing", "orphan"):
        edits = b.learner_edits(r.path) if r.status == "stale" else None
        if not edits:
            stale.append(f"{r.name}: {r.status}: {r.reason}")
            continue
        fresh = b.make_learner_notebook(b.read_notebook(pathlib.Path(solutions) / r.name), "")
        recorded = b.read_notebook(r.path).metadata.get("tutor", {}).get("build_hash")
        since = ("" if recorded == fresh.metadata["tutor"]["build_hash"]
                 else "; solutions/ also changed since it was built")
        learner_work.append((r.name, f"{edits}{since}"))
    return stale, learner_work


def test_the_repository_learner_notebooks_are_up_to_date():
    """Maintainers: notebooks/ must be rebuilt after a solution changes (`python -m tutor build`).

    A learner who saved work in notebooks/ is not told that it is an error: those notebooks are
    skipped with one line, unless TUTOR_MAINTAINER=1 or CI is set (then every difference fails).
    """
    if not list((ROOT / "solutions").glob("*.ipynb")):
        pytest.skip("solutions/ has no notebooks yet")
    stale, learner_work = repository_staleness(ROOT / "solutions", ROOT / "notebooks")
    if _maintainer_mode():
        stale += [f"{name}: holds edits: {why}" for name, why in learner_work]
    assert not stale, ("notebooks/ is out of date with solutions/; run `python -m tutor build`\n"
                       + "\n".join(stale))
    if learner_work:
        pytest.skip("notebooks/ holds your own work (" + ", ".join(name for name, _ in learner_work)
                    + "): not compared with solutions/; that is fine")


def test_staleness_tells_a_maintainers_stale_build_from_a_learners_work(dirs):
    solutions, notebooks = dirs
    nbformat.write(solution_notebook(), solutions / "01_softmax.ipynb")
    nbformat.write(solution_notebook(), solutions / "02_other.ipynb")
    assert b.build(solutions, notebooks).exit_code == 0
    assert repository_staleness(solutions, notebooks) == ([], [])

    # a learner types code and runs cells in 01, and saves it
    learner = read(notebooks / "01_softmax.ipynb")
    learner.cells[1].source = learner.cells[1].source.replace("raise NotImplementedError()", "return x")
    learner.cells[1].outputs = [new_output("stream", name="stdout", text="defined\n")]
    learner.cells[1].execution_count = 1
    nbformat.write(learner, notebooks / "01_softmax.ipynb")
    stale, work = repository_staleness(solutions, notebooks)
    assert stale == [] and [name for name, _ in work] == ["01_softmax.ipynb"]
    assert "outputs or code typed" in work[0][1] and "solutions/ also changed" not in work[0][1]

    # a maintainer edits solution 02 and forgets to rebuild: that is still caught
    sol = read(solutions / "02_other.ipynb")
    sol.cells[0].source += "\n\nA new sentence."
    nbformat.write(sol, solutions / "02_other.ipynb")
    stale, work = repository_staleness(solutions, notebooks)
    assert [line.split(":")[0] for line in stale] == ["02_other.ipynb"] and len(work) == 1

    # and when the learner's notebook 01 is also behind its solution, the line says so
    sol = read(solutions / "01_softmax.ipynb")
    sol.cells[0].source += "\n\nAnother sentence."
    nbformat.write(sol, solutions / "01_softmax.ipynb")
    _, work = repository_staleness(solutions, notebooks)
    assert "solutions/ also changed since it was built" in work[0][1]


def _env_for_data(tmp_path, **extra):
    env = {key: value for key, value in os.environ.items()
           if key not in ("TUTOR_NAMES", "TUTOR_SHAKESPEARE", "TUTOR_OFFLINE")}
    return {**env, "PYTHONPATH": str(ROOT), "TUTOR_CACHE_DIR": str(tmp_path / "cache"), **extra}


def _solutions_that_say_they_ran(tmp_path, *names):
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    for name in names:
        nb = new_notebook(cells=[new_code_cell(f"open('ran-{name}', 'w').write('yes')")])
        nbformat.write(nb, solutions / f"{name}.ipynb")
    args = [sys.executable, "-m", "tutor", "run", "--solutions", str(solutions), "--notebooks", str(tmp_path / "nb"),
            "--timeout", "120"]
    return solutions, args


def test_run_refuses_when_the_names_are_not_the_full_data_set(tmp_path):
    solutions, args = _solutions_that_say_they_ran(tmp_path, "01_x")
    small = tmp_path / "few.txt"
    small.write_text("laika\nmary\n")
    refused = subprocess.run(args, capture_output=True, text=True, timeout=300,
                             env=_env_for_data(tmp_path, TUTOR_NAMES=str(small), TUTOR_OFFLINE="1"))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "refusing to run: the notebooks would train on 2 names from few.txt (TUTOR_NAMES)" in refused.stderr
    assert "unset TUTOR_NAMES (the course ships all 100,364 names" in refused.stderr
    assert "--partial-data" in refused.stderr and not (solutions / "ran-01_x").exists()

    forced = subprocess.run(args + ["--partial-data"], capture_output=True, text=True,
                            timeout=300, env=_env_for_data(tmp_path, TUTOR_NAMES=str(small)))
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert "WARNING: --partial-data: the notebooks would train on 2 names" in forced.stderr
    assert (solutions / "ran-01_x").read_text() == "yes"


def test_run_of_notebook_10_needs_the_full_shakespeare_not_the_full_names(tmp_path):
    solutions, args = _solutions_that_say_they_ran(tmp_path, "01_x", "10_x")
    small = tmp_path / "few.txt"
    small.write_text("laika\nmary\n")
    short = tmp_path / "short.txt"
    short.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n")
    refused = subprocess.run(args + ["10"], capture_output=True, text=True, timeout=300,
                             env=_env_for_data(tmp_path, TUTOR_NAMES=str(small), TUTOR_SHAKESPEARE=str(short)))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    (line, hint) = refused.stderr.strip().splitlines()
    assert line.startswith("error: refusing to run: the notebooks would train on 61 characters from short.txt "
                           "(TUTOR_SHAKESPEARE), not the full tiny Shakespeare (1,115,394 characters, checksummed)")
    assert "names" not in line and "--partial-data" in hint and not (solutions / "ran-10_x").exists()

    # offline, nothing cached, no TUTOR_SHAKESPEARE: the text the package ships; the small names do not matter
    ran = subprocess.run(args + ["10"], capture_output=True, text=True, timeout=300,
                         env=_env_for_data(tmp_path, TUTOR_NAMES=str(small), TUTOR_OFFLINE="1"))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "refusing to run" not in ran.stderr and "--partial-data" not in ran.stderr
    assert (solutions / "ran-10_x").read_text() == "yes" and not (solutions / "ran-01_x").exists()


def test_data_needed_follows_the_catalog(tmp_path):
    assert run.data_needed([tmp_path / "01_x.ipynb", tmp_path / "10_scaling_up.ipynb"]) == ["names", "shakespeare"]
    assert run.data_needed([tmp_path / "10_x.ipynb", tmp_path / "11_x.ipynb"]) == ["shakespeare"]
    assert run.data_needed([tmp_path / "03_masking.ipynb"]) == []
    assert run.data_needed([tmp_path / "99_new.ipynb"]) == ["names", "shakespeare"]  # unknown: it may load either


def test_the_catalog_names_the_data_every_solution_notebook_loads():
    uses = {"names": ("load_names",), "shakespeare": ("load_shakespeare", "shakespeare_data", "bpe_vs_chars.load_text",
                                                       "long_run.")}
    for n in catalog.NOTEBOOKS:
        code = "\n".join(cell.source for cell in nbformat.read(ROOT / "solutions" / n.filename, as_version=4).cells
                         if cell.cell_type == "code")
        loads = sorted(name for name, calls in uses.items() if any(call in code for call in calls))
        assert loads == sorted(n.data), f"{n.filename} loads {loads}, the catalog says {n.data}"


def test_data_source_problem_is_none_for_the_full_data_set(monkeypatch):
    from conftest import ALLNAMES
    if not ALLNAMES.is_file():
        pytest.skip(f"{ALLNAMES} is absent")
    monkeypatch.setenv("TUTOR_NAMES", str(ALLNAMES))
    assert run.data_source_problem() is None
    monkeypatch.delenv("TUTOR_NAMES")
    monkeypatch.delenv("TUTOR_SHAKESPEARE", raising=False)
    assert run.data_source_problem() is None  # the copies that ship in the package


def _widget_notebook(ids):
    """A notebook as nbclient leaves it: a widget output and the saved widget state, with ids `ids`."""
    view = {"model_id": ids[0], "version_major": 2, "version_minor": 0}
    out = new_output("display_data", data={"application/vnd.jupyter.widget-view+json": view, "text/plain": "x"})
    nb = new_notebook(cells=[new_code_cell("interactive(f)", outputs=[out], id="widget-cell")])
    state = {
        ids[0]: {"model_name": "VBoxModel",
                 "state": {"children": [f"IPY_MODEL_{ids[1]}"], "layout": f"IPY_MODEL_{ids[2]}"}},
        ids[1]: {"model_name": "IntSliderModel",
                 "state": {"layout": f"IPY_MODEL_{ids[2]}", "description": "sha 0123456789abcdef0123456789abcdef"}},
        ids[2]: {"model_name": "LayoutModel", "state": {}},
    }
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"version_major": 2, "version_minor": 0,
                                                                             "state": state}}
    return nb


def test_rerunning_a_notebook_keeps_its_widget_ids():
    # Jupyter draws fresh random widget ids on every run; `tutor run` renames them so that an
    # unchanged notebook re-runs to the same file (issue 7: ~375 changed lines per run before).
    import uuid

    runs = []
    for _ in range(2):
        nb = _widget_notebook([uuid.uuid4().hex for _ in range(3)])
        run.stable_widget_ids(nb, "03_masking")
        runs.append(b.notebook_bytes(nb))
    assert runs[0] == runs[1]
    nb = nbformat.reads(runs[0].decode(), as_version=4)
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    view_id = nb.cells[0].outputs[0].data["application/vnd.jupyter.widget-view+json"]["model_id"]
    assert view_id in state  # the output still points at its saved model
    assert all(ref.removeprefix("IPY_MODEL_") in state for ref in state[view_id]["state"]["children"])
    assert any("0123456789abcdef0123456789abcdef" in str(m) for m in state.values())  # other hex text untouched
    other = _widget_notebook([uuid.uuid4().hex for _ in range(3)])
    run.stable_widget_ids(other, "04_multi_head_attention")
    assert b.notebook_bytes(other) != runs[0]  # ids differ between notebooks

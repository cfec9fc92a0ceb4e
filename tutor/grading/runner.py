"""Grade notebooks: run each submission in a fresh Jupyter kernel that the grader controls (nbclient).

:func:`grade` grades every submission (``python -m tutor grade``), several notebooks at once with
``Options.workers``; :func:`grade_notebook` grades one. Each attempt (:func:`run_attempt`) runs the cells
of ``tutor.grading.plan`` and believes nothing the notebook stored: only the display messages tagged with
the nonce of their check cell count.

A learner cell that hangs or kills the kernel (``os._exit``, a segfault, memory) is left out and the
notebook is run again without it; a check that does so costs that exercise only. A per-cell timeout, a
total timeout per notebook and a memory cap (``RLIMIT_AS``) bound every run. A learner cell that calls
the exercise's model answer earns nothing even when its check passes. See the README's "Grading" section
for the threat model.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

import nbformat
from tqdm.auto import tqdm

import tutor
from tutor import env
from tutor.course import catalog
from tutor.grading.grades import ExerciseGrade, NotebookGrade, Options, StudentGrade
from tutor.grading.kernel import MIME
from tutor.grading.plan import PACKAGE, PlannedCell, check_cell, grader_cells, load_template, plan_cells
from tutor.grading.submissions import find_submissions, match_notebook

# --------------------------------------------------------------------------------------
# The kernel: a pristine copy of the package, and its environment


def package_snapshot() -> dict[str, bytes]:
    """The ``tutor`` package's source files, read once: every kernel gets a fresh copy of these."""
    root = pathlib.Path(tutor.__file__).resolve().parent
    return {str(p.relative_to(root.parent)): p.read_bytes()
            for p in sorted(root.rglob("*.py")) if "__pycache__" not in p.parts}


def write_package(snapshot: dict[str, bytes], directory: pathlib.Path) -> pathlib.Path:
    """Write the files of :func:`package_snapshot` into ``directory`` (a new one for every kernel)."""
    for rel, data in snapshot.items():
        out = directory / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
    return directory


def kernel_env(package_dir: pathlib.Path, workdir: pathlib.Path) -> dict[str, str]:
    """The kernel's environment variables: ours without Jupyter's, Python's and the course's own, then the
    package copy on the path, the CPU with one thread, quick training, no progress file, no downloads."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("JPY_", "TUTOR_", "PYTHON"))}
    environ.update({
        "PYTHONPATH": str(package_dir),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "MPLBACKEND": "Agg",
        env.STRICT: "0",
        env.PROGRESS: "0",
        env.PROGRESS_FILE: str(workdir / "progress.json"),
        env.OFFLINE: "1",
        env.QUICK: "1",
        env.DEVICE: "cpu",
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    })
    if env.NAMES in os.environ:  # the instructor's own names file
        environ[env.NAMES] = os.environ[env.NAMES]
    return environ


# --------------------------------------------------------------------------------------
# Running one attempt in a fresh kernel


@dataclass
class Attempt:
    results: dict = field(default_factory=dict)  # exercise -> payload
    cell_errors: dict = field(default_factory=dict)  # label -> "NameError: ..."
    fatal: tuple | None = None  # (planned cell index, reason)
    out_of_time: bool = False
    load: dict | None = None


def _error_text(cell) -> str | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            value = str(output.get("evalue", ""))[:300]
            return f"{output.get('ename', 'Error')}: {value}" if value else output.get("ename", "Error")
    return None


def _payload(cell, nonce: str) -> dict | None:
    found = None
    for output in cell.get("outputs", []):
        data = output.get("data", {}) if output.get("output_type") in ("display_data", "execute_result") else {}
        payload = data.get(MIME)
        if isinstance(payload, str):
            with contextlib.suppress(ValueError):
                payload = json.loads(payload)
        if isinstance(payload, dict) and payload.get("nonce") == nonce:
            if found is not None:
                return None  # two answers to one question: forged
            found = payload
    return found


def _death_reason(client) -> str:
    code = None
    with contextlib.suppress(Exception):
        process = client.km.provisioner.process
        code = process.wait(timeout=2)
    if code is None:
        return "the Python process running your notebook died"
    if code < 0:
        name = {signal.SIGSEGV: "a segmentation fault (SIGSEGV)", signal.SIGKILL: "SIGKILL (usually: out of memory)",
                signal.SIGABRT: "an abort (SIGABRT)"}.get(-code, f"signal {-code}")
        return f"the Python process running your notebook was killed by {name}"
    return f"the Python process running your notebook exited with code {code} (os._exit or sys.exit in a thread?)"


def run_attempt(planned: list[PlannedCell], snapshot: dict, options: Options, deadline: float) -> Attempt:
    """Run the ``planned`` cells in a fresh kernel, one by one, and collect what they reported."""
    # imported here: nbclient is an optional dependency (the dev extra) that only grading needs
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    attempt = Attempt()
    with tempfile.TemporaryDirectory(prefix="tutor-grade-") as tmp:
        tmp = pathlib.Path(tmp)
        workdir = tmp / "work"
        workdir.mkdir()
        setup_pkg = write_package(snapshot, tmp / f"setup-{secrets.token_hex(4)}")
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(p.source) for p in planned]
        client = NotebookClient(nb, timeout=int(options.cell_timeout), kernel_name=options.kernel_name,
                                allow_errors=True, record_timing=False, startup_timeout=120,
                                resources={"metadata": {"path": str(workdir)}})
        try:
            with client.setup_kernel(env=kernel_env(setup_pkg, workdir), cwd=str(workdir),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
                for index, (cell, plan) in enumerate(zip(nb.cells, planned)):
                    remaining = deadline - time.monotonic()
                    if remaining <= 1:
                        attempt.out_of_time = True
                        attempt.fatal = (index, "the notebook ran out of its total time limit "
                                                f"({options.total_timeout:.0f} s)")
                        break
                    if plan.role == "grader-load":
                        package = write_package(snapshot, tmp / f"checks-{secrets.token_hex(8)}")
                        cell.source = plan.source.replace(PACKAGE, str(package))
                    # the grader's and the course's own cells (imports) get at least 2 minutes
                    limit = (options.cell_timeout if plan.role in ("learner", "check")
                             else max(options.cell_timeout, 120))
                    client.timeout = max(1, int(min(limit, remaining)))
                    try:
                        client.execute_cell(cell, index)
                    except CellTimeoutError:
                        if client.timeout < limit:
                            attempt.out_of_time = True
                            attempt.fatal = (index, "the notebook ran out of its total time limit "
                                                    f"({options.total_timeout:.0f} s)")
                        else:
                            attempt.fatal = (index, f"it ran for more than {options.cell_timeout:.0f} s "
                                                    "and was stopped")
                        break
                    except DeadKernelError:
                        attempt.fatal = (index, _death_reason(client))
                        break
                    error = _error_text(cell)
                    if plan.role == "learner":
                        if error:
                            attempt.cell_errors[index] = error
                        cell.outputs = []  # keep memory small: only the error matters
                    elif plan.role == "check":
                        payload = _payload(cell, plan.nonce)
                        if payload is not None:
                            attempt.results[plan.exercises[0]] = payload
                        else:
                            attempt.results[plan.exercises[0]] = {
                                "status": "error", "summary": "the check gave no result",
                                "details": [error] if error else []}
                    elif plan.role == "grader-load":
                        attempt.load = _payload(cell, plan.nonce)
                        if attempt.load is None:
                            attempt.fatal = (index, "the checks could not be loaded after your code ran"
                                                    + (f" ({error})" if error else ""))
                            break
                    elif plan.role in ("course", "capture"):
                        cell.outputs = []
                    elif error and plan.role in ("grader", "setup"):
                        attempt.fatal = (index, f"the grader's setup failed: {error}")
                        break
        except DeadKernelError:
            attempt.fatal = (None, "the kernel died")
        except Exception as error:  # noqa: BLE001 - a kernel that does not start, a broken client
            if attempt.fatal is None:
                attempt.fatal = (None, f"the kernel could not run the notebook: {type(error).__name__}: {error}")
    return attempt


# --------------------------------------------------------------------------------------
# Grading one notebook


def _uses_model_answer(name: str, cells) -> str | None:
    """``tutor.reference.<answer>`` when a cell defining exercise ``name`` uses the exercise's model answer."""
    answer = catalog.BY_NAME[name].reference
    pattern = re.compile(rf"\b(?:ref|reference|tutor\.reference)\.{answer}\b"
                         rf"|from\s+tutor(?:\.reference)?\s+import\s[^\n]*\b{answer}\b")
    for cell in cells:
        if cell.role == "learner" and name in cell.exercises and pattern.search(cell.source):
            return f"tutor.reference.{answer}"
    return None


def grade_notebook(path, number: int, options: Options | None = None, snapshot=None) -> NotebookGrade:
    """Grade one learner notebook (``path``) as a submission of catalog notebook ``number``."""
    options = options or Options()
    snapshot = snapshot or package_snapshot()
    start = time.monotonic()
    deadline = start + options.total_timeout
    entry = catalog.notebook(number)
    template = load_template(number, options)
    grade = NotebookGrade(number, entry.slug, str(path))
    exercises = catalog.exercises(number)

    def finish(results: dict[str, dict], default: tuple[str, str]) -> NotebookGrade:
        for e in exercises:
            payload = results.get(e.name) or {"status": "error", "summary": default[0],
                                              "details": [default[1]] if default[1] else []}
            grade.exercises.append(ExerciseGrade(e.name, number, template.points[e.name], payload["status"],
                                                 payload["summary"], list(payload.get("details", []))))
        grade.seconds = time.monotonic() - start
        return grade

    try:
        submission = nbformat.reads(pathlib.Path(path).read_text(encoding="utf-8"), as_version=4)
    except Exception as error:  # noqa: BLE001 - not JSON, not a notebook
        grade.notes.append(f"the notebook cannot be read: {type(error).__name__}: {str(error)[:200]}")
        return finish({}, ("not graded: the notebook file cannot be read", grade.notes[-1]))

    learner = plan_cells(submission, template)  # (with the course's setup and context cells)
    head, tail = grader_cells(options)
    results: dict[str, dict] = {}
    excluded: dict[int, str] = {}  # index into `learner` -> why it was left out
    for attempt_number in range(1, options.max_attempts + 1):
        remaining = [e for e in exercises if e.name not in results]
        if not remaining:
            break
        grade.attempts = attempt_number
        checks = [check_cell(e) for e in remaining]
        kept = [i for i in range(len(learner)) if i not in excluded]
        planned = head + [learner[i] for i in kept] + tail + checks
        attempt = run_attempt(planned, snapshot, options, deadline)

        learner_at = {len(head) + k: i for k, i in enumerate(kept)}  # planned index -> learner index
        # results first: the checks that ran are final
        for name, payload in attempt.results.items():
            details = list(payload.get("details", []))
            if payload["status"] != "passed":
                for planned_index, error in attempt.cell_errors.items():
                    cell = learner[learner_at[planned_index]]
                    if name in cell.exercises:
                        details.append(f"{cell.label} raised {error}")
                for i, why in excluded.items():
                    if name in learner[i].exercises:
                        details.append(f"{learner[i].label} was not run: {why}")
            copied = _uses_model_answer(name, [learner[i] for i in kept])
            if payload["status"] == "passed" and copied:
                payload = {"status": "failed", "summary": f"your code calls the model answer {copied} instead of "
                                                          "computing the result itself"}
                details = [f"the check passed, but only because {copied} did the work"]
            results[name] = {**payload, "details": details}
        if attempt.load:
            if attempt.load.get("changed"):
                note = ("your code changed " + ", ".join(attempt.load["changed"][:8])
                        + "; the grader put the originals back before checking")
                if note not in grade.notes:
                    grade.notes.append(note)
            if attempt.load.get("foreign"):
                grade.notes.append("the checks did not load cleanly: " + ", ".join(attempt.load["foreign"][:5]))
                return finish(results, ("not graded: the grader could not load a pristine copy of the checks", ""))
        if attempt.fatal is None:
            continue
        index, why = attempt.fatal
        if attempt.out_of_time:
            grade.notes.append(why)
            return finish(results, ("not graded: " + why, ""))
        if index is not None and index in learner_at and learner[learner_at[index]].role != "setup":
            learner_index = learner_at[index]
            excluded[learner_index] = why
            cell = learner[learner_index]
            grade.notes.append(f"{cell.label} was left out: {why}")
            continue  # run again without it
        if index is not None and planned[index].role == "check":
            name = planned[index].exercises[0]
            results[name] = {"status": "failed", "summary": f"checking your code failed: {why}",
                             "details": ["does your code loop forever, crash Python or use too much memory?"]}
            continue
        if index is not None:
            why = f"{planned[index].label}: {why}"
        grade.notes.append(why)
        return finish(results, ("not graded: " + why, ""))
    else:
        if any(e.name not in results for e in exercises):
            grade.notes.append(f"gave up after {options.max_attempts} attempts")
    return finish(results, ("not graded: too many faults in this notebook", ""))


# --------------------------------------------------------------------------------------
# Grading many


def grade(paths, options: Options | None = None, assignment=None, progress: bool = True) -> list[StudentGrade]:
    """Grade every SUBMISSION in ``paths``; returns one :class:`StudentGrade` per submission.

    ``assignment`` lists the notebook numbers every student should hand in (a missing one scores
    0); by default it is every notebook found in any submission.
    """
    options = options or Options()
    snapshot = package_snapshot()
    with tempfile.TemporaryDirectory(prefix="tutor-grade-in-") as workdir:
        found = find_submissions(paths, pathlib.Path(workdir))
        students, jobs = [], []
        for student, source, files, notes in found:
            s = StudentGrade(student, source, notes=list(notes))
            students.append(s)
            for f in files:
                nb = match_notebook(f)
                if nb is None:
                    s.notes.append(f"{f.name}: not a notebook of this course (expected a name like 03_masking.ipynb)")
                elif any(j[1] == nb.number for j in jobs if j[0] is s):
                    s.notes.append(f"{f.name}: a second copy of notebook {nb.number:02d}; only the first was graded")
                else:
                    jobs.append((s, nb.number, f))
        wanted = sorted(set(assignment) if assignment else {number for _, number, _ in jobs})
        for number in wanted:
            load_template(number, options)  # once, before the threads start

        bar = None
        if progress:
            bar = tqdm(total=len(jobs), desc="grading", unit="notebook", file=sys.stderr)
        done: dict[tuple, NotebookGrade] = {}
        with ThreadPoolExecutor(max_workers=max(1, options.workers)) as pool:
            futures = {pool.submit(_grade_job, f, number, options, snapshot): (s, number) for s, number, f in jobs}
            for future in as_completed(futures):
                s, number = futures[future]
                done[(id(s), number)] = future.result()
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix_str(f"{s.student} {number:02d}: {done[(id(s), number)].score:g}")
        if bar is not None:
            bar.close()
        for s in students:
            for number in wanted:
                if (id(s), number) in done:
                    s.notebooks.append(done[(id(s), number)])
                else:
                    s.notebooks.append(_missing(number, options))
            extra = sorted(n for (sid, n) in done if sid == id(s) and n not in wanted)
            for number in extra:
                s.notebooks.append(done[(id(s), number)])
            s.notebooks.sort(key=lambda nb: nb.number)
    return students


def _grade_job(path, number, options, snapshot) -> NotebookGrade:
    try:
        return grade_notebook(path, number, options, snapshot)
    except Exception as error:  # noqa: BLE001 - a bug here must not stop the batch
        template = load_template(number, options)
        g = NotebookGrade(number, catalog.notebook(number).slug, str(path))
        g.notes.append(f"the grader failed on this notebook: {type(error).__name__}: {error}")
        g.exercises = [ExerciseGrade(e.name, number, template.points[e.name], "error",
                                     "not graded: the grader failed", []) for e in catalog.exercises(number)]
        return g


def _missing(number: int, options: Options) -> NotebookGrade:
    template = load_template(number, options)
    entry = catalog.notebook(number)
    g = NotebookGrade(number, entry.slug, "")
    g.notes.append(f"{entry.filename} was not submitted")
    g.exercises = [ExerciseGrade(e.name, number, template.points[e.name], "missing",
                                 f"{entry.filename} was not submitted", []) for e in catalog.exercises(number)]
    return g

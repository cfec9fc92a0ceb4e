"""Grade notebooks: run each submission in a fresh Jupyter kernel that the grader controls (nbclient), then
check it in a fork of that kernel that no learner code ran in (see ``tutor.grading.kernel``).

:func:`grade` grades every submission (``python -m tutor grade``), several notebooks at once with
``Options.workers``; :func:`grade_notebook` grades one. Each attempt (:func:`run_attempt`) runs the cells
of ``tutor.grading.plan`` and believes nothing the notebook stored: the results come from the checker, on
the grader's channel (``tutor.grading.channel``).

A learner cell that hangs or kills the kernel (``os._exit``, a segfault, memory) is left out and the
notebook is run again without it; a check that does so costs that exercise only (each check runs in a
process of its own). A per-cell timeout, a total timeout per notebook and a memory cap (``RLIMIT_AS``)
bound every run. An exercise whose code calls its model answer earns nothing; code that could reach the
grader, or that is the model answer with the names changed, is flagged for review. See the README's
"Grading" section for the threat model.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

import nbformat
from tqdm.auto import tqdm

import tutor
from tutor import env, reference
from tutor.course import catalog
from tutor.grading import answers, channel, review
from tutor.grading.grades import ExerciseGrade, NotebookGrade, Options, StudentGrade
from tutor.grading.plan import CHANNEL, PlannedCell, grader_cells, load_template, plan_cells
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


def kernel_env(package_dir: pathlib.Path, workdir: pathlib.Path, marker: str = "") -> dict[str, str]:
    """The kernel's environment variables: ours without Jupyter's, Python's and the course's own, then the
    package copy on the path, the CPU with one thread, quick training, no progress file, no downloads, and
    ``marker``, which every process started from the kernel inherits (so that the grader can stop them all)."""
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
        env.GRADE_RUN: marker,
    })
    if env.NAMES in os.environ:  # the instructor's own names file
        environ[env.NAMES] = os.environ[env.NAMES]
    return environ


# --------------------------------------------------------------------------------------
# Running one attempt in a fresh kernel


@dataclass
class Attempt:
    results: dict = field(default_factory=dict)  # exercise -> payload
    cell_errors: dict = field(default_factory=dict)  # planned index -> "NameError: ..."
    fatal: tuple | None = None  # (planned cell index or None, reason)
    out_of_time: bool = False
    # whether the kernel started: one that did not is the machine's fault, tried again (kernels started side by
    # side can lose a TCP port to each other between choosing and binding it, jupyter/jupyter_client#154)
    started: bool = False
    load: dict = field(default_factory=dict)  # what the checker put back, reset and loaded
    notes: list = field(default_factory=list)  # what happened to the checks as a whole


def _error_text(cell) -> str | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            value = str(output.get("evalue", ""))[:300]
            return f"{output.get('ename', 'Error')}: {value}" if value else output.get("ename", "Error")
    return None


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


def run_attempt(planned: list[PlannedCell], snapshot: dict, options: Options, deadline: float,
                exercises: list[tuple[str, str]]) -> Attempt:
    """Run the ``planned`` cells in a fresh kernel, one by one; then, if they all ran, check ``exercises``
    (``[(name, learner_name)]``) in the checker and collect the results."""
    # imported here: nbclient is an optional dependency (the dev extra) that only grading needs
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    attempt = Attempt()
    with tempfile.TemporaryDirectory(prefix="tutor-grade-") as tmp:
        tmp = pathlib.Path(tmp)
        workdir = tmp / "work"
        workdir.mkdir()
        setup_pkg = write_package(snapshot, tmp / f"setup-{secrets.token_hex(4)}")
        line = channel.Channel(tmp / "channel")
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(p.source.replace(CHANNEL, line.path) if p.role == "grader" else p.source)
                    for p in planned]
        client = NotebookClient(nb, timeout=int(options.cell_timeout), kernel_name=options.kernel_name,
                                allow_errors=True, record_timing=False, startup_timeout=120,
                                resources={"metadata": {"path": str(workdir)}})
        kernel = None
        marker = secrets.token_hex(8)
        try:
            with client.setup_kernel(env=kernel_env(setup_pkg, workdir, marker), cwd=str(workdir),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
                attempt.started = True
                try:
                    kernel = _run_cells(attempt, client, nb.cells, planned, line, options, deadline)
                    if attempt.fatal is None and kernel is not None:
                        _check(attempt, line, kernel, snapshot, tmp, workdir, options, deadline, exercises, marker)
                finally:
                    # before nbclient's cleanup, which waits on the kernel's ports: a process of the learner's
                    # holding them would make it wait for ever
                    channel.kill_marked((env.GRADE_RUN, marker))
        except DeadKernelError:
            if attempt.fatal is None and not attempt.results:
                attempt.fatal = (None, "the kernel died")
        except Exception as error:  # noqa: BLE001 - a kernel that does not start, a broken client
            if attempt.fatal is None and not attempt.results:
                attempt.fatal = (None, f"the kernel could not run the notebook: {type(error).__name__}: {error}")
        finally:
            line.close()
            if kernel is not None:
                channel.kill_group(kernel)
    return attempt


def _settle_tasks() -> None:
    """Cancel what nbclient left running on this thread's event loop after a cell, and collect how it ended.

    A cell that ends in an exception (a timeout, a dead kernel) leaves nbclient's poll of the kernel
    running; it fails a second later ('assert self.kc is not None'), and the garbage collector logs that
    failure wherever it next runs. The log's traceback parses source with ``ast``, which, inside another
    ``ast`` call of that thread, fails it with 'AST constructor recursion depth mismatch' (CPython 3.11)."""
    from jupyter_core.utils import ensure_event_loop

    loop = ensure_event_loop()
    left = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in left:
        task.cancel()
    if left:
        loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))


def _run_cells(attempt: Attempt, client, cells, planned, line, options: Options, deadline: float) -> int | None:
    """Execute the cells one by one, recording errors and the first fault; returns the kernel's pid (from
    the preamble's hello on the channel), or None."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    kernel = None
    for index, (cell, plan) in enumerate(zip(cells, planned)):
        remaining = deadline - time.monotonic()
        if remaining <= 1:
            attempt.out_of_time = True
            attempt.fatal = (index, f"the notebook ran out of its total time limit ({options.total_timeout:.0f} s)")
            break
        # the grader's and the course's own cells (imports) get at least 2 minutes
        limit = options.cell_timeout if plan.role == "learner" else max(options.cell_timeout, 120)
        client.timeout = max(1, int(min(limit, remaining)))
        try:
            client.execute_cell(cell, index)
        except CellTimeoutError:
            if client.timeout < limit:
                attempt.out_of_time = True
                attempt.fatal = (index, f"the notebook ran out of its total time limit "
                                        f"({options.total_timeout:.0f} s)")
            else:
                attempt.fatal = (index, f"it ran for more than {options.cell_timeout:.0f} s and was stopped")
            break
        except DeadKernelError:
            attempt.fatal = (index, _death_reason(client))
            break
        finally:
            _settle_tasks()
        error = _error_text(cell)
        cell.outputs = []  # keep memory small: only the error matters
        if plan.role == "learner" and error:
            attempt.cell_errors[index] = error
        elif plan.role == "grader":
            if error:
                attempt.fatal = (index, f"the grader's setup failed: {error}")
                break
            try:
                kernel = line.accept(max(1.0, min(60.0, deadline - time.monotonic())))
            except channel.ChannelError as why:
                attempt.fatal = (index, str(why))
                break
        elif error and plan.role == "setup":
            attempt.fatal = (index, f"the grader's setup failed: {error}")
            break
    return kernel


def _check(attempt: Attempt, line, kernel: int, snapshot: dict, tmp: pathlib.Path, workdir: pathlib.Path,
           options: Options, deadline: float, exercises, marker: str) -> None:
    """The checks: fork the checker out of the kernel, write the pristine package, collect the results."""
    try:
        checker, hello, started = channel.start_checker(line, kernel, max(1.0, min(120.0, deadline - time.monotonic())),
                                                   (env.GRADE_RUN, marker))
    except channel.ChannelError as why:
        attempt.fatal = (None, str(why))
        return
    attempt.load = hello
    if started:
        attempt.notes.append(f"{started} process(es) your code started were stopped before the checks")
    package = write_package(snapshot, tmp / f"checks-{secrets.token_hex(8)}")
    environ = kernel_env(package, workdir, marker)
    environ.update({env.STRICT: "0", env.PROGRESS: "0"})
    go = {"package": str(package), "workdir": str(workdir), "environ": environ,
          "exercises": [list(e) for e in exercises], "timeout": float(options.cell_timeout),
          "seconds": max(1.0, deadline - time.monotonic())}
    loaded, attempt.results, notes = channel.read_results(line, checker, go, deadline + 5)
    attempt.notes += notes
    attempt.load = {**hello, **loaded}


# --------------------------------------------------------------------------------------
# Grading one notebook


# CPython's ast module keeps one recursion counter per interpreter, not per thread (gh-106905): two workers
# parsing at once failed a notebook with "AST constructor recursion depth mismatch" here (3.11.7). The workers
# parse one notebook at a time.
_PARSING = threading.Lock()


def review_notebook(learner: list[PlannedCell], number: int) -> tuple[list[str], dict[str, list[str]]]:
    """What of the learner's cells is flagged for review: lines that could reach the grader (for the notebook),
    and, per exercise, code that is the model answer's with only names or formatting changed."""
    lines = [flag.text() for cell in learner if cell.role == "learner"
             for flag in review.flags(cell.source, cell.label)]
    same: dict[str, list[str]] = {}
    for exercise in catalog.exercises(number):
        sources = [c.source for c in learner if c.role == "learner" and exercise.name in c.exercises]
        where = answers.same_as_answer(sources[-1], exercise, reference) if sources else None
        if where:
            short = answers.statements(answers.definition(sources[-1], exercise.learner_name)) <= 3
            same[exercise.name] = [f"the code of `{exercise.learner_name}` is the model answer's ({where}) with only "
                                   "names, formatting, comments or annotations changed"
                                   + (" (a short definition: one written independently can match it)" if short
                                      else "")]
    return lines, same


def _load_notes(load: dict) -> list[str]:
    """What the checker found the learner's code had left behind, and undid, for the notebook's notes."""
    notes = []
    if load.get("changed"):
        notes.append("your code changed " + ", ".join(load["changed"][:8])
                     + (f" and {len(load['changed']) - 8} more" if len(load["changed"]) > 8 else "")
                     + "; the grader put the originals back before checking")
    if load.get("reset"):
        notes.append("your code installed " + ", ".join(load["reset"][:5]) + "; the grader removed it before checking")
    if load.get("modes"):
        notes.append("your code left torch modes active (" + ", ".join(load["modes"][:5])
                     + "); the grader took them off before checking")
    return notes


def grade_notebook(path, number: int, options: Options | None = None, snapshot=None, only=None) -> NotebookGrade:
    """Grade one learner notebook (``path``) as a submission of catalog notebook ``number``; ``only`` names
    the exercises to check (default: all of them)."""
    options = options or Options()
    snapshot = snapshot or package_snapshot()
    start = time.monotonic()
    deadline = start + options.total_timeout
    entry = catalog.notebook(number)
    template = load_template(number, options)
    grade = NotebookGrade(number, entry.slug, str(path))
    exercises = [e for e in catalog.exercises(number) if not only or e.name in only]
    same: dict[str, list[str]] = {}

    def finish(results: dict[str, dict], default: tuple[str, str]) -> NotebookGrade:
        for e in exercises:
            payload = results.get(e.name) or {"status": "error", "summary": default[0],
                                              "details": [default[1]] if default[1] else []}
            grade.exercises.append(ExerciseGrade(
                e.name, number, template.points[e.name], payload["status"], payload["summary"],
                list(payload.get("details", [])), title=template.titles[e.name], label=template.labels[e.name],
                model_answer=str(payload.get("model_answer") or ""), review=same.get(e.name, [])))
        grade.seconds = time.monotonic() - start
        return grade

    try:
        submission = nbformat.reads(pathlib.Path(path).read_text(encoding="utf-8"), as_version=4)
    except Exception as error:  # noqa: BLE001 - not JSON, not a notebook
        grade.notes.append(f"the notebook cannot be read: {type(error).__name__}: {str(error)[:200]}")
        return finish({}, ("not graded: the notebook file cannot be read", grade.notes[-1]))

    with _PARSING:  # (with the course's setup and context cells)
        learner = plan_cells(submission, template)
        grade.review, same = review_notebook(learner, number)
    head = grader_cells(options, number)
    excluded: dict[int, str] = {}  # index into `learner` -> why it was left out
    unstarted = 0  # attempts whose kernel did not start
    for attempt_number in range(1, options.max_attempts + 1):
        grade.attempts = attempt_number
        kept = [i for i in range(len(learner)) if i not in excluded]
        planned = head + [learner[i] for i in kept]
        attempt = run_attempt(planned, snapshot, options, deadline, [(e.name, e.learner_name) for e in exercises])
        learner_at = {len(head) + k: i for k, i in enumerate(kept)}  # planned index -> learner index
        if attempt.fatal is None:
            for note in _load_notes(attempt.load) + attempt.notes:
                if note not in grade.notes:
                    grade.notes.append(note)
            registered = attempt.load.get("torch_library")
            if registered:
                grade.review.append("your code registered operator implementations with torch.library ("
                                    + ", ".join(registered[:5]) + "): the grader cannot undo that")
            if attempt.load.get("foreign"):
                grade.notes.append("the checks did not load cleanly: " + ", ".join(attempt.load["foreign"][:5]))
                return finish({}, ("not graded: the grader could not load a pristine copy of the checks", ""))
            results = {}
            for name, payload in attempt.results.items():
                details = list(payload.get("details", []))
                if payload.get("status") != "passed":
                    for planned_index, error in attempt.cell_errors.items():
                        cell = learner[learner_at[planned_index]]
                        if name in cell.exercises:
                            details.append(f"{cell.label} raised {error}")
                    for i, why in excluded.items():
                        if name in learner[i].exercises:
                            details.append(f"{learner[i].label} was not run: {why}")
                results[name] = {**payload, "details": details}
            why = attempt.notes[-1] if attempt.notes else "the checker gave no result"
            return finish(results, ("not graded: " + why, ""))
        index, why = attempt.fatal
        if not attempt.started:
            unstarted += 1
            if unstarted < 3 and attempt_number < options.max_attempts:
                time.sleep(1)
                continue  # the kernel did not start: nothing of the notebook's ran yet
        if attempt.out_of_time:
            grade.notes.append(why)
            return finish({}, ("not graded: " + why, ""))
        if index is not None and index in learner_at and learner[learner_at[index]].role != "setup":
            learner_index = learner_at[index]
            excluded[learner_index] = why
            cell = learner[learner_index]
            grade.notes.append(f"{cell.label} was left out: {why}")
            continue  # run again without it
        if index is not None:
            why = f"{planned[index].label}: {why}"
        grade.notes.append(why)
        return finish({}, ("not graded: " + why, ""))
    grade.notes.append(f"gave up after {options.max_attempts} attempts")
    return finish({}, ("not graded: too many faults in this notebook", ""))


# --------------------------------------------------------------------------------------
# Grading many


def grade(paths, options: Options | None = None, assignment=None, progress: bool = True, only=None,
          exercises=None) -> list[StudentGrade]:
    """Grade every SUBMISSION in ``paths``; returns one :class:`StudentGrade` per submission.

    ``assignment`` lists the notebook numbers every student should hand in (a missing one scores
    0); by default it is every notebook found in any submission. ``only`` (notebook numbers) and
    ``exercises`` (exercise names) grade part of it: the other notebooks and exercises are left out of the
    result (see ``tutor.grading.grades.merge`` to put it into an earlier batch's).
    """
    options = options or Options()
    snapshot = package_snapshot()
    chosen = set(only or ())
    if exercises:
        chosen |= {catalog.BY_NAME[name].notebook for name in exercises}
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
                elif not chosen or nb.number in chosen:
                    jobs.append((s, nb.number, f))
        wanted = sorted(set(assignment) if assignment else {number for _, number, _ in jobs})
        if chosen:
            wanted = [number for number in wanted if number in chosen]
        for number in wanted:
            load_template(number, options)  # once, before the threads start

        bar = None
        if progress:
            bar = tqdm(total=len(jobs), desc="grading", unit="notebook", file=sys.stderr)
        done: dict[tuple, NotebookGrade] = {}
        with ThreadPoolExecutor(max_workers=max(1, options.workers)) as pool:
            futures = {pool.submit(_grade_job, f, number, options, snapshot, exercises): (s, number)
                       for s, number, f in jobs}
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
                    s.notebooks.append(_missing(number, options, exercises))
            extra = sorted(n for (sid, n) in done if sid == id(s) and n not in wanted)
            for number in extra:
                s.notebooks.append(done[(id(s), number)])
            s.notebooks.sort(key=lambda nb: nb.number)
    return students


def _chosen(number: int, exercises) -> list[catalog.Exercise]:
    return [e for e in catalog.exercises(number) if not exercises or e.name in exercises]


def _grade_job(path, number, options, snapshot, exercises=None) -> NotebookGrade:
    try:
        return grade_notebook(path, number, options, snapshot, only=exercises)
    except Exception as error:  # noqa: BLE001 - a bug here must not stop the batch
        template = load_template(number, options)
        g = NotebookGrade(number, catalog.notebook(number).slug, str(path))
        g.notes.append(f"the grader failed on this notebook: {type(error).__name__}: {error}")
        g.exercises = [ExerciseGrade(e.name, number, template.points[e.name], "error", "not graded: the grader failed",
                                     [], title=template.titles[e.name], label=template.labels[e.name])
                       for e in _chosen(number, exercises)]
        return g


def _missing(number: int, options: Options, exercises=None) -> NotebookGrade:
    template = load_template(number, options)
    entry = catalog.notebook(number)
    g = NotebookGrade(number, entry.slug, "", submitted=False)
    g.notes.append(f"{entry.filename} was not submitted")
    g.exercises = [ExerciseGrade(e.name, number, template.points[e.name], "missing", "not submitted", [],
                                 title=template.titles[e.name], label=template.labels[e.name])
                   for e in _chosen(number, exercises)]
    return g

"""Grade notebooks: every submission runs on the learner's side, and is judged where no learner code runs.

:func:`grade` grades every submission (``python -m tutor grade``), several notebooks at once with
``Options.workers``; :func:`grade_notebook` grades one. An attempt (:func:`run_attempt`):

1. writes nothing the learner's code could use: the package the kernel sees is the course's without the model
   answers being graded (``tutor.grading.lock``), written once per batch;
2. starts the learner's side, confined (``tutor.grading.sandbox``): ``tutor.grading.host`` starts a Jupyter kernel
   with nbclient, runs the cells of ``tutor.grading.plan`` and reports on each on a socket the runner reads with its
   own clock;
3. hands the channel to the kernel's server to a judge (``tutor.grading.judge``): a process of its own, started
   before any notebook, in which the checks run on handles to the learner's objects. The judge's outcomes are the
   grades: nothing the notebook stored or printed, nor anything its host reports, is believed;
4. stops the learner's side and everything it started.

A learner cell that hangs or kills the kernel (``os._exit``, a segfault, memory) is left out and the notebook is run
again without it; a check that does so costs that exercise only (each check runs on a child of the kernel of its
own). A per-cell timeout, a total timeout per notebook and the sandbox's limits bound every run. See
docs/instructors.md, "Grading", for what this guarantees.
"""

from __future__ import annotations

import contextlib
import pathlib
import queue
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

import nbformat
from tqdm.auto import tqdm

from tutor import env
from tutor.course import catalog
from tutor.grading import lock, processes, review, sandbox, wire
from tutor.grading.grades import ExerciseGrade, NotebookGrade, Options, Outcome, StudentGrade
from tutor.grading.intake import take
from tutor.grading.judge import Judge
from tutor.grading.plan import PlannedCell, grader_cells, load_template, plan_cells

PROCESSES = 512  # RLIMIT_NPROC of a graded notebook (threads count: a kernel has a few dozen)
SHORT = 3  # statements: a definition this short that equals the model answer's is not flagged (see review_notebook)
HOST_SLACK = 15.0  # seconds the runner waits beyond a cell's own time limit before it stops the host itself


# --------------------------------------------------------------------------------------
# The judges


class Workers:
    """What each worker of a batch holds: a judge, and a slot (the sandbox's user id, when the grader is root)."""

    def __init__(self, count: int, notebooks=()):
        self.free: queue.Queue = queue.Queue()
        self.notebooks = list(notebooks)  # the checks the judges import when they start
        self.judges: list[Judge | None] = [None] * count
        for slot in range(count):
            self.free.put(slot)
        self.lock = threading.Lock()

    @contextlib.contextmanager
    def take(self):
        slot = self.free.get()
        try:
            judge = self.judges[slot]
            if judge is None or not judge.alive:
                judge = self.judges[slot] = Judge(self.notebooks)
            yield slot, judge
        finally:
            self.free.put(slot)

    def close(self) -> None:
        for judge in self.judges:
            if judge is not None:
                judge.close()


# --------------------------------------------------------------------------------------
# The packages the kernels see


class Packages:
    """The packages of ``tutor.grading.lock`` for a batch, one per set of exercises graded, written once."""

    def __init__(self):
        self.folder = pathlib.Path(tempfile.mkdtemp(prefix="tutor-grade-packages-"))
        self.folder.chmod(0o755)
        self.written: dict[tuple, pathlib.Path] = {}
        self.lock = threading.Lock()

    def get(self, exercises: list[str]) -> pathlib.Path:
        key = tuple(sorted(exercises))
        with self.lock:
            if key not in self.written:
                self.written[key] = lock.write_package(exercises, self.folder / f"p{len(self.written)}")
            return self.written[key]

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


# --------------------------------------------------------------------------------------
# Running one attempt


@dataclass
class Attempt:
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    cell_errors: dict = field(default_factory=dict)  # planned index -> "NameError: ..."
    fatal: tuple | None = None  # (planned cell index or None, reason)
    out_of_time: bool = False
    started: bool = False  # whether the first cell ran (a kernel that did not start is tried again)
    notes: list = field(default_factory=list)


@dataclass
class Context:
    """What one attempt needs besides its cells: the batch's choices and the worker's judge and slot."""

    options: Options
    package: pathlib.Path
    confinement: sandbox.Confinement
    judge: Judge
    slot: int = 0
    unlock: dict = field(default_factory=dict)  # exercise -> what hands its model answer back (lock)


def _host(context: Context, tmp: str, control: int, kernel: int, marker: str) -> subprocess.Popen:
    """Start the learner's side: the host, confined, with its two sockets."""
    confinement = context.confinement
    argv = [sys.executable, "-m", "tutor.grading.host", "--control", str(control), "--judge", str(kernel),
            "--memory-mb", str(int(context.options.memory_mb)), "--processes", str(PROCESSES)]
    uid = confinement.uid(context.slot)
    if uid is not None:
        argv += ["--uid", str(uid)]
    environ = sandbox.environment(confinement.package_path(context.package), tmp)
    environ[env.GRADE_RUN] = marker
    return subprocess.Popen(confinement.command(argv, context.package, context.slot), pass_fds=[control, kernel],
                            env=environ, cwd=tmp if confinement.kind != "bubblewrap" else "/",
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def run_attempt(planned: list[PlannedCell], exercises: list[tuple[str, str]], context: Context,
                deadline: float) -> Attempt:
    """Run the ``planned`` cells on the learner's side; then, if they all ran, have the judge check ``exercises``
    (``[(name, learner_name)]``)."""
    options = context.options
    attempt = Attempt()
    control, host_control = socket.socketpair()
    kernel, kernel_theirs = socket.socketpair()
    tmp = "/tmp" if context.confinement.kind == "bubblewrap" else tempfile.mkdtemp(prefix="tutor-grade-")
    marker = secrets.token_hex(8)
    process = None
    try:
        process = _host(context, tmp, host_control.fileno(), kernel_theirs.fileno(), marker)
        host_control.close()
        kernel_theirs.close()
        limits = [options.cell_timeout if p.role == "learner" else max(options.cell_timeout, 120) for p in planned]
        wire.write_frame(control, {"cells": [p.source for p in planned], "preamble": 0, "timeouts": limits,
                                   "cell_timeout": options.cell_timeout, "kernel_name": options.kernel_name})
        if _follow_cells(attempt, control, planned, limits, options, deadline):
            job = {"exercises": [list(e) for e in exercises], "timeout": float(options.cell_timeout),
                   "seconds": max(1.0, deadline - time.monotonic()), "unlock": context.unlock}
            attempt.outcomes, notes = context.judge.check(kernel, job, deadline - time.monotonic() + 30)
            attempt.notes += notes
    except OSError as error:
        attempt.fatal = (None, f"the grader could not run the notebook: {error}")
    finally:
        for sock in (control, kernel, host_control, kernel_theirs):
            with contextlib.suppress(OSError):
                sock.close()
        if process is not None:
            processes.stop(process, (env.GRADE_RUN, marker) if context.confinement.kind != "bubblewrap" else None)
        if tmp != "/tmp":
            shutil.rmtree(tmp, ignore_errors=True)
    return attempt


def _follow_cells(attempt: Attempt, control: socket.socket, planned, limits, options: Options, deadline) -> bool:
    """Read the host's reports until every cell has run (True) or one was fatal (False), on the runner's clock."""
    current, started_at = None, time.monotonic()
    while True:
        now = time.monotonic()
        if now >= deadline:
            attempt.out_of_time = True
            attempt.fatal = (current, f"the notebook ran out of its total time limit ({options.total_timeout:.0f} s)")
            return False
        wait = deadline - now
        if current is not None:
            wait = min(wait, started_at + limits[current] + HOST_SLACK - now)
        try:
            control.settimeout(max(0.1, wait))
            frame = wire.read_frame(control)
        except TimeoutError:
            if time.monotonic() >= deadline:
                continue
            attempt.fatal = (current, f"it ran for more than {options.cell_timeout:.0f} s and was stopped")
            return False
        except (OSError, wire.WireError) as error:
            attempt.fatal = (current, f"the notebook's process broke off ({type(error).__name__})")
            return False
        if frame is None:
            attempt.fatal = (current, "the Python process running your notebook died" if attempt.started
                             else "the kernel could not start")
            return False
        report = frame[0]
        index = report.get("cell")
        if report.get("done") is True:
            return True
        if "fatal" in report and index is None and not attempt.started:  # the kernel did not start
            attempt.fatal = (None, wire.text(report["fatal"], 300))
            return False
        if type(index) is not int or not 0 <= index < len(planned):
            attempt.fatal = (current, "the notebook's process sent a report the grader does not understand")
            return False
        if "fatal" in report:
            reason = wire.text(report["fatal"], 300)
            if reason == "timeout":
                if limits[index] >= deadline - started_at:
                    attempt.out_of_time = True
                    reason = f"the notebook ran out of its total time limit ({options.total_timeout:.0f} s)"
                else:
                    reason = f"it ran for more than {options.cell_timeout:.0f} s and was stopped"
            attempt.fatal = (index, reason)
            return False
        if "error" not in report:  # the cell starts
            current, started_at = index, time.monotonic()
            attempt.started = True
            continue
        error = wire.text(report.get("error"), 400) or None
        role = planned[index].role
        if error and role == "learner":
            attempt.cell_errors[index] = error
        elif error and role in ("grader", "setup"):
            attempt.fatal = (index, f"the grader's setup failed: {error}")
            return False


# --------------------------------------------------------------------------------------
# Grading one notebook


# CPython's ast module keeps one recursion counter per interpreter, not per thread (gh-106905): two workers
# parsing at once failed a notebook with "AST constructor recursion depth mismatch" here (3.11.7). The workers
# parse one notebook at a time.
_PARSING = threading.Lock()


def review_notebook(learner: list[PlannedCell], number: int) -> tuple[list[str], dict[str, list[str]]]:
    """What of the learner's cells is flagged for review: lines that reach for the grader's machinery (for the
    notebook), and, per exercise, code that is the model answer's with only names or formatting changed."""
    lines = [flag.text() for cell in learner if cell.role == "learner"
             for flag in review.flags(cell.source, cell.label)]
    same: dict[str, list[str]] = {}
    for exercise in catalog.exercises(number):
        sources = [c.source for c in learner if c.role == "learner" and exercise.name in c.exercises]
        where = review.same_as_answer(sources[-1], exercise) if sources else None
        # A definition of a few statements matches the model answer by chance (6 of 8 honest students of one class
        # were flagged so): only longer ones are flagged.
        if where and review.statements(review.answer_definition(exercise)) > SHORT:
            same[exercise.name] = [f"the code of `{exercise.learner_name}` is the model answer's ({where}) with only "
                                   "names, formatting, comments, annotations or no-op statements changed"]
    return lines, same


class Batch:
    """What the notebooks of one batch share: the confinement, the packages, the workers (judges and slots)."""

    def __init__(self, workers: int = 1, notebooks=()):
        self.confinement = sandbox.probe()
        self.packages = Packages()
        self.workers = Workers(max(1, workers), notebooks)

    def close(self) -> None:
        self.workers.close()
        self.packages.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def grade_notebook(path, number: int, options: Options | None = None, only=None, batch: Batch | None = None
                   ) -> NotebookGrade:
    """Grade one learner notebook (``path``) as a submission of catalog notebook ``number``; ``only`` names
    the exercises to check (default: all of them)."""
    options = options or Options()
    if batch is None:
        with Batch(notebooks=[number]) as own:
            return grade_notebook(path, number, options, only, own)
    start = time.monotonic()
    deadline = start + options.total_timeout
    entry = catalog.notebook(number)
    template = load_template(number, options)
    grade = NotebookGrade(number, entry.slug, str(path))
    exercises = [e for e in catalog.exercises(number) if not only or e.name in only]
    same: dict[str, list[str]] = {}

    def finish(outcomes: dict[str, Outcome], default: Outcome) -> NotebookGrade:
        grade.exercises += [ExerciseGrade.of(e, template.points[e.name], outcomes.get(e.name, default),
                                             title=template.titles[e.name], label=template.labels[e.name],
                                             review=same.get(e.name, [])) for e in exercises]
        grade.seconds = time.monotonic() - start
        return grade

    try:
        size = pathlib.Path(path).stat().st_size
        if size > options.max_notebook_mb * 2**20:
            raise ValueError(f"{size / 2**20:.0f} MB, over the limit of {options.max_notebook_mb:g} MB")
        submission = nbformat.reads(pathlib.Path(path).read_text(encoding="utf-8"), as_version=4)
    except Exception as error:  # noqa: BLE001 - not JSON, not a notebook
        grade.notes.append(f"the notebook cannot be read: {type(error).__name__}: {str(error)[:200]}")
        return finish({}, Outcome.error("not graded: the notebook file cannot be read", grade.notes[-1]))

    with _PARSING:  # (with the course's setup and context cells)
        learner = plan_cells(submission, template)
        grade.review, same = review_notebook(learner, number)
    names = [e.name for e in exercises]
    package = batch.packages.get(names)
    unlock = {name: lock.unlock_sources(name, names) for name in names}
    head = grader_cells()
    excluded: dict[int, str] = {}  # index into `learner` -> why it was left out
    unstarted = 0  # attempts whose kernel did not start
    for attempt_number in range(1, options.max_attempts + 1):
        grade.attempts = attempt_number
        kept = [i for i in range(len(learner)) if i not in excluded]
        planned = head + [learner[i] for i in kept]
        with batch.workers.take() as (slot, judge):
            context = Context(options, package, batch.confinement, judge, slot, unlock)
            attempt = run_attempt(planned, [(e.name, e.learner_name) for e in exercises], context, deadline)
        learner_at = {len(head) + k: i for k, i in enumerate(kept)}  # planned index -> learner index
        if attempt.fatal is None:
            for note in attempt.notes:
                if note not in grade.notes:
                    grade.notes.append(note)
            outcomes = {}
            for name, outcome in attempt.outcomes.items():
                if outcome.status != "passed":
                    for planned_index, error in attempt.cell_errors.items():
                        cell = learner[learner_at[planned_index]]
                        if name in cell.exercises:
                            outcome.details.append(f"{cell.label} raised {error}")
                    for i, why in excluded.items():
                        if name in learner[i].exercises:
                            outcome.details.append(f"{learner[i].label} was not run: {why}")
                outcomes[name] = outcome
            why = attempt.notes[-1] if attempt.notes else "the judge gave no result"
            return finish(outcomes, Outcome.error("not graded: " + why))
        index, why = attempt.fatal
        if not attempt.started:
            unstarted += 1
            if unstarted < 3 and attempt_number < options.max_attempts:
                time.sleep(1)
                continue  # the kernel did not start: nothing of the notebook's ran yet
        if attempt.out_of_time:
            grade.notes.append(why)
            return finish({}, Outcome.error("not graded: " + why))
        if index is not None and index in learner_at and learner[learner_at[index]].role != "setup":
            learner_index = learner_at[index]
            excluded[learner_index] = why
            grade.notes.append(f"{learner[learner_index].label} was left out: {why}")
            continue  # run again without it
        if index is not None:
            why = f"{planned[index].label}: {why}"
        grade.notes.append(why)
        return finish({}, Outcome.error("not graded: " + why))
    grade.notes.append(f"gave up after {options.max_attempts} attempts")
    return finish({}, Outcome.error("not graded: too many faults in this notebook"))


# --------------------------------------------------------------------------------------
# Grading many


def confinement_report() -> str:
    """Which protections hold for graded notebooks on this machine (``tutor.grading.sandbox``)."""
    return sandbox.probe().report()


def grade(paths, options: Options | None = None, assignment=None, progress: bool = True, only=None,
          exercises=None, roster=None, metadata=None, late=None) -> list[StudentGrade]:
    """Grade every SUBMISSION in ``paths``; returns one :class:`StudentGrade` per student
    (``tutor.grading.intake``: with ``roster``, a list of ``roster.Person``, one per row, then the unknown ones).

    ``assignment`` lists the notebook numbers every student should hand in (a missing one scores 0, one outside it
    is not graded); by default it is every notebook found in any submission. ``only`` (notebook numbers) and
    ``exercises`` (exercise names) grade part of it: the other notebooks and exercises are left out of the
    result (see ``tutor.grading.grades.merge`` to put it into an earlier batch's). ``metadata`` (Gradescope's, for a
    single submission) names the student and dates it; ``late`` (a ``roster.LatePolicy``) prices its lateness.
    """
    options = options or Options()
    chosen = set(only or ())
    if exercises:
        chosen |= {catalog.BY_NAME[name].notebook for name in exercises}
    with tempfile.TemporaryDirectory(prefix="tutor-grade-in-") as workdir, Batch(options.workers) as batch:
        if progress:
            print(batch.confinement.report(), file=sys.stderr)
        intake = take(paths, pathlib.Path(workdir), options, assignment, chosen or None, roster, metadata, late)
        batch.workers.notebooks = sorted({job.number for job in intake.jobs})
        for number in intake.wanted:
            load_template(number, options)  # once, before the threads start

        bar = None
        if progress:
            bar = tqdm(total=len(intake.jobs), desc="grading", unit="notebook", file=sys.stderr)
        done: dict[tuple, NotebookGrade] = {}
        with ThreadPoolExecutor(max_workers=max(1, options.workers)) as pool:
            futures = {pool.submit(_grade_job, job.path, job.number, options, batch, exercises): job
                       for job in intake.jobs}
            for future in as_completed(futures):
                job = futures[future]
                done[(id(job.student), job.number)] = future.result()
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix_str(f"{job.student.student} {job.number:02d}: "
                                        f"{done[(id(job.student), job.number)].score:g}")
        if bar is not None:
            bar.close()
        for s in intake.students:
            for number in intake.wanted:
                key = (id(s), number)
                if key in done:
                    s.notebooks.append(done[key])
                elif key in intake.refused:
                    s.notebooks.append(_not_graded(number, options, exercises, intake.refused[key]))
                else:
                    s.notebooks.append(_missing(number, options, exercises))
    return intake.students


def students_in(paths, options: Options | None = None, roster=None, metadata=None) -> list[str]:
    """The names of the students that :func:`grade` would give for ``paths`` (nothing is graded)."""
    with tempfile.TemporaryDirectory(prefix="tutor-grade-in-") as workdir:
        intake = take(paths, pathlib.Path(workdir), options or Options(), people=roster, metadata=metadata)
        return [s.student for s in intake.students]


def _not_graded(number: int, options: Options, exercises, why: str) -> NotebookGrade:
    template = load_template(number, options)
    g = NotebookGrade(number, catalog.notebook(number).slug, "")
    g.notes.append(why)
    g.exercises = [ExerciseGrade.of(e, template.points[e.name], Outcome.error("not graded: " + why),
                                    title=template.titles[e.name], label=template.labels[e.name])
                   for e in _chosen(number, exercises)]
    return g


def _chosen(number: int, exercises) -> list[catalog.Exercise]:
    return [e for e in catalog.exercises(number) if not exercises or e.name in exercises]


def _grade_job(path, number, options, batch, exercises=None) -> NotebookGrade:
    try:
        return grade_notebook(path, number, options, exercises, batch)
    except Exception as error:  # noqa: BLE001 - a bug here must not stop the batch
        template = load_template(number, options)
        g = NotebookGrade(number, catalog.notebook(number).slug, str(path))
        g.notes.append(f"the grader failed on this notebook: {type(error).__name__}: {error}")
        g.exercises = [ExerciseGrade.of(e, template.points[e.name], Outcome.error("not graded: the grader failed"),
                                        title=template.titles[e.name], label=template.labels[e.name])
                       for e in _chosen(number, exercises)]
        return g


def _missing(number: int, options: Options, exercises=None) -> NotebookGrade:
    template = load_template(number, options)
    entry = catalog.notebook(number)
    g = NotebookGrade(number, entry.slug, "", submitted=False)
    g.notes.append(f"{entry.filename} was not submitted")
    g.exercises = [ExerciseGrade.of(e, template.points[e.name], Outcome("missing", "not submitted"),
                                    title=template.titles[e.name], label=template.labels[e.name])
                   for e in _chosen(number, exercises)]
    return g

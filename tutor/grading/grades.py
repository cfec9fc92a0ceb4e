"""What a grading run is told (:class:`Options`) and what it returns: a :class:`StudentGrade` per
submission, holding a :class:`NotebookGrade` per notebook, holding an :class:`ExerciseGrade` per exercise.

A batch is kept as ``grades.json`` beside its reports (:func:`save`, :func:`load`), so that part of it can
be graded again and put back (:func:`merge`), and an instructor's manual adjustments (:func:`load_overrides`)
are applied to it and recorded (:func:`apply_overrides`).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from dataclasses import dataclass, field

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from tutor.course import catalog

FORMAT = 1  # the version of grades.json


@dataclass
class Options:
    cell_timeout: float = 60.0  # seconds per cell (learner cell or check)
    total_timeout: float = 300.0  # seconds per notebook, all attempts together
    memory_mb: int = 4096  # RLIMIT_AS of the kernel (address space, MiB); 0 = no cap
    workers: int = 1
    points: dict = field(default_factory=dict)  # overrides: exercise name -> points
    solutions_dir: pathlib.Path | None = None
    kernel_name: str = "python3"
    max_attempts: int = 8
    max_notebook_mb: float = 32  # a notebook over this is not graded (the largest solution is 0.7 MB)
    max_archive_mb: float = 256  # a zip's notebooks, extracted, at most
    max_archive_files: int = 2000  # files in a zip, at most
    show_review: bool = False  # the review flags in the students' own feedback and results (else instructor only)


STATUSES = ("passed", "failed", "not done", "missing", "error")


@dataclass
class Outcome:
    """What grading concluded about one exercise: made by the judge from its check's result, sent to the runner
    (:meth:`to_data`, :meth:`from_data`), and kept in the :class:`ExerciseGrade` of the gradebook."""

    status: str  # one of STATUSES
    summary: str
    details: list[str] = field(default_factory=list)
    model_answer: str = ""  # why it earned nothing although its code may be right: it used the model answer
    seconds: float = 0.0

    @classmethod
    def of_check(cls, result, learner_name: str) -> Outcome:
        """From a check's ``CheckResult``: its stub's "not done yet" said as the grader says it."""
        if result.status == "not done":
            return cls("not done", f"not done: `{learner_name}` still raises NotImplementedError", [],
                       seconds=float(result.seconds))
        return cls(str(result.status), str(result.summary), [str(d) for d in result.details],
                   seconds=float(result.seconds))

    @classmethod
    def error(cls, summary: str, *details: str) -> Outcome:
        return cls("error", summary, list(details))

    def to_data(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_data(cls, data) -> Outcome:
        """An outcome as :meth:`to_data` wrote it; anything else is an error outcome that says so."""
        if not isinstance(data, dict) or data.get("status") not in STATUSES:
            return cls.error("not graded: the grader's judge sent no valid result")
        details = data.get("details") if isinstance(data.get("details"), list) else []
        seconds = data.get("seconds") if isinstance(data.get("seconds"), (int, float)) else 0.0

        def text(value):  # cut, and valid UTF-8 (a lone surrogate from JSON becomes U+FFFD)
            return str(value)[:2000].encode("utf-8", "surrogatepass").decode("utf-8", "replace")

        return cls(data["status"], text(data.get("summary", "")), [text(d) for d in details[:40]],
                   text(data.get("model_answer") or ""), float(seconds))


@dataclass
class ExerciseGrade:
    name: str  # the check's name (tutor.checks.<name>), the key of points.toml and overrides
    notebook: int
    max_points: float
    status: str  # "passed", "failed", "not done", "missing" or "error"
    summary: str
    details: list[str] = field(default_factory=list)
    title: str = ""  # the notebook's header: "Exercise 2 — `scaled_dot_product_attention` with a mask"
    label: str = ""  # the gradebook's column: "03.2 scaled_dot_product_attention"
    model_answer: str = ""  # why it earned nothing although its check may have passed
    review: list[str] = field(default_factory=list)  # for the instructor to look at; the score is unchanged
    override: dict | None = None  # {"points": 1.5, "reason": "..."}: an instructor's adjustment

    @classmethod
    def of(cls, exercise, max_points: float, outcome: Outcome, *, title: str = "", label: str = "",
           review=()) -> ExerciseGrade:
        """The grade of ``exercise`` (a ``catalog.Exercise``) from its :class:`Outcome`."""
        return cls(exercise.name, exercise.notebook, max_points, outcome.status, outcome.summary,
                   list(outcome.details), title=title, label=label, model_answer=outcome.model_answer,
                   review=list(review))

    @property
    def earned(self) -> float:
        """The points the check gave: all of them when it passed, else 0."""
        return self.max_points if self.status == "passed" else 0

    @property
    def points(self) -> float:
        return self.override["points"] if self.override else self.earned

    @property
    def icon(self) -> str:
        return {"passed": "✅", "not done": "⏳"}.get(self.status, "❌")

    def text(self) -> str:
        return "\n".join([f"{self.icon} {self.label or self.name}: {self.summary}"] + [f"   {d}" for d in self.details])


@dataclass
class NotebookGrade:
    number: int
    slug: str
    path: str
    exercises: list[ExerciseGrade] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what happened to the notebook as a whole
    seconds: float = 0.0
    attempts: int = 0
    submitted: bool = True
    review: list[str] = field(default_factory=list)  # lines of the learner's code that could reach the grader

    @property
    def score(self) -> float:
        return sum(e.points for e in self.exercises)

    @property
    def max_score(self) -> float:
        return sum(e.max_points for e in self.exercises)


@dataclass
class StudentGrade:
    student: str
    source: str
    notebooks: list[NotebookGrade] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    roster: str = ""  # with a roster: "" (matched), "unknown" (on no row) or "missing" (a row, no submission)
    late: dict | None = None  # {"hours": 30.5, "factor": 0.8}: Gradescope's lateness and the late policy's factor

    @property
    def earned(self) -> float:
        """The points of the notebooks, before lateness."""
        return sum(n.score for n in self.notebooks)

    @property
    def score(self) -> float:
        return self.earned * (self.late["factor"] if self.late else 1.0)

    @property
    def max_score(self) -> float:
        return sum(n.max_score for n in self.notebooks)

    @property
    def exercises(self) -> list[ExerciseGrade]:
        return [e for n in self.notebooks for e in n.exercises]

    @property
    def flagged(self) -> bool:
        """Whether an instructor should look at this submission (see ``review``)."""
        return any(n.review or any(e.review for e in n.exercises) for n in self.notebooks)


# --------------------------------------------------------------------------------------
# grades.json


def save(students: list[StudentGrade], path, overrides: dict | None = None) -> None:
    """Write the batch (and the overrides applied to it) to ``path`` as JSON."""
    data = {"format": FORMAT, "students": [dataclasses.asdict(s) for s in students], "overrides": overrides or {}}
    text = json.dumps(data, indent=1, ensure_ascii=False)
    pathlib.Path(path).write_text(text.encode("utf-8", "surrogatepass").decode("utf-8", "replace"), encoding="utf-8")


def load(path) -> tuple[list[StudentGrade], dict]:
    """Read a batch written by :func:`save`: ``(students, overrides)``."""
    data = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    if data.get("format") != FORMAT:
        raise ValueError(f"{path}: not a grades.json this version of the grader wrote")
    students = []
    for s in data["students"]:
        notebooks = [NotebookGrade(**{**n, "exercises": [ExerciseGrade(**e) for e in n["exercises"]]})
                     for n in s["notebooks"]]
        students.append(StudentGrade(**{**s, "notebooks": notebooks}))
    return students, data.get("overrides", {})


def merge(previous: list[StudentGrade], new: list[StudentGrade]) -> list[StudentGrade]:
    """``previous`` with what ``new`` graded put in. A notebook graded again replaces the exercises of the old
    one that were graded again (all of them unless ``--exercise`` chose some) and its notes; a notebook
    missing from the new run's submission keeps its old grade; a student or notebook ``previous`` lacks is
    added."""
    by_name = {s.student: s for s in previous}
    for student in new:
        old = by_name.get(student.student)
        if old is None:
            previous.append(student)
            by_name[student.student] = student
            continue
        old.notes = list(dict.fromkeys(old.notes + student.notes))
        for notebook in student.notebooks:
            before = next((n for n in old.notebooks if n.number == notebook.number), None)
            if before is not None and not notebook.submitted:
                continue  # not in this run's submission: keep what was graded before
            if before is None or not before.submitted:
                old.notebooks = [n for n in old.notebooks if n.number != notebook.number] + [notebook]
                continue
            graded = {e.name: e for e in notebook.exercises}
            keep = [e for e in before.exercises if e.name not in graded]
            order = [e.name for e in catalog.exercises(notebook.number)]
            before.exercises = sorted(keep + list(graded.values()), key=lambda e: order.index(e.name))
            before.notes, before.review, before.path = notebook.notes, notebook.review, notebook.path
            before.seconds, before.attempts = notebook.seconds, notebook.attempts
        old.notebooks.sort(key=lambda n: n.number)
    return previous


# --------------------------------------------------------------------------------------
# An instructor's adjustments


def load_overrides(path) -> dict:
    """Read an overrides file: ``{student: {exercise: {"points": p, "reason": r}}}``.

    ::

        # overrides.toml: one table per student, one line per exercise
        [alice]
        padding_mask = { points = 1, reason = "right idea; the mask's axis fixed in office hours" }
        [bob]
        softmax = 0.5            # a number alone: no reason recorded
    """
    with open(path, "rb") as f:
        try:
            data = tomllib.load(f)
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"{path}: not valid TOML: {error}") from None
    out = {}
    for student, table in data.items():
        if not isinstance(table, dict):
            raise ValueError(f"{path}: [{student}] must be a table of exercise = points")
        for name, value in table.items():
            exercise = catalog.resolve(name)
            if exercise is None:
                raise ValueError(f"{path}: [{student}] no exercise is called {name} (see `python -m tutor catalog`: "
                                 "a check's name, or a label such as 03.2)")
            entry = value if isinstance(value, dict) else {"points": value}
            points, reason = entry.get("points"), str(entry.get("reason", ""))
            if isinstance(points, bool) or not isinstance(points, (int, float)) or points < 0:
                raise ValueError(f"{path}: [{student}] {name}: points must be a number >= 0, got {points!r}")
            out.setdefault(student, {})[exercise.name] = {"points": points, "reason": reason}
    return out


def check_overrides(overrides: dict, students, max_points) -> list[str]:
    """What is wrong with ``overrides`` for a batch of ``students`` (names): a student not in it, points above an
    exercise's maximum (``max_points(name)``). Each a line; none: fine."""
    problems = []
    names = set(students)
    for student, table in overrides.items():
        if student not in names:
            problems.append(f"[{student}] is not a student of this batch")
        for name, entry in table.items():
            most = max_points(name)
            if entry["points"] > most:
                problems.append(f"[{student}] {name}: {entry['points']:g} points, but the exercise is worth {most:g}")
    return problems


def apply_overrides(students: list[StudentGrade], overrides: dict) -> list[str]:
    """Set each override on its exercise (replacing earlier ones); returns the overrides that matched no
    graded exercise (a student or exercise not in the batch)."""
    unused = []
    by_name = {s.student: s for s in students}
    for student in students:
        for exercise in student.exercises:
            exercise.override = None
    for student, table in overrides.items():
        for name, entry in table.items():
            target = next((e for e in by_name[student].exercises if e.name == name), None) \
                if student in by_name else None
            if target is None:
                unused.append(f"{student}: {name}")
            else:
                target.override = dict(entry)
    return unused

"""Who the students are: a class roster (``--roster roster.csv``), and Gradescope's metadata of one submission.

**A roster** is a CSV file with a header: a column ``id`` (or ``student``, ``sid``, ``username``), and optionally
``name`` and ``email``. Each submission is matched to one row (:func:`match`): by its folder's, zip's or file's
name equal to the row's id or email (or the email's part before ``@``), or holding the id as a word of its own
(``Smith, Jane_js123`` holds ``js123``), case aside. A row that two submissions match is refused for both, with the
reason; a submission that matches no row is graded and listed as unknown; a row that none matches is a student who
handed in nothing. The reports then use the roster's ids, in its order.

**Gradescope** writes ``/autograder/submission_metadata.json`` beside each submission: the student (``users``),
when it was submitted (``created_at``) and the assignment's due dates. :func:`gradescope` reads it, and a late
policy (``--late-policy late.toml``: :func:`load_late_policy`) turns the lateness into a factor on the score.
"""

from __future__ import annotations

import csv
import datetime
import json
import math
import pathlib
import re
import sys
from dataclasses import dataclass, field

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from tutor.grading.submissions import Submission, clean

ID_COLUMNS = ("id", "student", "sid", "username", "student_id")


@dataclass
class Person:
    id: str
    name: str = ""
    email: str = ""

    def keys(self) -> set[str]:
        found = {self.id.lower()}
        if self.email:
            found |= {self.email.lower(), self.email.lower().split("@")[0]}
        return found


def load_roster(path) -> list[Person]:
    """The rows of a roster file; ``ValueError`` naming the file and the line for one that is not right."""
    try:
        text = pathlib.Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: cannot be read ({error})") from None
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise ValueError(f"{path}: empty: expected a header with an `id` column, then one row per student")
    header = [h.strip().lower() for h in rows[0]]
    column = next((header.index(c) for c in ID_COLUMNS if c in header), None)
    if column is None:
        raise ValueError(f"{path}: the header has no id column (one of {', '.join(ID_COLUMNS)}): {rows[0]}")
    people, seen = [], {}
    for number, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        value = {h: (row[i].strip() if i < len(row) else "") for i, h in enumerate(header)}
        person = Person(value[header[column]], value.get("name", ""), value.get("email", ""))
        if not person.id:
            raise ValueError(f"{path}, line {number}: no id")
        if person.id.lower() in seen:
            raise ValueError(f"{path}, line {number}: the id {person.id} is on line {seen[person.id.lower()]} too")
        seen[person.id.lower()] = number
        people.append(person)
    if not people:
        raise ValueError(f"{path}: no student under the header")
    return people


def _words(text: str) -> set[str]:
    """The words of a name (``smith, bo_bo02`` holds ``smith``, ``bo`` and ``bo02``; an email stays whole too)."""
    text = text.lower()
    return {w for w in re.split(r"[^0-9a-z@.\-]+", text) if w} | {w for w in re.split(r"[^0-9a-z]+", text) if w}


def match(submissions: list[Submission], people: list[Person]) -> tuple[dict[str, list[Submission]],
                                                                       list[Submission]]:
    """``(roster id -> the submissions matched to it, the submissions matched to no one)``."""
    matched: dict[str, list[Submission]] = {p.id: [] for p in people}
    unknown = []
    for submission in submissions:
        key = (submission.key or submission.student).strip().lower()
        exact = [p for p in people if key in p.keys()]
        found = exact or [p for p in people if p.id.lower() in _words(key)]
        if len(found) == 1:
            matched[found[0].id].append(submission)
        else:
            unknown.append(submission)
    return matched, unknown


# --------------------------------------------------------------------------------------
# Gradescope's metadata and lateness


@dataclass
class LatePolicy:
    """A fraction of the score lost per day late (days begun after ``grace_hours``), nothing after ``max_days``."""

    penalty_per_day: float = 0.0
    grace_hours: float = 0.0
    max_days: float = math.inf

    def factor(self, hours_late: float) -> float:
        hours = hours_late - self.grace_hours
        if hours <= 0:
            return 1.0
        days = math.ceil(hours / 24)
        if days > self.max_days:
            return 0.0
        return max(0.0, 1.0 - self.penalty_per_day * days)


def load_late_policy(path) -> LatePolicy:
    """``[late]`` with ``penalty_per_day`` (0.1: a tenth of the score a day), ``grace_hours`` and ``max_days``."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ValueError(f"{path}: cannot be read as TOML ({error})") from None
    table = data.get("late")
    if not isinstance(table, dict):
        raise ValueError(f"{path}: expected a [late] table (penalty_per_day, grace_hours, max_days)")
    values = {}
    for name in ("penalty_per_day", "grace_hours", "max_days"):
        if name in table:
            value = table[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{path}: {name} must be a number >= 0, got {value!r}")
            values[name] = float(value)
    unknown = set(table) - {"penalty_per_day", "grace_hours", "max_days"}
    if unknown:
        raise ValueError(f"{path}: [late] has no setting {', '.join(sorted(unknown))}")
    return LatePolicy(**values)


@dataclass
class Metadata:
    """What Gradescope says of one submission."""

    student: str = ""
    submitted: datetime.datetime | None = None
    due: datetime.datetime | None = None
    late_due: datetime.datetime | None = None
    notes: list[str] = field(default_factory=list)

    def hours_late(self) -> float:
        if self.submitted is None or self.due is None:
            return 0.0
        return max(0.0, (self.submitted - self.due).total_seconds() / 3600)


def _time(value) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def gradescope(path) -> Metadata:
    """``submission_metadata.json``: the student (name, else sid or email), the submission and due times."""
    try:
        data = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: cannot be read as Gradescope's submission metadata ({error})") from None
    users = data.get("users") if isinstance(data.get("users"), list) else []
    people = [clean(u.get("name") or u.get("sid") or u.get("email") or "") for u in users if isinstance(u, dict)]
    assignment = data.get("assignment") if isinstance(data.get("assignment"), dict) else {}
    metadata = Metadata(" & ".join(p for p in people if p)[:200], _time(data.get("created_at")),
                        _time(assignment.get("due_date")), _time(assignment.get("late_due_date")))
    if metadata.late_due and metadata.submitted and metadata.submitted > metadata.late_due:
        metadata.notes.append("submitted after the late due date")
    return metadata

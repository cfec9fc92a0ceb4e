"""Who is graded on what: the students of a batch and the notebook of each that is graded (:func:`take`).

From the submissions found (``tutor.grading.submissions``), a roster if there is one, and Gradescope's metadata
when it is there (``tutor.grading.roster``):

- one :class:`StudentGrade` per student: a roster's row (in its order, then the unknown submissions), else one per
  submission; two students of one name are told apart (``alice``, ``alice-2``) and the notes say so;
- for each student, at most one file per notebook of the course (``submissions.choose``); with ``--assignment``,
  only its notebooks: a notebook outside it is listed as not graded, and never counted;
- a notebook that cannot be graded (two candidates, two submissions for one roster row) is graded 0 with the reason.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass, field

from tutor.course import catalog
from tutor.grading import roster as rosters
from tutor.grading.grades import Options, StudentGrade
from tutor.grading.submissions import Limits, Submission, choose, find_submissions


@dataclass
class Job:
    student: StudentGrade
    number: int
    path: pathlib.Path


@dataclass
class Intake:
    students: list[StudentGrade]
    jobs: list[Job]
    wanted: list[int]  # the notebooks every student is graded on
    refused: dict = field(default_factory=dict)  # (id(student), number) -> why that notebook was not graded


def limits(options: Options) -> Limits:
    return Limits(int(options.max_notebook_mb * 2**20), int(options.max_archive_mb * 2**20),
                  int(options.max_archive_files))


def _students(found: list[Submission], people) -> list[tuple[StudentGrade, list[Submission]]]:
    """The batch's students and their submissions: by roster when there is one."""
    if people is None:
        out, seen = [], {}
        for submission in found:
            seen[submission.student] = seen.get(submission.student, 0) + 1
            name = submission.student if seen[submission.student] == 1 else \
                f"{submission.student}-{seen[submission.student]}"
            s = StudentGrade(name, submission.source, notes=list(submission.notes))
            if name != submission.student:
                s.notes.append(f"another submission is called {submission.student} too: this one is {name} "
                               "(use --roster to name students)")
            out.append((s, [submission]))
        return out
    matched, unknown = rosters.match(found, people)
    out = []
    for person in people:
        subs = matched[person.id]
        s = StudentGrade(person.id, ", ".join(sub.source for sub in subs),
                         notes=[note for sub in subs for note in sub.notes], roster="" if subs else "missing")
        if len(subs) > 1:
            s.notes.append(f"{len(subs)} submissions match {person.id} on the roster "
                           f"({', '.join(sub.source for sub in subs)}): none was graded; hand in one")
            subs = []
        out.append((s, subs))
    for submission in unknown:
        s = StudentGrade(submission.student, submission.source, notes=list(submission.notes), roster="unknown")
        s.notes.append(f"{submission.student} is on no row of the roster: graded, but check the name")
        out.append((s, [submission]))
    return out


def take(paths, workdir: pathlib.Path, options: Options, assignment=None, notebooks=None, people=None,
         metadata: rosters.Metadata | None = None, late: rosters.LatePolicy | None = None) -> Intake:
    """The students and jobs of a batch (see the module's docstring). ``notebooks``: only these are graded (from
    ``--only`` and ``--exercise``)."""
    bounds = limits(options)
    found = find_submissions(paths, workdir, bounds)
    pairs = _students(found, people)
    if metadata is not None and len(pairs) == 1:
        student = pairs[0][0]
        if metadata.student:
            student.student = metadata.student
        student.notes += metadata.notes
        hours = metadata.hours_late()
        if hours > 0:
            factor = late.factor(hours) if late is not None else 1.0
            student.late = {"hours": round(hours, 2), "factor": factor}
    choices = []
    for student, subs in pairs:
        files = [f for sub in subs for f in sub.files]
        chosen, refused, ignored = choose(files, bounds)
        student.notes += ignored
        choices.append((student, chosen, refused))
    found_numbers = {n for _, chosen, refused in choices for n in (*chosen, *refused)}
    wanted = sorted(set(assignment) if assignment else found_numbers)
    if notebooks:
        wanted = [n for n in wanted if n in notebooks]
    jobs, refusals = [], {}
    for student, chosen, refused in choices:
        for number, path in chosen.items():
            if number in wanted:
                jobs.append(Job(student, number, path))
            elif assignment and (not notebooks or number in notebooks):
                student.notes.append(f"{path.name}: notebook {number:02d} is not part of the assignment "
                                     f"({', '.join(f'{n:02d}' for n in sorted(assignment))}): not graded")
        for number, why in refused.items():
            if number in wanted:
                refusals[(id(student), number)] = why
    return Intake([s for s, _, _ in choices], jobs, wanted, refusals)


def known_notebook(number: int) -> bool:
    return any(nb.number == number for nb in catalog.NOTEBOOKS)

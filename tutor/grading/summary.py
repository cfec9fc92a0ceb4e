"""What concerns the whole batch: the gradebook (CSV), the class summary (``class.md`` and ``class.html``),
the terminal's table, and :func:`write_outputs`, which writes every report of a batch.

The class summary gives, per exercise, how many passed, and the mistakes the checks named most often
across the class ("2 of 3 students: the mask hides the queries instead of the keys"): each failed check
names its likely cause, and students who made the same mistake are counted together.
"""

from __future__ import annotations

import csv
import hashlib
import json
import pathlib
import re
from collections import Counter

from tutor.course import catalog
from tutor.grading import grades, reports
from tutor.grading.grades import ExerciseGrade, StudentGrade
from tutor.grading.reports import md, score
from tutor.grading.submissions import clean

FORMULA = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet may run at the start of a cell (OWASP)
# The files the grader writes, by format; on every run those of the formats not asked for are removed.
OUTPUTS = {"gradescope": ["results.json"], "otter": ["otter_results.json"], "csv": ["gradebook.csv"]}


def without_case(summary: str) -> str:
    """A check's summary without its "(case: ...)" label (string operations: no regex to backtrack on the
    learner's text)."""
    at = summary.rfind("(case: ")
    if at < 0 or not summary.endswith(")"):
        return summary
    return summary[:at].rstrip()


def cell(value):
    """A gradebook cell a spreadsheet shows as text: one that starts with = + - @ (a formula) gets a ' first."""
    if isinstance(value, str) and value.startswith(FORMULA):
        return "'" + value
    return value


def columns(students: list[StudentGrade]) -> list[tuple[int, str, str]]:
    """``(notebook, exercise name, label)`` for every exercise graded in the batch, in the notebooks' order."""
    found = {}
    for s in students:
        for e in s.exercises:
            found.setdefault((e.notebook, e.name), e.label or f"{e.notebook:02d} {e.name}")
    order = {e.name: i for i, e in enumerate(catalog.EXERCISES)}
    ordered = sorted(found.items(), key=lambda kv: (kv[0][0], order[kv[0][1]]))
    return [(nb, name, label) for (nb, name), label in ordered]


def student_notes(s: StudentGrade) -> list[str]:
    """Everything the gradebook's notes column says about a student: notes, model answers, adjustments, flags."""
    notes = list(s.notes)
    if reports.lateness(s):
        notes.insert(0, reports.lateness(s))
    if s.roster:
        notes.insert(0, {"unknown": "not on the roster", "missing": "on the roster: nothing handed in"}[s.roster])
    for nb in s.notebooks:
        if not nb.submitted:
            notes.append(f"{nb.number:02d}: not submitted")
            continue
        notes += [f"{nb.number:02d}: {note}" for note in nb.notes]
        for e in nb.exercises:
            if e.model_answer:
                notes.append(f"{e.label}: no points, {e.model_answer}")
            if e.override:
                notes.append(f"{e.label}: {reports.adjustment(e)}")
            notes += [f"{e.label}: review: {r}" for r in e.review]
        notes += [f"{nb.number:02d}: review: {r}" for r in nb.review]
    return notes


def gradebook_rows(students: list[StudentGrade]) -> tuple[list[str], list[list]]:
    """The gradebook: a header (student, score, max_score, one column per exercise, review, notes) and a row
    per student."""
    cols = columns(students)
    header = ["student", "score", "max_score"] + [label for _, _, label in cols] + ["review", "notes"]
    rows = []
    for s in students:
        by = {(e.notebook, e.name): score(e.points) for e in s.exercises}
        rows.append([cell(s.student), score(s.score), score(s.max_score)]
                    + [by.get((nb, name), "") for nb, name, _ in cols]
                    + ["yes" if s.flagged else "", cell("; ".join(student_notes(s))[:5000])])
    return header, rows


def write_gradebook(students: list[StudentGrade], path) -> None:
    """Write :func:`gradebook_rows` to ``path`` as CSV."""
    header, rows = gradebook_rows(students)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def mistake(e: ExerciseGrade) -> str:
    """The mistake a failed result names: its likely cause, else its summary without the case. Nothing for a
    pass, an exercise not done or not submitted, or the model answer (the table and its own section say those)."""
    if e.status in ("passed", "not done", "missing") or e.model_answer:
        return ""
    cause = next((d for d in e.details if d.startswith("Likely cause: ")), None)
    if cause:
        return cause[len("Likely cause: "):]
    return without_case(e.summary)


def class_markdown(students: list[StudentGrade], top: int = 3) -> str:
    """The class summary: pass rates per exercise and the most frequent mistakes, the model answers, the
    flags and the adjustments."""
    n = len(students)
    cols = columns(students)
    numbers = sorted({nb for nb, _, _ in cols})
    mean = sum(s.score for s in students) / n if n else 0
    best = max((s.max_score for s in students), default=0)
    lines = ["# Class summary", "",
             f"{n} student{'s' * (n != 1)} · notebook{'s' * (len(numbers) != 1)} "
             f"{', '.join(f'{x:02d}' for x in numbers)} · mean score {score(round(mean, 2))} / {score(best)}", "",
             "| exercise | passed | failed | not done | not submitted | mean points |", "|---|---|---|---|---|---|"]
    by_exercise = {}
    for nb, name, label in cols:
        results = [(s.student, e) for s in students for e in s.exercises if e.notebook == nb and e.name == name]
        by_exercise[(nb, name)] = results
        count = Counter("passed" if e.points == e.max_points and e.status == "passed" else e.status
                        for _, e in results)
        mean_points = sum(e.points for _, e in results) / len(results) if results else 0
        max_points = max((e.max_points for _, e in results), default=0)
        lines.append(f"| {label} | {count['passed']} of {len(results)} | {count['failed'] + count['error']} | "
                     f"{count['not done']} | {count['missing']} | "
                     f"{score(round(mean_points, 2))} / {score(max_points)} |")
    lines += ["", "## The most frequent mistakes", ""]
    for nb, name, label in cols:
        results = by_exercise[(nb, name)]
        passed = sum(1 for _, e in results if e.status == "passed" and not e.model_answer)
        who: dict[str, list[str]] = {}
        for student, e in results:
            key = mistake(e)
            if key:
                who.setdefault(key, []).append(student)
        if not who:
            continue
        lines += [f"### {label}: {passed} of {len(results)} passed", ""]
        for key, names in sorted(who.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:top]:
            shown = ", ".join(md(n, 100) for n in names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8
                                                                 else "")
            lines.append(f"- **{len(names)} of {len(results)}** ({shown}): {md(key, 500)}")
        if len(who) > top:
            lines.append(f"- and {len(who) - top} other mistake{'s' * (len(who) - top != 1)}")
        lines.append("")
    sections = [("Not on the roster (graded: check their names)",
                 [f"{s.student} ({s.source})" for s in students if s.roster == "unknown"]),
                ("On the roster, nothing handed in", [s.student for s in students if s.roster == "missing"]),
                ("Earned nothing: the model answer",
                 [f"{s.student}: {e.label}: {e.model_answer}"
                  for s in students for e in s.exercises if e.model_answer]),
                ("Late", [f"{s.student}: {reports.lateness(s)}" for s in students if s.late]),
                ("For review",
                 [f"{s.student}: {e.label}: {r}" for s in students for e in s.exercises for r in e.review]
                 + [f"{s.student}: {nb.number:02d}: {len(nb.review)} line{'s' * (len(nb.review) != 1)} that reach "
                    f"for the machinery of a process ({_first_reasons(nb.review)}); see gradebook.csv's notes"
                    for s in students for nb in s.notebooks if nb.review]),
                ("Adjusted by hand",
                 [f"{s.student}: {e.label}: {reports.adjustment(e)}" for s in students for e in s.exercises
                  if e.override])]
    for title, items in sections:
        if items:
            lines += [f"## {title}", ""] + [f"- {md(item, 600)}" for item in items] + [""]
    return "\n".join(lines).rstrip() + "\n"


def _first_reasons(lines: list[str], most: int = 3) -> str:
    """The distinct reasons in review lines ("... `import threading` starts threads (threading)"), a few."""
    reasons = []
    for line in lines:
        for why in line.rsplit("` ", 1)[-1].split("; "):
            why = why.split(" (")[0]
            if why not in reasons:
                reasons.append(why)
    return ", ".join(reasons[:most]) + (" …" if len(reasons) > most else "")


def summary_table(students: list[StudentGrade]) -> str:
    """One line per student with the score, for the terminal (🔍 marks a submission flagged for review)."""
    width = max([len(s.student) for s in students] + [7])
    lines = [f"{'student':<{width}}  score"]
    for s in students:
        lines.append(f"{s.student:<{width}}  {score(s.score)} / {score(s.max_score)}" + ("  🔍" if s.flagged else ""))
    return "\n".join(lines)


def _safe_name(name: str) -> str:
    return re.sub(r"[^\w.\-]+", "_", name).strip("._")[:80] or "student"


def folders(students: list[StudentGrade]) -> dict[int, str]:
    """A folder name for each student (by ``id``): safe on every file system, and never one student's for another:
    a name that had to change (``bob!``) or that two students share keeps a piece of the original's hash."""
    out, used = {}, set()
    for s in students:
        name = _safe_name(s.student)
        if name != s.student or name.lower() in used:
            name = f"{name}-{hashlib.sha1(s.student.encode('utf-8', 'replace')).hexdigest()[:6]}"
        while name.lower() in used:
            name += "_"
        used.add(name.lower())
        out[id(s)] = name
    return out


def write_outputs(students: list[StudentGrade], out, formats=("gradescope",), overrides=None,
                  confinement: str | None = None, show_review: bool = False) -> list[pathlib.Path]:
    """Write results into ``out``: with one submission directly there (Gradescope's layout), else one folder
    per student (:func:`folders`), ``gradebook.csv`` and the class summary (ending with ``confinement``, the
    grader's report of which protections held: ``tutor.grading.sandbox``); always ``grades.json`` (the batch, for a
    later partial regrade). The files of a format not asked for this time are removed, so that none is stale. The
    review flags are in the instructor's files; in the students' own only with ``show_review``. Returns the files
    written."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def write(path, text):
        path.write_text(clean(text), encoding="utf-8")
        written.append(path)

    single = len(students) == 1
    names = folders(students)
    for s in students:
        folder = out if single else out / names[id(s)]
        folder.mkdir(parents=True, exist_ok=True)
        if "gradescope" in formats:
            write(folder / "results.json", json.dumps(reports.gradescope_results(s, show_review), indent=2,
                                                      ensure_ascii=False))
        if "otter" in formats:
            write(folder / "otter_results.json", json.dumps(reports.otter_results(s, show_review), indent=2,
                                                            ensure_ascii=False))
        write(folder / "feedback.md", reports.feedback_markdown(s, show_review))
        write(folder / "feedback.html", reports.feedback_html(s, show_review))
        _remove_stale(folder, formats, keep=written)
    if "csv" in formats or not single:
        write_gradebook(students, out / "gradebook.csv")
        written.append(out / "gradebook.csv")
    if not single:
        summary = class_markdown(students)
        if confinement:
            summary += "\n## How the notebooks were confined\n\n" + confinement.split("\n", 1)[-1] + "\n"
        write(out / "class.md", summary)
        write(out / "class.html", reports.render(summary, "Class summary"))
    _remove_stale(out, formats, keep=written)
    for name in ("class.md", "class.html") if single else ():
        (out / name).unlink(missing_ok=True)  # a summary of another batch
    grades.save(students, out / "grades.json", overrides)
    written.append(out / "grades.json")
    return written


def _remove_stale(folder: pathlib.Path, formats, keep) -> None:
    """Remove the grader's files of the formats not asked for this time from ``folder``."""
    for fmt, names in OUTPUTS.items():
        for name in names:
            path = folder / name
            if path not in keep and fmt not in formats and path.exists():
                path.unlink()


__all__ = ["columns", "gradebook_rows", "write_gradebook", "class_markdown", "summary_table", "write_outputs",
           "student_notes", "mistake"]

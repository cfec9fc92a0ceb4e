"""The grades, written out: Gradescope's ``results.json``, otter-grader's results, a gradebook CSV,
feedback for the learner (Markdown and HTML) and a summary table for the terminal.

:func:`write_outputs` writes them all for a batch (``python -m tutor grade --out DIR --format ...``).
"""

from __future__ import annotations

import csv
import html
import json
import pathlib
import re

from tutor.course import catalog
from tutor.grading.grades import StudentGrade


def _score(x: float):
    return int(x) if float(x).is_integer() else round(float(x), 4)


def gradescope_results(student: StudentGrade) -> dict:
    """Gradescope's autograder results.json: score, and one test per exercise."""
    tests = []
    for nb in student.notebooks:
        for e in nb.exercises:
            tests.append({
                "name": f"{nb.number:02d} {e.name}",
                "score": _score(e.points),
                "max_score": _score(e.max_points),
                "status": "passed" if e.status == "passed" else "failed",
                "output": e.text(),
                "visibility": "visible",
            })
    notes = [f"{nb.slug}: {note}" for nb in student.notebooks for note in nb.notes] + student.notes
    out = {
        "score": _score(student.score),
        "output": (f"{_score(student.score)} / {_score(student.max_score)} points"
                   + ("\n" + "\n".join(notes) if notes else "")),
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }
    return out


def otter_results(student: StudentGrade) -> dict:
    """Otter-grader's results: one entry per question (exercise), like ``GradingResults.to_dict()``."""
    out = {}
    for nb in student.notebooks:
        for e in nb.exercises:
            case = {"name": f"{e.name} check", "body": f"checks.{e.name}({catalog.BY_NAME[e.name].learner_name})",
                    "hidden": False, "points": _score(e.max_points),
                    "success_message": None, "failure_message": None}
            out[e.name] = {
                "name": e.name,
                "path": nb.slug + ".ipynb",
                "score": _score(e.points),
                "possible": _score(e.max_points),
                "passed_all": e.status == "passed",
                "all_or_nothing": True,
                "test_cases": [case],
                "test_case_results": [{"test_case": case, "message": e.text(), "passed": e.status == "passed"}],
            }
    return out


def gradebook_rows(students: list[StudentGrade]) -> tuple[list[str], list[list]]:
    """The gradebook: a header (student, score, max_score, one column per exercise, notes) and a row per student."""
    columns: list[str] = []
    for s in students:
        for e in s.exercises:
            key = f"{e.notebook:02d} {e.name}"
            if key not in columns:
                columns.append(key)
    header = ["student", "score", "max_score"] + columns + ["notes"]
    rows = []
    for s in students:
        by = {f"{e.notebook:02d} {e.name}": _score(e.points) for e in s.exercises}
        notes = "; ".join([f"{nb.slug}: {n}" for nb in s.notebooks for n in nb.notes] + s.notes)
        rows.append([s.student, _score(s.score), _score(s.max_score)] + [by.get(c, "") for c in columns] + [notes])
    return header, rows


def write_gradebook(students: list[StudentGrade], path) -> None:
    """Write :func:`gradebook_rows` to ``path`` as CSV."""
    header, rows = gradebook_rows(students)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def feedback_markdown(student: StudentGrade) -> str:
    """A report for the learner: the score, then every exercise with the check's message."""
    lines = [f"# Feedback for {student.student}", "",
             f"**Score: {_score(student.score)} / {_score(student.max_score)} points**", ""]
    lines += [f"- {note}" for note in student.notes]
    for nb in student.notebooks:
        entry = catalog.notebook(nb.number)
        lines += ["", f"## {nb.number:02d} — {entry.title}: {_score(nb.score)} / {_score(nb.max_score)}", ""]
        lines += [f"> {note}" for note in nb.notes]
        if nb.notes:
            lines.append("")
        lines += ["| exercise | points | result |", "|---|---|---|"]
        for e in nb.exercises:
            summary = e.summary.replace("|", "\\|")
            lines.append(f"| `{e.name}` | {_score(e.points)} / {_score(e.max_points)} | {e.icon} {summary} |")
        for e in nb.exercises:
            if e.status != "passed":
                lines += ["", f"### {e.icon} `{e.name}`", "", "```", e.text(), "```"]
    return "\n".join(lines) + "\n"


def feedback_html(student: StudentGrade) -> str:
    """A page for the learner: the score, then a table per notebook with every exercise's full message."""
    body = []
    for nb in student.notebooks:
        entry = catalog.notebook(nb.number)
        body.append(f"<h2>{nb.number:02d} — {html.escape(entry.title)}: "
                    f"{_score(nb.score)} / {_score(nb.max_score)}</h2>")
        body += [f"<p><em>{html.escape(n)}</em></p>" for n in nb.notes]
        body.append("<table><tr><th>exercise</th><th>points</th><th>result</th></tr>")
        for e in nb.exercises:
            body.append(f"<tr><td><code>{html.escape(e.name)}</code></td><td>{_score(e.points)} / "
                        f"{_score(e.max_points)}</td><td><pre>{html.escape(e.text())}</pre></td></tr>")
        body.append("</table>")
    notes = "".join(f"<p><em>{html.escape(n)}</em></p>" for n in student.notes)
    return (f"<!doctype html><meta charset='utf-8'><title>Feedback: {html.escape(student.student)}</title>"
            "<style>body{font-family:sans-serif;max-width:60em;margin:auto}td,th{border:1px solid #ccc;"
            "padding:4px;vertical-align:top;text-align:left}table{border-collapse:collapse}pre{margin:0;"
            "white-space:pre-wrap}</style>"
            f"<h1>Feedback for {html.escape(student.student)}</h1>"
            f"<p><b>Score: {_score(student.score)} / {_score(student.max_score)} points</b></p>{notes}{''.join(body)}")


def _safe_name(name: str) -> str:
    return re.sub(r"[^\w.\-]+", "_", name).strip("._") or "student"


def write_outputs(students: list[StudentGrade], out, formats=("gradescope",)) -> list[pathlib.Path]:
    """Write results into ``out``: with one submission directly there (Gradescope's layout), else
    one folder per student; plus ``gradebook.csv`` for every batch. Returns the files written."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    single = len(students) == 1
    for s in students:
        folder = out if single else out / _safe_name(s.student)
        folder.mkdir(parents=True, exist_ok=True)
        if "gradescope" in formats:
            written.append(folder / "results.json")
            written[-1].write_text(json.dumps(gradescope_results(s), indent=2, ensure_ascii=False), encoding="utf-8")
        if "otter" in formats:
            written.append(folder / "otter_results.json")
            written[-1].write_text(json.dumps(otter_results(s), indent=2, ensure_ascii=False), encoding="utf-8")
        written.append(folder / "feedback.md")
        written[-1].write_text(feedback_markdown(s), encoding="utf-8")
        written.append(folder / "feedback.html")
        written[-1].write_text(feedback_html(s), encoding="utf-8")
    if "csv" in formats or not single:
        written.append(out / "gradebook.csv")
        write_gradebook(students, written[-1])
    return written


def summary_table(students: list[StudentGrade]) -> str:
    """One line per student with the score, for the terminal."""
    width = max([len(s.student) for s in students] + [7])
    lines = [f"{'student':<{width}}  score"]
    for s in students:
        lines.append(f"{s.student:<{width}}  {_score(s.score)} / {_score(s.max_score)}")
    return "\n".join(lines)

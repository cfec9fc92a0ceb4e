"""The grades of one student, written out: Gradescope's ``results.json``, otter-grader's results, and the
feedback (Markdown, and the same Markdown rendered to HTML by markdown-it).

The feedback speaks to the learner about the notebook they handed in: each exercise by the title it has
in the notebook, its points, the check's full message (what differs, the case, the likely cause), what
earned nothing and why, an instructor's adjustments, and what was flagged for review. A notebook that was
not handed in is said once. ``tutor.grading.summary`` writes what concerns the whole class.
"""

from __future__ import annotations

import html

from tutor.course import catalog
from tutor.grading.grades import ExerciseGrade, NotebookGrade, StudentGrade


def score(x: float):
    """``3`` for 3.0, ``2.5`` for 2.5: how points are written everywhere."""
    return int(x) if float(x).is_integer() else round(float(x), 4)


def plain(title: str) -> str:
    """A title without Markdown's backticks, for places that show text as it is (Gradescope, CSV)."""
    return title.replace("`", "")


def points_text(e: ExerciseGrade) -> str:
    text = f"{score(e.points)} / {score(e.max_points)}"
    return text + " (adjusted)" if e.override else text


def adjustment(e: ExerciseGrade) -> str | None:
    """"adjusted by your instructor from 0 to 1: reason" for an overridden exercise."""
    if not e.override:
        return None
    reason = e.override.get("reason")
    return (f"adjusted by your instructor from {score(e.earned)} to {score(e.override['points'])} points"
            + (f": {reason}" if reason else ""))


def exercise_lines(e: ExerciseGrade) -> list[str]:
    """The exercise's result as plain lines: the summary, the check's details, the adjustment, review flags."""
    lines = [f"{e.icon} {plain(e.title) or e.name}: {e.summary}"] + [f"   {d}" for d in e.details]
    if adjustment(e):
        lines.append(f"   {adjustment(e)}")
    lines += [f"   🔍 review: {r}" for r in e.review]
    return lines


def gradescope_results(student: StudentGrade) -> dict:
    """Gradescope's autograder results.json: score, and one test per exercise."""
    tests = []
    for nb in student.notebooks:
        if not nb.submitted:
            tests.append({"name": f"{nb.number:02d} {catalog.notebook(nb.number).filename}", "score": 0,
                          "max_score": score(nb.max_score), "status": "failed", "output": "not submitted",
                          "visibility": "visible"})
            continue
        for e in nb.exercises:
            tests.append({
                "name": f"{nb.number:02d} {plain(e.title) or e.name}",
                "score": score(e.points),
                "max_score": score(e.max_points),
                "status": "passed" if e.status == "passed" else "failed",
                "output": "\n".join(exercise_lines(e)),
                "visibility": "visible",
            })
    notes = [f"{nb.slug}: {note}" for nb in student.notebooks for note in nb.notes] + student.notes
    notes += [f"{nb.slug}: 🔍 review: {r}" for nb in student.notebooks for r in nb.review]
    return {
        "score": score(student.score),
        "output": f"{score(student.score)} / {score(student.max_score)} points" + "".join(f"\n{n}" for n in notes),
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def otter_results(student: StudentGrade) -> dict:
    """Otter-grader's results: one entry per question (exercise), like ``GradingResults.to_dict()``."""
    out = {}
    for nb in student.notebooks:
        for e in nb.exercises:
            case = {"name": f"{e.name} check", "body": f"checks.{e.name}({catalog.BY_NAME[e.name].learner_name})",
                    "hidden": False, "points": score(e.max_points),
                    "success_message": None, "failure_message": None}
            message = "\n".join(exercise_lines(e)) if nb.submitted else "not submitted"
            out[e.name] = {
                "name": e.name,
                "path": nb.slug + ".ipynb",
                "score": score(e.points),
                "possible": score(e.max_points),
                "passed_all": e.status == "passed",
                "all_or_nothing": True,
                "test_cases": [case],
                "test_case_results": [{"test_case": case, "message": message, "passed": e.status == "passed"}],
            }
    return out


# --------------------------------------------------------------------------------------
# Feedback


def message_markdown(lines: list[str]) -> list[str]:
    """A check's detail lines as Markdown: prose lines as a list, indented ones (tensors, tables) as code."""
    out, block = [], []

    def flush():
        if block:
            out.extend(["", "```", *block, "```", ""])
            block.clear()

    for line in lines:
        if line.startswith("  "):
            block.append(line)
        else:
            flush()
            out.append(f"- {line}")
    flush()
    return out


def _notebook_markdown(nb: NotebookGrade) -> list[str]:
    entry = catalog.notebook(nb.number)
    lines = ["", f"## {nb.number:02d} — {entry.title}: {score(nb.score)} / {score(nb.max_score)}", ""]
    if not nb.submitted:
        return lines + [f"`{entry.filename}` was not submitted.", ""]
    lines += [f"- {note}" for note in nb.notes]
    lines += ["", "| exercise | points | result |", "|---|---|---|"]
    for e in nb.exercises:
        summary = e.summary.replace("|", "\\|")
        lines.append(f"| {e.title or e.name} | {points_text(e)} | {e.icon} {summary} |")
    for e in nb.exercises:
        if e.status == "passed" and not e.override and not e.review:
            continue
        lines += ["", f"### {e.icon} {e.title or e.name}", "", e.summary, ""]
        lines += message_markdown(e.details)
        if adjustment(e):
            lines += ["", f"**{adjustment(e).capitalize()}**"]
        lines += [f"- 🔍 **For review:** {r}" for r in e.review]
    if nb.review:
        lines += ["", "### 🔍 For review", "",
                  "Lines of your code that could reach the grader (your score does not change; your instructor "
                  "will look at them):", ""]
        lines += [f"- {r}" for r in nb.review]
    return lines


def feedback_markdown(student: StudentGrade) -> str:
    """A report for the learner: the score, then every notebook's exercises with the checks' messages."""
    lines = [f"# Feedback for {student.student}", "",
             f"**Score: {score(student.score)} / {score(student.max_score)} points**", ""]
    lines += [f"- {note}" for note in student.notes]
    for nb in student.notebooks:
        lines += _notebook_markdown(nb)
    return "\n".join(lines) + "\n"


STYLE = ("body{font-family:sans-serif;max-width:60em;margin:auto;padding:0 1em}td,th{border:1px solid #ccc;"
         "padding:4px;vertical-align:top;text-align:left}table{border-collapse:collapse}"
         "pre{background:#f6f8fa;padding:6px;overflow-x:auto}code{background:#f6f8fa}")


def render(markdown: str, title: str) -> str:
    """A page from Markdown (CommonMark with tables; raw HTML in it is shown as text, never run)."""
    from markdown_it import MarkdownIt  # imported here: only reports use it

    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown)
    return (f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style>\n{body}")


def feedback_html(student: StudentGrade) -> str:
    """:func:`feedback_markdown`, rendered."""
    return render(feedback_markdown(student), f"Feedback: {student.student}")

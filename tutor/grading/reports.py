"""The grades of one student, written out: Gradescope's ``results.json``, otter-grader's results, and the
feedback (Markdown, and the same Markdown rendered to HTML by markdown-it).

The feedback speaks to the learner about the notebook they handed in: each exercise by the title it has
in the notebook, its points, the check's full message (what differs, the case, the likely cause), what
earned nothing and why, an instructor's adjustments, lateness, and (with ``show_review``) what was flagged for
review. A notebook that was not handed in is said once. ``tutor.grading.summary`` writes what concerns the whole
class.

A check's message can hold the learner's own text (an exception's message, a class's name): every such string goes
through :func:`md` before it is Markdown, so that it shows as text, never as a heading, a link or a picture, and is
cut to :data:`MAX_TEXT` characters.
"""

from __future__ import annotations

import html
import re

from tutor.course import catalog
from tutor.grading.grades import ExerciseGrade, NotebookGrade, StudentGrade

MAX_TEXT = 2000
_ACTIVE = re.compile(r"([\\\[\]()!<>#*_|~])")  # what makes Markdown (CommonMark) of plain text


def md(text, limit: int = MAX_TEXT) -> str:
    """``text`` as Markdown that shows it as it is: one line, cut to ``limit``, every active character escaped
    outside its `code spans` (which show as code)."""
    text = str(text).replace("\r", " ").replace("\n", " ")
    if len(text) > limit:
        text = text[:limit] + "…"
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an odd number of backticks: no code span, escape them all
        return _ACTIVE.sub(r"\\\1", text).replace("`", "\\`")
    return "`".join(_ACTIVE.sub(r"\\\1", p) if i % 2 == 0 else p for i, p in enumerate(parts))


def fence(lines: list[str]) -> list[str]:
    """``lines`` as a code block whose fence no line can close (longer than any run of backticks in them)."""
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    mark = "`" * max(3, longest + 1)
    return ["", mark, *(line[:MAX_TEXT] for line in lines), mark, ""]


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


def exercise_lines(e: ExerciseGrade, show_review: bool = False) -> list[str]:
    """The exercise's result as plain lines: the summary, the check's details, the adjustment, and (with
    ``show_review``) the review flags."""
    lines = [f"{e.icon} {plain(e.title) or e.name}: {e.summary[:MAX_TEXT]}"] + [f"   {d[:MAX_TEXT]}" for d in e.details]
    if adjustment(e):
        lines.append(f"   {adjustment(e)}")
    if show_review:
        lines += [f"   🔍 review: {r}" for r in e.review]
    return lines


def lateness(student: StudentGrade) -> str | None:
    """"submitted 30.5 hours late: the score is multiplied by 0.8" for a late submission."""
    if not student.late:
        return None
    factor = student.late["factor"]
    return (f"submitted {student.late['hours']:g} hours late" + (
        f": the score is multiplied by {factor:g} ({score(student.earned)} before)" if factor != 1 else ""))


def gradescope_results(student: StudentGrade, show_review: bool = False) -> dict:
    """Gradescope's autograder results.json: score, and one test per exercise (the review flags only with
    ``show_review``: they are for the instructor)."""
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
                "output": "\n".join(exercise_lines(e, show_review)),
                "visibility": "visible",
            })
    notes = [f"{nb.slug}: {note}" for nb in student.notebooks for note in nb.notes] + student.notes
    if lateness(student):
        notes.insert(0, lateness(student))
    if show_review:
        notes += [f"{nb.slug}: 🔍 review: {r}" for nb in student.notebooks for r in nb.review]
    return {
        "score": score(student.score),
        "output": f"{score(student.score)} / {score(student.max_score)} points" + "".join(f"\n{n}" for n in notes),
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def otter_results(student: StudentGrade, show_review: bool = False) -> dict:
    """Otter-grader's results: one entry per question (exercise), like ``GradingResults.to_dict()``."""
    out = {}
    for nb in student.notebooks:
        for e in nb.exercises:
            case = {"name": f"{e.name} check", "body": f"checks.{e.name}({catalog.BY_NAME[e.name].learner_name})",
                    "hidden": False, "points": score(e.max_points),
                    "success_message": None, "failure_message": None}
            message = "\n".join(exercise_lines(e, show_review)) if nb.submitted else "not submitted"
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
    """A check's detail lines as Markdown: prose lines as a list (escaped: :func:`md`), indented ones (tensors,
    tables) as code."""
    out, block = [], []

    def flush():
        if block:
            out.extend(fence(block))
            block.clear()

    for line in lines:
        if line.startswith("  "):
            block.append(line)
        else:
            flush()
            out.append(f"- {md(line)}")
    flush()
    return out


def _notebook_markdown(nb: NotebookGrade, show_review: bool) -> list[str]:
    entry = catalog.notebook(nb.number)
    lines = ["", f"## {nb.number:02d} — {entry.title}: {score(nb.score)} / {score(nb.max_score)}", ""]
    if not nb.submitted:
        return lines + [f"`{entry.filename}` was not submitted.", ""]
    lines += [f"- {md(note)}" for note in nb.notes]
    lines += ["", "| exercise | points | result |", "|---|---|---|"]
    for e in nb.exercises:
        lines.append(f"| {e.title or e.name} | {points_text(e)} | {e.icon} {md(e.summary, 300)} |")
    for e in nb.exercises:
        review = e.review if show_review else []
        if e.status == "passed" and not e.override and not review:
            continue
        lines += ["", f"### {e.icon} {e.title or e.name}", "", md(e.summary), ""]
        lines += message_markdown(e.details)
        if adjustment(e):
            lines += ["", f"**{md(adjustment(e).capitalize())}**"]
        lines += [f"- 🔍 **For review:** {md(r)}" for r in review]
    if nb.review and show_review:
        lines += ["", "### 🔍 For review", "",
                  "Lines of your code that reach for the machinery of a process (your score does not change; your "
                  "instructor will look at them):", ""]
        lines += [f"- {md(r)}" for r in nb.review]
    return lines


def feedback_markdown(student: StudentGrade, show_review: bool = False) -> str:
    """A report for the learner: the score, then every notebook's exercises with the checks' messages."""
    lines = [f"# Feedback for {md(student.student, 200)}", "",
             f"**Score: {score(student.score)} / {score(student.max_score)} points**", ""]
    if lateness(student):
        lines += [f"- {md(lateness(student))}"]
    lines += [f"- {md(note)}" for note in student.notes]
    for nb in student.notebooks:
        lines += _notebook_markdown(nb, show_review)
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


def feedback_html(student: StudentGrade, show_review: bool = False) -> str:
    """:func:`feedback_markdown`, rendered."""
    return render(feedback_markdown(student, show_review), f"Feedback: {student.student[:200]}")

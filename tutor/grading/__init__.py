"""Grade learner notebooks: ``python -m tutor grade SUBMISSION...``.

For every exercise of every submitted notebook the grader recomputes the result itself and believes nothing
the notebook stored. The learner's cells run in a fresh Jupyter kernel; the checks run in a fork of it that
no learner code ran in (see the README's "Grading" section for the threat model). One job per module, in
the order a grading run uses them:

| module | what is in it |
|---|---|
| ``grades`` | ``Options`` and the results (``StudentGrade`` ...); ``grades.json``, ``merge``, overrides |
| ``submissions`` | ``find_submissions``, ``match_notebook``: which files are whose, zips extracted safely |
| ``plan`` | ``plan_cells``, ``context_source``, ``Template``: which cells run, and the grader's preamble |
| ``kernel`` | the grader's code in the kernel: snapshot, the watchdog, restore, the start of the checker |
| ``channel`` | the runner's end of the grader's channel: starting the checker, reading its results |
| ``checker`` | the checker process: one child process per check, watched for the model answer |
| ``answers`` | what a model answer is, the watch on calls into it, the same source with the names changed |
| ``review`` | the static look at learner cells for code that could reach the grader |
| ``runner`` | ``grade``, ``grade_notebook``, ``run_attempt``: kernels, timeouts, faults, workers |
| ``reports`` | one student's Gradescope and otter results, and feedback (Markdown, HTML) |
| ``summary`` | the batch: the gradebook CSV, the class summary, ``write_outputs`` |

The public API is re-exported here: ``from tutor import grading``, then ``grading.grade(paths)``.
"""

import importlib

# name -> the module that defines it. Imported on first use (PEP 562), so that the checker, which imports
# tutor.grading.checker in a process of its own, does not import the runner's notebook and kernel machinery.
_PUBLIC = {
    "grades": ["Options", "ExerciseGrade", "NotebookGrade", "StudentGrade", "save", "load", "merge", "load_overrides",
               "apply_overrides"],
    "plan": ["Template", "context_source", "load_template", "plan_cells"],
    "reports": ["feedback_html", "feedback_markdown", "gradescope_results", "otter_results"],
    "runner": ["grade", "grade_notebook", "package_snapshot", "run_attempt"],
    "submissions": ["find_submissions", "match_notebook"],
    "summary": ["class_markdown", "gradebook_rows", "summary_table", "write_gradebook", "write_outputs"],
}
_WHERE = {name: module for module, names in _PUBLIC.items() for name in names}
__all__ = list(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_WHERE))

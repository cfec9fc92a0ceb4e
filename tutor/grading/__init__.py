"""Grade learner notebooks: ``python -m tutor grade SUBMISSION...``.

For every exercise of every submitted notebook the grader recomputes the result itself and believes nothing
the notebook stored. The learner's cells run in a Jupyter kernel on the learner's side, confined (a sandbox
without the model answers being graded); the checks run in the judge, a process of its own where no learner
code runs, on handles to the learner's objects across a wire that carries plain data only (see docs/instructors.md,
"Grading"). One job per module, in the order a grading run uses them:

| module | what is in it |
|---|---|
| ``grades`` | ``Options``, ``Outcome`` and the results (``StudentGrade`` ...); ``grades.json``, merges, overrides |
| ``submissions`` | ``find_submissions``, ``choose``: which files are whose and which is graded; safe zips |
| ``roster`` | the class roster, Gradescope's submission metadata, the late policy |
| ``intake`` | ``take``: the batch's students and the notebook of each that is graded |
| ``plan`` | ``plan_cells``, ``context_source``, ``Template``: which cells run, and the grader's preamble |
| ``lock`` | the package a graded kernel sees: the course's, without the model answers being graded |
| ``sandbox`` | the confinement of the learner's side (bubblewrap, else ``unshare``), and what held |
| ``host`` | the learner's side: runs the cells with nbclient and reports on each |
| ``kernel`` | the grader's code in the kernel: the preamble, and the server that answers the judge |
| ``serve`` | a child of the kernel that answers the judge's requests about one learner object |
| ``wire`` | every message between the grader's processes, and the plain data that may cross |
| ``remote`` | the judge's handles to the learner's objects (``Remote``, ``Peer``) |
| ``judge`` | the process where the checks run, apart from the learner's code, and the runner's handle on it |
| ``processes`` | stopping a graded notebook's processes |
| ``review`` | the static flags for the instructor: reaching for the machinery, copies of the answers |
| ``runner`` | ``grade``, ``grade_notebook``, ``run_attempt``: attempts, timeouts, faults, workers and judges |
| ``reports`` | one student's Gradescope and otter results, and feedback (Markdown, HTML) |
| ``summary`` | the batch: the gradebook CSV, the class summary, ``write_outputs`` |

The public API is re-exported here: ``from tutor import grading``, then ``grading.grade(paths)``.
"""

import importlib

# name -> the module that defines it. Imported on first use (PEP 562), so that the processes of the learner's side,
# which import tutor.grading.host, serve and wire, do not import the runner's machinery.
_PUBLIC = {
    "grades": ["Options", "Outcome", "ExerciseGrade", "NotebookGrade", "StudentGrade", "save", "load", "merge",
               "load_overrides", "apply_overrides", "check_overrides"],
    "plan": ["Template", "context_source", "load_template", "plan_cells"],
    "reports": ["feedback_html", "feedback_markdown", "gradescope_results", "otter_results"],
    "runner": ["grade", "grade_notebook", "run_attempt", "confinement_report", "students_in"],
    "submissions": ["find_submissions", "match_notebook", "Limits"],
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

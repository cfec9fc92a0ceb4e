"""Grade learner notebooks: ``python -m tutor grade SUBMISSION...``.

For every exercise of every submitted notebook the grader recomputes the result in a fresh Jupyter
kernel that it controls, and believes nothing the notebook stored (see the README's "Grading" section
for the threat model). One job per module, in the order a grading run uses them:

| module | what is in it |
|---|---|
| ``grades`` | ``Options`` (timeouts, memory, workers, points) and the results: ``StudentGrade`` and its parts |
| ``submissions`` | ``find_submissions``, ``match_notebook``: which files are whose, zips extracted safely |
| ``plan`` | ``plan_cells``, ``context_source``, ``Template``: which cells run, and the grader's own cells |
| ``kernel`` | the grader's code that runs inside the kernel: snapshot and restore, capture, the pristine checks |
| ``runner`` | ``grade``, ``grade_notebook``, ``run_attempt``: kernels, timeouts, faults, workers |
| ``reports`` | Gradescope and otter results, the gradebook CSV, feedback (Markdown, HTML), ``write_outputs`` |

The public API is re-exported here: ``from tutor import grading``, then ``grading.grade(paths)``.
"""

from tutor.grading.grades import ExerciseGrade, NotebookGrade, Options, StudentGrade
from tutor.grading.plan import Template, context_source, load_template, plan_cells
from tutor.grading.reports import (
    feedback_html,
    feedback_markdown,
    gradebook_rows,
    gradescope_results,
    otter_results,
    summary_table,
    write_gradebook,
    write_outputs,
)
from tutor.grading.runner import grade, grade_notebook, package_snapshot, run_attempt
from tutor.grading.submissions import find_submissions, match_notebook

__all__ = ["Options", "ExerciseGrade", "NotebookGrade", "StudentGrade", "grade", "grade_notebook",
           "find_submissions", "match_notebook", "gradescope_results", "otter_results", "write_gradebook",
           "gradebook_rows", "feedback_markdown", "feedback_html", "write_outputs", "summary_table",
           "Template", "context_source", "load_template", "plan_cells", "package_snapshot", "run_attempt"]

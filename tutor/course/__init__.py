"""The course itself: its notebooks and exercises, the learner notebooks built from the solutions, and progress.

| module | what is in it |
|---|---|
| ``catalog`` | every notebook and exercise (plain data): ``NOTEBOOKS``, ``EXERCISES``, ``BY_NAME``, ``exercises(n)`` |
| ``points`` | an exercise's points (its difficulty, read from its solution notebook): ``points.of("softmax")`` |
| ``build`` | ``python -m tutor build``: learner notebooks from the solution notebooks (``build``, ``BuildReport``) |
| ``run`` | ``python -m tutor run``: execute the solution notebooks in place, then rebuild their learner notebooks |
| ``progress`` | ``tutor.progress()`` and ``python -m tutor progress``: the results your checks recorded |

Import the module you need (``from tutor.course import catalog``); this package imports none of them, so
that a check in a learner's kernel loads only the catalog and progress.
"""

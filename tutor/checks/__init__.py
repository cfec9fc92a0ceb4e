"""One check per exercise: ``tutor.checks.<name>(your_function_or_class)``.

Each check runs your code on several cases, compares with ``tutor.reference`` and shows ✅, ⏳
("not done yet") or ❌ with what differs and the likely cause. It never raises into your
notebook (unless ``TUTOR_STRICT=1``) and returns a ``CheckResult`` whose ``.passed`` is a bool.

| module | what is in it |
|---|---|
| ``harness`` | running learner code safely, ``check``, ``CheckResult``, ``RESULTS``, ``yours_or_reference`` |
| ``compare`` | comparing with the reference: ``expect_close``, known mistakes, ``load_reference_weights`` |
| ``common`` | what the checks of several notebooks share (inputs, mistakes, sampling statistics) |
| ``beside`` | what a check runs in the learner's process (``harness.at``): stand-in models, recorders |
| ``nbNN_<slug>`` | the checks of notebook NN, with its tables of known mistakes |

The registry is the catalog (``tutor.course.catalog``): the check of exercise ``name`` is the function
``name`` in ``tutor.checks.nb{slug}`` of its notebook, and that module's ``__all__`` is exactly its
notebook's exercises (tests/test_catalog.py and tests/test_checks_registry.py hold to it). A check's
module is imported the first time the check is looked up.
"""

import importlib

from tutor.checks.harness import RESULTS, CheckFailed, CheckResult, yours_or_reference
from tutor.course import catalog

__all__ = ["CheckFailed", "CheckResult", "RESULTS", "yours_or_reference", *catalog.BY_NAME]


def module_name(notebook: catalog.Notebook) -> str:
    """The module of a notebook's checks: 01_dot_product_attention -> tutor.checks.nb01_dot_product_attention."""
    return f"{__name__}.nb{notebook.slug}"


def check_module(number: int):
    """The module of notebook ``number``'s checks (imported on first use)."""
    return importlib.import_module(module_name(catalog.notebook(number)))


def __getattr__(name: str):
    """``tutor.checks.softmax``: the check of an exercise, from the module of its notebook; also the
    ``nbNN_<slug>`` modules themselves."""
    exercise = catalog.BY_NAME.get(name)
    if exercise is not None:
        return getattr(check_module(exercise.notebook), name)
    for notebook in catalog.NOTEBOOKS:
        if name == f"nb{notebook.slug}":
            return check_module(notebook.number)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    """Every check (for tab completion), the notebooks' check modules and this module's own names."""
    return sorted(set(globals()) | set(catalog.BY_NAME) | {f"nb{n.slug}" for n in catalog.NOTEBOOKS})

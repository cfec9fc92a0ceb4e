"""tutor: the companion package of the "Transformers from scratch" notebooks, laid out by job.

- ``tutor.reference``: model answers for every exercise, one module per concept.
- ``tutor.checks``: one check per exercise, e.g. ``tutor.checks.softmax(softmax)``.
- ``tutor.shapes``: shape-checking asserts such as ``expect_shape(x, "B T C")``.
- ``tutor.viz``: heatmaps, plots and widgets, one module per notebook topic (each widget with a static picture).
- ``tutor.data``: the data sets (names, tiny Shakespeare), where they are loaded from, and their batches.
- ``tutor.train``: the training engine of notebooks 08-11, the benchmarks and ``python -m tutor.scale``.
- ``tutor.distributed`` and ``tutor.scale``: process groups, and the ``torchrun`` command line.
- ``tutor.course``: the notebooks and exercises (``tutor.course.catalog``), building the learner notebooks,
  running the solutions, points, and your progress.
- ``tutor.grading``: ``python -m tutor grade``, grading learner notebooks in a kernel of its own.
- ``tutor.env``: every ``TUTOR_*`` environment variable; ``tutor.device``, ``tutor.errors``, ``tutor.files``.
"""

from tutor import env
from tutor.device import get_device, seed_everything
from tutor.errors import TutorError
from tutor.errors import install_excepthook as _install_excepthook

__version__ = "0.2.0"

# The repository the notebooks install from on Colab. Forks change it here and in the
# first cell of each notebook (a test checks that they agree).
REPO_URL = "https://github.com/transformers-from-scratch/course"

_install_excepthook()  # a TutorError (bad names file, bad TUTOR_DEVICE) prints one line in a terminal


def progress(*notebooks: int):
    """Your progress: every exercise of these notebooks (default: all) as ✅ / ❌ / ⏳ with the date of
    its last pass, e.g. ``tutor.progress(3)``. See ``tutor.course.progress``."""
    # imported here: tutor.course.progress imports from this package, which is not yet whole at its top
    from tutor.course.progress import progress as _progress

    return _progress(*notebooks)


__all__ = ["REPO_URL", "TutorError", "env", "get_device", "seed_everything", "progress", "__version__"]

"""Moved: the training engine is now the package ``tutor.train`` (one module per job). This old path keeps
working, with a ``TutorDeprecationWarning``, until the next release of the course."""

from tutor.deprecation import warn_moved

warn_moved("tutor.trainer", "tutor.train")

from tutor.train import *  # noqa: E402,F403

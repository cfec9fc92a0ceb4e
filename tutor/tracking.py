"""Moved: your progress (``tutor.progress()``) is now ``tutor.course.progress``. This old path keeps working,
with a ``TutorDeprecationWarning``, until the next release of the course."""

from tutor.deprecation import warn_moved

warn_moved("tutor.tracking", "tutor.course.progress")

from tutor.course.progress import *  # noqa: E402,F403

"""Moved: the notebooks and exercises are now ``tutor.course.catalog`` (an exercise's points:
``tutor.course.points.of(name)``). This old path keeps working, with a ``TutorDeprecationWarning``,
until the next release of the course."""

from tutor.deprecation import warn_moved

warn_moved("tutor.catalog", "tutor.course.catalog")

from tutor.course.catalog import *  # noqa: E402,F403

"""Moved: notebook 01's characters (the alphabet, encode, decode, one_hot) are now ``tutor.reference.characters``.
This old path keeps working, with a ``TutorDeprecationWarning``, until the next release of the course."""

from tutor.deprecation import warn_moved

warn_moved("tutor.reference.tokens", "tutor.reference.characters")

from tutor.reference.characters import *  # noqa: E402,F403

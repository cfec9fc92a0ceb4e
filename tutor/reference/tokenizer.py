"""Moved: notebook 11's byte-pair encoding is now ``tutor.reference.bpe``. This old path keeps working, with a
``TutorDeprecationWarning``, until the next release of the course."""

from tutor.deprecation import warn_moved

warn_moved("tutor.reference.tokenizer", "tutor.reference.bpe")

from tutor.reference.bpe import *  # noqa: E402,F403

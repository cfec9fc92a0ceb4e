"""Moved: notebook 11's payoff is now ``tutor.train.bpe_vs_chars``. This old path keeps working, with a
``TutorDeprecationWarning``, until the next release of the course."""

from tutor.deprecation import warn_moved

warn_moved("tutor.bpe_vs_chars", "tutor.train.bpe_vs_chars")

from tutor.train.bpe_vs_chars import *  # noqa: E402,F403

"""Moved: notebook 10's get_batch, flops_per_token and average_gradients are now ``tutor.reference.scaling_up``.
This old path keeps working, with a ``TutorDeprecationWarning``, until the next release of the course."""

from tutor.deprecation import warn_moved

warn_moved("tutor.reference.scaling", "tutor.reference.scaling_up")

from tutor.reference.scaling_up import *  # noqa: E402,F403

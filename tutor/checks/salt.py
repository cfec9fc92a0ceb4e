"""Where the checks' random inputs start: a salt, 0 in a notebook (a check sees the same inputs every run), drawn
anew by the grader for every exercise it checks (``tutor.grading.judge``), so that no table of inputs recorded at
home, with the outputs the model answer gave, can answer a graded check. ``TUTOR_CHECK_SALT`` sets it (tests)."""

import os

import torch

from tutor import env

_SALT = int(os.environ.get(env.CHECK_SALT) or 0)


def set_salt(value: int) -> None:
    """Make every seed the checks use ``value`` further on (the judge's, before each exercise)."""
    global _SALT
    _SALT = int(value)


def salted(n: int) -> int:
    """The seed a check's ``n`` stands for: ``n`` in a notebook, ``n`` plus the grader's salt when graded."""
    return (n + _SALT) % (2**63)


def generator(n: int) -> torch.Generator:
    """A CPU generator for a check's random inputs, seeded with ``salted(n)``."""
    return torch.Generator().manual_seed(salted(n))


def manual_seed(n: int) -> None:
    """Seed torch's global CPU generator with ``salted(n)``, in this process only (see ``harness.seed``)."""
    torch.default_generator.manual_seed(salted(n))

"""Every ``TUTOR_*`` environment variable the course reads, in one place, with one parser for "true".

| variable | what it does | read by |
|---|---|---|
| ``TUTOR_DEVICE`` | force ``cpu``, ``cuda``, ``cuda:N`` or ``mps`` | ``tutor.device`` |
| ``TUTOR_QUICK`` | notebooks train for a few dozen steps only (a smoke test) | notebooks 08-11 |
| ``TUTOR_STRICT`` | a check that does not pass raises (nbval, ``tutor run``) | ``tutor.checks.harness`` |
| ``TUTOR_OFFLINE`` | never try a download | ``tutor.data`` |
| ``TUTOR_NAMES`` | your own names file, one name per line | ``tutor.data.names`` |
| ``TUTOR_SHAKESPEARE`` | your own text file instead of tiny Shakespeare | ``tutor.data.shakespeare`` |
| ``TUTOR_GPT2_ENCODER`` | your copy of GPT-2's ``encoder.json`` (notebook 11's last section) | ``tutor.data.gpt2`` |
| ``TUTOR_GPT2_MERGES`` | your copy of GPT-2's ``vocab.bpe`` | ``tutor.data.gpt2`` |
| ``TUTOR_CACHE_DIR`` | where downloaded data sets are cached | ``tutor.data.sources`` |
| ``TUTOR_PROGRESS`` | ``0`` records no progress on disk | ``tutor.course.progress`` |
| ``TUTOR_PROGRESS_FILE`` | where progress is recorded | ``tutor.course.progress`` |
| ``TUTOR_DIST_START`` | how the notebook-10 check starts its processes (``fork``/``spawn``) | ``tutor.distributed`` |
| ``TUTOR_MAINTAINER`` | tests: ``notebooks/`` must equal a fresh build exactly | ``tests/`` |
| ``TUTOR_GRADE_RUN`` | set by the grader in its kernels: marks one graded notebook's processes | ``tutor.grading`` |
| ``TUTOR_CHECK_REMOTE`` | tests: checks call the learner's code in another process, as graded | ``tutor.checks`` |
| ``TUTOR_CHECK_SALT`` | tests: the salt of the checks' inputs (graded: one per exercise) | ``tutor.checks.salt`` |

"True" is one of ``1``, ``true``, ``yes``, ``on`` (any case, spaces ignored); everything else, an empty
value included, is false. A switch that is on by default (``TUTOR_PROGRESS``) is off only for ``0``,
``false``, ``no`` or ``off``.
"""

from __future__ import annotations

import os

DEVICE = "TUTOR_DEVICE"
QUICK = "TUTOR_QUICK"
STRICT = "TUTOR_STRICT"
OFFLINE = "TUTOR_OFFLINE"
NAMES = "TUTOR_NAMES"
SHAKESPEARE = "TUTOR_SHAKESPEARE"
GPT2_ENCODER = "TUTOR_GPT2_ENCODER"
GPT2_MERGES = "TUTOR_GPT2_MERGES"
CACHE_DIR = "TUTOR_CACHE_DIR"
PROGRESS = "TUTOR_PROGRESS"
PROGRESS_FILE = "TUTOR_PROGRESS_FILE"
DIST_START = "TUTOR_DIST_START"
MAINTAINER = "TUTOR_MAINTAINER"
GRADE_RUN = "TUTOR_GRADE_RUN"
CHECK_REMOTE = "TUTOR_CHECK_REMOTE"
CHECK_SALT = "TUTOR_CHECK_SALT"

TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})


def is_true(value: str | None) -> bool:
    """``"1"``, ``"true"``, ``"yes"``, ``"on"`` (any case) -> True; anything else, ``None`` included -> False."""
    return (value or "").strip().lower() in TRUE


def flag(name: str, default: bool = False) -> bool:
    """The switch ``name``: unset or empty gives ``default``; otherwise true only for a "true" word, and
    with ``default=True`` false only for ``0``/``false``/``no``/``off``."""
    value = (os.environ.get(name) or "").strip().lower()
    if not value:
        return default
    return value not in FALSE if default else value in TRUE


def text(name: str) -> str | None:
    """The value of ``name`` with surrounding spaces removed, or ``None`` when unset or empty."""
    value = (os.environ.get(name) or "").strip()
    return value or None


def quick() -> bool:
    """``TUTOR_QUICK``: the notebooks that train run a short smoke test (the tests and the grader set it)."""
    return flag(QUICK)


def strict() -> bool:
    """``TUTOR_STRICT``: a check that does not pass raises instead of only showing ❌."""
    return flag(STRICT)


def offline() -> bool:
    """``TUTOR_OFFLINE``: never try to download anything."""
    return flag(OFFLINE)

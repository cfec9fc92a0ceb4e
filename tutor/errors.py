"""Errors a learner can fix (a bad data file, a bad ``TUTOR_DEVICE``): one readable line.

A ``TutorError`` is about the learner's setup, not a bug in their code, so a traceback through
``tutor``'s internals only hides the one line that matters. It renders as that line:

- in Jupyter and IPython, through ``_render_traceback_`` (IPython's hook for custom exceptions);
- in a terminal, through a ``sys.excepthook`` that ``tutor`` installs when nothing else has
  replaced Python's default one; every other exception keeps its full traceback.

Each subclass also derives from the built-in exception a caller would expect
(``FileNotFoundError``, ``ValueError``, ...), so ``except ValueError`` still catches it.
"""

from __future__ import annotations

import sys


class TutorError(Exception):
    """A problem with the learner's setup, explained in one line (``str(error)``)."""

    def one_line(self) -> str:
        return f"{type(self).__name__}: {self}"

    def _render_traceback_(self) -> list[str]:  # IPython / Jupyter
        return [self.one_line()]


class DataFileError(TutorError, ValueError):
    """A data file of yours (``path=``, ``TUTOR_NAMES``, ``TUTOR_SHAKESPEARE``) that cannot be used: not text,
    empty, or (a names file) mostly not names."""


class DataFileNotFoundError(TutorError, FileNotFoundError):
    """The data file given by ``path=``, ``TUTOR_NAMES`` or ``TUTOR_SHAKESPEARE`` does not exist."""


class DataFileIsADirectoryError(TutorError, IsADirectoryError):
    """The data file given by ``path=``, ``TUTOR_NAMES`` or ``TUTOR_SHAKESPEARE`` is a directory."""


class NoDataError(TutorError, RuntimeError):
    """No source of a data set at all (no file, no good package copy, no cache, no download)."""


# The names of these errors from before tiny Shakespeare shared them: the same classes.
NamesFileError = DataFileError
NamesFileNotFoundError = DataFileNotFoundError
NamesFileIsADirectoryError = DataFileIsADirectoryError
NoNamesError = NoDataError


class DeviceError(TutorError, ValueError):
    """``TUTOR_DEVICE`` names a device that does not exist, or is not available here."""


def _excepthook(kind, value, traceback):
    if isinstance(value, TutorError):
        print(value.one_line(), file=sys.stderr)
    else:
        _previous_hook(kind, value, traceback)


_previous_hook = sys.excepthook


def install_excepthook() -> bool:
    """Print an uncaught ``TutorError`` as one line in a terminal; True if installed.

    Only when ``sys.excepthook`` is still Python's default (IPython, pytest and debuggers
    install their own and are left alone).
    """
    global _previous_hook
    if sys.excepthook is _excepthook:
        return True
    if sys.excepthook is not sys.__excepthook__:
        return False
    _previous_hook = sys.excepthook
    sys.excepthook = _excepthook
    return True

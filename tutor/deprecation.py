"""Old import paths, kept for one release: each one warns and forwards to the new home.

Learners' saved notebooks use paths such as ``from tutor import trainer as tr``; they keep working,
with a ``TutorDeprecationWarning`` that names the new path. A ``FutureWarning`` subclass, because
Python hides a plain ``DeprecationWarning`` outside ``__main__``, and this one is meant for learners.
"""

from __future__ import annotations

import importlib
import warnings


class TutorDeprecationWarning(FutureWarning):
    """An import path of the course that moved; it still works until the next release."""


def warn_moved(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn that ``old`` (a module or ``module.name``) is now ``new``."""
    warnings.warn(f"{old} has moved to {new}: please import it from there "
                  f"(the old path keeps working until the next release of the course)",
                  TutorDeprecationWarning, stacklevel=stacklevel)


def forwarder(old_module: str, moved: dict[str, str]):
    """A module-level ``__getattr__`` for ``old_module``: ``moved`` maps an old attribute name to
    ``"new.module"`` or ``"new.module:new_name"``; looking one up warns and returns the new object.

    In the old module: ``__getattr__ = forwarder(__name__, {"train": "tutor.train.long_run"})``.
    """

    def __getattr__(name: str):
        target = moved.get(name)
        if target is None:
            raise AttributeError(f"module {old_module!r} has no attribute {name!r}")
        module, _, attribute = target.partition(":")
        attribute = attribute or name
        warn_moved(f"{old_module}.{name}", f"{module}.{attribute}")
        return getattr(importlib.import_module(module), attribute)

    return __getattr__

"""Files written so that no reader ever sees half of one, and their checksums.

Used by every job that writes: the data cache (``tutor.data``), the learner notebooks
(``tutor.course.build``), the progress file (``tutor.course.progress``) and checkpoints
(``tutor.train.checkpoint``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path


def sha256(data: bytes) -> str:
    """The SHA-256 of ``data`` as 64 hex digits."""
    return hashlib.sha256(data).hexdigest()


def write_atomically(path, data: bytes | str, keep_previous=None, fsync: bool = True) -> Path:
    """Write ``data`` to ``path`` so that no reader ever sees half a file; returns the path.

    The bytes go to a temporary file in the same folder, are flushed to disk (``fsync``), and only then
    replace ``path`` (``os.replace`` is atomic). A crash or Ctrl-C while writing leaves the old file as it
    was. With ``keep_previous`` (a path), the file being replaced is moved there once the new one is safely
    on disk, so there is always one whole file. A ``str`` is written as UTF-8.
    """
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        if keep_previous is not None and path.exists():
            os.replace(path, keep_previous)
        try:
            os.replace(tmp, path)
        except PermissionError:  # Windows: a target held open elsewhere; remove it, then try again
            path.unlink()
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path

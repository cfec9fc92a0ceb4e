"""Stopping the processes of a graded notebook.

In a sandbox with its own PID namespace (``tutor.grading.sandbox``) stopping its first process stops them all.
Where the system refused the namespaces, every process the notebook started carries a marker in its environment
(``TUTOR_GRADE_RUN``, inherited by its children, also those that left the process group), and :func:`sweep` finds
them among this user's processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil


def stop(process: subprocess.Popen, marker: tuple[str, str] | None = None) -> None:
    """Kill ``process`` with its process group (it was started in a session of its own), wait for it, and sweep
    what carries ``marker``."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        process.kill()
    except OSError:
        pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    if marker is not None:
        sweep(marker)


def sweep(marker: tuple[str, str], *, keep: int | None = None) -> int:
    """Kill every process of this user whose environment holds ``marker`` (``(name, value)``), all but ``keep``;
    returns how many there were."""
    name, value = marker
    killed = 0
    for process in psutil.process_iter(["pid", "uids"]):
        if process.pid in (keep, os.getpid()) or process.info["uids"] is None \
                or process.info["uids"].real != os.getuid():
            continue
        try:
            if process.environ().get(name) == value:
                process.kill()
                killed += 1
        except psutil.Error:
            pass
    return killed


def wait_gone(pid: int, timeout: float = 10.0) -> None:
    """Until ``pid`` is dead (a zombie counts as dead)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.01)

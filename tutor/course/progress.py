"""Your progress through the course: ``tutor.progress()`` and ``python -m tutor progress``.

Every check records its result, as it runs, in a small JSON file in your user data directory
(``platformdirs.user_data_dir("transformers-from-scratch")/progress.json``), so the progress view
covers every notebook you have worked on, in JupyterLab, Colab or Binder alike. Recording never
breaks a check: every error (a read-only disk, a corrupt or locked file) is swallowed, a corrupt
file is replaced, and the results of the running session are kept in memory as well.

- ``TUTOR_PROGRESS_FILE=/path/progress.json`` stores the file elsewhere (the tests use it);
- ``TUTOR_PROGRESS=0`` records nothing on disk (the grader and the test suite use it).

The file::

    {"version": 1, "exercises": {"softmax": {"status": "passed", "summary": "passed (9 cases)",
     "last_run": "2026-11-24T10:02:03+01:00", "last_passed": "2026-11-24T10:02:03+01:00"}, ...}}
"""

from __future__ import annotations

import contextlib
import datetime
import html
import json
import os
import pathlib
import time

import platformdirs

from tutor import env
from tutor.course import catalog
from tutor.errors import TutorError
from tutor.files import write_atomically

APP_NAME = "transformers-from-scratch"
VERSION = 1
LOCK_STALE_SECONDS = 10.0
LOCK_WAIT_SECONDS = 0.5

# This session's results, so that progress() is right even when the file cannot be written.
_SESSION: dict[str, dict] = {}


def enabled() -> bool:
    """``TUTOR_PROGRESS``: on unless ``0``, ``false``, ``no`` or ``off``."""
    return env.flag(env.PROGRESS, default=True)


def progress_file() -> pathlib.Path:
    """Where progress is stored: ``$TUTOR_PROGRESS_FILE``, else the user data directory."""
    override = os.environ.get(env.PROGRESS_FILE)
    if override:
        return pathlib.Path(override).expanduser()
    return pathlib.Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)) / "progress.json"


def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def _read(path: pathlib.Path) -> dict:
    """The stored exercises; ``{}`` for a missing, unreadable or corrupt file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        exercises = data.get("exercises") if isinstance(data, dict) else None
        if isinstance(exercises, dict):
            return {k: v for k, v in exercises.items() if isinstance(v, dict)}
    except Exception:  # noqa: BLE001 - missing, unreadable, not JSON: start again
        pass
    return {}


@contextlib.contextmanager
def _lock(path: pathlib.Path):
    """A best-effort lock file beside ``path``: waits briefly, breaks a stale one, never blocks for long."""
    lock = path.with_name(path.name + ".lock")
    held = False
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            held = True
            break
        except FileExistsError:
            with contextlib.suppress(OSError):
                if time.time() - lock.stat().st_mtime > LOCK_STALE_SECONDS:
                    lock.unlink()  # left behind by a crashed kernel: replace it
                    continue
            if time.monotonic() > deadline:
                break  # somebody holds it: write anyway rather than wait
            time.sleep(0.02)
        except OSError:
            break
    try:
        yield
    finally:
        if held:
            with contextlib.suppress(OSError):
                lock.unlink()


def _write(path: pathlib.Path, exercises: dict) -> None:
    data = json.dumps({"version": VERSION, "exercises": exercises}, indent=1, sort_keys=True, ensure_ascii=False)
    # Written after every check, so without fsync (as before): a result lost in a crash is recorded again
    # the next time its check runs.
    write_atomically(path, data, fsync=False)


def record(result) -> None:
    """Record one check result (a ``CheckResult``). Never raises."""
    try:
        name = result.name
        if name not in catalog.BY_NAME:
            return
        now = _now()
        entry = {"status": result.status, "summary": str(result.summary)[:200], "last_run": now}
        previous = _SESSION.get(name, {})
        entry["last_passed"] = now if result.status == "passed" else previous.get("last_passed")
        _SESSION[name] = entry
        if not enabled():
            return
        path = progress_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        with _lock(path):
            stored = _read(path)
            old = stored.get(name, {})
            if entry["last_passed"] is None:
                entry = {**entry, "last_passed": old.get("last_passed")}
            stored[name] = entry
            _write(path, stored)
    except Exception:  # noqa: BLE001 - progress must never break a check
        pass


def load() -> dict[str, dict]:
    """Every recorded exercise: the file, updated by this session's results."""
    stored = {}
    if enabled():
        with contextlib.suppress(Exception):
            stored = _read(progress_file())
    for name, entry in _SESSION.items():
        old = stored.get(name, {})
        if str(entry.get("last_run", "")) >= str(old.get("last_run", "")):
            stored[name] = {**entry, "last_passed": entry.get("last_passed") or old.get("last_passed")}
    return stored


def reset() -> None:
    """Forget everything: this session's results and the file."""
    _SESSION.clear()
    with contextlib.suppress(Exception):
        progress_file().unlink()


ICONS = {"passed": "✅", "failed": "❌", "not done": "⏳", None: "⏳"}


def _date(stamp) -> str:
    if not stamp:
        return ""
    try:
        return datetime.datetime.fromisoformat(stamp).strftime("%Y-%m-%d %H:%M")
    except (TypeError, ValueError):
        return str(stamp)[:16]


def _when(status, last, short: bool = False) -> str:
    """When the exercise last passed; for one whose last check did not pass, said so (not a contradiction)."""
    if not last:
        return ""
    if status == "passed":
        return _date(last) if short else f"last passed {_date(last)}"
    return f"{_date(last)}, not its last check" if short else f"(it passed on {_date(last)}, not in its last check)"


class Progress:
    """A table of exercises: notebook, exercise, ✅/❌/⏳, date of the last pass."""

    def __init__(self, notebooks, entries):
        self.notebooks = list(notebooks)
        self.entries = entries
        self.rows = []  # (notebook, exercise, status or None, last passed)
        for nb in self.notebooks:
            for e in catalog.exercises(nb.number):
                entry = entries.get(e.name, {})
                self.rows.append((nb, e, entry.get("status"), entry.get("last_passed")))

    def status(self, name: str) -> str | None:
        return next((s for _, e, s, _ in self.rows if e.name == name), None)

    @property
    def passed(self) -> int:
        return sum(s == "passed" for _, _, s, _ in self.rows)

    def _title(self) -> str:
        if len(self.notebooks) == 1:
            nb = self.notebooks[0]
            return f"Your progress in {nb.number:02d} — {nb.title}: {self.passed} of {len(self.rows)} exercises passed"
        return f"Your progress: {self.passed} of {len(self.rows)} exercises passed"

    def text(self) -> str:
        lines = [self._title()]
        width = max([len(e.name) for _, e, _, _ in self.rows] + [8])
        current = None
        for nb, e, status, last in self.rows:
            if nb is not current and len(self.notebooks) > 1:
                done = sum(s == "passed" for n, _, s, _ in self.rows if n is nb)
                total = sum(n is nb for n, *_ in self.rows)
                lines.append(f"{nb.number:02d} {nb.title} ({done}/{total})")
                current = nb
            when = _when(status, last)
            label = {"passed": "passed", "failed": "not passing", "not done": "not done yet"}.get(status, "not started")
            lines.append(f"  {ICONS.get(status, '⏳')} {e.name:<{width}}  {label:<12} {when}".rstrip())
        return "\n".join(lines)

    __str__ = text

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        rows = []
        for nb, e, status, last in self.rows:
            label = {"passed": "passed", "failed": "not passing", "not done": "not done yet"}.get(status, "not started")
            when = html.escape(_when(status, last, short=True))
            rows.append(
                f"<tr><td>{nb.number:02d}</td><td><code>{html.escape(e.name)}</code></td>"
                f"<td>{ICONS.get(status, '⏳')} {label}</td><td>{when}</td></tr>")
        return (f"<div><b>{html.escape(self._title())}</b>"
                "<table><thead><tr><th>notebook</th><th>exercise</th><th>result</th><th>last passed</th></tr></thead>"
                f"<tbody>{''.join(rows)}</tbody></table></div>")


def progress(*notebooks: int) -> Progress:
    """Every exercise of the given notebooks (default: all) as ✅ / ❌ / ⏳ with the date of the last pass."""
    by_number = {nb.number: nb for nb in catalog.NOTEBOOKS}
    chosen = []
    for n in notebooks:
        try:
            chosen.append(by_number[int(n)])
        except (KeyError, TypeError, ValueError):
            known = ", ".join(f"{number:02d}" for number in by_number)
            raise TutorError(f"there is no notebook {n!r}: the notebooks are {known}") from None
    return Progress(chosen or list(catalog.NOTEBOOKS), load())

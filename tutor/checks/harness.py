"""The machinery every check shares: running learner code safely and recording the result.

A check is a function decorated with :func:`check`. Its body runs the learner's object on
several cases and compares with ``tutor.reference`` (the comparisons are in
``tutor.checks.compare``); when something differs it raises :class:`Mismatch` with a message a
beginner can act on. The decorator turns everything that can happen inside learner code (an
exception, ``NotImplementedError``, a wrong type, NaN, a hang) into a :class:`CheckResult`, so a
check never crashes the notebook.

Set the environment variable ``TUTOR_STRICT=1`` to make a check that does not pass raise
:class:`CheckFailed` after showing its result: CI runs the solution notebooks that way, and an
instructor can grade a notebook by running it so.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import html
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field

import torch

from tutor import env, reference
from tutor.checks.salt import generator, manual_seed, salted, set_salt  # noqa: F401 - the checks import them here
from tutor.course import catalog
from tutor.course.progress import record

# The last result of every check, by name (see ``yours_or_reference``).
RESULTS: dict[str, CheckResult] = {}

DEFAULT_TIMEOUT = 20.0  # seconds a check may run before we assume learner code hangs


# --------------------------------------------------------------------------------------
# Results


@dataclass
class CheckResult:
    """The outcome of one check. ``passed`` is a bool; it prints as one short block."""

    name: str
    status: str  # "passed", "failed" or "not done"
    summary: str
    details: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def not_done(self) -> bool:
        return self.status == "not done"

    def __bool__(self) -> bool:
        return self.passed

    @property
    def icon(self) -> str:
        return {"passed": "✅", "failed": "❌", "not done": "⏳"}[self.status]

    def __str__(self) -> str:
        lines = [f"{self.icon} {self.name}: {self.summary}"]
        lines += [f"   {line}" for line in self.details]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = {"passed": "#e6f4ea", "failed": "#fce8e6", "not done": "#fef7e0"}[self.status]
        border = {"passed": "#34a853", "failed": "#d93025", "not done": "#f9ab00"}[self.status]
        body = "".join(f"<div style='margin-left:1.6em'>{html.escape(d)}</div>" for d in self.details)
        return (
            f"<div style='background:{colour};border-left:4px solid {border};padding:4px 8px;"
            f"font-family:monospace;white-space:pre-wrap'>"
            f"<b>{self.icon} {html.escape(self.name)}</b>: {html.escape(self.summary)}{body}</div>"
        )


class CheckFailed(AssertionError):
    """Raised after a check that did not pass, only when ``TUTOR_STRICT=1``."""


# --------------------------------------------------------------------------------------
# What a check body raises


class Mismatch(Exception):
    """The learner's result differs from the reference.

    ``summary`` is one line ("wrong values"), ``details`` explain (expected vs got), ``hint``
    names the likely cause.
    """

    def __init__(self, summary: str, details: list[str] | str = (), hint: str | None = None):
        super().__init__(summary)
        self.summary = summary
        self.details = [details] if isinstance(details, str) else list(details)
        self.hint = hint
        self.case: str | None = None


class NotDone(Exception):
    """The learner's code still raises ``NotImplementedError`` (``error``: the one it raised)."""

    def __init__(self, error: BaseException | None = None):
        super().__init__()
        self.error = error


class LearnerError(Exception):
    """The learner's code raised an exception."""

    def __init__(self, what: str, error: BaseException):
        super().__init__(what)
        self.what = what
        self.error = error
        self.where = _learner_frame(error)
        self.case: str | None = None
        self.hint: str | None = _hint_for_error(error)


# Hints for exceptions beginners meet often, keyed by a piece of the message.
ERROR_HINTS = {
    "leaf Variable that requires grad is being used in an in-place operation":
        "an in-place operation (a method ending in _, or x[...] = ...) changed a tensor your code was given, which "
        "needs its gradient: compute a new tensor instead of changing the input",
    "devices, meta and cpu":  # beside.LikeAGPU: the check's stand-in for a GPU (see checks.compare.KINDS)
        "a tensor your code creates is on the CPU while the input is elsewhere (the check uses PyTorch's 'meta' "
        "device, which has shapes but no values, to stand for a GPU): create it on the input's device, e.g. "
        "torch.arange(T, device=x.device)",
    "before Module.__init__() call": "call super().__init__() first in __init__",
    "mat1 and mat2 shapes cannot be multiplied":
        "a matrix product got shapes that do not fit: print the shapes of both sides",
    "Expected all tensors to be on the same device":
        "create new tensors on the input's device, e.g. torch.zeros(..., device=x.device)",
    "is not on the expected device":  # a tensor on the CPU beside the check's meta ones (see checks.compare.KINDS)
        "a tensor your code creates is on the CPU while the input is elsewhere (the check uses PyTorch's 'meta' "
        "device, which has shapes but no values, to stand for a GPU): create it with device=x.device",
    "to have the same dtype":
        "two tensors of different dtypes met in a product: create new tensors with dtype=x.dtype (the check passes "
        "float64 to see that your code follows the input's dtype)",
    "expected scalar type":
        "two tensors of different dtypes met: create new tensors with dtype=x.dtype (the check passes float64 to "
        "see that your code follows the input's dtype)",
    "must match the size of tensor b":
        "two tensors do not broadcast: print their shapes, and keep reduced axes with keepdim=True",
    "object has no attribute": "check the attribute names the exercise asks for",
    "positional argument": "check the signature the exercise asks for, e.g. forward(self, x, mask=None)",
    "unexpected keyword argument": "check the signature the exercise asks for, e.g. forward(self, x, mask=None)",
}


def is_signature_error(error: BaseException) -> bool:
    """The learner's function was called with arguments its signature does not take."""
    text = str(error)
    return isinstance(error, TypeError) and ("positional argument" in text or "unexpected keyword argument" in text)


def error_details(e: LearnerError) -> list[str]:
    """The lines that show a learner's exception: its type and message, and where it was raised. A message of several
    lines keeps them, each marked as the message's (``  | ``), so that none can pass for a line of the check's own
    (a graded notebook's ``raise ValueError("\\n✅ passed")``)."""
    first, *rest = str(e.error).split("\n")
    message = first + "".join(f"\n  | {line}" for line in rest)
    return [f"{type(e.error).__name__}: {message}"] + ([f"at {e.where}"] if e.where else [])


def _hint_for_error(error: BaseException) -> str | None:
    text = str(error)
    return next((hint for key, hint in ERROR_HINTS.items() if key in text), None)


class CheckTimeout(Exception):
    pass


class Unreachable(Exception):
    """The process that holds the learner's objects (when the grader checks them from another process) stopped, or
    broke the protocol: see ``tutor.grading.remote``."""


def _learner_frame(error: BaseException) -> str | None:
    """'line 4: return x / x.sum()' for the innermost frame outside torch and tutor."""
    where = getattr(error, "__tutor_where__", None)  # raised in the learner's process (grading): it says where
    if where or getattr(error, "__tutor_remote__", False):
        return where
    frames = traceback.extract_tb(error.__traceback__)
    for frame in reversed(frames):
        fname = frame.filename.replace("\\", "/")
        if "/tutor/" in fname or "/torch/" in fname or "/site-packages/" in fname:
            continue
        if "/lib/python" in fname:
            continue
        code = (frame.line or "").strip()
        return f"line {frame.lineno} in {frame.name}(): {code}" if code else f"line {frame.lineno} in {frame.name}()"
    return None


# --------------------------------------------------------------------------------------
# Where the learner's code runs

# The connection to the process holding the learner's objects while a check runs on them from another process
# (``tutor.grading.remote``: the grader, or tests with TUTOR_CHECK_REMOTE); None when they are in this process.
_PEER: contextvars.ContextVar = contextvars.ContextVar("tutor_peer", default=None)


def at(obj, near=None):
    """``obj`` as the learner's code sees it: what a check builds for the learner's code to use (an optimizer over
    the learner's parameters, a copy of the learner's model, a stand-in model for ``generate``) must live where that
    code runs. ``at(torch.optim.SGD)(model.parameters(), lr=0.1)`` builds the optimizer there.

    In a notebook the learner's code runs in the check's own process, and ``at(obj)`` is ``obj``. When the grader
    checks it from another process, ``at(obj)`` is a handle to the object of the same name in the learner's process
    (a module-level function or class: ``torch``'s, ``copy``'s, ``tutor``'s). With ``near``, ``obj`` is found where
    ``near`` lives: ``at(torch.optim.SGD, near=model)`` is the check's own SGD for a model of the check's."""
    peer = _PEER.get()
    if peer is None or (near is not None and _peer_of(near) is None):
        return obj
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        raise TypeError(f"{obj!r} has no module-level name: it cannot be found in the learner's process")
    return peer.resolve(f"{module}:{qualname}")


def twin(module, *args, **kwargs):
    """``module`` where the learner's code runs: ``module`` itself in a notebook; when graded, a module of the same
    class built there from ``args`` and ``kwargs``, with the same weights and mode."""
    if _PEER.get() is None:
        return module
    there = at(type(module))(*args, **kwargs)
    there.load_state_dict(module.state_dict())
    there.train(module.training)
    return there


def seed(n: int) -> None:
    """Seed torch's global CPU generator (a GPU's generator is the learner's, and is left alone). When the learner's
    code runs in another process, its next call starts from this seed too (``tutor.grading.remote``)."""
    torch.default_generator.manual_seed(salted(n))
    peer = _PEER.get()
    if peer is not None:
        peer.reseeded = True


def remote() -> bool:
    """Whether the learner's code runs in another process than this check (see :func:`at`)."""
    return _PEER.get() is not None


@contextlib.contextmanager
def may_change():
    """Calls of the learner's code inside this block may change their arguments in place (the exercise asks for it:
    ``count_pairs(ids, counts)`` adds to ``counts``). Elsewhere, when the grader runs the learner's code in another
    process, a call that changes an argument it was given fails the check (see :func:`_run`)."""
    peer = _PEER.get()
    seen = len(peer.changed) if peer is not None else 0
    try:
        yield
    finally:
        if peer is not None:
            del peer.changed[seen:]


# --------------------------------------------------------------------------------------
# Running learner code safely


# The labels of the cases a check entered: what its pass message counts (tests/test_checks_registry.py)
_CASES: contextvars.ContextVar[list | None] = contextvars.ContextVar("tutor_cases", default=None)
CASES: dict[str, list[str]] = {}  # check name -> the cases its last run entered


@contextlib.contextmanager
def case(label: str, hint_on_error: str | None = None):
    """Label the case being run, so that a failure says which input showed it.

    ``hint_on_error`` is the likely cause to give when learner code raises in this case (for
    example "works without batch dimensions but not with them").
    """
    entered = _CASES.get()
    if entered is not None:
        entered.append(label)
    try:
        yield
    except (Mismatch, LearnerError) as failure:
        if failure.case is None:  # the innermost case labels the failure
            failure.case = label
            if isinstance(failure, LearnerError) and hint_on_error and not is_signature_error(failure.error):
                failure.hint = hint_on_error
        raise


def call(fn, *args, what: str | None = None, **kwargs):
    """Call learner code; turn its exceptions into ``NotDone`` or ``LearnerError``."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as error:
        raise NotDone(error) from None
    except (Mismatch, NotDone, CheckTimeout, LearnerError, Unreachable):
        raise
    except Exception as error:  # anything the learner's code raised
        if getattr(error, "check_bug", False):  # the check sent what may not cross to the learner's process
            raise
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
        raise LearnerError(what or f"{name}(...)", error) from error


@contextlib.contextmanager
def _time_limit(seconds: float | None):
    """Interrupt a hang with SIGALRM where we can (POSIX, main thread)."""
    usable = (
        seconds
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def on_alarm(signum, frame):
        raise CheckTimeout()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check(body=None, *, timeout: float = DEFAULT_TIMEOUT):
    """Turn a check body ``body(obj) -> str | None`` into a check that never raises: ``@check`` above
    ``def softmax(fn)`` checks the exercise of that name (``@check(timeout=240.0)`` for a slow one).

    The body returns an optional short note for the success message; ``{cases}`` in it becomes the number of
    ``case(...)`` blocks the check entered ("{cases} cases, including T = 1").
    """
    if body is None:
        return functools.partial(check, timeout=timeout)
    name = body.__name__
    exercise = catalog.BY_NAME[name]

    def decorate(body):
        @functools.wraps(body)
        def run(obj=None) -> CheckResult:
            start = time.perf_counter()
            peer = _peer_of(obj)
            if env.flag(env.CHECK_REMOTE) and obj is not None and peer is None and _PEER.get() is None:
                from tutor.grading import remote  # tests: the learner's code in a process of its own, as graded

                with remote.forked(obj, timeout) as (there, peer):
                    result = _run(name, exercise, body, there, timeout, peer)
            else:
                result = _run(name, exercise, body, obj, timeout, peer)
            result.seconds = time.perf_counter() - start
            RESULTS[name] = result
            _record_progress(result)
            if env.strict() and not result.passed:
                raise CheckFailed(str(result))
            return result

        run.exercise = exercise
        return run

    return decorate(body)


def _record_progress(result: CheckResult) -> None:
    """Store the result for ``tutor.progress()`` (see ``tutor.course.progress``); never raises."""
    try:
        record(result)
    except Exception:  # noqa: BLE001 - progress must never break a check
        pass


def _peer_of(obj):
    """The connection to the learner's process when ``obj`` is a handle to an object there (else None)."""
    import sys

    remote = sys.modules.get("tutor.grading.remote")
    return remote.peer_of(obj) if remote is not None else None


def _run(name, exercise, body, obj, timeout, peer=None) -> CheckResult:
    """Run ``body(obj)`` and turn whatever happens into a :class:`CheckResult`. ``peer``: the connection to the
    process that holds ``obj`` when it is a handle (``tutor.grading.remote``)."""
    if obj is None or not callable(obj):
        kind = "class" if exercise.learner_name[:1].isupper() else "function"
        return CheckResult(
            name, "failed", f"pass your {kind} itself, e.g. checks.{name}({exercise.learner_name})",
            [f"got {type(obj).__name__}: {obj!r:.80}"],
        )
    threads = torch.get_num_threads()
    try:
        # Checks use tiny tensors: one thread is fastest, and immune to a busy machine.
        torch.set_num_threads(1)
        entered = []
        CASES[name] = entered
        token = _CASES.set(entered)
        peer_token = _PEER.set(peer)
        try:
            with torch.random.fork_rng(devices=[]), _time_limit(timeout):
                torch.default_generator.manual_seed(salted(0))  # the CPU only: a GPU's generator is the learner's
                note = body(obj)
        finally:
            _PEER.reset(peer_token)
            _CASES.reset(token)
    except NotDone:
        return CheckResult(
            name, "not done", "not done yet",
            ["replace `raise NotImplementedError()` with your code, then run this cell again"],
        )
    except Mismatch as m:
        details = list(m.details)
        if m.hint:
            details.append(f"Likely cause: {m.hint}")
        summary = m.summary if m.case is None else f"{m.summary} (case: {m.case})"
        return CheckResult(name, "failed", summary, details)
    except LearnerError as e:
        details = [f"{type(e.error).__name__}: {e.error}"]
        if e.where:
            details.append(f"at {e.where}")
        if e.hint:
            details.append(f"Likely cause: {e.hint}")
        case_label = f" (case: {e.case})" if e.case else ""
        return CheckResult(name, "failed", f"your code raised an exception while running {e.what}{case_label}", details)
    except CheckTimeout:
        return CheckResult(
            name, "failed", f"your code ran for more than {timeout:.0f} s and was stopped",
            ["is there a loop that never ends, or a much larger computation than needed?"],
        )
    except Unreachable as lost:
        return CheckResult(name, "failed", "checking your code stopped the Python process that runs it",
                           [str(lost), "does your code crash Python (a segmentation fault, os._exit) or use too much "
                                       "memory?"])
    except KeyboardInterrupt:
        return CheckResult(name, "failed", "interrupted", [])
    except Exception as error:  # noqa: BLE001 - a bug in the check, or an odd object  # pragma: no cover
        return CheckResult(
            name, "failed", "the check could not run your code",
            [f"{type(error).__name__}: {error}"],
        )
    finally:
        torch.set_num_threads(threads)
    if peer is not None and peer.changed:
        return CheckResult(name, "failed", "your code changed an input it was given, in place",
                           [f"it changed {', '.join(dict.fromkeys(peer.changed))} that a call passed to it",
                            "Likely cause: an in-place operation (x += ..., x[...] = ..., .append, .add_) on an "
                            "argument; work on a new object instead"])
    if note:
        note = note.replace("{cases}", str(len(entered)))  # counted, not written by hand
    return CheckResult(name, "passed", "passed" + (f" ({note})" if note else ""))


# --------------------------------------------------------------------------------------
# Building the learner's module


def build(cls, *args, what: str | None = None, **kwargs):
    """Instantiate the learner's class, reporting a failing constructor clearly."""
    label = what
    if not label:
        shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
        label = f"{getattr(cls, '__name__', cls)}({', '.join(shown)})"
    module = call(cls, *args, what=label, **kwargs)
    if not isinstance(module, torch.nn.Module):
        raise Mismatch(f"{label} is not a torch.nn.Module",
                       hint="subclass nn.Module and call super().__init__() first in __init__")
    return module


# --------------------------------------------------------------------------------------
# Using the learner's work later in a notebook


def yours_or_reference(obj, check_name: str | None = None):
    """The learner's ``obj`` if its check passed, else the model answer from ``tutor.reference``.

    Cells after an exercise use this, so a notebook runs top to bottom before the learner has
    done every exercise, and uses the learner's own code once it is correct.
    """
    name = check_name or getattr(obj, "__name__", None)
    exercise = catalog.BY_NAME.get(name) or next(
        (e for e in catalog.EXERCISES if e.learner_name == name), None
    )
    if exercise is None:
        raise ValueError(f"no exercise is called {name!r}; pass check_name=")
    result = RESULTS.get(exercise.name)
    if result is not None and result.passed:
        return obj
    print(f"(using tutor.reference.{exercise.reference}: the check `{exercise.name}` has not passed yet)")
    return getattr(reference, exercise.reference)

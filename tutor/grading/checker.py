"""The checker: the process that runs the checks of one graded notebook, and reports on the grader's channel.

It is a fork of the grading kernel, made after the learner's cells ran (see ``tutor.grading.kernel``: no
thread of the learner's is in it, and everything the snapshot holds was put back), and this module comes
from the pristine copy of ``tutor`` the runner wrote after the kernel was stopped. :func:`serve`:

1. imports the checks of the notebook from that copy, and takes any operator mode the learner's code left
   active off torch's stacks;
2. for each exercise, forks once more (:func:`check_one`): the check runs in a child of its own, in its
   own process group, with the grader's channel closed, under an :class:`~tutor.grading.answers.Watch`
   for the model answer. Whatever the learner's code does while the check calls it (threads, patches,
   processes, a crash, a hang) stays in that child: it can reach its own exercise's result, never
   another's, and the checker kills the child's process group when it is done or out of time;
3. sends one message per exercise, then ``{"done": true}``.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
import warnings

import torch

from tutor.course import catalog
from tutor.grading import answers
from tutor.grading.kernel import encode, send


def serve(fd: int, go: dict, captured: dict, setup: dict, keep: list) -> None:
    """Check ``go["exercises"]`` (``[[name, learner_name], ...]``) against ``captured`` (the learner's
    definitions) and send the results on ``fd``. ``setup`` holds the ``tutor`` modules the learner's cells
    imported (the other copy of the package)."""
    import tutor.checks  # the pristine copy

    names = [name for name, _ in go["exercises"]]
    for number in sorted({catalog.BY_NAME[name].notebook for name in names}):
        tutor.checks.check_module(number)  # every check of the notebook now, before any runs learner code
    package = os.path.realpath(go["package"])
    foreign = sorted(name for name, module in list(sys.modules.items())
                     if (name == "tutor" or name.startswith("tutor."))
                     and not os.path.realpath(getattr(module, "__file__", "") or "").startswith(package))
    send(fd, {"loaded": True, "foreign": foreign, "modes": clear_torch_modes()})
    if foreign:
        return
    reference = {name: module for name, module in sys.modules.items() if name.startswith("tutor.reference")}
    footprints = answers.footprints(names, reference)
    setup_dir = os.path.dirname(os.path.dirname(getattr(setup.get("tutor"), "__file__", "") or ""))
    library = answers.library_dirs(package, *([setup_dir] if setup_dir else []))
    deadline = time.monotonic() + float(go["seconds"])
    for name, learner_name in go["exercises"]:
        if learner_name not in captured:
            result = {"status": "missing", "summary": f"the notebook does not define `{learner_name}`",
                      "details": []}
        else:
            timeout = max(1.0, min(float(go["timeout"]), deadline - time.monotonic()))
            result = check_one(fd, name, learner_name, captured[learner_name], footprints[name], library, timeout)
        send(fd, {"result": name, **result})
    send(fd, {"done": True})


def clear_torch_modes() -> list[str]:
    """Take every ``TorchFunctionMode``/``TorchDispatchMode`` off torch's stacks; returns their names."""
    found = []
    for length, pop in (("_len_torch_function_stack", "_pop_torch_function_stack"),
                        ("_len_torch_dispatch_stack", "_pop_torch_dispatch_stack")):
        if not hasattr(torch._C, length):
            continue
        while getattr(torch._C, length)() > 0:
            found.append(type(getattr(torch._C, pop)()).__name__)
    return found


def check_one(fd: int, name: str, learner_name: str, obj, fp: answers.Footprint, library, timeout: float) -> dict:
    """Run the check ``name`` on ``obj`` in a child process; its result as a dict (status, summary, details,
    and ``model_answer``: a sentence that says how it used the model answer, when it did)."""
    same = answers.identity(obj, fp)
    if same:
        why = f"`{learner_name}` is the model answer `{same}`, not your code"
        return {"status": "failed", "summary": why, "details": [], "model_answer": why}
    results_r, results_w = os.pipe()
    found_r, found_w = os.pipe()
    try:
        with warnings.catch_warnings():  # Python 3.12+ warns that torch's threads may not survive: they need not
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError as error:
        for fd_ in (results_r, results_w, found_r, found_w):
            os.close(fd_)
        return {"status": "error", "summary": f"not graded: the grader could not start the check's process ({error})",
                "details": []}
    if pid == 0:  # the child: nothing returns from here
        try:
            os.setpgid(0, 0)
            for unused in (fd, results_r, found_r):
                os.close(unused)
            payload = _run_check(name, learner_name, obj, fp, library, found_w)
            data = encode(payload)
            while data:
                data = data[os.write(results_w, data):]
        finally:
            os._exit(0)
    os.close(results_w)
    os.close(found_w)
    data, status = _collect(pid, results_r, timeout)
    findings = list(dict.fromkeys(_read_all(found_r).decode("utf-8", "replace").splitlines()))
    try:
        os.killpg(pid, signal.SIGKILL)  # what the learner's code left running
    except (ProcessLookupError, PermissionError):
        pass
    result = _decode(data, status, timeout)
    if findings:
        why = answers.describe(findings, learner_name)
        result["model_answer"] = why
        result["details"] = [f"the check {'passed' if result['status'] == 'passed' else 'ran'}, but {why}"] \
            + list(result.get("details", []))
        result["status"] = "failed"
        result["summary"] = why + ": no points"
    return result


def _run_check(name: str, learner_name: str, obj, fp, library, found_w: int) -> dict:
    import tutor.checks

    check = getattr(tutor.checks, name)
    watch = answers.Watch(fp, library)
    watch.start(found_w)
    try:
        result = check(obj)
    finally:
        intact = watch.stop()
    if type(result) is not tutor.checks.CheckResult:
        return {"status": "error", "summary": "the check was tampered with", "details": []}
    if not intact:
        return {"status": "error", "summary": "not graded: your code switched off the grader's watch on calls into "
                                              "tutor.reference (sys.setprofile) while its check ran", "details": []}
    payload = {"status": str(result.status), "summary": str(result.summary),
               "details": [str(d) for d in result.details], "seconds": float(result.seconds)}
    if result.status == "not done":
        payload["summary"] = f"not done: `{learner_name}` still raises NotImplementedError"
        payload["details"] = []
    return payload


def _collect(pid: int, fd: int, timeout: float) -> tuple[bytes, int | None]:
    """What the child wrote before it exited, and its wait status (None: killed at ``timeout``)."""
    data, end = b"", time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(fd)
            return data, None
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 1 << 16)
            if chunk:
                data += chunk
                continue
            break
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    return data, status


def _read_all(fd: int) -> bytes:
    data = b""
    os.set_blocking(fd, False)
    try:
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            data += chunk
    except BlockingIOError:
        pass
    os.close(fd)
    return data


def _decode(data: bytes, status: int | None, timeout: float) -> dict:
    if status is None:
        return {"status": "failed", "summary": f"your code ran for more than {timeout:.0f} s while it was checked "
                                               "and was stopped",
                "details": ["is there a loop that never ends, or a much larger computation than needed?"]}
    import json

    if len(data) >= 4 and len(data) == 4 + int.from_bytes(data[:4], "big"):
        try:
            payload = json.loads(data[4:].decode("utf-8"))
            if isinstance(payload, dict) and payload.get("status") in ("passed", "failed", "not done", "error"):
                return {"status": payload["status"], "summary": str(payload.get("summary", "")),
                        "details": [str(d) for d in payload.get("details", [])]}
        except ValueError:
            pass
    return {"status": "failed", "summary": f"checking your code killed the Python process ({_how(status)})",
            "details": ["does your code crash Python (a segmentation fault, os._exit) or use too much memory?"]}


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        return {signal.SIGSEGV: "a segmentation fault", signal.SIGKILL: "SIGKILL, usually out of memory",
                signal.SIGABRT: "an abort"}.get(number, f"signal {number}")
    return f"exit code {os.WEXITSTATUS(status)}"

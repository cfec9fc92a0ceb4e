"""The grader's code in the grading kernel: the preamble, and the server that answers the judge.

The host (``tutor.grading.host``) runs this module's source as the first cell of the kernel, before any learner code:
:func:`start` connects to the host's socket, takes the channel to the judge from it (a file descriptor passed over
that socket) and starts :func:`serve_judge` in a thread. Then the learner's cells run, each exercise followed by a
cell that keeps its definitions (:func:`make_capture`).

When the cells have run, the judge (``tutor.grading.judge``) asks, exercise after exercise:

- ``exercise`` (with a socket of its own): the server forks; the child serves the learner's definition of that
  exercise on that socket (``tutor.grading.serve``), so that whatever the check makes it do stays in that child;
- ``unlock``: the exercise just judged has its verdict; its model answer is run in its module here
  (``tutor.grading.lock``), for the exercises after it;
- ``stop``: the children are killed.

Nothing here is trusted by the judge: the learner's code can change any of it, and then only its own checks fail.
Only the standard library is imported at module level: this runs before the setup cell.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading


def make_capture():
    """Returns ``capture``: ``capture(names, namespace)`` keeps those names' current values; ``capture()``
    returns everything kept so far."""
    captured = {}

    def capture(names=None, namespace=None):
        """Keep the learner's definitions as their exercise cell left them (later cells may rebind the names)."""
        if names is None:
            return dict(captured)
        for name in names:
            if name in namespace:
                captured[name] = namespace[name]

    return capture


def start(path: str):
    """The preamble: import what the checks' requests need, take the channel to the judge from the host's socket at
    ``path``, and serve it in a thread. Returns ``capture`` (see :func:`make_capture`)."""
    import torch.nn.functional  # noqa: F401 - before the learner's code: every request needs torch

    import tutor.grading.serve  # and these (tutor.grading.wire with them)

    tutor.grading.serve.keep_pristine()  # the course's check helpers, before any learner code runs

    host = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    host.connect(path)
    _, fds, _, _ = socket.recv_fds(host, 16, 1)
    host.close()
    if not fds:
        raise RuntimeError("the grader's host did not hand over the channel to the judge")
    channel = socket.socket(fileno=fds[0])
    capture = make_capture()
    threading.Thread(target=serve_judge, args=(channel, capture), name="tutor grade", daemon=True).start()
    return capture


def serve_judge(channel: socket.socket, capture) -> None:
    """Answer the judge's requests on ``channel`` until it closes (see the module's docstring). Each answer repeats
    its request's ``nonce``: the judge ignores what else arrives on the channel."""
    from tutor.grading import wire

    read, write = wire.read_frame, wire.write_frame  # (bound now: the learner's code may replace them later)
    children: list[int] = []
    while True:
        try:
            frame = read(channel, fds=1)
        except (OSError, wire.WireError):
            return
        if frame is None:
            return
        header, _, fds = frame
        op = header.get("op")
        try:
            if op == "exercise":
                reply = _exercise(channel, capture(), str(header.get("name")), fds, children)
            elif op == "unlock":
                reply = _unlock(header.get("definitions") or [])
            elif op == "stop":
                reply = {"ended": _stop(children)}
            else:
                reply = {"error": f"no request is called {op!r}"}
        except Exception as error:  # noqa: BLE001 - said to the judge, which decides what it means
            reply = {"error": f"{type(error).__name__}: {error}"}
        finally:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
        try:
            write(channel, {**reply, "nonce": header.get("nonce")})
        except OSError:
            return


def _exercise(channel, captured: dict, name: str, fds: list[int], children: list[int],
              _fork=os.fork, _exit=os._exit, _closerange=os.closerange) -> dict:
    """Fork a child that serves the learner's ``name`` on the socket in ``fds`` (the process functions bound when
    this module ran, before the learner's code). The child keeps no other file of the kernel's but the standard
    streams: nothing else the notebook opened is its to use, and a notebook that used up its open files still has
    its exercise checked."""
    import warnings

    _stop(children)
    if not fds:
        try:  # the learner's code may have used up this process's open files: the kernel drops a socket then
            os.close(os.open(os.devnull, os.O_RDONLY))
        except OSError as error:
            return {"failed": f"the notebook's process ran out of open files ({error.strerror}), so the grader's "
                              "socket could not reach it: close the files and sockets your code opens"}
        return {"error": "no socket came with the request"}
    if name not in captured:
        return {"missing": True}
    with warnings.catch_warnings():  # Python 3.12+ warns that other threads do not survive a fork: they need not
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = _fork()
    if pid == 0:  # the child: serves, then exits without running anything else of the kernel's
        try:
            channel.close()
            _closerange(3, fds[0])
            _closerange(fds[0] + 1, max(fds[0] + 1, os.sysconf("SC_OPEN_MAX")))
            from tutor.grading import serve

            serve.quiet()
            serve.serve(socket.socket(fileno=fds[0]), captured[name])
        finally:
            _exit(0)
    children.append(pid)
    return {"child": pid}


def _stop(children: list[int], _kill=os.kill, _waitpid=os.waitpid) -> list[str]:
    """Kill the children (after a moment for one that is ending); returns how each ended, in words."""
    import time

    ended = []
    for pid in children:
        try:
            done, status = 0, 0
            for _ in range(20):
                done, status = _waitpid(pid, os.WNOHANG)
                if done:
                    break
                time.sleep(0.01)
            if not done:
                _kill(pid, signal.SIGKILL)
                _, status = _waitpid(pid, 0)
                ended.append("stopped by the grader")
            elif os.WIFSIGNALED(status):
                ended.append(_signal_name(os.WTERMSIG(status)))
            else:
                ended.append(f"exit code {os.WEXITSTATUS(status)}")
        except (ProcessLookupError, ChildProcessError):
            pass
    children.clear()
    return ended


def _signal_name(number: int) -> str:
    return {signal.SIGSEGV: "a segmentation fault", signal.SIGKILL: "SIGKILL, usually out of memory",
            signal.SIGABRT: "an abort"}.get(number, f"signal {number}")


def _unlock(definitions) -> dict:
    """Run each ``[module, name, source]`` in its module and hand the definition to ``tutor._locked``."""
    import importlib

    locked = sys.modules.get("tutor._locked") or importlib.import_module("tutor._locked")
    reference = importlib.import_module("tutor.reference")
    for module_name, name, source in definitions:
        module = importlib.import_module(str(module_name))
        exec(compile(str(source), f"<model answer {module_name}.{name}>", "exec"), vars(module))
        answer = vars(module)[name]
        locked.UNLOCKED[f"{module_name}.{name}"] = answer
        if getattr(reference, name, None) is not None and not str(name).startswith("_"):
            setattr(reference, name, answer)
    return {"ok": True}

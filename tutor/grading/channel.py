"""The runner's end of the grader's channel, and the start of the checker (see ``tutor.grading.kernel``).

The channel is a Unix socket in the attempt's own folder. The preamble connects to it before any learner
code runs, and the runner then closes and removes the listening socket: no other connection can be made.
On Linux every read carries the writer's process id (``SO_PASSCRED``), checked by the kernel of the
operating system, so that the runner takes the checker's results from the checker only.

:func:`start_checker` turns a kernel whose cells have all run into a checker process:

1. it kills every process the learner's code started (the kernel's descendants);
2. it writes ``fork``: the watchdog forks, and the child says hello once it has put back what the learner's
   code changed (see ``tutor.grading.kernel.watch``);
3. it accepts the hello only from a new child of the kernel, the only one, and then kills the kernel and
   its process group (the child has left it): every thread the learner started dies with them.

:func:`run_checks` then writes the pristine package, sends ``go`` and collects the results.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import time

import psutil

from tutor.grading.kernel import FORK, encode

CREDENTIALS = hasattr(socket, "SO_PASSCRED") and hasattr(socket, "SCM_CREDENTIALS")  # Linux
UCRED = struct.Struct("iII")  # pid, uid, gid


class ChannelError(Exception):
    """The checks could not be started or finished; the message says why, for the feedback."""


class Channel:
    """A listening socket at ``path`` until the preamble connects (:meth:`accept`), then that connection."""

    def __init__(self, path):
        self.path = str(path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.connection: socket.socket | None = None
        self.buffers: dict = {}  # writer's pid (None where unknown) -> bytes not yet read as frames
        self.strangers: set = set()  # pids that wrote although the runner did not listen to them

    def accept(self, timeout: float) -> int:
        """The preamble's connection and its hello; returns the kernel's process id."""
        self.listener.settimeout(max(0.1, timeout))
        try:
            self.connection, _ = self.listener.accept()
        except OSError as error:
            raise ChannelError(f"the grader's preamble did not connect ({error})") from None
        finally:
            self.listener.close()
            os.unlink(self.path)
        if CREDENTIALS:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        pid, hello = self.read(time.monotonic() + timeout, lambda pid: True)
        if not isinstance(hello, dict) or not isinstance(hello.get("kernel"), int):
            raise ChannelError("the grader's preamble did not say hello")
        if pid is not None and pid != hello["kernel"]:
            raise ChannelError("the hello on the grader's channel came from another process")
        return hello["kernel"]

    def send(self, data: bytes) -> None:
        self.connection.sendall(data)

    def read(self, deadline: float, trusted) -> tuple:
        """The next frame from a writer ``trusted(pid)`` accepts: ``(pid, message)``; ``(None, None)`` at the
        end of the stream. Raises ``TimeoutError`` at ``deadline``."""
        while True:
            for pid, buffer in self.buffers.items():
                if trusted(pid) and len(buffer) >= 4 and len(buffer) >= 4 + int.from_bytes(buffer[:4], "big"):
                    size = int.from_bytes(buffer[:4], "big")
                    self.buffers[pid] = buffer[4 + size:]
                    try:
                        return pid, json.loads(buffer[4:4 + size].decode("utf-8"))
                    except ValueError:
                        return pid, None
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.connection.settimeout(left)
            try:
                pid, data = self._receive()
            except TimeoutError:
                raise TimeoutError from None
            if not data:
                return None, None
            if not trusted(pid):
                self.strangers.add(pid)
                continue
            self.buffers[pid] = self.buffers.get(pid, b"") + data

    def _receive(self) -> tuple:
        if not CREDENTIALS:
            return None, self.connection.recv(1 << 16)
        data, ancillary, _, _ = self.connection.recvmsg(1 << 16, socket.CMSG_SPACE(UCRED.size))
        pid = None
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = UCRED.unpack(payload[:UCRED.size])[0]
        return pid, data

    def close(self) -> None:
        for sock in (self.connection, self.listener):
            if sock is not None:
                sock.close()
        if os.path.exists(self.path):
            os.unlink(self.path)


# --------------------------------------------------------------------------------------
# Processes


def kill_tree(pid: int, *, keep: int | None = None) -> int:
    """Kill the descendants of ``pid`` (all but ``keep``); returns how many there were."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return 0
    killed = 0
    for child in children:
        if child.pid != keep:
            try:
                if child.status() != psutil.STATUS_ZOMBIE:
                    child.kill()
                    killed += 1
            except psutil.Error:
                pass
    return killed


def kill_marked(marker: tuple[str, str], *, keep: int | None = None) -> int:
    """Kill every process of this user whose environment holds ``marker`` (``(name, value)``: the grader
    sets it in each kernel, and every process started from the kernel inherits it, also one that left its
    process group), all but ``keep``; returns how many there were."""
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


def kill_group(pid: int) -> None:
    """Kill ``pid`` and, where it leads a process group of its own (a kernel, a checker), the whole group."""
    try:
        if os.getpgid(pid) == pid and pid != os.getpgrp():
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


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


def _child_of(pid, parent: int) -> bool:
    if pid is None:
        return True  # no credentials on this system: trust the connection
    try:
        return psutil.Process(pid).ppid() == parent
    except psutil.Error:
        return False


def start_checker(channel: Channel, kernel: int, timeout: float, marker: tuple[str, str]) -> tuple[int, dict, int]:
    """Fork the checker out of the kernel and stop the kernel (see the module's docstring). Returns the
    checker's pid, its hello (what the restore put back) and how many processes of the learner's were killed.
    ``marker`` is the environment variable that marks the kernel's processes (see :func:`kill_marked`)."""
    started = kill_tree(kernel) + kill_marked(marker, keep=kernel)
    try:
        channel.send(FORK)
    except OSError as error:
        raise ChannelError(f"the grader's channel was closed before the checks started ({error}); did your code "
                           "close files it did not open?") from None
    deadline = time.monotonic() + timeout
    try:
        pid, hello = channel.read(deadline, lambda p: p != kernel and _child_of(p, kernel))
    except TimeoutError:
        raise ChannelError(f"the grader's checker did not start within {timeout:.0f} s") from None
    if hello is None:
        raise ChannelError("the grader's channel was closed before the checks started "
                           "(did your code close files it did not open?)")
    if not isinstance(hello, dict) or "checker" not in hello:
        raise ChannelError(f"the grader's checker could not start: {str((hello or {}).get('fatal', hello))[:300]}")
    checker = pid if pid is not None else int(hello["checker"])
    if CREDENTIALS:
        others = []
        for child in psutil.Process(kernel).children() if psutil.pid_exists(kernel) else []:
            try:
                if child.pid != checker and child.status() != psutil.STATUS_ZOMBIE:
                    others.append(child.pid)
            except psutil.Error:
                pass
        if others:
            kill_group(kernel)
            kill_group(checker)
            raise ChannelError("your notebook started a process while the grader was starting its checks")
    kill_group(kernel)
    wait_gone(kernel)
    kill_marked(marker, keep=checker)  # what the learner's code started in the meantime, wherever it went
    return checker, hello, started


def read_results(channel: Channel, checker: int, go: dict, deadline: float) -> tuple[dict, dict, list[str]]:
    """Send ``go`` and collect ``(loaded, results, notes)``: the checker's report on loading the checks, a
    payload per exercise, and what went wrong with the checker itself."""
    loaded, results, notes = {}, {}, []
    try:
        channel.send(encode(go))
    except OSError as error:
        kill_group(checker)
        return loaded, results, [f"the grader's checker could not be reached ({error})"]
    def trusted(pid):
        return pid is None or pid == checker

    while True:
        try:
            _, message = channel.read(deadline, trusted)
        except TimeoutError:
            notes.append("the notebook ran out of its total time limit while it was checked")
            break
        if message is None:
            notes.append("the grader's checker stopped before it had checked every exercise")
            break
        if message.get("loaded"):
            loaded = message
        elif "result" in message:
            results[message["result"]] = {k: v for k, v in message.items() if k != "result"}
        elif "fatal" in message:
            notes.append(f"the grader's checker failed: {str(message['fatal'])[:300]}")
        if message.get("done") or (loaded and loaded.get("foreign")):
            break
    kill_tree(checker)
    kill_group(checker)
    if channel.strangers - {None}:
        notes.append("another process wrote on the grader's channel while the checks ran; it was not listened to")
    return loaded, results, notes


__all__ = ["Channel", "ChannelError", "start_checker", "read_results", "kill_tree", "kill_group", "kill_marked",
           "wait_gone"]

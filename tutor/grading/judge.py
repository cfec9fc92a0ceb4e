"""The judge: the process where the checks run, in which no learner code has run and none will.

``python -m tutor.grading.judge --channel FD --notebooks N ...``. The runner starts one per worker before it grades
a notebook; it imports the checks of the batch's notebooks (and what they import when they run) at once, so that
nothing is read from disk later. Then,
for each graded notebook, the runner sends a job with the channel to that notebook's kernel (a file descriptor,
passed over the runner's socket): :func:`judge_notebook` checks its exercises in order.

For each exercise the judge asks the kernel to fork a child that serves the learner's definition on a socket of
its own (``tutor.grading.kernel``), and runs the exercise's check on a handle to it (``tutor.grading.remote``): the
check's own code, comparisons and diagnoses run here, and only plain data comes back from the learner's side
(``tutor.grading.wire``). A learner's code that calls a model answer hidden from it (``tutor.grading.lock``) earns
nothing, with the reason. Once an exercise has its verdict, its model answer is handed to the kernel for the
exercises after it.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import secrets
import socket
import subprocess
import sys
import time

from tutor.grading import processes, wire
from tutor.grading.grades import Outcome


def preload(numbers=None) -> None:
    """Import the checks of notebooks ``numbers`` (default: all), and what they import only when they run, now."""
    import tutor.checks
    from tutor.course import catalog

    for number in numbers or [notebook.number for notebook in catalog.NOTEBOOKS]:
        module = tutor.checks.check_module(number)
        for name in getattr(module, "IMPORTED_WHEN_CHECKING", ()):
            with contextlib.suppress(ImportError):  # an optional package (transformers): the checks do without it
                importlib.import_module(name)
    importlib.import_module("tutor.grading.remote")


def _ask(kernel: socket.socket, header: dict, timeout: float, fds=()) -> dict:
    """One request to the kernel's server and its answer (``{"error": ...}`` when it does not come). The answer
    must repeat the request's nonce: frames that the learner's code writes on the channel are skipped."""
    nonce = secrets.token_hex(8)
    deadline = time.monotonic() + max(0.1, timeout)
    try:
        kernel.settimeout(max(0.1, timeout))
        wire.write_frame(kernel, {**header, "nonce": nonce}, fds=fds)
        while True:
            kernel.settimeout(max(0.01, deadline - time.monotonic()))
            frame = wire.read_frame(kernel)
            if frame is None:
                return {"error": "the notebook's kernel stopped"}
            if frame[0].get("nonce") == nonce:
                return frame[0]
    except (OSError, wire.WireError) as error:
        return {"error": f"the notebook's kernel did not answer the grader ({type(error).__name__}; does the "
                         "notebook write on sockets it did not open?)"}


def judge_exercise(kernel: socket.socket, name: str, learner_name: str, timeout: float) -> Outcome:
    """Check exercise ``name`` on the learner's ``learner_name`` in a child of the kernel."""
    import tutor.checks
    from tutor.checks import harness
    from tutor.grading import remote

    mine, theirs = socket.socketpair()
    try:
        reply = _ask(kernel, {"op": "exercise", "name": learner_name}, 30.0, fds=[theirs.fileno()])
    finally:
        theirs.close()
    if reply.get("missing") is True:
        mine.close()
        return Outcome("missing", f"the notebook does not define `{learner_name}`")
    if "failed" in reply:  # the learner's code made its own process unable to take the check's socket
        mine.close()
        return Outcome("failed", wire.text(reply.get("failed"), 300))
    if "child" not in reply:
        mine.close()
        return Outcome.error(f"not graded: {wire.text(reply.get('error'), 300) or 'the kernel did not serve it'}")
    peer = remote.Peer(mine, timeout=timeout)
    try:
        try:
            obj = peer.root()
        except remote.RemoteError as lost:
            return Outcome("failed", "checking your code stopped the Python process that runs it", [str(lost)])
        harness.set_salt(secrets.randbelow(2**31))  # inputs no one could record at home (tutor.checks.salt)
        result = getattr(tutor.checks, name)(obj)
        outcome = Outcome.of_check(result, learner_name)
        if peer.broken and outcome.status != "passed":  # how the child ended, in the kernel's words
            ended = _ask(kernel, {"op": "stop"}, 5.0).get("ended")
            if isinstance(ended, list) and ended:
                outcome.details.append(f"the process that ran your code ended with {wire.text(ended[-1], 80)}")
        if peer.locked:
            answers = ", ".join(f"`{a}`" for a in sorted(peer.locked))
            why = f"your `{learner_name}` calls the model answer {answers}"
            outcome = Outcome("failed", why + ": no points",
                              [f"the check {'passed' if outcome.status == 'passed' else 'ran'}, but {why}, which "
                               "the grader hides while this exercise is graded"] + outcome.details,
                              model_answer=why, seconds=outcome.seconds)
        return outcome
    finally:
        peer.close()


def judge_notebook(kernel: socket.socket, job: dict) -> tuple[list[dict], list[str]]:
    """Check ``job["exercises"]`` (``[[name, learner_name], ...]``) in order; returns their outcomes (as data) and
    notes on the checking as a whole."""
    deadline = time.monotonic() + float(job["seconds"])
    unlock = job.get("unlock") or {}
    outcomes, notes = [], []
    for name, learner_name in job["exercises"]:
        left = deadline - time.monotonic()
        if left <= 1:
            outcome = Outcome.error("not graded: the notebook ran out of its total time limit while it was checked")
            notes.append("the notebook ran out of its total time limit while it was checked")
        else:
            outcome = judge_exercise(kernel, name, learner_name, min(float(job["timeout"]), left))
        outcomes.append(outcome.to_data())
        if unlock.get(name):
            reply = _ask(kernel, {"op": "unlock", "definitions": unlock[name]}, 30.0)
            if "ok" not in reply:
                notes.append(f"the model answer of {name} could not be handed to the kernel: "
                             f"{wire.text(reply.get('error'), 200)}")
    _ask(kernel, {"op": "stop"}, 5.0)
    return outcomes, notes


# --------------------------------------------------------------------------------------
# The runner's end


class Judge:
    """One judge process (``python -m tutor.grading.judge``), used for one notebook at a time."""

    def __init__(self, notebooks=()):
        self.channel, theirs = socket.socketpair()
        self.process = subprocess.Popen([sys.executable, "-m", "tutor.grading.judge", "--channel",
                                         str(theirs.fileno()), "--notebooks", *map(str, sorted(set(notebooks)))],
                                        pass_fds=[theirs.fileno()],
                                        env=self._environment(), stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        theirs.close()
        self.channel.settimeout(180)
        try:
            ready = wire.read_frame(self.channel)
        except (OSError, wire.WireError):
            ready = None
        if ready is None or ready[0].get("ready") is not True:
            self.close()
            raise RuntimeError("the grader's judge did not start")

    @staticmethod
    def _environment() -> dict:
        from tutor import env

        environ = dict(os.environ, **{env.STRICT: "0", env.PROGRESS: "0", env.OFFLINE: "1", "OMP_NUM_THREADS": "1"})
        environ.pop(env.CHECK_REMOTE, None)
        return environ

    def check(self, kernel: socket.socket, job: dict, seconds: float) -> tuple[dict[str, Outcome], list[str]]:
        """The outcomes of ``job``'s exercises (by name) on the kernel at ``kernel``, and notes."""
        try:
            self.channel.settimeout(max(1.0, seconds))
            wire.write_frame(self.channel, job, fds=[kernel.fileno()])
            frame = wire.read_frame(self.channel)
        except (OSError, wire.WireError) as error:
            self.close()
            return {}, [f"the grader's judge did not finish ({type(error).__name__}); it was started again"]
        if frame is None:
            self.close()
            return {}, ["the grader's judge stopped; it was started again"]
        reply = frame[0]
        outcomes = [Outcome.from_data(data) for data in reply.get("outcomes", [])]
        names = [name for name, _ in job["exercises"]]
        return dict(zip(names, outcomes)), [str(note) for note in reply.get("notes", [])]

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.channel.close()
        processes.stop(self.process)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--channel", type=int, required=True)
    parser.add_argument("--notebooks", type=int, nargs="*", default=None, help="the checks to import (default all)")
    args = parser.parse_args(argv)
    channel = socket.socket(fileno=args.channel)
    preload(args.notebooks)
    wire.write_frame(channel, {"ready": True})
    while True:
        frame = wire.read_frame(channel, fds=1)
        if frame is None:
            return 0
        job, _, fds = frame
        if not fds:
            wire.write_frame(channel, {"outcomes": [], "notes": ["no channel to the notebook's kernel came"]})
            continue
        kernel = socket.socket(fileno=fds[0])
        try:
            outcomes, notes = judge_notebook(kernel, job)
        finally:
            kernel.close()
        wire.write_frame(channel, {"outcomes": outcomes, "notes": notes})


if __name__ == "__main__":
    sys.exit(main())

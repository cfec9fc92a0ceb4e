"""The learner's side of grading one notebook: ``python -m tutor.grading.host --control FD --judge FD``.

The runner starts it in the sandbox (``tutor.grading.sandbox``) with two sockets: ``--control``, on which it gets
the cells to run and reports on each, and ``--judge``, the channel the kernel's preamble takes over
(``tutor.grading.kernel``) and on which the judge will ask for the learner's objects. It sets the limits (and, when
it is root, drops to the user id it is given), starts a Jupyter kernel with nbclient and runs the cells one by one:

- ``{"cell": i}`` before cell ``i``; ``{"cell": i, "error": text}`` after it (``error`` None when it raised nothing);
- ``{"fatal": reason, "cell": i}`` when the cell ran too long or the kernel died;
- ``{"done": true}`` when every cell has run. It then waits, the kernel alive for the judge, until the runner
  closes the control socket or stops the sandbox.

This process runs beside the learner's code: the runner trusts nothing it says beyond which cell to leave out
of the next attempt, and keeps its own clock.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import secrets
import socket
import sys

PREAMBLE_PATH = "@HOST_SOCKET@"  # in the preamble cell: the path of this process's socket for the kernel


def limit(memory_mb: int, processes: int, uid: int | None) -> None:
    """Set the limits every process of the sandbox inherits; drop to ``uid`` (root only)."""
    limits = [(resource.RLIMIT_NOFILE, 1024), (resource.RLIMIT_FSIZE, 256 << 20), (resource.RLIMIT_CORE, 0)]
    if memory_mb > 0:
        limits.append((resource.RLIMIT_AS, memory_mb << 20))
    for kind, value in limits:
        try:
            resource.setrlimit(kind, (value, value))
        except (ValueError, OSError):
            pass
    if uid is not None and os.geteuid() == 0:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    if processes > 0 and (uid is not None or os.geteuid() != 0):
        try:
            resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
        except (ValueError, OSError):
            pass


def _error_text(cell) -> str | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            value = str(output.get("evalue", ""))[:300]
            return f"{output.get('ename', 'Error')}: {value}" if value else output.get("ename", "Error")
    return None


def _death_reason(client) -> str:
    import signal

    code = None
    try:
        code = client.km.provisioner.process.wait(timeout=2)
    except Exception:  # noqa: BLE001 - no exit code to be had
        pass
    if code is None:
        return "the Python process running your notebook died"
    if code < 0:
        name = {signal.SIGSEGV: "a segmentation fault (SIGSEGV)", signal.SIGKILL: "SIGKILL (usually: out of memory)",
                signal.SIGABRT: "an abort (SIGABRT)"}.get(-code, f"signal {-code}")
        return f"the Python process running your notebook was killed by {name}"
    return f"the Python process running your notebook exited with code {code} (os._exit or sys.exit in a thread?)"


def _settle_tasks() -> None:
    """Cancel what nbclient left running on this thread's event loop after a cell (a cell that ended in an exception
    leaves its poll of the kernel running)."""
    from jupyter_core.utils import ensure_event_loop

    loop = ensure_event_loop()
    left = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in left:
        task.cancel()
    if left:
        loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))


def run(control: socket.socket, judge: socket.socket, plan: dict) -> None:
    """Run the cells of ``plan`` (see the module's docstring)."""
    # nbformat imports jsonschema, whose check of the IRI format compiles a grammar when it is imported (0.7 s of
    # the 3 s a notebook costs, measured with python -X importtime); the cells this process runs hold no IRI to
    # check, so it goes without that check.
    sys.modules.setdefault("rfc3987_syntax", None)
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    from tutor.grading import wire

    def report(message):
        wire.write_frame(control, message)

    tmp = os.environ.get("TMPDIR", "/tmp")
    work = os.path.join(tmp, "work")
    for folder in (work, os.environ.get("HOME", work)):
        os.makedirs(folder, exist_ok=True)
    path = os.path.join(tmp, f"grade-{secrets.token_hex(8)}.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    cells = [str(source).replace(PREAMBLE_PATH, path) for source in plan["cells"]]
    preamble = int(plan.get("preamble", 0))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    client = NotebookClient(nb, timeout=int(plan["cell_timeout"]), kernel_name=plan.get("kernel_name", "python3"),
                            allow_errors=True, record_timing=False, startup_timeout=120,
                            resources={"metadata": {"path": work}})
    try:
        kernel = client.setup_kernel(cwd=work)
        kernel.__enter__()
    except Exception as error:  # noqa: BLE001 - no kernel: said to the runner, which tries again or gives up
        report({"fatal": f"the kernel could not run the notebook: {type(error).__name__}: {error}"})
        return
    try:
        for index, cell in enumerate(nb.cells):
            report({"cell": index})
            client.timeout = max(1, int(plan["timeouts"][index]))
            if index == preamble:  # hand the judge's channel to the kernel's preamble, the one connection taken
                listener.settimeout(max(1.0, float(plan["timeouts"][index])))
            try:
                if index == preamble:
                    _run_preamble(client, cell, index, listener, judge)
                else:
                    client.execute_cell(cell, index)
            except CellTimeoutError:
                report({"fatal": "timeout", "cell": index})
                return
            except DeadKernelError:
                report({"fatal": _death_reason(client), "cell": index})
                return
            except OSError as error:
                report({"fatal": f"the grader's preamble could not connect ({error})", "cell": index})
                return
            finally:
                _settle_tasks()
            report({"cell": index, "error": _error_text(cell)})
            cell.outputs = []  # only the error matters
        report({"done": True})
        try:
            control.settimeout(None)
            control.recv(1)  # until the runner closes it, or stops the sandbox
        except OSError:
            pass
    finally:
        kernel.__exit__(None, None, None)


def _run_preamble(client, cell, index, listener, judge) -> None:
    """Run the preamble cell while accepting its connection, and give it the judge's channel."""
    import threading

    done = threading.Event()
    failure: list = []

    def accept():
        try:
            connection, _ = listener.accept()
            socket.send_fds(connection, [b"j"], [judge.fileno()])
            connection.close()
        except OSError as error:
            failure.append(error)
        finally:
            listener.close()
            done.set()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    client.execute_cell(cell, index)
    done.wait(timeout=5)
    judge.close()
    if failure:
        raise failure[0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--control", type=int, required=True)
    parser.add_argument("--judge", type=int, required=True)
    parser.add_argument("--memory-mb", type=int, default=0)
    parser.add_argument("--processes", type=int, default=0)
    parser.add_argument("--uid", type=int, default=None)
    args = parser.parse_args(argv)
    limit(args.memory_mb, args.processes, args.uid)
    from tutor.grading import wire

    control = socket.socket(fileno=args.control)
    judge = socket.socket(fileno=args.judge)
    frame = wire.read_frame(control)
    if frame is None:
        return 1
    run(control, judge, frame[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())

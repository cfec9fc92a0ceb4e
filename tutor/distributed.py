"""Processes that train together: the one launcher of Gloo process groups on this machine, and the set-up of a
run under ``torchrun``.

The launcher, ``run_in_group``, runs a function in every process of a real group of 2, 3, ... processes talking
over Gloo: notebook 10's check of ``average_gradients`` (``tutor.checks.nb10_scaling_up``) and its data-parallel
step (``tutor.train.long_run.data_parallel_step``) both use it. The learner's function usually lives in a notebook
cell, which ``spawn`` (the start method of macOS and Windows) cannot pickle. On Linux (Colab included) the
processes are forked, so they inherit the function as it is; elsewhere they are spawned and get the function's
source code, which they run again with ``torch``, ``dist``, ``nn``, ``F`` and ``math`` defined. Set
``TUTOR_DIST_START=spawn`` (or ``fork``) to choose.

Under ``torchrun`` (``python -m tutor.scale``): ``init_distributed`` joins the job's group and gives this
process's ``Dist`` (rank, world size, GPU); ``all_gather``, ``any_rank`` and ``weights_identical`` work on it.
"""

import datetime
import faulthandler
import inspect
import multiprocessing
import os
import re
import signal
import sys
import tempfile
import textwrap
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from tutor import env
from tutor.device import get_device

# --- the launcher: a Gloo group of processes on this machine ------------------------------------------

NAMESPACE_IMPORTS = ("import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
                     "import torch.distributed as dist\n")


class NoProcessGroup(Exception):
    """No process group could be started on this machine (not the learner's fault)."""


class RanksStopped(RuntimeError):
    """Some processes of the group died before saving their result (Gloo aborts a process whose collective calls
    do not match the others', e.g. tensors of different sizes).

    ``stopped`` maps each such rank to why, in words (the C++ message cleaned up, or its exit code); ``results``
    holds what the other ranks returned (``None`` for the stopped ones)."""

    def __init__(self, stopped: dict, results: list):
        self.stopped, self.results = stopped, results
        super().__init__("; ".join(f"rank {rank} stopped: {why}" for rank, why in sorted(stopped.items())))


def start_method() -> str:
    """``fork`` on Linux (Colab included), ``spawn`` elsewhere; ``$TUTOR_DIST_START`` overrides."""
    chosen = (env.text(env.DIST_START) or "").lower()
    if chosen in ("fork", "spawn"):
        return chosen
    return "fork" if sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods() else "spawn"


def function_from_source(source, name):
    """The function ``name`` defined by ``source``, run in a namespace with ``NAMESPACE_IMPORTS``."""
    namespace = {"__name__": "__learner__"}
    exec(NAMESPACE_IMPORTS, namespace)
    exec(source, namespace)
    return namespace[name]


def learner_where(error):
    """``"line N in f(): code"`` for the last frame of ``error``'s traceback outside tutor, torch and the
    installed packages (the learner's own line), or ``None``."""
    frames = traceback.extract_tb(error.__traceback__)
    for frame in reversed(frames):
        fname = frame.filename.replace("\\", "/")
        if "/tutor/" in fname or "/torch/" in fname or "/site-packages/" in fname or "/lib/python" in fname:
            continue
        code = (frame.line or "").strip()
        return f"line {frame.lineno} in {frame.name}()" + (f": {code}" if code else "")
    return None


def gloo_reason(text: str) -> str:
    """A Gloo or C++ error message without its source path and sign-off: "Connection closed by peer [...]",
    "op.preamble.length <= op.nbytes. 24 vs 20. Received data size doesn't match expected size. ..."."""
    text = re.sub(r"\[(enforce fail at )?[^\]]*\.(cc|cpp|h|hpp):\d+\]\s*", "", text)
    text = re.sub(r"\s*(This is typically caused by|Check the logs of|GLHF).*", "", text, flags=re.S)
    return " ".join(text.split())


# What a process's C++ side writes to stderr that only says what the result already says: an uncaught C++
# exception ("terminate called after throwing ...", then "  what():  ..." and Python's "Fatal Python error: Aborted"
# with a traceback), and PyTorch's [W ...]/[E ...] logs.
_CXX_CRASH = re.compile(r"^terminate called|^\s+what\(\):|^Exception raised from|^frame #\d+:")
_TORCH_LOG = re.compile(r"^\[[WEI] [^\]]*\]")


def _crash_reason(stderr: str, exitcode) -> str:
    """Why a process stopped, from what it wrote to stderr and its exit code."""
    what = [line.split("what():", 1)[1] for line in stderr.splitlines() if "what():" in line]
    thrown = re.search(r"terminate called after throwing an instance of '([^']+)'", stderr)
    if what:
        return (f"{thrown.group(1)}: " if thrown else "") + gloo_reason(what[-1])
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def _relay(stderr: str) -> None:
    """Pass on what a process wrote to stderr (the learner's own prints, Python warnings), leaving out the C++ crash
    report and PyTorch's log lines, which the result reports in words."""
    kept, crashed = [], False
    for line in stderr.splitlines():
        crashed = crashed or line.startswith(("terminate called", "Fatal Python error"))
        if not (crashed or _CXX_CRASH.match(line) or _TORCH_LOG.match(line)):
            kept.append(line)
    if any(line.strip() for line in kept):
        print("\n".join(kept), file=sys.stderr)


def _capture_stderr(path) -> None:
    """Send this process's stderr (file descriptor 2, where C++ writes) to ``path``; where that cannot be done,
    stderr stays as it was."""
    try:
        sys.stderr.flush()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 2)
        os.close(fd)
        if faulthandler.is_enabled():  # pytest and Jupyter point it at their own copy of stderr: follow fd 2
            faulthandler.enable(file=2, all_threads=True)
    except Exception:  # noqa: BLE001 - best effort: a stream that cannot flush or be redirected still works
        pass


def _worker(rank, world_size, store, out_dir, work, learner_fn, source, name, args):
    """One process of the group: join it, run ``work`` with the learner's function, save the result."""
    result = {"rank": rank, "status": "ok"}
    path = os.path.join(out_dir, f"rank{rank}.pt")
    _capture_stderr(os.path.join(out_dir, f"rank{rank}.err"))
    try:
        torch.set_num_threads(1)
        if sys.platform == "darwin":
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo0")
        elif sys.platform.startswith("linux"):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=20))
        # Every rank finishes connecting before any runs the learner's code: a rank that fails or
        # returns at once must not close its sockets while another is still connecting.
        dist.barrier()
    except Exception as e:  # noqa: BLE001 - reported to the parent as "no group", whatever the cause
        result.update(status="no group", error=f"{type(e).__name__}: {e}")
        torch.save(result, path)
        return
    try:
        if learner_fn is None and source is not None:
            learner_fn = function_from_source(source, name)
        result.update(work(rank, world_size, learner_fn, *args))
    except Exception as e:  # noqa: BLE001 - the source could not be run again, or the learner's work raised
        result.update(status="error", error=f"{type(e).__name__}: {e}", where=learner_where(e))
    finally:
        torch.save(result, path)
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - best-effort cleanup: the result is already saved
            pass


def run_in_group(work, world_size: int, learner_fn=None, args=(), timeout: float = 60.0) -> list:
    """Run ``work(rank, world_size, learner_fn, *args)`` in each process of a real Gloo group of ``world_size``
    processes on this machine. ``work`` is a function of a module (spawned processes import it) returning a dict.

    Returns a list of per-rank results: the dicts ``work`` returned, with ``rank`` and ``status`` ("ok"; "error"
    with ``error`` and ``where`` when ``work`` raised; or a status ``work`` set, such as "not done"). Raises
    ``NoProcessGroup`` when no group can start here, ``RanksStopped`` when a process died without a result
    (Gloo aborts one whose collective calls do not match the others'), and ``TimeoutError`` when the processes
    are still running after ``timeout`` seconds. What the processes write to stderr is passed on, except C++
    crash reports and PyTorch's log lines (the exception says why in words).
    """
    if not dist.is_available() or not dist.is_gloo_available():
        raise NoProcessGroup("this PyTorch was built without torch.distributed / Gloo")
    method = start_method()
    source = name = None
    if method == "spawn" and learner_fn is not None:
        name = getattr(learner_fn, "__name__", None)
        try:
            source = textwrap.dedent(inspect.getsource(learner_fn))
        except (OSError, TypeError):
            source = None
        if source is None or not name or name == "<lambda>":
            raise NoProcessGroup("processes start with 'spawn' here, and the source of your function could not "
                                 "be read (define it with `def average_gradients(model):` in a cell)")
        learner_fn = None
    context = multiprocessing.get_context(method)
    with tempfile.TemporaryDirectory(prefix="tutor-dist-") as tmp:
        store = os.path.join(tmp, "store")
        processes = []
        try:
            for rank in range(world_size):
                p = context.Process(target=_worker, daemon=True,
                                    args=(rank, world_size, store, tmp, work, learner_fn, source, name, args))
                p.start()
                processes.append(p)
        except Exception as e:  # noqa: BLE001 - any start failure becomes NoProcessGroup, with its reason
            for p in processes:
                p.kill()
            raise NoProcessGroup(f"could not start {world_size} processes ({type(e).__name__}: {e})") from None
        deadline = time.monotonic() + timeout
        for p in processes:
            p.join(max(0.0, deadline - time.monotonic()))
        hung = [i for i, p in enumerate(processes) if p.is_alive()]
        for i in hung:
            processes[i].kill()
            processes[i].join(5)
        results, stderr = [], []
        for rank in range(world_size):
            path = os.path.join(tmp, f"rank{rank}.pt")
            results.append(torch.load(path, weights_only=False) if os.path.exists(path) else None)
            err = Path(tmp) / f"rank{rank}.err"
            stderr.append(err.read_text(encoding="utf-8", errors="replace") if err.exists() else "")
    for text in stderr:
        _relay(text)
    if any(r is not None and r["status"] == "not done" for r in results):
        return results  # a stub: "not done yet", whatever happened on the other ranks
    if any(r is not None and r["status"] == "no group" for r in results):
        reason = next(r["error"] for r in results if r is not None and r["status"] == "no group")
        raise NoProcessGroup(f"torch.distributed.init_process_group('gloo') failed: {reason}")
    stopped = {rank: _crash_reason(stderr[rank], processes[rank].exitcode)
               for rank, r in enumerate(results) if r is None and rank not in hung}
    if stopped:
        raise RanksStopped(stopped, results)
    if hung:
        raise TimeoutError(f"ranks {hung} did not finish within {timeout:.0f} s")
    return results


# --- torchrun: one process of a job -------------------------------------------------------------------


@dataclass
class Dist:
    """This process's place in a job: its rank, the number of processes, and its GPU on this node."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def on(self) -> bool:
        return self.world_size > 1


def init_distributed(device_arg=None) -> tuple[Dist, torch.device]:
    """Under ``torchrun`` (``RANK`` in the environment): join the process group, NCCL on GPUs and
    Gloo on CPUs, and pick this process's GPU. Otherwise one process on the best device."""
    if "RANK" not in os.environ:
        return Dist(), torch.device(device_arg) if device_arg else get_device()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = torch.cuda.is_available() and (device_arg is None or device_arg.startswith("cuda"))
    if use_cuda:
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if use_cuda else "gloo")
    return Dist(rank, world, local), device


def all_gather(obj, d: Dist) -> list:
    """``obj`` of every process, in rank order (``[obj]`` for one process)."""
    if not d.on:
        return [obj]
    out = [None] * d.world_size
    dist.all_gather_object(out, obj)
    return out


def any_rank(flag: bool, d: Dist) -> bool:
    """True on every process when ``flag`` is true on any (so all stop at the same step)."""
    if not d.on:
        return flag
    t = torch.tensor([1.0 if flag else 0.0])
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t)
    return bool(t.item() > 0)


def weights_identical(model, d: Dist) -> bool:
    """Whether every process holds exactly the same weights (compares a checksum of all of them)."""
    flat = torch.cat([p.detach().float().flatten().cpu() for p in model.parameters()])
    digest = (flat.double() * torch.arange(1, len(flat) + 1, dtype=torch.float64).sin()).sum().item()
    return len(set(all_gather(digest, d))) == 1


def finish(d: Dist) -> None:
    """Leave the job's process group (what ``init_distributed`` joined), if there is one."""
    if d.on:
        dist.destroy_process_group()

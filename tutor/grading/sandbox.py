"""Where a graded notebook runs: confined with what the system has, and a report of which protections held.

The learner's side of grading (``tutor.grading.host`` and the kernel it starts, with everything they start) runs
under `bubblewrap <https://github.com/containers/bubblewrap>`_ (``bwrap``) where it is installed and allowed:

- its own PID namespace: every process it starts dies with it (``--unshare-pid``, ``--die-with-parent``);
- no network (``--unshare-net``: a loopback of its own, which the kernel's Jupyter channels use);
- a view of the filesystem that holds the system, Python and its packages read-only, the course's package as the
  grader wrote it for this notebook (the model answers of the graded exercises left out: ``tutor.grading.lock``)
  read-only, and a private ``/tmp`` of limited size, its working folder, gone when it ends. The course's folder, the
  solutions, the other submissions, the grader's files and the home folder are not in it;
- limits (set by ``tutor.grading.host`` before it starts anything): memory (``RLIMIT_AS``), processes
  (``RLIMIT_NPROC``, under a user id of its own when the grader runs as root), open files, the size of a file;
- as root, no capabilities: the host drops to that user id before the kernel starts.

Where bubblewrap is missing or refused (Docker's default seccomp profile refuses the namespaces; macOS has none),
:func:`probe` tries ``unshare`` (util-linux) for the PID and network namespaces, else runs unconfined, and the
batch's report says once which protections held (:attr:`Confinement.held`, :attr:`Confinement.missing`).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

PACKAGE = "/grade/package"  # where the package written for the notebook is, inside the sandbox
TMP_BYTES = 512 << 20  # the private /tmp (and the working folder in it)
UID_BASE = 3_000_000  # the user ids of graded notebooks when the grader runs as root: one per worker slot


@dataclass
class Confinement:
    """How graded notebooks are confined on this machine."""

    kind: str  # "bubblewrap", "unshare" or "none"
    held: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    uid_base: int | None = None  # set: the host drops to uid_base + slot (the grader runs as root)

    def command(self, argv: list[str], package: pathlib.Path, slot: int = 0) -> list[str]:
        """``argv`` (a command of the sandbox's view: ``python -m tutor.grading.host ...``) wrapped in the
        confinement, the package written for this notebook at :data:`PACKAGE`."""
        if self.kind == "bubblewrap":
            return bwrap_command(package) + ["--", *argv]
        if self.kind == "unshare":
            return unshare_command() + list(argv)
        return list(argv)

    def package_path(self, package: pathlib.Path) -> str:
        """Where the package written for a notebook is, as the sandbox sees it."""
        return PACKAGE if self.kind == "bubblewrap" else str(package)

    def uid(self, slot: int) -> int | None:
        return None if self.uid_base is None else self.uid_base + slot

    def report(self) -> str:
        """One paragraph for the batch's report."""
        lines = [f"confinement of the graded notebooks: {self.kind}"]
        lines += [f"- held: {item}" for item in self.held]
        lines += [f"- did not hold: {item}" for item in self.missing]
        return "\n".join(lines)


def _python_paths() -> list[str]:
    """The folders Python needs: its installation, the environment's, and the import path, the course's own
    folder and the current one left out."""
    course = _course_roots()
    found = []
    for path in [sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix, *sys.path]:
        if not path or not os.path.isabs(path):
            continue
        real = os.path.realpath(path)
        if not os.path.isdir(real) or real == "/" or any(_inside(real, c) and not _inside(real, os.path.realpath(
                sys.prefix)) for c in course):
            continue
        if not any(_inside(real, other) for other in found):
            found = [other for other in found if not _inside(other, real)] + [real]
    return sorted(found)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _course_roots() -> list[str]:
    """The folders that hold the course's real package (and, beside it, the solutions)."""
    roots = []
    spec = importlib.util.find_spec("tutor")
    for location in (spec.submodule_search_locations or []) if spec else []:
        package = os.path.realpath(location)
        roots += [package, os.path.dirname(package)]
    return roots


def _hidden_packages(paths: list[str]) -> list[str]:
    """Copies of the course's package inside the folders the sandbox sees (an installed, not editable, package):
    each is covered by an empty folder."""
    hidden = []
    for path in paths:
        for root, dirs, _ in os.walk(path):
            if os.path.basename(root) in ("site-packages", "dist-packages") and "tutor" in dirs:
                candidate = os.path.join(root, "tutor")
                if os.path.isdir(os.path.join(candidate, "reference")):
                    hidden.append(candidate)
            if root.count(os.sep) - path.count(os.sep) >= 4:
                dirs[:] = []
    return hidden


def bwrap_command(package: pathlib.Path) -> list[str]:
    """bubblewrap's options for one graded notebook (see the module's docstring)."""
    args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try"]
    if os.geteuid() != 0:
        args += ["--unshare-user"]  # (as root the host drops to a user id of its own first: no capabilities left)
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    args += ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc", "--ro-bind-try", "/sys", "/sys"]
    paths = _python_paths()
    made = set()
    for path in paths:
        if not _inside(path, "/usr"):
            for parent in reversed(pathlib.PurePosixPath(path).parents):  # traversable by the sandbox's user
                if str(parent) != "/" and str(parent) not in made:
                    made.add(str(parent))
                    args += ["--perms", "0755", "--dir", str(parent)]
            args += ["--ro-bind", path, path]
    for hidden in _hidden_packages(paths + ["/usr/lib", "/usr/local/lib"]):
        args += ["--tmpfs", hidden]
    names = os.environ.get("TUTOR_NAMES")
    if names and os.path.isfile(names):
        args += ["--ro-bind", os.path.realpath(names), os.path.realpath(names)]
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--size", str(TMP_BYTES), "--tmpfs", "/tmp",
             "--perms", "1777", "--size", str(TMP_BYTES), "--tmpfs", "/dev/shm",
             "--perms", "0755", "--dir", "/grade", "--perms", "0755", "--dir", PACKAGE,
             "--ro-bind", str(package), PACKAGE, "--chdir", "/tmp"]
    return args


def unshare_command() -> list[str]:
    """util-linux's ``unshare`` for a PID and a network namespace, its loopback brought up (the kernel's Jupyter
    channels need it) with iproute2's ``ip``."""
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", *user, "--pid", "--fork", "--kill-child", "--mount-proc", "--net", "--", "sh", "-c",
            'ip link set lo up 2>/dev/null; exec "$@"', "sh"]


def _works(command: list[str]) -> bool:
    try:
        return subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.lru_cache(maxsize=1)
def probe() -> Confinement:
    """The strongest confinement this machine allows, tried once (a command that imports nothing)."""
    probe_code = ["-c", "import os, socket, sys; socket.create_server(('127.0.0.1', 0)).close(); "
                        "sys.exit(0 if os.getpid() <= 3 else 1)"]  # a PID namespace, with a loopback that works
    root = os.geteuid() == 0
    common = ["no network: a loopback of its own", "its own PID namespace: every process it starts dies with it"]
    if sys.platform.startswith("linux") and shutil.which("bwrap"):
        empty = pathlib.Path(os.path.realpath(os.path.dirname(__file__)))  # any folder, to try the binds
        if _works(bwrap_command(empty) + ["--", sys.executable, *probe_code]):
            held = common + ["a filesystem view without the course's folder, the solutions, other submissions and "
                             "the grader's files; the package read-only, without the model answers being graded",
                             "a private /tmp of 512 MiB, removed afterwards",
                             "limits on memory, open files and file size"]
            missing = []
            if root:
                held += ["no capabilities, and a user id of its own per worker: a limit on its processes"]
            else:
                missing += ["a limit on the number of processes (not root: the count would be shared with your "
                            "own processes); the PID namespace still stops them all at the end"]
            return Confinement("bubblewrap", held, missing, UID_BASE if root else None)
        why = "bubblewrap is installed but its namespaces were refused (a container's seccomp profile?)"
    else:
        why = "bubblewrap (bwrap) is not installed: apt install bubblewrap" if sys.platform.startswith("linux") \
            else f"{sys.platform} has no Linux namespaces"
    filesystem = (f"the filesystem view: the model answers and the course's files are readable ({why})")
    if sys.platform.startswith("linux") and shutil.which("unshare") and shutil.which("ip"):
        if _works(unshare_command() + [sys.executable, *probe_code]):
            return Confinement("unshare", common + ["limits on memory, open files and file size"],
                               [filesystem, "a private /tmp (a temporary folder of the grader's is used)",
                                "a limit on the number of processes"])
    return Confinement("none", ["limits on memory, open files and file size"],
                       [filesystem, "no network", "a PID namespace: a process the notebook starts outside the "
                        "kernel's group is found by the grader's sweep of this user's processes only",
                        "a private /tmp", "a limit on the number of processes"])


def environment(package_path: str, tmp: str) -> dict[str, str]:
    """The environment of the learner's side: ours without Jupyter's, Python's and the course's own, then the package
    written for the notebook on the path, every writable folder in ``tmp``, one CPU thread, quick training, no
    progress file and no downloads."""
    from tutor import env

    environ = {k: v for k, v in os.environ.items() if not k.startswith(("JPY_", "TUTOR_", "PYTHON", "JUPYTER"))}
    environ.update({
        "PYTHONPATH": package_path, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg",
        "HOME": f"{tmp}/home", "TMPDIR": tmp, "JUPYTER_RUNTIME_DIR": f"{tmp}/jupyter",
        "JUPYTER_CONFIG_DIR": f"{tmp}/jupyter-config", "IPYTHONDIR": f"{tmp}/ipython", "MPLCONFIGDIR": f"{tmp}/mpl",
        env.STRICT: "0", env.PROGRESS: "0", env.OFFLINE: "1", env.QUICK: "1", env.DEVICE: "cpu",
        "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    })
    if env.NAMES in os.environ:  # the instructor's own names file
        environ[env.NAMES] = os.environ[env.NAMES]
    return environ

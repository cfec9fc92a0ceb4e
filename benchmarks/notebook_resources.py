"""Headless wall time and peak memory of each notebook, each run in a fresh kernel.

    python benchmarks/notebook_resources.py [solutions|notebooks] [NN ...]

Peak memory is the kernel's maximum resident set size (the kernel is a child process of a fresh
Python process per notebook, read with resource.getrusage(RUSAGE_CHILDREN)). Learner notebooks run
with TUTOR_QUICK=1, as in the tests.
"""

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

RUNNER = r"""
import json, os, resource, sys, time
import nbformat
from nbclient import NotebookClient
path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
start = time.perf_counter()
NotebookClient(nb, timeout=900, kernel_name="python3",
               resources={"metadata": {"path": os.path.dirname(path)}}).execute()
wall = time.perf_counter() - start
peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"wall_s": wall, "peak_mib": peak_kib / 1024}))
"""


def main():
    kind = sys.argv[1] if len(sys.argv) > 1 else "solutions"
    only = sys.argv[2:]
    env = dict(os.environ, MPLBACKEND="Agg", TUTOR_OFFLINE="1")
    seed = ROOT.parent / "shared" / "data" / "allnames.txt"
    if seed.exists():
        env.setdefault("TUTOR_NAMES", str(seed))
    if kind == "notebooks":
        env.update(TUTOR_QUICK="1", TUTOR_STRICT="0")
    else:
        env["TUTOR_STRICT"] = "1"
    print(f"{kind}: {os.cpu_count()} CPUs\n{'notebook':34s} {'wall s':>8s} {'peak MiB':>9s}")
    for path in sorted((ROOT / kind).glob("[0-9][0-9]_*.ipynb")):
        if only and not any(path.name.startswith(o) for o in only):
            continue
        out = subprocess.run([sys.executable, "-c", RUNNER, str(path)], env=env,
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{path.name:34s} FAILED\n{out.stderr[-2000:]}")
            continue
        figures = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{path.name:34s} {figures['wall_s']:8.1f} {figures['peak_mib']:9.0f}")


if __name__ == "__main__":
    main()

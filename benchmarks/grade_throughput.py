"""Throughput of `python -m tutor grade`: N submissions of one notebook, graded with W workers.

    python benchmarks/grade_throughput.py               # 100 submissions of 03, workers 1 and 2... up to the cores
    python benchmarks/grade_throughput.py --n 20 --notebook 1 --workers 4
    python benchmarks/grade_throughput.py --n 12 --workers 1 2 --baseline fa2b3aa --rounds 2

Half the submissions are the solution notebook, half the blank learner notebook, so the figure
covers both a full run of the checks and the "not done yet" path. Prints seconds, notebooks per
minute and seconds per notebook per worker, side by side for each worker count (the judges' start,
once per worker and batch, included).

``--baseline REV`` grades the same submissions with the grader of another commit (a temporary git worktree of this
repository, same Python, same machine), alternating with this one round by round, and prints the ratio.

Measured 2026-11-28 on two idle cores of an AMD EPYC, 12 submissions of notebook 03, two rounds each, alternating
(``--baseline fa2b3aa``: the grader whose checks ran in a fork of the learner's kernel), against the judge apart
from the learner's code in a bubblewrap sandbox: 2.36-2.46 s a notebook a worker before, 2.60-2.73 s now, a ratio
of 1.06-1.16 (one worker 1.06 and 1.11, two workers 1.15 and 1.14).
"""

import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tutor import grading
from tutor.course import catalog

ROW = re.compile(r"^\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+\[")


def grade_here(n: int, notebook: int, workers: list[int]) -> None:
    cores = os.cpu_count() or 1
    entry = catalog.notebook(notebook)
    sources = [ROOT / "solutions" / entry.filename, ROOT / "notebooks" / entry.filename]
    with tempfile.TemporaryDirectory() as tmp:
        subs = []
        for i in range(n):
            folder = pathlib.Path(tmp) / f"student{i:03d}"
            folder.mkdir()
            (folder / entry.filename).write_bytes(sources[i % 2].read_bytes())
            subs.append(folder)
        print(f"{n} submissions of {entry.filename} on {cores} CPU cores (load average "
              f"{os.getloadavg()[0]:.1f} at the start)")
        print(f"{'workers':>7}  {'seconds':>8}  {'notebooks/min':>13}  {'s/notebook/worker':>17}  scores")
        for w in workers:
            start = time.perf_counter()
            students = grading.grade(subs, grading.Options(workers=w), progress=False)
            seconds = time.perf_counter() - start
            scores = sorted({s.score for s in students})
            print(f"{w:>7}  {seconds:>8.1f}  {60 * n / seconds:>13.1f}  {seconds * w / n:>17.2f}  {scores}",
                  flush=True)


def _rows(checkout: pathlib.Path, args) -> dict[int, float]:
    """Seconds a notebook a worker, by worker count, from the benchmark of ``checkout`` run in a process of its own."""
    command = [sys.executable, str(checkout / "benchmarks" / "grade_throughput.py"), "--n", str(args.n),
               "--notebook", str(args.notebook), "--workers", *map(str, args.workers)]
    done = subprocess.run(command, cwd=checkout, capture_output=True, text=True, check=True)
    return {int(m.group(1)): float(m.group(4)) for line in done.stdout.splitlines() if (m := ROW.match(line))}


def side_by_side(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = pathlib.Path(tmp) / "baseline"
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.baseline], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            print(f"{args.n} submissions of notebook {args.notebook:02d}, {args.rounds} rounds, this checkout against "
                  f"{args.baseline}, alternating; seconds a notebook a worker")
            print(f"{'round':>5}  {'workers':>7}  {args.baseline[:12]:>12}  {'this':>8}  {'ratio':>6}")
            for round_ in range(1, args.rounds + 1):
                before = _rows(base, args)
                now = _rows(ROOT, args)
                for w in args.workers:
                    print(f"{round_:>5}  {w:>7}  {before[w]:>12.2f}  {now[w]:>8.2f}  {now[w] / before[w]:>6.2f}",
                          flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--notebook", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=None)
    parser.add_argument("--baseline", default=None, metavar="REV",
                        help="also grade with the grader of this commit, alternating, and print the ratio")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the side-by-side comparison")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    args.workers = args.workers or sorted({1, min(2, cores), cores})
    if args.baseline:
        side_by_side(args)
    else:
        grade_here(args.n, args.notebook, args.workers)


if __name__ == "__main__":
    main()

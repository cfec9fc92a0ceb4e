"""Throughput of `python -m tutor grade`: N submissions of one notebook, graded with W workers.

    python benchmarks/grade_throughput.py               # 100 submissions of 03, workers 1 and 2... up to the cores
    python benchmarks/grade_throughput.py --n 20 --notebook 1 --workers 4

Half the submissions are the solution notebook, half the blank learner notebook, so the figure
covers both a full run of the checks and the "not done yet" path. Prints seconds, notebooks per
minute and seconds per notebook per worker, side by side for each worker count.
"""

import argparse
import os
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tutor import grading  # noqa: E402
from tutor.course import catalog  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--notebook", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=None)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    workers = args.workers or sorted({1, min(2, cores), cores})
    entry = catalog.notebook(args.notebook)
    sources = [ROOT / "solutions" / entry.filename, ROOT / "notebooks" / entry.filename]

    with tempfile.TemporaryDirectory() as tmp:
        subs = []
        for i in range(args.n):
            folder = pathlib.Path(tmp) / f"student{i:03d}"
            folder.mkdir()
            (folder / entry.filename).write_bytes(sources[i % 2].read_bytes())
            subs.append(folder)
        print(f"{args.n} submissions of {entry.filename} on {cores} CPU cores (load average "
              f"{os.getloadavg()[0]:.1f} at the start)")
        print(f"{'workers':>7}  {'seconds':>8}  {'notebooks/min':>13}  {'s/notebook/worker':>17}  scores")
        for w in workers:
            start = time.perf_counter()
            students = grading.grade(subs, grading.Options(workers=w), progress=False)
            seconds = time.perf_counter() - start
            scores = sorted({s.score for s in students})
            print(f"{w:>7}  {seconds:>8.1f}  {60 * args.n / seconds:>13.1f}  {seconds * w / args.n:>17.2f}  {scores}")


if __name__ == "__main__":
    main()

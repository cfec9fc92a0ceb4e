"""How long each check takes on the model answer (the goal: median ≤ 0.2 s).

    python benchmarks/check_timings.py [--repeat 5]

Prints, for every exercise, the median and max wall time of its check over several runs, and the
median and max over all checks.
"""

import argparse
import os
import statistics
import time

os.environ.pop("TUTOR_STRICT", None)

import torch

from tutor import checks, reference
from tutor.course import catalog


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.repeat} runs per check\n")
    print(f"{'check':32s} {'median s':>9s} {'max s':>8s}")
    medians, maxima = [], []
    for exercise in catalog.EXERCISES:
        check = getattr(checks, exercise.name)
        answer = getattr(reference, exercise.reference)
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            result = check(answer)
            times.append(time.perf_counter() - start)
            assert result.passed, str(result)
        medians.append(statistics.median(times))
        maxima.append(max(times))
        print(f"{exercise.name:32s} {medians[-1]:9.3f} {maxima[-1]:8.3f}")
    print(f"\nall checks: median {statistics.median(medians):.3f} s, slowest median {max(medians):.3f} s, "
          f"max {max(maxima):.3f} s")


if __name__ == "__main__":
    main()

"""How many CPU threads to train with: the cores this process may use, and ``ThreadChooser`` for
``cpu_threads="auto"``, which measures while training which thread count is fastest right now."""

import os
import statistics

import torch


def cpu_cores() -> int:
    """The CPU cores this process may run on (its affinity, e.g. a container's cpuset; a CPU quota is not seen
    here, which is one reason ``ThreadChooser`` measures instead of trusting this number)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows
        return os.cpu_count() or 1


class ThreadChooser:
    """``cpu_threads="auto"``: train with whichever thread count is fastest right now.

    Every ``every`` steps (and at the start), the next ``rounds`` rounds of steps cycle through the
    candidates (1, 2, 4, ... up to the cores, at most 8), timing each step; then the count with the
    fastest median step is kept. The steps are real training steps: nothing is wasted but the time
    of the slower counts. On an idle machine more threads win; when another program keeps a core
    busy, threads that wait for each other lose, and one thread wins.
    """

    def __init__(self, cores: int | None = None, rounds: int = 5, every: int = 500, first: int = 1):
        cores = cores or cpu_cores()
        self.candidates = [1] + [n for n in (2, 4, 8) if n <= cores]
        self.rounds, self.every, self.first = rounds, every, first
        self.threads = max(self.candidates)  # until the first measurement
        self.times = {n: [] for n in self.candidates}
        self.choices = []  # (step, threads, {threads: median seconds per step}) for each measurement
        self._probing = None

    def before_step(self, step: int):
        """Set the thread count for ``step``; returns it."""
        window = self.rounds * len(self.candidates)
        offset = (step - self.first) % self.every
        self._probing = len(self.candidates) > 1 and step >= self.first and offset < window
        n = self.candidates[offset % len(self.candidates)] if self._probing else self.threads
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)
        return n

    def after_step(self, step: int, seconds: float):
        """Record the time of ``step``; at the end of a measurement, keep the fastest count."""
        if not self._probing:
            return
        self.times[torch.get_num_threads()].append(seconds)
        if (step - self.first) % self.every == self.rounds * len(self.candidates) - 1:
            medians = {n: statistics.median(t) for n, t in self.times.items() if t}
            self.threads = min(medians, key=medians.get)
            self.choices.append((step, self.threads, medians))
            self.times = {n: [] for n in self.candidates}
            torch.set_num_threads(self.threads)

"""What a grading run is told (:class:`Options`) and what it returns: a :class:`StudentGrade` per
submission, holding a :class:`NotebookGrade` per notebook, holding an :class:`ExerciseGrade` per exercise."""

from __future__ import annotations

import pathlib
from dataclasses import dataclass, field


@dataclass
class Options:
    cell_timeout: float = 60.0  # seconds per cell (learner cell or check)
    total_timeout: float = 300.0  # seconds per notebook, all attempts together
    memory_mb: int = 4096  # RLIMIT_AS of the kernel (address space, MiB); 0 = no cap
    workers: int = 1
    points: dict = field(default_factory=dict)  # overrides: exercise name -> points
    solutions_dir: pathlib.Path | None = None
    kernel_name: str = "python3"
    max_attempts: int = 8


@dataclass
class ExerciseGrade:
    name: str
    notebook: int
    max_points: float
    status: str  # "passed", "failed", "not done", "missing" or "error"
    summary: str
    details: list[str] = field(default_factory=list)

    @property
    def points(self) -> float:
        return self.max_points if self.status == "passed" else 0

    @property
    def icon(self) -> str:
        return {"passed": "✅", "not done": "⏳"}.get(self.status, "❌")

    def text(self) -> str:
        return "\n".join([f"{self.icon} {self.name}: {self.summary}"] + [f"   {d}" for d in self.details])


@dataclass
class NotebookGrade:
    number: int
    slug: str
    path: str
    exercises: list[ExerciseGrade] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what happened to the notebook as a whole
    seconds: float = 0.0
    attempts: int = 0

    @property
    def score(self) -> float:
        return sum(e.points for e in self.exercises)

    @property
    def max_score(self) -> float:
        return sum(e.max_points for e in self.exercises)


@dataclass
class StudentGrade:
    student: str
    source: str
    notebooks: list[NotebookGrade] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(n.score for n in self.notebooks)

    @property
    def max_score(self) -> float:
        return sum(n.max_score for n in self.notebooks)

    @property
    def exercises(self) -> list[ExerciseGrade]:
        return [e for n in self.notebooks for e in n.exercises]

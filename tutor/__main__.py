"""``python -m tutor``: build the learner notebooks, run the solutions, list the catalog.

    python -m tutor build [NB ...] [--check] [--force] [--solutions DIR] [--notebooks DIR]
    python -m tutor run [NB ...] [--force] [--partial-data] [--timeout S] [--solutions DIR] [--notebooks DIR]
    python -m tutor catalog
    python -m tutor grade SUBMISSION... [--out DIR] [--format gradescope|otter|csv] [--timeout S] [--workers N]
                          [--only NB ...] [--exercise NAME ...] [--overrides TOML]
    python -m tutor progress [NB ...]

NB is a notebook number (``1`` or ``01``), a name (``01_dot_product_attention``) or a file name.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from tutor import grading
from tutor.course import build, catalog, points, progress, run
from tutor.errors import TutorError


def _add_dirs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("notebooks_only", nargs="*", metavar="NB",
                        help="only these notebooks: a number (1 or 01), a name or a file name (default: all)")
    parser.add_argument("--solutions", metavar="DIR", default=None,
                        help="the solution notebooks (default: solutions/ in the repository)")
    parser.add_argument("--notebooks", metavar="DIR", default=None,
                        help="the learner notebooks (default: notebooks/ in the repository)")


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (and a pointer to ``--help``), not the whole usage."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def make_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m tutor",
        description="Tools for the 'Transformers from scratch' notebooks. The solution notebooks in "
                    "solutions/ are the source of truth; the learner notebooks in notebooks/ are built from them.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)

    p = commands.add_parser(
        "build", help="build notebooks/ from solutions/",
        description="Build each learner notebook from its solution notebook: solution regions become stubs, "
                    "outputs are cleared. A learner notebook holding edits (typed code, outputs) is not "
                    "overwritten unless --force, which backs it up first.")
    _add_dirs(p)
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if a learner notebook is stale, missing or an orphan")
    p.add_argument("--force", action="store_true",
                   help="overwrite learner notebooks holding edits, after copying each to X.backup-<time>.ipynb")

    p = commands.add_parser(
        "run", help="execute solution notebooks in place, then rebuild their learner notebooks",
        description="Execute solution notebooks with nbclient (kernel python3, TUTOR_STRICT=1, cwd solutions/), "
                    "store their outputs, then rebuild the learner notebooks.")
    _add_dirs(p)
    p.add_argument("--timeout", type=int, default=600, metavar="S", help="seconds per cell (default 600)")
    p.add_argument("--kernel", default="python3", help="kernel name (default python3)")
    p.add_argument("--force", action="store_true", help="as for build: back up and overwrite edited learner notebooks")
    p.add_argument("--partial-data", action="store_true",
                   help="run even when a data set the notebooks load is not the full checksummed one (e.g. "
                        "TUTOR_NAMES points at a small file); the stored outputs then change")

    commands.add_parser("catalog", help="list the notebooks and their exercises",
                        description="Print the notebooks and exercises of tutor.course.catalog as a table.")

    p = commands.add_parser(
        "grade", help="grade learner notebooks (Gradescope, otter, CSV, feedback)",
        description="Grade submissions: each notebook runs again in a fresh, confined kernel, and each exercise "
                    "is checked by the grader's judge, apart from the learner's code; stored outputs are ignored. "
                    "A SUBMISSION is one "
                    "student: a learner notebook (NN_*.ipynb), a folder or a zip of them; a folder with a "
                    "subfolder per student (or alice_03_masking.ipynb, bob_03_masking.ipynb ...) is a class.")
    p.add_argument("submissions", nargs="*", metavar="SUBMISSION",
                   help="notebooks, folders or zips; none with --overrides: apply them to the batch in --out")
    p.add_argument("--out", default="grades", metavar="DIR",
                   help="where results go (default grades/); one submission: results.json right there, "
                        "several: one folder per student, gradebook.csv and the class summary (class.md, "
                        "class.html); always grades.json, the batch for --only/--exercise")
    p.add_argument("--format", action="append", choices=["gradescope", "otter", "csv"], dest="formats",
                   help="results to write (repeatable; default gradescope). Feedback (feedback.md/.html) "
                        "is always written")
    p.add_argument("--timeout", type=float, default=60, metavar="S", help="seconds per cell (default 60)")
    p.add_argument("--total-timeout", type=float, default=300, metavar="S",
                   help="seconds per notebook, all attempts together (default 300)")
    p.add_argument("--memory", type=int, default=4096, metavar="MB",
                   help="address-space cap of each kernel in MiB (default 4096; 0: none)")
    p.add_argument("--workers", type=int, default=1, metavar="N", help="notebooks graded in parallel (default 1)")
    p.add_argument("--points", metavar="TOML", help="a TOML file with a [points] table: exercise = points")
    p.add_argument("--assignment", nargs="+", metavar="NB", type=notebook_number,
                   help="the notebooks every student must submit (a missing one scores 0, another is not graded); "
                        "default: those found")
    p.add_argument("--solutions", metavar="DIR", default=None,
                   help="the solution notebooks the grader reads exercises and points from "
                        "(default: solutions/ in the repository)")
    p.add_argument("--only", nargs="+", metavar="NB", type=notebook_number,
                   help="grade only these notebooks; with an earlier batch's grades.json in --out, the new "
                        "grades replace those notebooks there and the rest is kept")
    p.add_argument("--exercise", nargs="+", metavar="NAME", dest="exercises",
                   help="grade only these exercises (a check's name as in `python -m tutor catalog`, or the "
                        "gradebook's label: 03.2), merged into an earlier batch's grades.json in --out like --only")
    p.add_argument("--overrides", metavar="TOML",
                   help="manual adjustments: a table per student, exercise = points or {points = P, reason = "
                        "\"...\"}; kept in grades.json and applied again by later runs until replaced")
    p.add_argument("--roster", metavar="CSV",
                   help="the class: a CSV with an id column (and name, email); each submission is matched to a "
                        "row, the reports use the ids, unknown and missing students are listed")
    p.add_argument("--metadata", metavar="JSON", default=None,
                   help="Gradescope's submission_metadata.json (default: /autograder/submission_metadata.json when "
                        "it exists): the student's name and the lateness")
    p.add_argument("--late-policy", metavar="TOML",
                   help="a [late] table: penalty_per_day (a fraction of the score), grace_hours, max_days")
    p.add_argument("--show-review", action="store_true",
                   help="show the review flags to the students too (default: the instructor's reports only)")
    p.add_argument("--max-notebook-mb", type=float, default=32, metavar="MB",
                   help="a notebook larger than this is not graded (default 32)")
    p.add_argument("--max-archive-mb", type=float, default=256, metavar="MB",
                   help="a zip's notebooks, extracted, at most (default 256)")
    p.add_argument("--max-archive-files", type=int, default=2000, metavar="N",
                   help="files in a zip at most (default 2000)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = commands.add_parser(
        "progress", help="show which exercises you have passed",
        description="Show every exercise of every notebook as passed, failed or not done yet, with the "
                    "date of the last pass (from the results your checks recorded).")
    p.add_argument("notebooks_only", nargs="*", metavar="NB", type=int, help="only these notebook numbers")
    return parser


def _dirs(args) -> tuple:
    root = build.find_root()
    return (args.solutions or root / "solutions", args.notebooks or root / "notebooks")


def cmd_build(args) -> int:
    solutions, notebooks = _dirs(args)
    report = build.build(solutions, notebooks, force=args.force, check=args.check, only=args.notebooks_only)
    for line in report.lines():
        print(line, file=sys.stderr if line.startswith("error:") else sys.stdout)
    refused = report.by_status("refused")
    if refused:
        print(f"{len(refused)} notebook(s) hold a learner's work and were not overwritten; "
              f"rerun with --force to back them up and rebuild them.")
    if args.check and not report.ok and not report.errors:
        print("run `python -m tutor build` to rebuild them.")
    return report.exit_code


def cmd_run(args) -> int:
    solutions, notebooks = _dirs(args)
    chosen, _ = build.select(build.notebook_files(pathlib.Path(solutions)), args.notebooks_only)
    problem = run.data_source_problem(chosen) if chosen else None  # only the data sets these notebooks load
    if problem and not args.partial_data:
        print(f"error: refusing to run: {problem}.\n"
              "  To run anyway (and not commit the outputs), pass --partial-data.", file=sys.stderr)
        return 2
    if problem:
        print(f"WARNING: --partial-data: {problem}. Do not commit these outputs.", file=sys.stderr)
    return run.run_solutions(solutions, notebooks, only=args.notebooks_only, force=args.force,
                             timeout=args.timeout, kernel_name=args.kernel)


def catalog_table() -> str:
    """The notebooks and exercises of ``tutor.course.catalog`` as a plain-text table."""
    rows = [("NB", "exercise", "learner writes")]
    for nb in catalog.NOTEBOOKS:
        rows.append((f"{nb.number:02d}", f"{nb.filename}: {nb.title} (~{nb.minutes} min)", ""))
        for ex in catalog.exercises(nb.number):
            rows.append(("", f"  {ex.name}", ex.writes))
    width0 = max(len(r[0]) for r in rows)
    width1 = max(len(r[1]) for r in rows if r[2]) if len(rows) > 1 else len(rows[0][1])
    lines = []
    for number, name, writes in rows:
        line = f"{number:<{width0}}  {name:<{width1}}  {writes}" if writes else f"{number:<{width0}}  {name}"
        lines.append(line.rstrip())
    lines.append(f"{len(catalog.NOTEBOOKS)} notebooks, {len(catalog.EXERCISES)} exercises")
    return "\n".join(lines)


def notebook_number(text: str) -> int:
    """``3``, ``03``, ``03_masking`` or ``03_masking.ipynb``: a notebook of the course, for argparse."""
    entry = next((nb for nb in catalog.NOTEBOOKS if text.strip() in (str(nb.number), f"{nb.number:02d}", nb.slug,
                                                                      nb.filename)), None)
    if entry is None:
        raise argparse.ArgumentTypeError(f"no notebook {text!r} (the course has {catalog.NOTEBOOKS[0].number:02d} to "
                                         f"{catalog.NOTEBOOKS[-1].number:02d}: see `python -m tutor catalog`)")
    return entry.number


def _exercises(names) -> list[str] | None:
    """The check names of ``names`` (a check's name, or a gradebook label such as 03.2); ValueError otherwise."""
    if not names:
        return None
    out = []
    for name in names:
        exercise = catalog.resolve(name)
        if exercise is None:
            same = [e for e in catalog.EXERCISES if e.learner_name == name]
            hint = (" (it is the name learners write for " + " and ".join(
                f"{e.notebook:02d}.{catalog.exercises(e.notebook).index(e) + 1} (check {e.name})" for e in same)
                + ")") if same else ""
            raise ValueError(f"--exercise: no exercise is called {name}{hint}; see `python -m tutor catalog`")
        out.append(exercise.name)
    return out


def _grading_inputs(args, options):
    """The roster, Gradescope's metadata and the late policy the arguments name (ValueError when one is wrong)."""
    from tutor.grading import roster

    people = roster.load_roster(args.roster) if args.roster else None
    metadata_path = args.metadata or ("/autograder/submission_metadata.json"
                                      if pathlib.Path("/autograder/submission_metadata.json").exists() else None)
    metadata = roster.gradescope(metadata_path) if metadata_path else None
    late = roster.load_late_policy(args.late_policy) if args.late_policy else None
    if metadata is not None and len(args.submissions) > 1:
        raise ValueError("--metadata is Gradescope's for one submission: give one SUBMISSION with it")
    return people, metadata, late


def cmd_grade(args) -> int:
    try:
        overrides = points.load_overrides(args.points) if args.points else {}
        adjustments = grading.load_overrides(args.overrides) if args.overrides else None
        exercises = _exercises(args.exercises)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not args.submissions and adjustments is None:
        print("error: give the submissions to grade (or --overrides to adjust the batch in --out)", file=sys.stderr)
        return 2
    missing = [path for path in args.submissions if not pathlib.Path(path).exists()]
    if missing:  # a typo: grading it would write a silent 0 / 0
        print(f"error: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    options = grading.Options(cell_timeout=args.timeout, total_timeout=args.total_timeout, memory_mb=args.memory,
                              workers=args.workers, points=overrides,
                              solutions_dir=pathlib.Path(args.solutions) if args.solutions else None,
                              max_notebook_mb=args.max_notebook_mb, max_archive_mb=args.max_archive_mb,
                              max_archive_files=args.max_archive_files, show_review=args.show_review)
    try:
        people, metadata, late = _grading_inputs(args, options)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    kept = pathlib.Path(args.out) / "grades.json"
    previous, stored = [], {}
    if kept.exists():
        try:
            previous, stored = grading.load(kept)
        except (OSError, ValueError, TypeError, KeyError) as error:
            if args.only or args.exercises:  # nothing to merge into: say so rather than lose the batch
                print(f"error: {kept} cannot be read ({error}); grade the whole batch first", file=sys.stderr)
                return 2
    if not args.submissions:  # --overrides alone: adjust the batch graded before, grade nothing
        if not previous:
            print(f"error: {kept} holds no batch to adjust: grade the submissions first", file=sys.stderr)
            return 2
        students = previous
        names = [s.student for s in previous]
    else:
        names = grading.students_in(args.submissions, options, people, metadata)
    if adjustments:
        def worth(name):
            exercise = catalog.BY_NAME[name]
            return points.points_for(exercise.notebook, overrides, options.solutions_dir)[name]

        problems = grading.check_overrides(adjustments, names, worth)
        if problems:
            print(f"error: {args.overrides}: " + "; ".join(problems), file=sys.stderr)
            return 2
    if args.submissions:
        students = grading.grade(args.submissions, options, assignment=args.assignment, progress=not args.no_progress,
                                 only=args.only, exercises=exercises, roster=people, metadata=metadata, late=late)
        if (args.only or exercises) and not any(nb.submitted for s in students for nb in s.notebooks):
            asked = sorted(set(args.only or ()) | {catalog.BY_NAME[n].notebook for n in exercises or ()})
            print(f"error: no submission holds notebook {', '.join(f'{n:02d}' for n in asked)}: nothing graded, "
                  "nothing written", file=sys.stderr)
            return 2
    if args.submissions and (args.only or exercises):
        students = grading.merge(previous, students)
        if previous:
            print(f"merged into the batch of {kept} ({len(students)} students)")
    adjustments = stored if adjustments is None else adjustments
    for line in grading.apply_overrides(students, adjustments):
        print(f"warning: the override for {line} matches no graded exercise", file=sys.stderr)
    written = grading.write_outputs(students, args.out, tuple(args.formats or ["gradescope"]), adjustments,
                                    confinement=grading.confinement_report() if args.submissions else None,
                                    show_review=args.show_review)
    print(grading.summary_table(students))
    print(f"wrote {len(written)} files to {args.out}")
    return 0


def cmd_progress(args) -> int:
    try:
        print(progress.progress(*args.notebooks_only).text())
    except TutorError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def main(argv=None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.command == "build":
        return cmd_build(args)
    if args.command == "run":
        return cmd_run(args)
    if args.command == "grade":
        return cmd_grade(args)
    if args.command == "progress":
        return cmd_progress(args)
    if args.command == "catalog":
        print(catalog_table())
        return 0
    parser.print_help(sys.stderr)  # no command: usage, and a non-zero exit like any usage error
    return 2


if __name__ == "__main__":
    sys.exit(main())

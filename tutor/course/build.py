"""Build the learner notebooks in ``notebooks/`` from the solution notebooks in ``solutions/``.

The solution notebooks are the one source of truth. The code a learner must write sits
between two comment lines, as in nbgrader::

    def softmax(x, dim=-1):
        ### BEGIN SOLUTION
        x = x - x.max(dim=dim, keepdim=True).values
        e = x.exp()
        return e / e.sum(dim=dim, keepdim=True)
        ### END SOLUTION

and the learner notebook gets, at the marker's indentation::

    def softmax(x, dim=-1):
        # YOUR CODE HERE
        raise NotImplementedError()

In markdown cells a region becomes ``YOUR ANSWER HERE``. Lines that are only nbval
directives (``# NBVAL_SKIP`` ...) are removed, outputs are cleared and the metadata is
reduced to a small stable subset, so that building twice gives the same bytes.

Each learner notebook records where it came from and a hash of its cells::

    "metadata": {"tutor": {"source": "solutions/01_x.ipynb", "build_hash": "<sha256>"}}

Before overwriting a learner notebook the build hashes its current cells the same way: if
the hash differs from the recorded one, a learner typed code or ran cells, and the build
refuses to overwrite it unless ``force=True`` (which first saves a backup copy).

Public API: :func:`strip_solutions`, :func:`make_learner_notebook`, :func:`cells_hash`,
:func:`build` and :class:`BuildReport`; :func:`find_root` and :func:`read_notebook` for the other
jobs that read the solutions. Executing the solutions (``python -m tutor run``) is ``tutor.course.run``.
"""

from __future__ import annotations

import copy
import datetime
import json
import pathlib
import shutil
from dataclasses import dataclass, field

import nbformat

from tutor.files import sha256, write_atomically

BEGIN_MARKER = "### BEGIN SOLUTION"
END_MARKER = "### END SOLUTION"
CODE_STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
MARKDOWN_STUB = ("YOUR ANSWER HERE",)

# Comment lines that only steer nbval (matched like nbval does: a comment whose text,
# without the leading '#'s, is exactly one of these).
NBVAL_DIRECTIVES = frozenset({
    "NBVAL_CHECK_OUTPUT",
    "NBVAL_SKIP",
    "NBVAL_IGNORE_OUTPUT",
    "NBVAL_RAISES_EXCEPTION",
    "PYTEST_VALIDATE_IGNORE_OUTPUT",  # nbval's old spelling
})
# Cell tags that only steer nbval; other tags (e.g. Jupyter's "raises-exception") are kept.
NBVAL_TAGS = frozenset({"nbval-check-output", "nbval-skip", "nbval-ignore-output", "nbval-raises-exception"})

# The cell metadata a learner notebook keeps; everything else (execution timing,
# collapsed, scrolled, ExecuteTime, ...) is view state and is dropped.
KEPT_CELL_METADATA = ("tags", "editable", "deletable")

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO = {"name": "python"}
# Notebook metadata copied as is when a solution has it (Colab reads these).
KEPT_NOTEBOOK_METADATA = ("accelerator", "colab")

BACKUP_GLOB = "*.backup*.ipynb"  # the pattern .gitignore ignores


class BuildError(Exception):
    """A solution notebook cannot be turned into a learner notebook (e.g. unbalanced markers)."""


class MarkerError(BuildError):
    """Unbalanced, nested or misspelt ``### BEGIN/END SOLUTION`` markers in one cell's source."""


# --------------------------------------------------------------------------------------
# One cell


def _indentation(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _is_nbval_directive(line: str) -> bool:
    stripped = line.strip()
    return stripped.startswith("#") and stripped.lstrip("#").strip() in NBVAL_DIRECTIVES


def _looks_like_a_misspelt_marker(line: str) -> bool:
    """A comment mentioning BEGIN/END SOLUTION that is not exactly a marker, e.g. '## BEGIN SOLUTION'.

    Letting it through would leak the solution into the learner notebook.
    """
    stripped = line.strip()
    if not stripped.startswith("#") or stripped in (BEGIN_MARKER, END_MARKER):
        return False
    upper = stripped.upper()
    return "BEGIN SOLUTION" in upper or "END SOLUTION" in upper


def strip_solutions(source: str, cell_type: str = "code") -> str:
    """Replace every ``### BEGIN SOLUTION`` ... ``### END SOLUTION`` region of ``source``.

    In a code cell a region becomes ``# YOUR CODE HERE`` and ``raise NotImplementedError()``,
    in a markdown cell ``YOUR ANSWER HERE``, at the indentation of the BEGIN marker. The
    lines around the regions are kept as they are. Markers are compared after stripping
    whitespace. In code cells, lines that are only nbval directives are removed too.

    Raises :class:`MarkerError` for an END without a BEGIN, a BEGIN inside a region, a
    region that is never closed, or (in code cells) a comment that looks like a misspelt
    marker.
    """
    stub = CODE_STUB if cell_type == "code" else MARKDOWN_STUB
    out: list[str] = []
    begin_line = None  # 1-based line number of the open region's BEGIN marker
    for number, line in enumerate(source.split("\n"), start=1):
        stripped = line.strip()
        if stripped == BEGIN_MARKER:
            if begin_line is not None:
                raise MarkerError(f"line {number}: {BEGIN_MARKER!r} inside the region opened on line {begin_line} "
                                  f"(regions cannot be nested)")
            begin_line = number
            out.extend(_indentation(line) + s for s in stub)
        elif stripped == END_MARKER:
            if begin_line is None:
                raise MarkerError(f"line {number}: {END_MARKER!r} without a {BEGIN_MARKER!r} before it")
            begin_line = None
        elif begin_line is not None:
            continue  # solution code: dropped
        elif cell_type == "code" and _looks_like_a_misspelt_marker(line):
            raise MarkerError(f"line {number}: {stripped!r} is not a marker; write exactly "
                              f"{BEGIN_MARKER!r} or {END_MARKER!r}")
        elif cell_type == "code" and _is_nbval_directive(line):
            continue
        else:
            out.append(line)
    if begin_line is not None:
        raise MarkerError(f"line {begin_line}: {BEGIN_MARKER!r} is never closed by {END_MARKER!r}")
    return "\n".join(out)


# --------------------------------------------------------------------------------------
# One notebook


def _cell_id(source_name: str, index: int) -> str:
    """A deterministic id for a cell that has none (only used for nbformat >= 4.5)."""
    return sha256(f"{source_name}:{index}".encode())[:8]


def read_notebook(path):
    """Read a notebook with nbformat, as version 4, without letting it invent ids.

    (``nbformat.read`` gives id-less cells of an nbformat 4.5 notebook random ids, which
    would make the build differ from run to run; :func:`make_learner_notebook` derives
    them deterministically instead.)
    """
    nb = nbformat.reader.reads(pathlib.Path(path).read_text(encoding="utf-8"))
    if nb.nbformat != 4:
        nb = nbformat.convert(nb, 4)
    return nb


def _learner_cell(cell, cell_id: str | None):
    metadata = {key: copy.deepcopy(cell.metadata[key]) for key in KEPT_CELL_METADATA if key in cell.metadata}
    if "tags" in metadata:
        metadata["tags"] = [tag for tag in metadata["tags"] if tag not in NBVAL_TAGS]
        if not metadata["tags"]:
            del metadata["tags"]

    if cell.cell_type == "code":
        new = nbformat.v4.new_code_cell(source=strip_solutions(cell.source, "code"), metadata=metadata)
    elif cell.cell_type == "markdown":
        new = nbformat.v4.new_markdown_cell(source=strip_solutions(cell.source, "markdown"), metadata=metadata)
        if "attachments" in cell:
            new.attachments = copy.deepcopy(cell.attachments)
    else:
        new = nbformat.v4.new_raw_cell(source=cell.source, metadata=metadata)

    if cell_id is None:
        new.pop("id", None)
    else:
        new.id = cell_id
    return new


def cells_hash(nb) -> str:
    """The sha256 of what a learner can change in a notebook's cells.

    It covers each cell's type, source, outputs, execution count and attachments, in
    order. Cell ids and cell metadata are left out: Jupyter changes them when a notebook is
    merely opened and saved (collapsed, scrolled, timings), and that is not a learner's work.
    """
    content = []
    for cell in nb.cells:
        content.append({
            "cell_type": cell.get("cell_type"),
            "source": cell.get("source", ""),
            "outputs": cell.get("outputs", []),
            "execution_count": cell.get("execution_count"),
            "attachments": cell.get("attachments", {}),
        })
    text = json.dumps(content, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return sha256(text.encode("ascii"))


def make_learner_notebook(nb, source_name: str = ""):
    """Return the learner notebook for the solution notebook ``nb`` (which is not modified).

    ``source_name`` (e.g. ``"solutions/01_x.ipynb"``) is recorded in ``metadata.tutor.source``
    and used in error messages. Raises :class:`BuildError` naming the notebook and the cell
    index when a cell's markers are unbalanced, and when the result is not a valid notebook.
    """
    if nb.nbformat != 4:
        raise BuildError(f"{source_name}: nbformat {nb.nbformat} is not supported (only 4)")
    minor = nb.nbformat_minor
    with_ids = minor >= 5

    cells, seen_ids = [], set()
    for index, cell in enumerate(nb.cells):
        cell_id = None
        if with_ids:
            # the solution's id; a missing or duplicate one is derived from the position
            cell_id = cell.get("id")
            if not cell_id or cell_id in seen_ids:
                cell_id = _cell_id(source_name, index)
            seen_ids.add(cell_id)
        try:
            cells.append(_learner_cell(cell, cell_id))
        except MarkerError as error:
            raise MarkerError(f"{source_name}, cell {index} ({cell.cell_type}): {error}") from None

    learner = nbformat.v4.new_notebook()  # (new_notebook(cells=...) would give id-less cells random ids)
    learner.nbformat_minor = minor
    learner.cells = cells
    metadata = {"kernelspec": dict(KERNELSPEC), "language_info": dict(LANGUAGE_INFO)}
    for key in KEPT_NOTEBOOK_METADATA:
        if key in nb.metadata:
            metadata[key] = copy.deepcopy(nb.metadata[key])
    metadata["tutor"] = {"source": source_name, "build_hash": cells_hash(learner)}
    learner.metadata = nbformat.from_dict(metadata)

    try:
        nbformat.validate(learner)
    except nbformat.ValidationError as error:
        raise BuildError(f"{source_name}: the learner notebook would be invalid: {error.message}") from None
    return learner


def notebook_bytes(nb) -> bytes:
    """The notebook as nbformat writes it (indent 1, sorted keys), UTF-8, ending in a newline."""
    text = nbformat.writes(nb)
    if not text.endswith("\n"):
        text += "\n"
    return text.encode("utf-8")


def backup_path(path: pathlib.Path, now: datetime.datetime | None = None) -> pathlib.Path:
    """``notebooks/X.ipynb`` -> ``notebooks/X.backup-YYYYmmdd-HHMMSS.ipynb`` (a free name)."""
    stamp = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    candidate = path.with_name(f"{path.stem}.backup-{stamp}.ipynb")
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.stem}.backup-{stamp}-{n}.ipynb")
        n += 1
    return candidate


def learner_edits(path: pathlib.Path) -> str | None:
    """Why the learner notebook at ``path`` holds work of its own, or None when it does not.

    It holds work when its cells no longer hash to the recorded ``build_hash``, when it has
    no recorded hash, or when it cannot be read.
    """
    try:
        nb = read_notebook(path)
    except Exception as error:  # noqa: BLE001 - any unreadable file must be protected
        return f"it cannot be read as a notebook ({type(error).__name__}: {error})"
    recorded = nb.metadata.get("tutor", {}).get("build_hash")
    if recorded is None:
        return "it has no recorded build hash and differs from the build"
    if cells_hash(nb) != recorded:
        ran = any(cell.get("outputs") or cell.get("execution_count") is not None for cell in nb.cells)
        return "it has outputs or code typed since it was built" if ran else "its cells were edited since it was built"
    return None


# --------------------------------------------------------------------------------------
# The whole directory


@dataclass
class NotebookResult:
    """What happened (or, with check=True, what would happen) to one learner notebook.

    ``status`` is one of: ``"created"``, ``"updated"``, ``"unchanged"``, ``"refused"`` (it
    holds a learner's edits; not overwritten), ``"forced"`` (backed up, then overwritten),
    and with check=True ``"up to date"``, ``"stale"``, ``"missing"`` or ``"orphan"``.
    """

    name: str  # file name, e.g. "01_dot_product_attention.ipynb"
    status: str
    reason: str = ""
    path: pathlib.Path | None = None
    backup: pathlib.Path | None = None


@dataclass
class BuildReport:
    results: list[NotebookResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # solutions that cannot be built; nothing was written
    warnings: list[str] = field(default_factory=list)
    check: bool = False

    FAILING = ("refused", "stale", "missing")

    def by_status(self, *statuses: str) -> list[NotebookResult]:
        return [r for r in self.results if r.status in statuses]

    def status_of(self, name: str) -> str | None:
        return next((r.status for r in self.results if r.name == name or r.name == f"{name}.ipynb"), None)

    @property
    def ok(self) -> bool:
        failing = self.FAILING + (("orphan",) if self.check else ())
        return not self.errors and not self.by_status(*failing)

    @property
    def exit_code(self) -> int:
        """0 when all is well, 2 when a solution cannot be built, 1 when something was refused or is out of date."""
        if self.errors:
            return 2
        return 0 if self.ok else 1

    def summary(self) -> str:
        if self.errors:
            return f"build failed: {len(self.errors)} error(s); nothing was written"
        counts: dict[str, int] = {}
        for result in self.results:
            counts[result.status] = counts.get(result.status, 0) + 1
        parts = ", ".join(f"{n} {status}" for status, n in counts.items()) or "no notebooks"
        if self.check:
            verdict = "everything is up to date" if self.ok else "the learner notebooks are out of date"
            return f"check: {parts}: {verdict}"
        return f"build: {parts}"

    def lines(self) -> list[str]:
        """Human-readable lines: one per error, notebook needing attention, and a summary."""
        out = [f"error: {e}" for e in self.errors]
        out += [f"warning: {w}" for w in self.warnings]
        for r in self.results:
            if r.status in ("unchanged", "up to date"):
                continue
            line = f"{r.status:>10}  {display_path(r.path) if r.path else r.name}"
            if r.reason:
                line += f": {r.reason}"
            out.append(line)
        out.append(self.summary())
        return out


def display_path(path: pathlib.Path) -> str:
    """``path`` relative to the current directory where it is inside it (shorter messages), else as it is."""
    try:
        return str(path.resolve().relative_to(pathlib.Path.cwd().resolve()))
    except ValueError:
        return str(path)


def find_root() -> pathlib.Path:
    """The repository root: the parent of the ``tutor`` package if it has ``solutions/``,
    else the current directory if it has ``solutions/``, else the package's parent."""
    package_parent = pathlib.Path(__file__).resolve().parents[2]  # (this file is tutor/course/build.py)
    if (package_parent / "solutions").is_dir():
        return package_parent
    if (pathlib.Path.cwd() / "solutions").is_dir():
        return pathlib.Path.cwd()
    return package_parent


def _is_backup(path: pathlib.Path) -> bool:
    return path.match(BACKUP_GLOB)


def notebook_files(directory: pathlib.Path) -> list[pathlib.Path]:
    """The notebooks in ``directory`` (not its backups), sorted; none when it is not a directory."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("*.ipynb") if p.is_file() and not _is_backup(p))


def select(paths: list[pathlib.Path], only) -> tuple[list[pathlib.Path], list[str]]:
    """The paths matching any of ``only`` (all when ``only`` is empty), and the unmatched words.

    A word matches by number (``"1"`` or ``"01"`` matches ``01_*.ipynb``), by name without
    extension (``"01_dot_product_attention"``) or by file name.
    """
    if not only:
        return list(paths), []
    chosen, unmatched = [], []
    for word in only:
        word = str(word)
        hits = [p for p in paths if _matches(p, word)]
        if not hits:
            unmatched.append(word)
        chosen += [p for p in hits if p not in chosen]
    return sorted(chosen), unmatched


def _matches(path: pathlib.Path, word: str) -> bool:
    if word.isdigit():
        prefix = path.name.split("_", 1)[0]
        return prefix.isdigit() and int(prefix) == int(word)
    return word in (path.stem, path.name)


def build(solutions_dir, notebooks_dir, force: bool = False, check: bool = False, only=None) -> BuildReport:
    """Build ``notebooks_dir/X.ipynb`` from every ``solutions_dir/X.ipynb`` (or those in ``only``).

    - A learner notebook byte-identical to the new build is left untouched ("unchanged").
    - One holding a learner's edits (see :func:`learner_edits`) is "refused" and not
      written, unless ``force``: then it is first copied to ``X.backup-YYYYmmdd-HHMMSS.ipynb``
      and rebuilt ("forced").
    - If any solution cannot be built (e.g. unbalanced markers), nothing at all is written
      and ``report.errors`` says why.
    - With ``check=True`` nothing is written; each notebook is reported "up to date",
      "stale", "missing" or "orphan" (a learner notebook without a solution).

    Returns a :class:`BuildReport`; ``report.exit_code`` is what the CLI exits with.
    """
    solutions_dir = pathlib.Path(solutions_dir)
    notebooks_dir = pathlib.Path(notebooks_dir)
    report = BuildReport(check=check)
    if not solutions_dir.is_dir():
        report.errors.append(f"{solutions_dir} is not a directory")
        return report

    sources, unmatched = select(notebook_files(solutions_dir), only)
    report.errors += [f"no solution notebook in {solutions_dir} matches {word!r}" for word in unmatched]

    # 1. Build everything in memory first, so that one bad solution writes nothing.
    built: dict[str, bytes] = {}
    for source in sources:
        source_name = f"{solutions_dir.name}/{source.name}"
        try:
            solution = read_notebook(source)
            built[source.name] = notebook_bytes(make_learner_notebook(solution, source_name))
        except BuildError as error:
            report.errors.append(str(error))
        except Exception as error:  # noqa: BLE001 - unreadable JSON, invalid notebook, ...
            report.errors.append(f"{source_name}: cannot be read: {type(error).__name__}: {error}")
    if report.errors:
        return report

    # 2. Compare with (and unless checking, write) each learner notebook.
    for name, data in built.items():
        target = notebooks_dir / name
        result = NotebookResult(name=name, status="", path=target)
        report.results.append(result)
        if not target.exists():
            result.status, result.reason = ("missing", "no learner notebook yet") if check else ("created", "")
            if not check:
                write_atomically(target, data)
            continue
        if target.read_bytes() == data:
            result.status = "up to date" if check else "unchanged"
            continue
        edits = learner_edits(target)
        if check:
            result.status = "stale"
            result.reason = (f"holds a learner's edits: {edits}" if edits
                             else f"differs from a fresh build of {solutions_dir.name}/{name}")
        elif edits and not force:
            result.status = "refused"
            result.reason = (f"not overwritten because {edits}; rerun with --force to back it up "
                             f"and rebuild it")
        elif edits:
            result.backup = backup_path(target)
            shutil.copy2(target, result.backup)
            write_atomically(target, data)
            result.status = "forced"
            result.reason = f"{edits}; the old notebook was saved to {display_path(result.backup)}"
        else:
            write_atomically(target, data)
            result.status = "updated"

    # 3. Learner notebooks that no solution builds.
    orphans, _ = select(notebook_files(notebooks_dir), only)
    for path in orphans:
        if path.name not in built and not (solutions_dir / path.name).exists():
            reason = f"no {solutions_dir.name}/{path.name} builds it"
            if check:
                report.results.append(NotebookResult(path.name, "orphan", reason, path))
            else:
                report.warnings.append(f"{display_path(path)} is an orphan: {reason} "
                                       "(left alone; delete it if it is obsolete)")
    return report

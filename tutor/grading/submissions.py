"""Finding the submissions: which files are whose, and which notebook of the course each one is.

A SUBMISSION argument of ``python -m tutor grade`` is a notebook, a folder or a zip file:

- a **notebook** is one student's, named after the file without the notebook's name (``alice_03_masking.ipynb`` is
  alice's), else after its folder;
- a **folder** with two or more subfolders holding notebooks is a **class**: each subfolder is one student's, named
  after it, whatever its files are called; loose notebooks beside them are students of their own, named as above.
  A folder without such subfolders is one student's, named after it (or, when two of its loose notebooks are the
  same notebook of the course, one student per file name);
- a **zip** is one student's, named after it, whatever its folders are called; one that holds several students'
  notebooks is refused, with the reason. It is extracted safely into the grader's work folder: no absolute path,
  no ``..``, only notebooks, within :class:`Limits`; a member that cannot be read (encrypted, an unknown
  compression, a corrupt one) is that submission's note, never the batch's end.

Within one student's files, Jupyter's checkpoints and hidden files are ignored; a course notebook with two
candidates is graded from the one with the course's own file name (``03_masking.ipynb``), else not at all, with the
reason (:func:`choose`). Every name is cleaned of what the file system let through and JSON cannot hold
(:func:`clean`).
"""

from __future__ import annotations

import pathlib
import re
import shutil
import zipfile
import zlib
from dataclasses import dataclass, field

from tutor.course import catalog

# What a submission's name looks like: 01_dot_product_attention.ipynb, alice-03_masking (1).ipynb ...
NUMBER = re.compile(r"(?<!\d)(\d{1,2})_[A-Za-z]")
IGNORED_PARTS = (".ipynb_checkpoints", "__MACOSX")


@dataclass
class Limits:
    """What one submission may hold; the defaults are far above any notebook of the course (the largest solution,
    with its pictures, is 0.7 MB)."""

    notebook_bytes: int = 32 << 20
    archive_bytes: int = 256 << 20  # the total size of a zip's notebooks, extracted
    archive_members: int = 2000


@dataclass
class Submission:
    """One student's files, as found."""

    student: str  # the name in every report (cleaned)
    source: str  # the path given
    files: list[pathlib.Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    key: str = ""  # what identifies it: the folder's, zip's or file's own name (for a roster)


def clean(text) -> str:
    """``text`` as valid UTF-8: what a file name or JSON let through that is not (a lone surrogate) becomes U+FFFD."""
    return str(text).encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def match_notebook(path) -> catalog.Notebook | None:
    """The catalog notebook a file is a submission of: by name (``03_masking``), else by number."""
    stem = pathlib.Path(path).stem
    for nb in catalog.NOTEBOOKS:
        if nb.slug in stem:
            return nb
    m = NUMBER.search(stem)
    if m:
        return next((nb for nb in catalog.NOTEBOOKS if nb.number == int(m.group(1))), None)
    return None


def _ignored(path: pathlib.Path) -> bool:
    return (any(part in IGNORED_PARTS for part in path.parts) or path.name.startswith(".")
            or path.stem.endswith("-checkpoint"))


def _extract(archive: pathlib.Path, target: pathlib.Path, limits: Limits, notes: list[str]) -> None:
    """Extract the notebooks of ``archive`` into ``target``; what cannot be read, or is over the limits, goes to
    ``notes``."""
    try:
        z = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError, UnicodeDecodeError, ValueError, RuntimeError, EOFError) as error:
        notes.append(f"{clean(archive.name)} cannot be opened as a zip file ({type(error).__name__}: "
                     f"{clean(error)[:200]})")
        return
    with z:
        members = [m for m in z.infolist() if not m.is_dir()]
        if len(members) > limits.archive_members:
            notes.append(f"{clean(archive.name)} holds {len(members):,} files, more than the limit of "
                         f"{limits.archive_members:,}: not extracted")
            return
        total = 0
        for member in members:
            name = pathlib.PurePosixPath(member.filename)
            if name.is_absolute() or ".." in name.parts or not name.name.endswith(".ipynb"):
                continue
            if member.file_size > limits.notebook_bytes:
                notes.append(f"{clean(member.filename)}: {member.file_size / 2**20:.0f} MB, over the limit of "
                             f"{limits.notebook_bytes / 2**20:.0f} MB for a notebook: not extracted")
                continue
            total += member.file_size
            if total > limits.archive_bytes:
                notes.append(f"{clean(archive.name)}: its notebooks come to more than the limit of "
                             f"{limits.archive_bytes / 2**20:.0f} MB: the rest was not extracted")
                return
            out = target / pathlib.Path(*name.parts)
            try:
                out.parent.mkdir(parents=True, exist_ok=True)
                with z.open(member) as src, open(out, "wb") as dst:
                    shutil.copyfileobj(src, dst, length=1 << 20)
            except (RuntimeError, NotImplementedError, zipfile.BadZipFile, zlib.error, EOFError, OSError,
                    ValueError) as error:  # encrypted, an unknown compression, a corrupt member
                out.unlink(missing_ok=True)
                notes.append(f"{clean(member.filename)} in {clean(archive.name)} cannot be read "
                             f"({type(error).__name__}: {clean(error)[:120]})")


def _notebooks_in(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in folder.rglob("*.ipynb") if p.is_file())


def _student_from_file(path: pathlib.Path, nb: catalog.Notebook | None) -> str:
    """The name before the notebook's in a file's name (``alice_03_masking.ipynb``: alice); what comes after it
    (``03_masking_final``, ``(1)``) is a version, not a student. No name before it: the folder's."""
    stem = path.stem
    if nb is not None:
        at = stem.find(nb.slug)
        if at < 0:
            found = NUMBER.search(stem)
            at = found.start() if found else -1
        if at >= 0:
            stem = stem[:at]
    stem = re.sub(r"\(\d+\)", "", stem).strip(" _-.")
    return stem or path.resolve().parent.name


def _holders(base: pathlib.Path, files: list[pathlib.Path]) -> dict[str, list[pathlib.Path]]:
    """The notebooks under ``base`` by the subfolder of ``base`` they are in (``""`` for loose ones)."""
    groups: dict[str, list[pathlib.Path]] = {}
    for f in files:
        parts = f.relative_to(base).parts
        groups.setdefault(parts[0] if len(parts) > 1 else "", []).append(f)
    return groups


def _numbers_repeat(files) -> bool:
    numbers = [nb.number for nb in map(match_notebook, files) if nb is not None]
    return len(numbers) != len(set(numbers))


def _folder(path: pathlib.Path, raw: str) -> list[Submission]:
    """A folder: a class (two or more subfolders with notebooks), one student, or one student per loose file."""
    files = [f for f in _notebooks_in(path) if not _ignored(f.relative_to(path))]
    groups = _holders(path, files)
    folders = {k: v for k, v in groups.items() if k}
    loose = groups.get("", [])
    if len(folders) < 2:
        if len({_student_from_file(f, match_notebook(f)) for f in loose}) > 1 and _numbers_repeat(loose):
            return _loose(loose, raw) + [Submission(clean(k), raw, v, key=k) for k, v in folders.items()]
        return [Submission(clean(path.resolve().name), raw, files, key=path.resolve().name)]
    return [Submission(clean(k), raw, v, key=k) for k, v in sorted(folders.items())] + _loose(loose, raw)


def _loose(files: list[pathlib.Path], raw: str) -> list[Submission]:
    by: dict[str, list[pathlib.Path]] = {}
    for f in files:
        by.setdefault(_student_from_file(f, match_notebook(f)), []).append(f)
    return [Submission(clean(k), raw, v, key=k) for k, v in by.items()]


def _zip(path: pathlib.Path, raw: str, workdir: pathlib.Path, index: int, limits: Limits) -> Submission:
    target = workdir / f"zip-{index}"
    submission = Submission(clean(path.stem), raw, key=path.stem)
    _extract(path, target, limits, submission.notes)
    files = [f for f in _notebooks_in(target) if not _ignored(f.relative_to(target))] if target.exists() else []
    groups = {k: v for k, v in _holders(target, files).items() if k}
    several = [k for k, v in groups.items() if any(match_notebook(f) for f in v)]
    if len(several) > 1 and _numbers_repeat(files):
        submission.notes.append(f"{clean(path.name)} holds the notebooks of several students "
                                f"({', '.join(clean(k) + '/' for k in sorted(several)[:5])}): a zip is one student's "
                                "submission; nothing in it was graded")
        return submission
    submission.files = files
    return submission


def find_submissions(paths, workdir: pathlib.Path, limits: Limits | None = None) -> list[Submission]:
    """The students of the SUBMISSION arguments (see the module's docstring), in the order given."""
    limits = limits or Limits()
    out: list[Submission] = []
    for i, raw in enumerate(paths):
        path = pathlib.Path(raw)
        shown = clean(raw)
        if path.is_dir():
            out += _folder(path, shown)
        elif path.suffix.lower() == ".zip" and path.is_file():
            out.append(_zip(path, shown, workdir, i, limits))
        elif path.suffix.lower() == ".ipynb" and path.is_file():
            key = _student_from_file(path, match_notebook(path))
            out.append(Submission(clean(key), shown, [path], key=key))
        else:
            out.append(Submission(clean(path.stem or raw), shown, notes=[f"{shown}: not a notebook, a folder or a "
                                                                          "zip file"], key=path.stem))
    return out


def choose(files: list[pathlib.Path], limits: Limits | None = None
           ) -> tuple[dict[int, pathlib.Path], dict[int, str], list[str]]:
    """One student's files: ``(notebook number -> the file graded, number -> why none was, notes on the files
    ignored)``. Of two candidates for one notebook the one with the course's file name is graded; otherwise none."""
    limits = limits or Limits()
    candidates: dict[int, list[pathlib.Path]] = {}
    ignored = []
    for f in files:
        nb = match_notebook(f)
        if nb is None:
            ignored.append(f"{clean(f.name)}: not a notebook of this course (expected a name like 03_masking.ipynb)")
            continue
        try:
            size = f.stat().st_size
        except OSError:
            size = 0
        if size > limits.notebook_bytes:
            ignored.append(f"{clean(f.name)}: {size / 2**20:.0f} MB, over the limit of "
                           f"{limits.notebook_bytes / 2**20:.0f} MB for a notebook: not graded")
            continue
        candidates.setdefault(nb.number, []).append(f)
    chosen, refused = {}, {}
    for number, found in sorted(candidates.items()):
        if len(found) == 1:
            chosen[number] = found[0]
            continue
        exact = [f for f in found if f.name == catalog.notebook(number).filename]
        names = ", ".join(clean(f.name) for f in found[:5])
        if len(exact) == 1:
            chosen[number] = exact[0]
            ignored += [f"{clean(f.name)}: another copy of notebook {number:02d}; {exact[0].name} was graded"
                        for f in found if f is not exact[0]]
        else:
            refused[number] = (f"{len(found)} files could be notebook {number:02d} ({names}): hand in one, named "
                               f"{catalog.notebook(number).filename}")
    return chosen, refused, ignored

"""Finding the submissions: which files are whose, and which notebook of the course each one is.

A SUBMISSION argument of ``python -m tutor grade`` is a notebook, a folder or a zip file. A zip is
extracted safely (no absolute paths, no ``..``, only notebooks, none over 64 MiB) into the grader's
work folder. See :func:`find_submissions`.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import zipfile

from tutor.course import catalog

MAX_NOTEBOOK_BYTES = 64 * 1024 * 1024

# What a submission's name looks like: 01_dot_product_attention.ipynb, alice-03_masking (1).ipynb ...
NUMBER = re.compile(r"(?<!\d)(\d{1,2})_[A-Za-z]")


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


def _safe_extract(archive: pathlib.Path, target: pathlib.Path) -> None:
    with zipfile.ZipFile(archive) as z:
        for member in z.infolist():
            name = pathlib.PurePosixPath(member.filename)
            if name.is_absolute() or ".." in name.parts or member.is_dir():
                continue
            if not name.name.endswith(".ipynb") or name.name.startswith(".") or "__MACOSX" in name.parts:
                continue
            if member.file_size > MAX_NOTEBOOK_BYTES:
                continue  # no notebook of this course is that big: a zip bomb, or data
            out = target / pathlib.Path(*name.parts)
            out.parent.mkdir(parents=True, exist_ok=True)
            with z.open(member) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, length=1 << 20)


def _notebooks_in(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in folder.rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts and not p.name.startswith("."))


def _student_from_file(path: pathlib.Path, nb: catalog.Notebook | None) -> str:
    stem = path.stem
    if nb is not None:
        stem = stem.replace(nb.slug, "")
    stem = re.sub(r"\(\d+\)", "", stem).strip(" _-.")
    return stem or path.resolve().parent.name


def _numbers_repeat(files) -> bool:
    numbers = [nb.number for nb in map(match_notebook, files) if nb is not None]
    return len(numbers) != len(set(numbers))


def _split(name: str, base: pathlib.Path, files: list[pathlib.Path]) -> list[tuple[str, list[pathlib.Path]]]:
    """One student, or several: a folder (or zip) with a subfolder per student, or with loose
    notebooks of which two are the same notebook (``alice_03_masking.ipynb``, ``bob_03_masking.ipynb``)."""
    groups: dict = {}
    for f in files:
        parts = f.relative_to(base).parts
        groups.setdefault(parts[0] if len(parts) > 1 else None, []).append(f)
    if len(groups) <= 1 and not _numbers_repeat(files):
        return [(name, files)]
    out = []
    for key, group in groups.items():
        if key is not None:
            out.append((key, group))
        elif _numbers_repeat(group):
            by_student: dict[str, list] = {}
            for f in group:
                by_student.setdefault(_student_from_file(f, match_notebook(f)), []).append(f)
            out += list(by_student.items())
        else:
            out.append((name, group))
    return out


def find_submissions(paths, workdir: pathlib.Path) -> list[tuple[str, str, list[pathlib.Path], list[str]]]:
    """``[(student, source, [notebook paths], [notes])]`` for the SUBMISSION arguments.

    A notebook file is one student (named after the file without the notebook's name, else its
    folder). A folder or a zip is one student named after it, holding any number of notebooks,
    unless it holds a subfolder per student or several copies of one notebook (one per student).
    """
    out = []
    for i, raw in enumerate(paths):
        path = pathlib.Path(raw)
        notes = []
        if path.is_dir():
            for student, files in _split(path.resolve().name, path, _notebooks_in(path)):
                out.append((student, str(raw), files, notes))
            continue
        if path.suffix.lower() == ".zip" and path.is_file():
            target = workdir / f"zip-{i}"
            try:
                _safe_extract(path, target)
            except (zipfile.BadZipFile, OSError) as error:
                notes.append(f"{path.name} cannot be opened as a zip file: {error}")
            found = _split(path.stem, target, _notebooks_in(target)) if target.exists() else []
            for student, files in found or [(path.stem, [])]:
                out.append((student, str(raw), files, notes))
            continue
        if path.suffix.lower() == ".ipynb" and path.is_file():
            files, student = [path], _student_from_file(path, match_notebook(path))
        else:
            files, student = [], path.stem or str(path)
            notes.append(f"{raw}: not a notebook, a folder or a zip file")
        out.append((student, str(raw), files, notes))
    # two submissions with one name (e.g. two files in one folder): keep both, numbered
    seen: dict[str, int] = {}
    result = []
    for student, source, files, notes in out:
        seen[student] = seen.get(student, 0) + 1
        result.append((student if seen[student] == 1 else f"{student}-{seen[student]}", source, files, notes))
    return result

"""The names data set (notebooks 08 and 09): loading, cleaning and the train/val split.

The full data set is ``allnames.txt``: 100,364 US baby names, 1880 to today, from
https://github.com/hackerb9/ssa-baby-names (US Social Security Administration data, public domain). It
ships inside the package, gzipped (``tutor/data/allnames.txt.gz``, see ``tutor/data/DATA.md``), so it
loads offline. It loads in the order of ``tutor.data.sources`` (your file or ``TUTOR_NAMES``, the
package copy, the cache, a download); with none of them, a one-line ``NoDataError`` says what to do:
no other list stands in. Every load prints one line saying which source was used and how many names it
gave (``verbose=False`` silences it). Names are lowercased and anything outside a-z is dropped.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from tutor import env
from tutor.data.sources import DataSet, announce, check_text, load
from tutor.errors import DataFileError
from tutor.files import sha256
from tutor.reference.characters import LETTERS

FILENAME = "allnames.txt"
PACKAGE_FILE = "allnames.txt.gz"  # the copy that ships in tutor/data/ (the checksum is of the unzipped file)
# Candidate download URLs, tried in order (used only when the package copy is missing or damaged). The
# checksum below pins the content, so a changed upstream file is rejected rather than silently used.
# The first is pinned to the upstream commit whose allnames.txt has this checksum; the branch
# URLs are second candidates (used only while their file still has the same checksum).
UPSTREAM_COMMIT = "0b1a1316457d55447d1a1f7bfe57ee15e53cc2f0"
URLS = (
    f"https://raw.githubusercontent.com/hackerb9/ssa-baby-names/{UPSTREAM_COMMIT}/allnames.txt",
    "https://raw.githubusercontent.com/hackerb9/ssa-baby-names/master/allnames.txt",
    "https://github.com/hackerb9/ssa-baby-names/raw/master/allnames.txt",
)
SHA256 = "3c1dcc2ad4cecc470d21f91cd6d839ce48fb0740abf35cf3bebb6d094ba335c1"
NUM_NAMES = 100_364  # names in that file
EXPECTED = f"a text file with one name per line, such as {FILENAME}"

MAX_NAME_LETTERS = 40  # a longer "name" is not a name (the longest in allnames.txt has 15 letters)


@dataclass
class LoadedNames:
    """What ``load_names_with_source`` returns: the names and where they came from."""

    names: list[str]  # cleaned: lowercase, only a-z, none empty
    source: str  # "file", "package", "cache" or "download"
    location: str  # the file, package file, cache file or URL the names were read from
    notice: str  # the line that was printed (or would have been, with verbose=False)
    dropped_chars: int = 0  # characters outside a-z removed by cleaning
    changed_names: int = 0  # names that lost at least one character
    dropped_names: int = 0  # names with no letter left, removed


# -----------------------------------------------------------------------------
# cleaning and checking

def clean_names(lines) -> tuple[list[str], int, int, int]:
    """Lowercase names and keep only a-z.

    Returns ``(names, dropped_chars, changed_names, dropped_names)``. Blank lines are skipped
    without counting; a name with no letter left (e.g. "123") is dropped and counted.
    Nothing is deduplicated.
    """
    names, dropped_chars, changed_names, dropped_names = [], 0, 0, 0
    for line in lines:
        raw = line.strip().lower()
        if not raw:
            continue
        name = "".join(ch for ch in raw if ch in LETTERS)
        if len(name) != len(raw):
            dropped_chars += len(raw) - len(name)
            changed_names += 1
        if name:
            names.append(name)
        else:
            dropped_names += 1
    return names, dropped_chars, changed_names, dropped_names


def _is_name_like(line: str) -> bool:
    """A line that reads as a name: one to three words, at least 2/3 letters, at most 40 letters."""
    words = line.split()
    text = "".join(words)
    letters = sum(ch.isalpha() for ch in text)
    return 1 <= len(words) <= 3 and 0 < letters <= MAX_NAME_LETTERS and letters * 3 >= 2 * len(text)


def _check_names(text: str, where: str) -> list[str]:
    """The lines of ``text``, or a one-line ``DataFileError`` when fewer than half of them read as a name."""
    lines = text.splitlines()
    filled = [line for line in lines if line.strip()]
    names = sum(_is_name_like(line) for line in filled)
    if filled and names * 2 < len(filled):
        raise DataFileError(f"{where} does not look like a names file: only {names:,} of its "
                            f"{len(filled):,} lines read as a name (expected {EXPECTED})")
    return lines


def check_names_text(data: bytes, where: str) -> list[str]:
    """The lines of a names file, or a one-line ``DataFileError`` (alias ``NamesFileError``) when it is not one.

    Rejected: a file that is not text (NUL bytes, or more than 1% of it not UTF-8 or control
    characters, as in a zip, an image or random bytes), and a text file in which fewer than half
    of the non-blank lines read as a name (one to three words, at least 2/3 letters, at most 40 letters).
    """
    return _check_names(check_text(data, where, EXPECTED), where)


# -----------------------------------------------------------------------------
# the data set

DATA_SET = DataSet(
    name="names", filename=FILENAME, sha256=SHA256, urls=URLS, env_var=env.NAMES,
    file_label="names file", expected=EXPECTED, check=_check_names, package_file=PACKAGE_FILE,
)


# -----------------------------------------------------------------------------
# loading

def _count(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def full_list_hint() -> str:
    """How to get the full data set, in one clause (what ``tutor run`` says when the names are partial)."""
    return (f"unset {DATA_SET.env_var} (the course ships all {NUM_NAMES:,} names, checksummed) "
            f"or set {DATA_SET.env_var}=/path/to/{DATA_SET.filename}")


def is_full_data_set(loaded: LoadedNames) -> bool:
    """True when ``loaded`` holds the full checksummed data set (package, cache, download or an identical file)."""
    if loaded.source in ("package", "cache", "download"):
        return True
    return loaded.source == "file" and len(loaded.names) == NUM_NAMES and _file_matches(loaded.location)


def _file_matches(location: str) -> bool:
    try:
        return sha256(Path(location).read_bytes()) == DATA_SET.sha256
    except OSError:
        return False


def load_names_with_source(path=None, *, verbose: bool = True,
                           offline: bool | None = None) -> LoadedNames:
    """Load and clean the names, and say where they came from. See the module docstring.

    ``path`` (or ``$TUTOR_NAMES``) is your own file, one name per line. ``offline=None`` reads
    ``$TUTOR_OFFLINE``; ``offline=True`` never downloads (the cache is still used).
    """
    loaded = load(DATA_SET, path, offline=offline)
    names, dropped_chars, changed, dropped_names = clean_names(loaded.text.splitlines())
    if not names:
        what = "no names" if dropped_names == 0 else "no names made of the letters a–z"
        raise DataFileError(f"{loaded.location} contains {what} (expected a text file with one name per line)")
    remarks = []
    if dropped_chars:
        remarks.append(f"dropped {_count(dropped_chars, 'character')} outside a–z from {_count(changed, 'name')}")
    if dropped_names:
        remarks.append(f"dropped {_count(dropped_names, 'name')} with no letter a–z")
    notice = announce(f"Names: {len(names):,}", loaded, *remarks, verbose=verbose)
    return LoadedNames(names, loaded.source, loaded.location, notice, dropped_chars, changed, dropped_names)


def load_names(path=None, *, verbose: bool = True, offline: bool | None = None) -> list[str]:
    """The names data set as a list of lowercase strings over a-z (see ``load_names_with_source``).

    >>> names = load_names()        # prints "Names: 100,364 from the package (...)"
    >>> names[:3]
    ['linda', 'james', 'michael']
    """
    return load_names_with_source(path, verbose=verbose, offline=offline).names


# -----------------------------------------------------------------------------
# splitting

def split_names(names, val_fraction: float = 0.1, seed: int = 0) -> tuple[list[str], list[str]]:
    """Shuffle a copy of ``names`` with ``random.Random(seed)`` and cut it into ``(train, val)``.

    ``val`` gets ``round(len(names) * val_fraction)`` names. Deterministic for a given seed;
    every name lands in exactly one of the two lists.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    names = list(names)
    random.Random(seed).shuffle(names)
    n_val = round(len(names) * val_fraction)
    return names[n_val:], names[:n_val]


def max_name_length(names) -> int:
    """The length of the longest name (``x`` and ``y`` are one longer)."""
    return max((len(name) for name in names), default=0)

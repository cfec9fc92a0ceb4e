"""The names data set, the alphabet and batching (notebook 08).

Where the names come from, in this order:

1. ``load_names(path)`` or the environment variable ``TUTOR_NAMES``: your own text file, one name
   per line. A missing file is an error (we never silently train on something else).
2. The cached copy of ``allnames.txt`` (100,364 US baby names, 1880 to today, from
   https://github.com/hackerb9/ssa-baby-names) in the user cache directory, if its sha256 matches.
   ``TUTOR_CACHE_DIR`` moves the cache.
3. A download of ``allnames.txt`` into the cache (5 s timeout, checksum verified).
   ``TUTOR_OFFLINE=1`` skips it.
4. The offline fallback: the ~5,000 US census first names shipped inside the ``names`` package
   (installed with the course). Its notice says how to get the full list.

Every load prints one line saying which source was used and how many names it gave
(``verbose=False`` silences it). Names are lowercased and anything outside a-z is dropped.

Batching: a name becomes ``x = ' ' + name`` and ``y = name + ' '``; ``collate`` pads ``x`` with
``PAD_X`` (' ') and ``y`` with ``PAD_Y`` ('.', the ``ignore_index`` of the loss).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import random
import socket
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset, Sampler

from tutor.errors import (
    NamesFileError, NamesFileIsADirectoryError, NamesFileNotFoundError, NoNamesError,
)
from tutor.reference.tokens import (  # noqa: F401  (re-exported)
    PAD_X, PAD_Y, alphabet, decode, encode, itos, stoi, vocab_size,
)

__all__ = [
    "alphabet", "stoi", "itos", "vocab_size", "PAD_X", "PAD_Y", "encode", "decode",
    "LoadedNames", "load_names", "load_names_with_source", "clean_names", "cache_dir",
    "check_names_text", "full_list_hint", "is_full_data_set",
    "split_names", "max_name_length", "NamesDataset", "collate", "make_loader",
    "LoadedText", "load_shakespeare", "load_shakespeare_with_source", "SHAKESPEARE_CHARS", "CharVocab",
    "split_text", "ShakespeareData", "shakespeare_data",
    "SortishBatchSampler", "make_sortish_loader", "padding_fraction",
    "PACK_WIDTH", "pack_names", "make_packed_loader", "name_starts", "name_positions", "same_name_mask",
]

# -----------------------------------------------------------------------------
# where the data lives

FILENAME = "allnames.txt"
# Candidate download URLs, tried in order. The checksum below pins the content, so a changed
# upstream file is rejected (and we fall back) rather than silently used.
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
TIMEOUT = 5.0  # seconds, per network operation

CACHE_APP = "transformers-from-scratch-tutor"
ENV_NAMES = "TUTOR_NAMES"  # path to your own names file
ENV_CACHE = "TUTOR_CACHE_DIR"  # where allnames.txt is cached
ENV_OFFLINE = "TUTOR_OFFLINE"  # 1 = never download

FALLBACK_PACKAGE = "names"
FALLBACK_FILES = ("dist.female.first", "dist.male.first")
FALLBACK_DESCRIPTION = "the offline fallback (the 'names' package, US census first names)"

LETTERS = set("abcdefghijklmnopqrstuvwxyz")


@dataclass
class LoadedNames:
    """What ``load_names_with_source`` returns: the names and where they came from."""

    names: list[str]  # cleaned: lowercase, only a-z, none empty
    source: str  # "file", "cache", "download" or "fallback"
    location: str  # the file, URL or package directory the names were read from
    notice: str  # the line that was printed (or would have been, with verbose=False)
    dropped_chars: int = 0  # characters outside a-z removed by cleaning
    changed_names: int = 0  # names that lost at least one character
    dropped_names: int = 0  # names with no letter left, removed


def cache_dir() -> Path:
    """The directory of the cached ``allnames.txt``: ``$TUTOR_CACHE_DIR`` or the user cache dir."""
    override = os.environ.get(ENV_CACHE)
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir(CACHE_APP))


def _is_truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _download(url: str, timeout: float) -> bytes:
    """Fetch ``url`` and return its bytes. (Tests replace this function; it is the only network.)"""
    request = urllib.request.Request(url, headers={"User-Agent": CACHE_APP})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


def _describe(error: BaseException) -> str:
    """A short one-line reason for a failed download."""
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code} {error.reason}"
    if isinstance(error, urllib.error.URLError):
        if not isinstance(error.reason, BaseException):
            return str(error.reason)
        error = error.reason  # e.g. a timeout or a DNS failure inside urlopen
    if isinstance(error, TimeoutError):
        return f"timed out after {TIMEOUT:g} s"
    if isinstance(error, socket.gaierror):  # DNS: almost always "no internet here"
        return "no internet connection (the name lookup failed)"
    if isinstance(error, (ConnectionError, OSError)) and not str(error):
        return "no network connection"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _write_atomically(path: Path, data: bytes, keep_previous: Path | None = None) -> None:
    """Write ``data`` to ``path`` so that no reader ever sees half a file. With ``keep_previous``, the file
    being replaced is moved there, once the new one is safely on disk (there is always one whole file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if keep_previous is not None and path.exists():
            os.replace(path, keep_previous)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# -----------------------------------------------------------------------------
# cleaning

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


def _lines(data: bytes) -> list[str]:
    # utf-8-sig drops a byte-order mark; undecodable bytes become U+FFFD and are then cleaned away
    return data.decode("utf-8-sig", errors="replace").splitlines()


# -----------------------------------------------------------------------------
# the sources

MAX_NAME_LETTERS = 40  # a longer "name" is not a name (the longest in allnames.txt has 15 letters)


def _is_name_like(line: str) -> bool:
    """A line that reads as a name: one to three words, at least 2/3 letters, at most 40 letters."""
    words = line.split()
    text = "".join(words)
    letters = sum(ch.isalpha() for ch in text)
    return 1 <= len(words) <= 3 and 0 < letters <= MAX_NAME_LETTERS and letters * 3 >= 2 * len(text)


def check_names_text(data: bytes, where: str) -> list[str]:
    """The lines of a names file, or a one-line ``NamesFileError`` when it is not one.

    Rejected: a file that is not text (NUL bytes, or more than 1% of it not UTF-8 or control
    characters, as in a zip, an image or random bytes), and a text file in which fewer than half
    of the non-blank lines read as a name (one to three words, at least 2/3 letters, at most 40 letters).
    """
    what = f"expected a text file with one name per line, such as {FILENAME}"
    text = data.decode("utf-8-sig", errors="replace")
    bad = text.count("\ufffd") + sum(ch < " " and ch not in "\t\n\r\f\v" for ch in text)
    if b"\0" in data or bad > max(1, len(text) // 100):
        raise NamesFileError(f"{where} is not a text file ({what})")
    lines = text.splitlines()
    filled = [line for line in lines if line.strip()]
    names = sum(_is_name_like(line) for line in filled)
    if filled and names * 2 < len(filled):
        raise NamesFileError(f"{where} does not look like a names file: only {names:,} of its "
                             f"{len(filled):,} lines read as a name ({what})")
    return lines


def _read_user_file(path, origin: str) -> tuple[list[str], str]:
    """Lines of a names file the user pointed at, with clear one-line errors."""
    p = Path(os.fspath(path)).expanduser()
    if not p.exists():
        raise NamesFileNotFoundError(f"Names file not found: {p} ({origin})")
    if p.is_dir():
        raise NamesFileIsADirectoryError(f"Names file is a directory, not a text file: {p} ({origin})")
    return check_names_text(p.read_bytes(), f"The names file {p} ({origin})"), str(p)


def _read_cache(path: Path) -> tuple[list[str] | None, str | None]:
    """The cached lines if the cache verifies, else ``(None, problem or None)``.

    A cache that fails its checksum (a truncated download, a disk error, an edited file) is
    deleted so that it gets replaced (``_read_verified``, shared with tiny Shakespeare).
    """
    data, problem = _read_verified(path, SHA256, FILENAME)
    return (None if data is None else _lines(data)), problem


def _try_download(path: Path) -> tuple[list[str] | None, str, str]:
    """Download, verify and cache. Returns ``(lines or None, url, reason-or-note)``."""
    data, url, note = _download_verified(path, URLS, SHA256)
    return (None if data is None else _lines(data)), url, note


def _fallback_lines() -> tuple[list[str], str]:
    """First names from the ``names`` package (``MARY  2.629 2.629 1``: first column)."""
    try:
        folder = importlib.resources.files(FALLBACK_PACKAGE)
    except ModuleNotFoundError:
        raise NoNamesError(
            f"No names available: {FILENAME} is neither cached nor downloadable, and the offline "
            f"fallback needs the '{FALLBACK_PACKAGE}' package (pip install names). Or point "
            f"{ENV_NAMES} at a text file with one name per line."
        ) from None
    names = []
    for filename in FALLBACK_FILES:
        for line in (folder / filename).read_text(encoding="utf-8").splitlines():
            fields = line.split()
            if fields:
                names.append(fields[0])
    return list(dict.fromkeys(names)), str(folder)  # dedupe, keep order


# -----------------------------------------------------------------------------
# loading

def _count(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _say(line: str) -> None:
    try:
        print(line)
    except UnicodeEncodeError:  # a console that cannot show '–' or '—'
        print(line.encode("ascii", "replace").decode("ascii"))


def full_list_hint() -> str:
    """How to get the full data set, in one clause (part of the offline notice)."""
    return (f"for all {NUM_NAMES:,} names, run once with internet (they are cached in {cache_dir()}) "
            f"or set {ENV_NAMES}=/path/to/{FILENAME}")


def is_full_data_set(loaded: "LoadedNames") -> bool:
    """True when ``loaded`` holds the full checksummed data set (cache, download or an identical file)."""
    if loaded.source in ("cache", "download"):
        return True
    return loaded.source == "file" and len(loaded.names) == NUM_NAMES and _file_matches(loaded.location)


def _file_matches(location: str) -> bool:
    try:
        return _sha256(Path(location).read_bytes()) == SHA256
    except OSError:
        return False


def load_names_with_source(path=None, *, verbose: bool = True,
                           offline: bool | None = None) -> LoadedNames:
    """Load and clean the names, and say where they came from. See the module docstring.

    ``path`` (or ``$TUTOR_NAMES``) is your own file, one name per line. ``offline=None`` reads
    ``$TUTOR_OFFLINE``; ``offline=True`` never downloads (the cache is still used).
    """
    if offline is None:
        offline = _is_truthy(os.environ.get(ENV_OFFLINE))
    remarks = []  # extra clauses for the notice, after an em dash
    env_path = os.environ.get(ENV_NAMES)

    if path is not None:
        lines, location = _read_user_file(path, "given as path=")
        source, where = "file", f"from {Path(location).name}"
    elif env_path:
        lines, location = _read_user_file(env_path, f"from the environment variable {ENV_NAMES}")
        source, where = "file", f"from {Path(location).name} ({ENV_NAMES})"
    else:
        cached = cache_dir() / FILENAME
        lines, problem = _read_cache(cached)
        if problem:
            remarks.append(problem)
        if lines is not None:
            source, location, where = "cache", str(cached), f"from the cache ({cached}, checksum verified)"
        elif not offline:
            lines, url, note = _try_download(cached)
            if lines is not None:
                source, location = "download", url
                where = f"downloaded from {url} (checksum verified) into the cache"
                if note:
                    remarks.append(note)
            else:
                remarks.append(f"offline (could not download {FILENAME}: {note})")
        else:
            remarks.append(f"offline ({ENV_OFFLINE}=1: no download tried)")
        if lines is None:
            lines, location = _fallback_lines()
            source, where = "fallback", f"from {FALLBACK_DESCRIPTION}"
            remarks.append(full_list_hint())

    names, dropped_chars, changed, dropped_names = clean_names(lines)
    if not names:
        what = "no names" if dropped_names == 0 else "no names made of the letters a–z"
        raise NamesFileError(f"{location} contains {what} "
                             "(expected a text file with one name per line)")
    if dropped_chars:
        remarks.append(f"dropped {_count(dropped_chars, 'character')} outside a–z "
                       f"from {_count(changed, 'name')}")
    if dropped_names:
        remarks.append(f"dropped {_count(dropped_names, 'name')} with no letter a–z")

    notice = f"Names: {len(names):,} {where}"
    if remarks:
        notice += " — " + "; ".join(remarks)
    if verbose:
        _say(notice)
    return LoadedNames(names, source, location, notice, dropped_chars, changed, dropped_names)


def load_names(path=None, *, verbose: bool = True, offline: bool | None = None) -> list[str]:
    """The names data set as a list of lowercase strings over a-z (see ``load_names_with_source``).

    >>> names = load_names()        # prints e.g. "Names: 100,364 from the cache (...)"
    >>> names[:3]
    ['linda', 'james', 'michael']
    """
    return load_names_with_source(path, verbose=verbose, offline=offline).names


# -----------------------------------------------------------------------------
# splitting and batching

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


class NamesDataset(Dataset):
    """Item ``i`` is ``(x, y)``: LongTensors ``encode(' ' + name)`` and ``encode(name + ' ')``.

    >>> NamesDataset(["laika"])[0]
    (tensor([ 0, 12,  1,  9, 11,  1]), tensor([12,  1,  9, 11,  1,  0]))
    """

    def __init__(self, names):
        self.names = list(names)
        for name in self.names:
            if not name or not set(name.lower()) <= LETTERS:
                raise ValueError(
                    f"NamesDataset needs non-empty names made of the letters a-z, got {name!r} "
                    "(load_names() cleans names for you)"
                )
        self._items = [None] * len(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, i):
        # Each name is encoded once, on first use (a training run visits every name many times).
        # pad_sequence copies the tensors into the batch, so the cached ones are never modified.
        item = self._items[i]
        if item is None:
            name = self.names[i]
            x = torch.tensor(encode(" " + name), dtype=torch.long)
            y = torch.tensor(encode(name + " "), dtype=torch.long)
            item = self._items[i] = (x, y)
        return item


def collate(batch) -> tuple[torch.Tensor, torch.Tensor]:
    """A list of ``(x, y)`` pairs -> ``X [B, T]`` padded with PAD_X, ``Y [B, T]`` padded with PAD_Y.

    ``T`` is the longest ``x`` in the batch.
    """
    xs, ys = zip(*batch)
    X = pad_sequence(xs, batch_first=True, padding_value=PAD_X)
    Y = pad_sequence(ys, batch_first=True, padding_value=PAD_Y)
    return X, Y


def make_loader(names, batch_size: int = 64, shuffle: bool = True, seed: int = 0,
                drop_last: bool = False) -> DataLoader:
    """A DataLoader of padded ``(X, Y)`` batches; the order depends only on ``seed``.

    ``names`` is a list of names or a ``NamesDataset``.
    """
    dataset = names if isinstance(names, Dataset) else NamesDataset(names)
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, collate_fn=collate,
                      generator=generator, drop_last=drop_last)


# =============================================================================
# Tiny Shakespeare (notebooks 10 and 11)
#
# Where the text comes from, in this order (the same ladder as the names):
#
# 1. ``load_shakespeare(path)`` or the environment variable ``TUTOR_SHAKESPEARE``: your own text
#    file. A missing file is an error.
# 2. The cached copy of tiny Shakespeare (1,115,394 characters, karpathy/char-rnn
#    ``data/tinyshakespeare/input.txt``) in the cache directory, if its sha256 matches.
# 3. A download into the cache (5 s timeout, checksum verified): first the file at a pinned commit
#    of char-rnn, then the same path on the master branch. ``TUTOR_OFFLINE=1`` skips it.
# 4. The offline fallback: no package on PyPI ships the text and installs cleanly on Python
#    3.10-3.13, so the ~5,000 first names of the ``names`` package (already a dependency) stand in,
#    one per line, as a text stream. A model learns to spell names instead of verse; the notice
#    says so.
#
# Every load prints one line saying which source was used and how many characters it gave.

SHAKESPEARE_FILENAME = "tinyshakespeare.txt"
# commit d1d7aa34 of karpathy/char-rnn holds the file with exactly this content (1,115,394 characters)
SHAKESPEARE_URLS = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/d1d7aa34fdb3626174bce1d753e6cc6845ce7087/"
    "data/tinyshakespeare/input.txt",
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
)
SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
SHAKESPEARE_LENGTH = 1_115_394  # characters (all ASCII, so also bytes)
ENV_SHAKESPEARE = "TUTOR_SHAKESPEARE"  # path to your own text file
SHAKESPEARE_FALLBACK_DESCRIPTION = ("the offline fallback: no Shakespeare here, so the first names of the "
                                    "'names' package stand in, one per line")

# The 65 characters of tiny Shakespeare, in sorted order: newline, space, punctuation, 3, A-Z, a-z.
SHAKESPEARE_CHARS = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@dataclass
class LoadedText:
    """What ``load_shakespeare_with_source`` returns: the text and where it came from."""

    text: str
    source: str  # "file", "cache", "download" or "fallback"
    location: str  # the file, URL or package directory the text was read from
    notice: str  # the line that was printed (or would have been, with verbose=False)


def _text(data: bytes) -> str:
    return data.decode("utf-8-sig", errors="replace")


def _read_verified(path: Path, sha256: str, what: str) -> tuple[bytes | None, str | None]:
    """The cached bytes if they verify, else ``(None, problem or None)``; a bad cache is deleted."""
    if not path.is_file():
        return None, None
    try:
        data = path.read_bytes()
    except OSError as e:
        return None, f"could not read the cached {what} ({e})"
    if _sha256(data) == sha256:
        return data, None
    problem = f"the cached {path} failed its checksum (truncated or corrupted)"
    try:
        path.unlink()
        problem += " and was deleted"
    except OSError as e:
        problem += f" and could not be deleted ({e})"
    return None, problem


def _download_verified(path: Path, urls, sha256: str) -> tuple[bytes | None, str, str]:
    """Try ``urls`` in order; verify, cache. Returns ``(bytes or None, url, reason-or-note)``."""
    reasons = []
    for url in urls:
        try:
            data = _download(url, TIMEOUT)
        except Exception as e:  # any failure means "try the next URL", with the reason
            reasons.append(_describe(e))
            continue
        if _sha256(data) != sha256:
            reasons.append(f"checksum mismatch for {url} ({len(data):,} bytes)")
            continue
        note = ""
        try:
            _write_atomically(path, data)
        except OSError as e:
            note = f"could not write the cache {path} ({e})"
        return data, url, note
    return None, "", "; ".join(dict.fromkeys(reasons))  # the same reason twice reads as once


def load_shakespeare_with_source(path=None, *, verbose: bool = True, offline: bool | None = None) -> LoadedText:
    """Load tiny Shakespeare (or your own text) and say where it came from. See the comment above.

    ``path`` (or ``$TUTOR_SHAKESPEARE``) is your own text file. ``offline=None`` reads
    ``$TUTOR_OFFLINE``; ``offline=True`` never downloads (the cache is still used).
    """
    if offline is None:
        offline = _is_truthy(os.environ.get(ENV_OFFLINE))
    remarks = []
    env_path = os.environ.get(ENV_SHAKESPEARE)
    if path is not None or env_path:
        origin = "given as path=" if path is not None else f"from the environment variable {ENV_SHAKESPEARE}"
        p = Path(os.fspath(path if path is not None else env_path)).expanduser()
        if not p.exists():
            raise FileNotFoundError(f"Text file not found: {p} ({origin})")
        if p.is_dir():
            raise IsADirectoryError(f"Text file is a directory, not a text file: {p} ({origin})")
        raw = p.read_bytes()
        text, source, location = _text(raw), "file", str(p)
        where = f"from {p.name}" + ("" if path is not None else f" ({ENV_SHAKESPEARE})")
        if _sha256(raw) == SHAKESPEARE_SHA256:
            where += ", checksum verified"
    else:
        cached = cache_dir() / SHAKESPEARE_FILENAME
        raw, problem = _read_verified(cached, SHAKESPEARE_SHA256, SHAKESPEARE_FILENAME)
        if problem:
            remarks.append(problem)
        text = None
        if raw is not None:
            text, source, location = _text(raw), "cache", str(cached)
            where = f"from the cache ({SHAKESPEARE_FILENAME}, checksum verified)"
        elif not offline:
            raw, url, note = _download_verified(cached, SHAKESPEARE_URLS, SHAKESPEARE_SHA256)
            if raw is not None:
                text, source, location = _text(raw), "download", url
                where = "downloaded from karpathy/char-rnn (checksum verified) into the cache"
                if note:
                    remarks.append(note)
            else:
                remarks.append(f"could not download tiny Shakespeare: {note}")
        else:
            remarks.append("offline: no download tried")
        if text is None:
            names, location = _fallback_lines()
            text = "\n".join(name.lower() for name in names) + "\n"
            source, where = "fallback", f"from {SHAKESPEARE_FALLBACK_DESCRIPTION}"
    if not text:
        raise ValueError(f"{location} is empty (expected a text file)")
    notice = f"Text: {len(text):,} characters {where}"
    if remarks:
        notice += " — " + "; ".join(remarks)
    if verbose:
        _say(notice)
    return LoadedText(text, source, location, notice)


def load_shakespeare(path=None, *, verbose: bool = True, offline: bool | None = None) -> str:
    """Tiny Shakespeare as one string (see ``load_shakespeare_with_source``).

    >>> text = load_shakespeare()   # prints e.g. "Text: 1,115,394 characters from the cache (...)"
    >>> text[:14]
    'First Citizen:'
    """
    return load_shakespeare_with_source(path, verbose=verbose, offline=offline).text


class CharVocab:
    """A character vocabulary: every distinct character of a text, sorted; ids are positions.

    >>> vocab = CharVocab.from_text("hello")
    >>> vocab.chars, vocab.encode("hell"), vocab.decode([2, 1])
    ('ehlo', [1, 0, 2, 2], 'he')
    """

    def __init__(self, chars):
        self.chars = "".join(sorted(set(chars)))
        self.stoi = {ch: i for i, ch in enumerate(self.chars)}
        self.itos = dict(enumerate(self.chars))

    @classmethod
    def from_text(cls, text: str) -> "CharVocab":
        return cls(set(text))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        """Characters to ids; a character outside the vocabulary is a ``KeyError`` naming it."""
        try:
            return [self.stoi[ch] for ch in text]
        except KeyError as e:
            raise KeyError(f"character {e.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids) -> str:
        """Ids (a list or a tensor) back to text."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return "".join(self.itos[int(i)] for i in ids)

    def tensor(self, text: str) -> torch.Tensor:
        """The text as a LongTensor ``[len(text)]`` of ids."""
        return torch.tensor(self.encode(text), dtype=torch.long)

    def __repr__(self) -> str:
        return f"CharVocab({self.vocab_size} characters: {self.chars!r})"


def split_text(data, val_fraction: float = 0.1):
    """The first ``1 - val_fraction`` of ``data`` for training, the rest for validation (no shuffle:
    neighbouring characters are not independent, so a random split would leak)."""
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    n = int(len(data) * (1 - val_fraction))
    return data[:n], data[n:]


@dataclass
class ShakespeareData:
    """Everything notebook 10 trains on: the text, its vocabulary, and the encoded 90/10 split."""

    text: str
    vocab: CharVocab
    train: torch.Tensor  # LongTensor [N_train]
    val: torch.Tensor  # LongTensor [N_val]
    source: str  # as in LoadedText


def shakespeare_data(path=None, *, verbose: bool = True, offline: bool | None = None,
                     val_fraction: float = 0.1) -> ShakespeareData:
    """Load the text, build its character vocabulary, encode it and split it 90/10."""
    loaded = load_shakespeare_with_source(path, verbose=verbose, offline=offline)
    vocab = CharVocab.from_text(loaded.text)
    train, val = split_text(vocab.tensor(loaded.text), val_fraction)
    return ShakespeareData(loaded.text, vocab, train, val, loaded.source)


# -----------------------------------------------------------------------------
# batches of names of similar length ("sortish" batching)

class SortishBatchSampler(Sampler):
    """Batches of indices of names of about the same length, so that a batch is hardly padded.

    Every pass over the data: shuffle all the indices (``torch.Generator`` seeded with ``seed``
    plus the pass number), cut them into pools of ``pool`` batches, sort each pool by length and
    cut it into batches, then shuffle the order of all the batches. Every name is used exactly
    once per pass, as with ``shuffle=True``; only which names share a batch changes: with
    ``pool=4``, the shortest quarter of a pool, the next quarter, and so on. A larger pool leaves
    less padding (names of 128: 41% padding unsorted, 18% with pools of 4, 2% with pools of 50)
    but makes each batch a less varied sample: after 1,500 steps of the 4-layer GPT the validation
    loss (excluding the first letter) was 1.930 unsorted, 1.975 with pools of 4 and 1.999 with pools
    of 50; after 5,000 steps of the 2-layer GPT with AdamW (``tutor.trainer.PADDED_CPU_CONFIG``), 1.838
    unsorted and 1.861 with pools of 4. Packed batches (``make_packed_loader``) remove more padding at no such cost.

    ``lengths[i]`` is the length of item ``i`` (any unit: only the order matters). The last
    batch of a pool may be smaller; ``drop_last=True`` drops those smaller batches.
    """

    def __init__(self, lengths, batch_size: int, seed: int = 0, pool: int = 4, drop_last: bool = False):
        if batch_size < 1 or pool < 1:
            raise ValueError(f"batch_size and pool must be at least 1, got {batch_size} and {pool}")
        self.lengths = torch.as_tensor(list(lengths), dtype=torch.long)
        self.batch_size, self.seed, self.pool, self.drop_last = batch_size, seed, pool, drop_last
        self.epoch = 0  # passes started so far: each one is shuffled differently

    def batches(self, epoch: int) -> list[list[int]]:
        """The batches of pass number ``epoch`` (0, 1, ...), in the order they are served."""
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order = torch.randperm(len(self.lengths), generator=generator)
        size = self.pool * self.batch_size
        batches = []
        for start in range(0, len(order), size):
            chunk = order[start:start + size]
            chunk = chunk[torch.argsort(self.lengths[chunk], stable=True)]
            for b in range(0, len(chunk), self.batch_size):
                batch = chunk[b:b + self.batch_size].tolist()
                if len(batch) == self.batch_size or not self.drop_last:
                    batches.append(batch)
        shuffled = torch.randperm(len(batches), generator=generator).tolist()
        return [batches[i] for i in shuffled]

    def __iter__(self):
        batches = self.batches(self.epoch)
        self.epoch += 1
        return iter(batches)

    def __len__(self) -> int:
        n, size = len(self.lengths), self.pool * self.batch_size
        full, rest = divmod(n, size)
        per_pool = self.pool
        last = rest // self.batch_size if self.drop_last else -(-rest // self.batch_size)
        return full * per_pool + last


def make_sortish_loader(names, batch_size: int = 64, seed: int = 0, pool: int = 4,
                        drop_last: bool = False) -> DataLoader:
    """Like ``make_loader(names, batch_size, shuffle=True, seed=seed)``, but each batch holds names
    of (nearly) the same length, so almost nothing is padding (see ``SortishBatchSampler``).

    The batches are ``(X, Y)`` exactly as ``collate`` makes them: the loss, ``train_step`` and
    ``evaluate`` do not change.
    """
    dataset = names if isinstance(names, Dataset) else NamesDataset(names)
    lengths = [len(name) for name in dataset.names] if hasattr(dataset, "names") else \
        [len(dataset[i][0]) for i in range(len(dataset))]
    sampler = SortishBatchSampler(lengths, batch_size, seed=seed, pool=pool, drop_last=drop_last)
    return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate)


def padding_fraction(loader, max_batches: int | None = None) -> float:
    """The fraction of the input positions of ``loader``'s batches that are padding (``Y == PAD_Y``),
    over its first ``max_batches`` batches (all when ``None``)."""
    padded = total = 0
    for i, (_, y) in enumerate(loader):
        if max_batches is not None and i >= max_batches:
            break
        padded += int((y == PAD_Y).sum())
        total += y.numel()
    return padded / max(total, 1)


# -----------------------------------------------------------------------------
# packed batches: several names per row, none of them padded

PACK_WIDTH = 16  # positions per packed row: the position table of notebook 07's GPT (max_len 16)


def pack_names(batch, width: int = PACK_WIDTH) -> tuple[torch.Tensor, torch.Tensor]:
    """A list of ``(x, y)`` pairs -> ``X [R, width]``, ``Y [R, width]``: the names laid end to end in rows.

    Longest name first, each goes into the row with the least room that still fits it (a new row when
    none does), so a row holds two or three names and only its end is padded (``PAD_X`` in ``X``,
    ``PAD_Y`` in ``Y``). Each name keeps its own ``' '`` at the start of its ``x``: that is how
    ``name_positions`` and ``same_name_mask`` find where it begins. The same names give the same targets
    as ``collate``, in fewer positions.
    """
    lengths = [len(x) for x, _ in batch]
    order = sorted(range(len(batch)), key=lengths.__getitem__, reverse=True)
    rows_with_room = [[] for _ in range(width + 1)]  # rows_with_room[r]: the rows with exactly r free positions
    room, start = [], [0] * len(batch)  # free positions of each row; where each name starts (flat index)
    for i in order:
        n = lengths[i]
        if n > width:
            raise ValueError(f"a name of {n - 1} letters needs {n} positions, but packed rows have {width}: "
                             f"use a larger width")
        fits = next((r for r in range(n, width + 1) if rows_with_room[r]), None)
        if fits is None:
            row = len(room)
            room.append(width)
        else:
            row = rows_with_room[fits].pop()
        start[i] = row * width + width - room[row]
        room[row] -= n
        rows_with_room[room[row]].append(row)
    n = torch.tensor(lengths)
    first = torch.cumsum(n, 0) - n  # where each name starts in the concatenation of all names
    where = torch.tensor(start).repeat_interleave(n) + torch.arange(int(n.sum())) - first.repeat_interleave(n)
    X = torch.full((len(room) * width,), PAD_X, dtype=torch.long)
    Y = torch.full((len(room) * width,), PAD_Y, dtype=torch.long)
    X[where] = torch.cat([x for x, _ in batch])
    Y[where] = torch.cat([y for _, y in batch])
    return X.view(-1, width), Y.view(-1, width)


def make_packed_loader(names, batch_size: int = 64, seed: int = 0, width: int = PACK_WIDTH) -> DataLoader:
    """Like ``make_loader(names, batch_size, shuffle=True, seed=seed)``: the same names in the same batches,
    but each batch packed into rows of ``width`` positions (``pack_names``), so that almost nothing is padding.

    A model trained on these batches must keep each name to itself: ``tutor.trainer.PackedNames`` gives the
    GPT ``same_name_mask`` and ``name_positions``. Then the loss of a batch is the loss of the same names
    padded, up to float rounding.
    """
    from functools import partial

    dataset = names if isinstance(names, Dataset) else NamesDataset(names)
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=generator,
                      collate_fn=partial(pack_names, width=width))


def name_starts(ids: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` bool: True where a name starts (its ``' '``). Padding is ``' '`` too, so each padded
    position counts as a name of its own: nothing real ever attends to it, and the loss ignores it."""
    return ids == PAD_X


def name_positions(ids: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` LongTensor: each position's place inside its own name (0 at its ``' '``).

    ``" ann bo"`` -> ``[0, 1, 2, 3, 0, 1, 2]``. On a padded batch (one name per row) it is ``arange(T)``
    up to the padding."""
    T = ids.shape[-1]
    index = torch.arange(T, device=ids.device).expand_as(ids)
    start = torch.where(name_starts(ids), index, torch.zeros_like(index)).cummax(dim=-1).values
    return index - start


def same_name_mask(ids: torch.Tensor) -> torch.Tensor:
    """``[B, T, T]`` bool: True where query position ``i`` and key position ``j`` belong to the same name.

    Give it to the GPT as ``mask``: its attention ANDs it with the causal mask, so each position sees
    only the earlier characters of its own name."""
    name = name_starts(ids).cumsum(dim=-1)  # which name of the row each position belongs to
    return name.unsqueeze(-1) == name.unsqueeze(-2)

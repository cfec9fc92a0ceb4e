"""The names data set, the alphabet and batching (notebook 08).

Where the names come from, in this order:

1. ``load_names(path)`` or the environment variable ``TUTOR_NAMES``: your own text file, one name
   per line. A missing file is an error (we never silently train on something else).
2. The cached copy of ``allnames.txt`` (100,364 US baby names, 1880 to today, from
   https://github.com/hackerb9/ssa-baby-names) in the user cache directory, if its sha256 matches.
   ``TUTOR_CACHE_DIR`` moves the cache.
3. A download of ``allnames.txt`` into the cache (5 s timeout, checksum verified).
   ``TUTOR_OFFLINE=1`` skips it.
4. The offline fallback: the ~5,000 US census first names shipped inside the ``names`` package.

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
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset, Sampler

from tutor.reference.tokens import (  # noqa: F401  (re-exported)
    PAD_X, PAD_Y, alphabet, decode, encode, itos, stoi, vocab_size,
)

__all__ = [
    "alphabet", "stoi", "itos", "vocab_size", "PAD_X", "PAD_Y", "encode", "decode",
    "LoadedNames", "load_names", "load_names_with_source", "clean_names", "cache_dir",
    "split_names", "max_name_length", "NamesDataset", "collate", "make_loader",
    "SortishBatchSampler", "make_sortish_loader", "padding_fraction",
]

# -----------------------------------------------------------------------------
# where the data lives

FILENAME = "allnames.txt"
# Candidate download URLs, tried in order. The checksum below pins the content, so a changed
# upstream file is rejected (and we fall back) rather than silently used.
URLS = (
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
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that no reader ever sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
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

def _read_user_file(path, origin: str) -> tuple[list[str], str]:
    """Lines of a names file the user pointed at, with clear errors."""
    p = Path(os.fspath(path)).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"Names file not found: {p} ({origin})")
    if p.is_dir():
        raise IsADirectoryError(f"Names file is a directory, not a text file: {p} ({origin})")
    return _lines(p.read_bytes()), str(p)


def _read_cache(path: Path) -> tuple[list[str] | None, str | None]:
    """The cached lines if the cache verifies, else ``(None, problem or None)``.

    A cache that fails its checksum (a truncated download, a disk error, an edited file) is
    deleted so that it gets replaced.
    """
    if not path.is_file():
        return None, None
    try:
        data = path.read_bytes()
    except OSError as e:
        return None, f"could not read the cached {FILENAME} ({e})"
    if _sha256(data) == SHA256:
        return _lines(data), None
    problem = f"the cached {path} failed its checksum (truncated or corrupted)"
    try:
        path.unlink()
        problem += " and was deleted"
    except OSError as e:
        problem += f" and could not be deleted ({e})"
    return None, problem


def _try_download(path: Path) -> tuple[list[str] | None, str, str]:
    """Download, verify and cache. Returns ``(lines or None, url, reason-or-note)``."""
    reasons = []
    for url in URLS:
        try:
            data = _download(url, TIMEOUT)
        except Exception as e:  # any failure here means "use the next source", with the reason
            reasons.append(_describe(e))
            continue
        if _sha256(data) != SHA256:
            reasons.append(f"checksum mismatch for {url} ({len(data):,} bytes)")
            continue
        note = ""
        try:
            _write_atomically(path, data)
        except OSError as e:
            note = f"could not write the cache {path} ({e})"
        return _lines(data), url, note
    unique = list(dict.fromkeys(reasons))  # same reason twice reads as once
    return None, "", "; ".join(unique)


def _fallback_lines() -> tuple[list[str], str]:
    """First names from the ``names`` package (``MARY  2.629 2.629 1``: first column)."""
    try:
        folder = importlib.resources.files(FALLBACK_PACKAGE)
    except ModuleNotFoundError:
        raise RuntimeError(
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
            source, location, where = "cache", str(cached), f"from the cache ({FILENAME}, checksum verified)"
        elif not offline:
            lines, url, note = _try_download(cached)
            if lines is not None:
                source, location = "download", url
                where = f"downloaded from {url} (checksum verified) into the cache"
                if note:
                    remarks.append(note)
            else:
                remarks.append(f"could not download {FILENAME}: {note}")
        else:
            remarks.append("offline: no download tried")
        if lines is None:
            lines, location = _fallback_lines()
            source, where = "fallback", f"from {FALLBACK_DESCRIPTION}"

    names, dropped_chars, changed, dropped_names = clean_names(lines)
    if not names:
        what = "no names" if dropped_names == 0 else "no names made of the letters a–z"
        raise ValueError(f"{location} contains {what} "
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

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, i):
        name = self.names[i]
        x = torch.tensor(encode(" " + name), dtype=torch.long)
        y = torch.tensor(encode(name + " "), dtype=torch.long)
        return x, y


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
    but makes each batch a less varied sample: after 1,500 steps of notebook 08's CPU preset the
    validation loss was 1.930 unsorted, 1.975 with pools of 4 and 1.999 with pools of 50.

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

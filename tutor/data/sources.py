"""Where a data set comes from: one loading order for every data set (the names, tiny Shakespeare).

A ``DataSet`` describes one (its file name, sha256, download URLs, environment variable, packaged copy);
``load(data_set, path)`` returns its bytes from the first source that has them:

1. ``path=``: your own file. A missing file, a directory or a file that is not text is a one-line error
   (``tutor.errors.DataFileError`` and friends): we never silently use something else.
2. The data set's environment variable (``TUTOR_NAMES``, ``TUTOR_SHAKESPEARE``): the same, for every load.
3. The package: a copy shipped inside ``tutor/data/``, if the data set declares one (gzipped when its name
   ends in ``.gz``), checksum verified on the decompressed bytes (a copy that fails it is never used; the
   notice says so). Both data sets of the course ship this way, so the course runs offline by construction.
4. The cache (``cache_dir()``, moved by ``TUTOR_CACHE_DIR``), checksum verified. A bad copy (a truncated
   download, an edited file) is deleted, so that it gets replaced.
5. A download into the cache: the pinned URLs in order, ``TIMEOUT`` seconds each, checksum verified, written
   atomically. ``offline=True`` or ``TUTOR_OFFLINE=1`` skips it (the cache is still used).
6. Otherwise a one-line ``NoDataError`` that says what to do. There is no fallback: a missing data set is
   never silently replaced by another text.

Every load prints one line saying which source was used (``announce``; ``verbose=False`` silences it).
``download`` is the only function here that touches the network: tests replace it.
"""

from __future__ import annotations

import gzip
import importlib.resources
import os
import socket
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import platformdirs

from tutor import env
from tutor.errors import DataFileError, DataFileIsADirectoryError, DataFileNotFoundError, NoDataError
from tutor.files import sha256, write_atomically

CACHE_APP = "transformers-from-scratch-tutor"  # the cache folder's name, and the User-Agent of downloads
PACKAGE = "tutor.data"  # the package whose folder holds the data files that ship with the course
TIMEOUT = 5.0  # seconds, per network operation


@dataclass(frozen=True)
class DataSet:
    """What ``load`` needs to know about a data set."""

    name: str  # in messages: "names", "tiny Shakespeare"
    filename: str  # its name in the cache (and in the package, where it ships)
    sha256: str  # of the real file: the cache, the (decompressed) package copy and every download must match it
    urls: tuple[str, ...]  # download candidates, tried in order (the first pinned to a commit)
    env_var: str  # the environment variable naming your own file, e.g. ``tutor.env.NAMES``
    file_label: str  # your own file, in errors: "names file", "text file"
    expected: str  # what such a file holds, in errors: "a text file with one name per line, such as ..."
    check: Callable[[str, str], object] | None = None  # (text, where): one more check of your file, raises
    package_file: str | None = None  # a copy shipped inside ``tutor/data/`` (``.gz``: gzipped), or None


@dataclass(frozen=True)
class Loaded:
    """What ``load`` returns: the bytes of a data set and where they came from."""

    data: bytes
    source: str  # "file", "package", "cache" or "download"
    location: str  # the file, package file, cache file or URL it was read from
    where: str  # the notice's part about the source: "from pets.txt", "from the cache (...)", ...
    remarks: tuple[str, ...] = ()  # what went wrong on the way (a bad cache, no internet), for the notice

    @property
    def text(self) -> str:
        return _decode(self.data)


def cache_dir() -> Path:
    """The directory of the cached data sets: ``$TUTOR_CACHE_DIR`` or the user cache dir."""
    override = env.text(env.CACHE_DIR)
    if override:
        return Path(override).expanduser()
    return Path(platformdirs.user_cache_dir(CACHE_APP))


def download(url: str, timeout: float) -> bytes:
    """Fetch ``url`` and return its bytes. (Tests replace this function; it is the only network.)"""
    request = urllib.request.Request(url, headers={"User-Agent": CACHE_APP})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


def _decode(data: bytes) -> str:
    # utf-8-sig drops a byte-order mark; undecodable bytes become U+FFFD
    return data.decode("utf-8-sig", errors="replace")


def check_text(data: bytes, where: str, expected: str) -> str:
    """``data`` decoded, or a one-line ``DataFileError`` when it is not text: NUL bytes, or more than 1% of
    it not UTF-8 or control characters (as in a zip, an image or random bytes)."""
    text = _decode(data)
    bad = text.count("\ufffd") + sum(ch < " " and ch not in "\t\n\r\f\v" for ch in text)
    if b"\0" in data or bad > max(1, len(text) // 100):
        raise DataFileError(f"{where} is not a text file (expected {expected})")
    return text


# -----------------------------------------------------------------------------
# the sources, in order

def _from_user_file(data_set: DataSet, path, env_var: str | None = None) -> Loaded:
    """Your own file (``path=``, or the environment variable ``env_var``), with clear one-line errors."""
    origin = "given as path=" if env_var is None else f"from the environment variable {env_var}"
    label = data_set.file_label
    p = Path(os.fspath(path)).expanduser()
    if not p.exists():
        raise DataFileNotFoundError(f"{label.capitalize()} not found: {p} ({origin})")
    if p.is_dir():
        raise DataFileIsADirectoryError(f"{label.capitalize()} is a directory, not a text file: {p} ({origin})")
    data = p.read_bytes()
    where = f"The {label} {p} ({origin})"
    text = check_text(data, where, data_set.expected)
    if data_set.check is not None:
        data_set.check(text, where)
    return Loaded(data, "file", str(p), f"from {p.name}" + ("" if env_var is None else f" ({env_var})"))


def _from_package(data_set: DataSet, remarks: list[str]) -> Loaded | None:
    """The copy shipped inside the package, if the data set has one and it verifies (a ``.gz`` copy is
    decompressed first; the checksum is that of the decompressed bytes)."""
    if data_set.package_file is None:
        return None
    resource = importlib.resources.files(PACKAGE) / data_set.package_file
    if not resource.is_file():
        remarks.append(f"the packaged {data_set.package_file} is missing (reinstall the course)")
        return None
    data = resource.read_bytes()
    if data_set.package_file.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error):  # not gzip, or truncated: as bad as a wrong checksum
            data = b""
    if sha256(data) != data_set.sha256:
        remarks.append(f"the packaged {resource} failed its checksum and was not used (reinstall the course)")
        return None
    return Loaded(data, "package", str(resource), f"from the package ({data_set.package_file}, checksum verified)")


def _from_cache(data_set: DataSet, remarks: list[str]) -> Loaded | None:
    """The cached copy if it verifies; one that does not is deleted (and said so in ``remarks``)."""
    path = cache_dir() / data_set.filename
    if not path.is_file():
        return None
    try:
        data = path.read_bytes()
    except OSError as e:
        remarks.append(f"could not read the cached {data_set.filename} ({e})")
        return None
    if sha256(data) == data_set.sha256:
        return Loaded(data, "cache", str(path), f"from the cache ({path}, checksum verified)")
    problem = f"the cached {path} failed its checksum (truncated or corrupted)"
    try:
        path.unlink()
        problem += " and was deleted"
    except OSError as e:
        problem += f" and could not be deleted ({e})"
    remarks.append(problem)
    return None


def _from_download(data_set: DataSet, remarks: list[str]) -> Loaded | None:
    """Try the URLs in order; the first that gives the right checksum is cached and returned."""
    path = cache_dir() / data_set.filename
    reasons = []
    for url in data_set.urls:
        try:
            data = download(url, TIMEOUT)
        except Exception as e:  # noqa: BLE001 - any failure means "try the next URL", with the reason
            reasons.append(_describe(e))
            continue
        if sha256(data) != data_set.sha256:
            reasons.append(f"checksum mismatch for {url} ({len(data):,} bytes)")
            continue
        try:
            write_atomically(path, data)
        except OSError as e:
            remarks.append(f"could not write the cache {path} ({e})")
        return Loaded(data, "download", url, f"downloaded from {url} (checksum verified) into the cache")
    reasons = "; ".join(dict.fromkeys(reasons))  # the same reason twice reads as once
    remarks.append(f"offline (could not download {data_set.filename}: {reasons})")
    return None


def _no_data(data_set: DataSet, remarks: list[str]) -> NoDataError:
    """The one-line error when no source has the data set: what went wrong, then what to do."""
    fixes = ["reinstall the course (it ships a checksummed copy)"] if data_set.package_file else []
    fixes += [f"run once with internet (it is then cached in {cache_dir()})",
              f"set {data_set.env_var}=/path/to/{data_set.filename}"]
    return NoDataError(f"No {data_set.name} available ({'; '.join(remarks)}). To fix it: "
                       f"{', '.join(fixes[:-1])} or {fixes[-1]}")


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


# -----------------------------------------------------------------------------
# loading

def load(data_set: DataSet, path=None, *, offline: bool | None = None) -> Loaded:
    """The bytes of ``data_set`` from the first source that has them (the order of the module docstring).

    ``offline=None`` reads ``$TUTOR_OFFLINE``; ``offline=True`` never downloads (the cache is still used).
    """
    if path is not None:
        return _from_user_file(data_set, path)
    env_path = env.text(data_set.env_var)
    if env_path:
        return _from_user_file(data_set, env_path, data_set.env_var)
    remarks = []  # what went wrong on the way, for the notice
    found = _from_package(data_set, remarks)
    if found is None:
        found = _from_cache(data_set, remarks)
    if found is None:
        if offline is None and env.offline():
            remarks.append(f"offline ({env.OFFLINE}=1): no download tried")
        elif offline:
            remarks.append("offline: no download tried")
        else:
            found = _from_download(data_set, remarks)
    if found is None:
        raise _no_data(data_set, remarks)
    return replace(found, remarks=tuple(remarks))


def announce(head: str, loaded: Loaded, *remarks: str, verbose: bool = True) -> str:
    """The one line a load says: ``head`` (e.g. ``"Names: 3"``), where from, then every remark after a dash.
    Printed unless ``verbose=False``; returned either way."""
    notice = f"{head} {loaded.where}"
    remarks = loaded.remarks + remarks
    if remarks:
        notice += " — " + "; ".join(remarks)
    if verbose:
        _say(notice)
    return notice


def _say(line: str) -> None:
    """Print ``line``, even on a console that cannot show '–' or '—'."""
    try:
        print(line)
    except UnicodeEncodeError:
        print(line.encode("ascii", "replace").decode("ascii"))

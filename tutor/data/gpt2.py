"""GPT-2's vocabulary files (notebook 11's last section, notebook 12): ``encoder.json`` and ``vocab.bpe``.

They are OpenAI's files, the ones ``tiktoken.get_encoding("gpt2")`` reads, and come through the course's one
loading order (``tutor.data.sources``): your own copies (``TUTOR_GPT2_ENCODER``, ``TUTOR_GPT2_MERGES``), the
cache, a download (1.5 MB, checksum verified). They do not ship with the course: where they are not here and
there is no network, ``gpt2_files`` says so in one line and returns ``None``, and the notebook skips that part.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import tiktoken

from tutor import env
from tutor.data import sources
from tutor.errors import DataFileError, NoDataError

BASE_URL = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"

ENCODER = sources.DataSet(
    name="GPT-2's encoder.json",
    filename="gpt2-encoder.json",
    sha256="196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",  # the hash tiktoken checks
    urls=(BASE_URL + "encoder.json",),
    env_var=env.GPT2_ENCODER,
    file_label="GPT-2 encoder.json file",
    expected="GPT-2's encoder.json, a JSON object {token: id}",
)
MERGES = sources.DataSet(
    name="GPT-2's vocab.bpe",
    filename="gpt2-vocab.bpe",
    sha256="1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    urls=(BASE_URL + "vocab.bpe",),
    env_var=env.GPT2_MERGES,
    file_label="GPT-2 vocab.bpe file",
    expected="GPT-2's vocab.bpe, one merge per line",
)


@dataclass(frozen=True)
class GPT2Files:
    """Where GPT-2's two files are on this machine, and the notice that said where they came from."""

    encoder: Path  # encoder.json: {token: id}
    merges: Path  # vocab.bpe: the 50,000 merges in the order learned
    notice: str


def _as_path(data_set: sources.DataSet, loaded: sources.Loaded) -> Path:
    """A file holding ``loaded``: your own file, the cached copy, or (if the cache could not be written) a
    temporary copy."""
    if loaded.source == "file":
        return Path(loaded.location)
    cached = sources.cache_dir() / data_set.filename
    if cached.is_file():
        return cached
    folder = Path(tempfile.mkdtemp(prefix="tutor-gpt2-"))
    (folder / data_set.filename).write_bytes(loaded.data)
    return folder / data_set.filename


def gpt2_files(*, verbose: bool = True, offline: bool | None = None) -> GPT2Files | None:
    """GPT-2's ``encoder.json`` and ``vocab.bpe``, or ``None`` when they are not here and cannot be downloaded.
    Either way one line says what happened (``verbose=False`` silences it)."""
    try:
        loaded = [(data_set, sources.load(data_set, offline=offline)) for data_set in (ENCODER, MERGES)]
    except (NoDataError, DataFileError) as error:
        reason = str(error).split(". To fix it")[0]
        if isinstance(error, NoDataError) and " available (" in reason:
            reason = reason.split(" available (", 1)[1].removesuffix(")")
        notice = (f"GPT-2's vocabulary files are not here ({reason}), so this part is skipped. With internet they "
                  f"are downloaded once (1.5 MB); or set {env.GPT2_ENCODER} and {env.GPT2_MERGES} to your copies.")
        if verbose:
            print(notice)
        return None
    paths = [_as_path(data_set, found) for data_set, found in loaded]
    parts = [found.where.removeprefix("from ") if found.source == "file"  # "encoder.json (TUTOR_GPT2_ENCODER)"
             else f"{data_set.filename.removeprefix('gpt2-')} {found.where}" for data_set, found in loaded]
    notice = "GPT-2's vocabulary: " + "; ".join(parts)
    remarks = [r for _, found in loaded for r in found.remarks]
    if remarks:
        notice += " — " + "; ".join(dict.fromkeys(remarks))
    if verbose:
        print(notice)
    return GPT2Files(paths[0], paths[1], notice)


def tiktoken_gpt2(files: GPT2Files) -> tiktoken.Encoding:
    """tiktoken's own ``"gpt2"`` encoding, reading these files instead of the internet: they are put in a
    temporary ``TIKTOKEN_CACHE_DIR`` under the names tiktoken looks for (the sha1 of their URLs), and tiktoken
    checks their sha256 itself."""
    cache = Path(tempfile.mkdtemp(prefix="tiktoken-gpt2-"))
    for url, path in ((ENCODER.urls[0], files.encoder), (MERGES.urls[0], files.merges)):
        shutil.copyfile(path, cache / hashlib.sha1(url.encode()).hexdigest())
    before = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    try:
        return tiktoken.get_encoding("gpt2")
    finally:
        if before is None:
            del os.environ["TIKTOKEN_CACHE_DIR"]
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = before
        shutil.rmtree(cache, ignore_errors=True)

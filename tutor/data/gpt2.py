"""GPT-2's files: its vocabulary (``encoder.json`` and ``vocab.bpe``; notebook 11's last section, notebook 12) and its
weights (``model.safetensors``; notebook 12).

They are OpenAI's files, the ones ``tiktoken.get_encoding("gpt2")`` reads, and come through the course's one
loading order (``tutor.data.sources``): your own copies (``TUTOR_GPT2_ENCODER``, ``TUTOR_GPT2_MERGES``), the
cache, a download (1.5 MB, checksum verified). They do not ship with the course: where they are not here and
there is no network, ``gpt2_files`` says so in one line and returns ``None``, and the notebook skips that part.

``gpt2_weights()`` finds ``model.safetensors`` of ``openai-community/gpt2`` (OpenAI's 124M GPT-2 as Hugging Face
hosts it, MIT licence; 548 MB in float32) in huggingface_hub's cache, or downloads it once, saying its size first
and showing huggingface_hub's progress bar; the cache is ``~/.cache/huggingface/hub`` (``HF_HOME`` moves it). With no
network, or ``TUTOR_OFFLINE=1`` / ``HF_HUB_OFFLINE=1``, and nothing cached, one line says so and it returns ``None``:
the notebook then runs on ``tutor.huggingface.random_gpt2``, a randomly initialised model of GPT-2's shape, so that
every cell runs. ``huggingface_hub`` is imported only when used (it takes seconds), and a missing one is a ``None``
and one line, never an exception.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import tiktoken
import torch

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


# --- the weights -------------------------------------------------------------------------------------------------

REPOS = {"small": "openai-community/gpt2", "medium": "openai-community/gpt2-medium",
         "large": "openai-community/gpt2-large", "xl": "openai-community/gpt2-xl"}
WEIGHTS = "model.safetensors"
INSTALL = "pip install transformers huggingface_hub"


@dataclass(frozen=True)
class Weights:
    """Where GPT-2's weights are on this machine."""

    repo: str  # "openai-community/gpt2"
    path: Path  # model.safetensors in huggingface_hub's cache
    size: int  # bytes
    notice: str  # the line that said where they came from


def _say(line: str, verbose: bool) -> None:
    if verbose:
        print(line)


def _offline(offline: bool | None) -> bool:
    if offline is not None:
        return offline
    return env.offline() or env.is_true(os.environ.get("HF_HUB_OFFLINE"))


def gpt2_weights(size: str = "small", *, verbose: bool = True, offline: bool | None = None,
                 skipped: str = "so this notebook runs on a random model of GPT-2's shape, and its text is gibberish",
                 ) -> Weights | None:
    """GPT-2's ``model.safetensors`` of ``size`` (``"small"``: 124M), from the cache or downloaded once; ``None``,
    with one line saying why, when it is not here and cannot be downloaded (ending with ``skipped``: what the
    notebook does then)."""
    repo = REPOS[size]
    try:
        import huggingface_hub as hub  # seconds to import: only here
    except ImportError:
        _say(f"huggingface_hub is not installed ({INSTALL}), {skipped}.", verbose)
        return None
    cached = hub.try_to_load_from_cache(repo, WEIGHTS)
    if isinstance(cached, str):
        path = Path(cached)
        notice = f"GPT-2 ({repo}): {WEIGHTS}, {path.stat().st_size / 1e6:,.0f} MB, from the cache ({path.parent})"
        _say(notice, verbose)
        return Weights(repo, path, path.stat().st_size, notice)
    if _offline(offline):
        _say(f"GPT-2's weights are not in the cache and downloads are off (TUTOR_OFFLINE or HF_HUB_OFFLINE), "
             f"{skipped}.", verbose)
        return None
    try:
        size_bytes = hub.get_hf_file_metadata(hub.hf_hub_url(repo, WEIGHTS), timeout=10).size
        _say(f"Downloading GPT-2 ({repo}): {WEIGHTS}, {size_bytes / 1e6:,.0f} MB, once; it is kept in "
             f"huggingface_hub's cache ({hub.constants.HF_HUB_CACHE}).", verbose)
        path = Path(hub.hf_hub_download(repo, WEIGHTS))  # shows its own progress bar
    except Exception as error:  # noqa: BLE001 - no network, a proxy, a full disk: say so in one line and go on
        reason = str(error).splitlines()[0][:120] if str(error) else type(error).__name__
        _say(f"GPT-2's weights could not be downloaded ({type(error).__name__}: {reason}), {skipped}.", verbose)
        return None
    notice = f"GPT-2 ({repo}): {WEIGHTS}, {path.stat().st_size / 1e6:,.0f} MB, downloaded to {path.parent}"
    _say(notice, verbose)
    return Weights(repo, path, path.stat().st_size, notice)


def read_weights(weights: Weights) -> dict[str, torch.Tensor]:
    """The tensors of ``model.safetensors`` by Hugging Face's names (no ``transformer.`` prefix, no ``lm_head``)."""
    from safetensors.torch import load_file  # comes with transformers and huggingface_hub

    return load_file(str(weights.path))

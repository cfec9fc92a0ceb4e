"""Tiny Shakespeare (notebooks 10 and 11): the text, its character vocabulary and the 90/10 split.

The text is karpathy/char-rnn's ``data/tinyshakespeare/input.txt`` (1,115,394 characters, public domain).
It ships inside the package, gzipped (``tutor/data/tinyshakespeare.txt.gz``, see ``tutor/data/DATA.md``),
so it loads offline. It loads in the order of ``tutor.data.sources`` (your file or ``TUTOR_SHAKESPEARE``,
the package copy, the cache, a download: first the file at a pinned commit of char-rnn, then the same path
on the master branch). With none of them, a one-line ``NoDataError`` says what to do: no other text ever
stands in for Shakespeare.

Every load prints one line saying which source was used and how many characters it gave.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from tutor import env
from tutor.data.sources import DataSet, announce, load
from tutor.errors import DataFileError
from tutor.files import sha256

SHAKESPEARE_FILENAME = "tinyshakespeare.txt"
SHAKESPEARE_PACKAGE_FILE = "tinyshakespeare.txt.gz"  # the copy in tutor/data/ (the checksum is of the unzipped text)
# commit d1d7aa34 of karpathy/char-rnn holds the file with exactly this content (1,115,394 characters)
SHAKESPEARE_URLS = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/d1d7aa34fdb3626174bce1d753e6cc6845ce7087/"
    "data/tinyshakespeare/input.txt",
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
)
SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
SHAKESPEARE_LENGTH = 1_115_394  # characters (all ASCII, so also bytes)

# The 65 characters of tiny Shakespeare, in sorted order: newline, space, punctuation, 3, A-Z, a-z.
SHAKESPEARE_CHARS = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


DATA_SET = DataSet(
    name="tiny Shakespeare", filename=SHAKESPEARE_FILENAME, sha256=SHAKESPEARE_SHA256, urls=SHAKESPEARE_URLS,
    env_var=env.SHAKESPEARE, file_label="text file", expected=f"a text file, such as {SHAKESPEARE_FILENAME}",
    package_file=SHAKESPEARE_PACKAGE_FILE,
)


@dataclass
class LoadedText:
    """What ``load_shakespeare_with_source`` returns: the text and where it came from."""

    text: str
    source: str  # "file", "package", "cache" or "download"
    location: str  # the file, package file, cache file or URL the text was read from
    notice: str  # the line that was printed (or would have been, with verbose=False)
    verified: bool = False  # it matched the pinned sha256: the real tiny Shakespeare, all of it


def load_shakespeare_with_source(path=None, *, verbose: bool = True, offline: bool | None = None) -> LoadedText:
    """Load tiny Shakespeare (or your own text) and say where it came from. See the module docstring.

    ``path`` (or ``$TUTOR_SHAKESPEARE``) is your own text file. ``offline=None`` reads
    ``$TUTOR_OFFLINE``; ``offline=True`` never downloads (the cache is still used).
    """
    loaded = load(DATA_SET, path, offline=offline)
    text = loaded.text
    if not text:
        raise DataFileError(f"{loaded.location} is empty (expected a text file)")
    verified = loaded.source != "file"  # the package copy, the cache and a download are checked in load()
    if loaded.source == "file" and sha256(loaded.data) == DATA_SET.sha256:  # your own copy of the real text
        loaded, verified = replace(loaded, where=loaded.where + ", checksum verified"), True
    notice = announce(f"Text: {len(text):,} characters", loaded, verbose=verbose)
    return LoadedText(text, loaded.source, loaded.location, notice, verified)


def load_shakespeare(path=None, *, verbose: bool = True, offline: bool | None = None) -> str:
    """Tiny Shakespeare as one string (see ``load_shakespeare_with_source``).

    >>> text = load_shakespeare()   # prints "Text: 1,115,394 characters from the package (...)"
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
    def from_text(cls, text: str) -> CharVocab:
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

"""The data sets of the course and their batches: ``from tutor import data``, then ``data.load_names()``.

| module | what is in it |
|---|---|
| ``sources`` | ``DataSet``, ``load``: the one loading order of every data set; ``cache_dir``, ``download`` |
| ``names`` | the names data set (notebooks 08-09): ``load_names``, ``clean_names``, ``split_names``, ... |
| ``shakespeare`` | tiny Shakespeare (notebooks 10-11): ``load_shakespeare``, ``CharVocab``, ``shakespeare_data``, ... |
| ``gpt2`` | GPT-2's vocabulary (``gpt2_files``, ``tiktoken_gpt2``) and weights (``gpt2_weights``); not shipped |
| ``batching`` | ``NamesDataset``, ``collate``, ``make_loader``; sortish and packed batches of names |

Where a data set comes from, in this order (``tutor.data.sources``):

1. ``path=``, your own file (a missing file, a directory or a file that is not text is a one-line error);
2. the environment variable ``TUTOR_NAMES`` or ``TUTOR_SHAKESPEARE``: the same;
3. the copy shipped inside the package (``allnames.txt.gz``, ``tinyshakespeare.txt.gz``; see ``DATA.md``
   here), checksum verified: the course runs offline by construction;
4. the cache (``cache_dir()``, moved by ``TUTOR_CACHE_DIR``), checksum verified, a bad copy deleted;
5. a download into the cache (pinned URLs, 5 s timeout, checksum verified; ``TUTOR_OFFLINE=1`` skips it);
6. otherwise a one-line ``NoDataError`` saying what to do. No other text ever stands in for a data set.

Every load prints one line saying which source was used (``verbose=False`` silences it). The alphabet
(``alphabet``, ``stoi``, ``encode``, ``PAD_X``, ``PAD_Y``, ...) is re-exported from ``tutor.reference``.
"""

from tutor.data.batching import (
    PACK_WIDTH,
    NamesDataset,
    SortishBatchSampler,
    collate,
    make_loader,
    make_packed_loader,
    make_sortish_loader,
    name_positions,
    name_starts,
    pack_names,
    padding_fraction,
    same_name_mask,
    worker_options,
)
from tutor.data.names import (
    FILENAME,
    NUM_NAMES,
    SHA256,
    URLS,
    LoadedNames,
    check_names_text,
    clean_names,
    full_list_hint,
    is_full_data_set,
    load_names,
    load_names_with_source,
    max_name_length,
    split_names,
)
from tutor.data.shakespeare import (
    SHAKESPEARE_CHARS,
    SHAKESPEARE_FILENAME,
    SHAKESPEARE_LENGTH,
    SHAKESPEARE_SHA256,
    SHAKESPEARE_URLS,
    CharVocab,
    LoadedText,
    ShakespeareData,
    load_shakespeare,
    load_shakespeare_with_source,
    shakespeare_data,
    split_text,
)
from tutor.data.sources import TIMEOUT, cache_dir
from tutor.errors import (
    DataFileError,
    DataFileIsADirectoryError,
    DataFileNotFoundError,
    NamesFileError,
    NamesFileIsADirectoryError,
    NamesFileNotFoundError,
    NoDataError,
    NoNamesError,
)
from tutor.reference import PAD_X, PAD_Y, alphabet, decode, encode, itos, stoi, vocab_size

__all__ = [
    "alphabet", "stoi", "itos", "vocab_size", "PAD_X", "PAD_Y", "encode", "decode",
    "LoadedNames", "load_names", "load_names_with_source", "clean_names", "cache_dir",
    "check_names_text", "full_list_hint", "is_full_data_set",
    "split_names", "max_name_length", "NamesDataset", "collate", "make_loader",
    "LoadedText", "load_shakespeare", "load_shakespeare_with_source", "SHAKESPEARE_CHARS", "CharVocab",
    "split_text", "ShakespeareData", "shakespeare_data",
    "SortishBatchSampler", "make_sortish_loader", "padding_fraction",
    "PACK_WIDTH", "pack_names", "make_packed_loader", "name_starts", "name_positions", "same_name_mask",
    "worker_options",
    # also importable from here, as before: the pinned files, and the errors of a bad data file
    "FILENAME", "URLS", "SHA256", "NUM_NAMES", "TIMEOUT",
    "SHAKESPEARE_FILENAME", "SHAKESPEARE_URLS", "SHAKESPEARE_SHA256", "SHAKESPEARE_LENGTH",
    "DataFileError", "DataFileNotFoundError", "DataFileIsADirectoryError", "NoDataError",
    "NamesFileError", "NamesFileNotFoundError", "NamesFileIsADirectoryError", "NoNamesError",
]

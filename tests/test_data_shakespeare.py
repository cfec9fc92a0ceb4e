"""tutor.data's tiny Shakespeare source: explicit path and environment variable, the checksummed copy that
ships in the package (used offline; a corrupted one never), checksummed cache, download (pinned commit, then
the branch), and no fallback: nothing else ever stands in for the text; the character vocabulary and the
90/10 split. No test touches the network (`tutor.data.sources.download` is replaced)."""

import dataclasses
import hashlib

import pytest
import torch
from datakit import FakeDownload, damaged_package, isolated, without_package_copy  # noqa: F401  (isolated: autouse)

from conftest import SHARED
from tutor import data, errors
from tutor.data import shakespeare, sources

SEED = SHARED / "data" / "tinyshakespeare.txt"
needs_seed_file = pytest.mark.skipif(not SEED.is_file(), reason=f"{SEED} is absent")
SMALL = b"First Citizen:\nBefore we proceed any further, hear me speak.\n"


@pytest.fixture
def unshipped(monkeypatch):
    """Tiny Shakespeare as if it did not ship in the package (to test the cache and the download)."""
    without_package_copy(monkeypatch, shakespeare)


@pytest.fixture
def small_is_shakespeare(monkeypatch, unshipped):
    """Pretend SMALL is the real file (its checksum becomes the pinned one), and that it does not ship."""
    pinned = dataclasses.replace(shakespeare.DATA_SET, sha256=hashlib.sha256(SMALL).hexdigest())
    monkeypatch.setattr(shakespeare, "DATA_SET", pinned)


@needs_seed_file
def test_the_shared_file_is_tiny_shakespeare(capsys):
    assert data.load_shakespeare_with_source(SEED, verbose=False).verified
    text = data.load_shakespeare(SEED)
    assert len(text) == shakespeare.SHAKESPEARE_LENGTH == 1_115_394
    assert text.startswith("First Citizen:")
    assert capsys.readouterr().out == "Text: 1,115,394 characters from tinyshakespeare.txt, checksum verified\n"
    vocab = data.CharVocab.from_text(text)
    assert vocab.vocab_size == 65 and vocab.chars == data.SHAKESPEARE_CHARS
    assert hashlib.sha256(SEED.read_bytes()).hexdigest() == shakespeare.SHAKESPEARE_SHA256


def test_explicit_path_and_environment_variable(tmp_path, monkeypatch, capsys):
    f = tmp_path / "mine.txt"
    f.write_bytes(SMALL)
    assert data.load_shakespeare(f) == SMALL.decode()
    assert capsys.readouterr().out == f"Text: {len(SMALL)} characters from mine.txt\n"
    monkeypatch.setenv("TUTOR_SHAKESPEARE", str(f))
    loaded = data.load_shakespeare_with_source(verbose=False)
    assert loaded.source == "file" and "(TUTOR_SHAKESPEARE)" in loaded.notice
    monkeypatch.setenv("TUTOR_SHAKESPEARE", str(tmp_path / "missing.txt"))
    with pytest.raises(FileNotFoundError, match="TUTOR_SHAKESPEARE") as info:
        data.load_shakespeare()
    assert isinstance(info.value, errors.DataFileNotFoundError)  # one line, as for the names
    monkeypatch.setenv("TUTOR_SHAKESPEARE", str(tmp_path))
    with pytest.raises(IsADirectoryError, match="is a directory") as info:
        data.load_shakespeare()
    assert isinstance(info.value, errors.DataFileIsADirectoryError)


def test_a_file_that_is_not_text_or_is_empty_is_a_one_line_error(tmp_path):
    binary = tmp_path / "picture.png"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    with pytest.raises(errors.DataFileError, match="is not a text file") as info:
        data.load_shakespeare(binary)
    assert info.value._render_traceback_() == [f"DataFileError: {info.value}"] and "\n" not in str(info.value)
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="is empty"):
        data.load_shakespeare(empty)


def test_download_tries_the_pinned_commit_then_the_branch_and_caches(monkeypatch, small_is_shakespeare, capsys):
    fake = FakeDownload(OSError("boom"), SMALL)
    monkeypatch.setattr(sources, "download", fake)
    loaded = data.load_shakespeare_with_source()
    assert loaded.source == "download" and loaded.text == SMALL.decode()
    assert fake.calls == list(shakespeare.SHAKESPEARE_URLS)
    assert "d1d7aa34fdb3626174bce1d753e6cc6845ce7087" in fake.calls[0] and "/master/" in fake.calls[1]
    assert capsys.readouterr().out.count("\n") == 1  # one line
    # the next load reads the cache, without the network
    monkeypatch.setattr(sources, "download", FakeDownload())
    assert data.load_shakespeare_with_source(verbose=False).source == "cache"


def test_a_corrupted_cache_is_deleted_and_replaced(monkeypatch, small_is_shakespeare):
    cached = data.cache_dir() / shakespeare.SHAKESPEARE_FILENAME
    cached.parent.mkdir(parents=True)
    cached.write_bytes(SMALL[:10])  # truncated
    monkeypatch.setattr(sources, "download", FakeDownload(SMALL))
    loaded = data.load_shakespeare_with_source(verbose=False)
    assert loaded.source == "download" and "failed its checksum" in loaded.notice
    assert cached.read_bytes() == SMALL


def test_the_package_copy_is_the_real_text_and_is_used_offline(monkeypatch, capsys):
    monkeypatch.setenv("TUTOR_OFFLINE", "1")
    loaded = data.load_shakespeare_with_source()
    assert (loaded.source, loaded.verified, len(loaded.text)) == ("package", True, shakespeare.SHAKESPEARE_LENGTH)
    assert loaded.text.startswith("First Citizen:") and loaded.location.endswith("tinyshakespeare.txt.gz")
    assert capsys.readouterr().out == ("Text: 1,115,394 characters from the package (tinyshakespeare.txt.gz, "
                                       "checksum verified)\n")
    assert data.CharVocab.from_text(loaded.text).chars == data.SHAKESPEARE_CHARS
    assert not data.cache_dir().exists()  # nothing cached, nothing downloaded


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_a_corrupted_package_copy_is_never_used_and_nothing_stands_in(monkeypatch, tmp_path, capsys, damage):
    damaged_package(monkeypatch, tmp_path, {"truncated": lambda b: b[:-1000], "empty": lambda b: b""}[damage])
    with pytest.raises(errors.NoDataError) as info:
        data.load_shakespeare(offline=True)
    message = str(info.value)
    assert message.startswith("No tiny Shakespeare available (the packaged ") and "\n" not in message
    assert "tinyshakespeare.txt.gz failed its checksum and was not used (reinstall the course)" in message
    assert "To fix it: reinstall the course" in message and "TUTOR_SHAKESPEARE=/path/to/tinyshakespeare.txt" in message
    assert capsys.readouterr().out == ""  # no text was announced: none was loaded


def test_wrong_checksum_download_is_a_one_line_error_and_never_cached(monkeypatch, unshipped):
    monkeypatch.setattr(sources, "download", FakeDownload(b"tampered"))
    with pytest.raises(errors.NoDataError) as info:
        data.load_shakespeare()
    message = str(info.value)
    assert "\n" not in message and "checksum mismatch" in message and "names" not in message
    assert not (data.cache_dir() / shakespeare.SHAKESPEARE_FILENAME).exists()


def test_offline_never_downloads(unshipped):
    with pytest.raises(errors.NoDataError, match="offline: no download tried"):
        data.load_shakespeare_with_source(offline=True)


def test_your_own_file_is_verified_only_when_it_is_the_real_text(tmp_path):
    mine = tmp_path / "mine.txt"
    mine.write_bytes(SMALL)
    assert not data.load_shakespeare_with_source(mine, verbose=False).verified


def test_char_vocab_round_trip_and_errors():
    vocab = data.CharVocab.from_text("To be, or not to be\n")
    assert vocab.chars == "\n ,Tbenort"
    ids = vocab.encode("not to be")
    assert vocab.decode(ids) == "not to be" and vocab.decode(torch.tensor(ids)) == "not to be"
    assert vocab.tensor("be").dtype == torch.long
    with pytest.raises(KeyError, match="'z'"):
        vocab.encode("zoo")


def test_split_is_the_first_90_percent_then_the_rest():
    train, val = data.split_text(torch.arange(100))
    assert torch.equal(train, torch.arange(90)) and torch.equal(val, torch.arange(90, 100))
    with pytest.raises(ValueError):
        data.split_text(torch.arange(10), 1.0)


@needs_seed_file
def test_shakespeare_data_bundle():
    d = data.shakespeare_data(SEED, verbose=False)
    assert d.vocab.vocab_size == 65
    assert len(d.train) == 1_003_854 and len(d.val) == 111_540
    assert d.vocab.decode(d.train[:14]) == "First Citizen:"

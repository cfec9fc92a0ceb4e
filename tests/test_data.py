"""tutor.data: where the names come from, how they are cleaned, split and batched.

These tests never touch the network: `tutor.data.sources.download` is replaced in every test (an autouse
fixture makes any unexpected call fail), and the cache lives in `tmp_path`. The names ship in the package
(`tutor/data/allnames.txt.gz`): offline, that copy is used; the tests of the cache and the download take it
away first (`unshipped`).
"""

import dataclasses
import hashlib
import re
import socket
import urllib.error

import pytest
import torch
from datakit import FakeDownload, damaged_package, isolated, without_package_copy  # noqa: F401  (isolated: autouse)

from conftest import ALLNAMES
from tutor import data, errors
from tutor.data import names as names_module
from tutor.data import sources

needs_seed_file = pytest.mark.skipif(not ALLNAMES.is_file(), reason=f"{ALLNAMES} is absent")
LETTERS_ONLY = re.compile(r"^[a-z]+$")


@pytest.fixture
def unshipped(monkeypatch):
    """The names data set as if it did not ship in the package (to test the cache and the download)."""
    without_package_copy(monkeypatch, names_module)


@pytest.fixture
def served(monkeypatch, unshipped):
    """The bytes a good download returns: the seed file if present, else a tiny synthetic file
    (with the module's checksum patched to match). The package copy is taken away."""
    if ALLNAMES.is_file():
        payload = ALLNAMES.read_bytes()
        assert hashlib.sha256(payload).hexdigest() == names_module.SHA256 == names_module.DATA_SET.sha256
    else:
        payload = b"Linda\nJames\nMichael\nRobert\nZzyzx\n"
        pinned = dataclasses.replace(names_module.DATA_SET, sha256=hashlib.sha256(payload).hexdigest())
        monkeypatch.setattr(names_module, "DATA_SET", pinned)
    return payload


def expected_count(payload):
    return len(payload.decode().split())


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


# -----------------------------------------------------------------------------
# explicit sources

def test_explicit_path(tmp_path, capsys):
    f = write(tmp_path / "pets.txt", "Laika\nBelka\nStrelka\n")
    loaded = data.load_names_with_source(f)
    assert loaded.names == ["laika", "belka", "strelka"]
    assert loaded.source == "file" and loaded.location == str(f)
    out = capsys.readouterr().out
    assert out == "Names: 3 from pets.txt\n"  # the file's name, not a path of this machine
    assert data.load_names(str(f), verbose=False) == ["laika", "belka", "strelka"]
    assert capsys.readouterr().out == ""


def test_env_var_path(tmp_path, monkeypatch, capsys):
    f = write(tmp_path / "env.txt", "ada\ngrace\n")
    monkeypatch.setenv("TUTOR_NAMES", str(f))
    assert data.load_names() == ["ada", "grace"]
    out = capsys.readouterr().out.strip()
    assert out == "Names: 2 from env.txt (TUTOR_NAMES)"
    # an explicit path wins over the environment variable
    g = write(tmp_path / "arg.txt", "alan\n")
    assert data.load_names(g, verbose=False) == ["alan"]


def test_missing_explicit_path_is_a_clear_error(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))) as info:
        data.load_names(missing)
    assert "path=" in str(info.value)


def test_missing_env_path_is_a_clear_error(tmp_path, monkeypatch):
    missing = tmp_path / "gone.txt"
    monkeypatch.setenv("TUTOR_NAMES", str(missing))
    with pytest.raises(FileNotFoundError, match="TUTOR_NAMES") as info:
        data.load_names()
    assert str(missing) in str(info.value)


def test_empty_file_is_a_clear_error(tmp_path):
    f = write(tmp_path / "empty.txt", "\n  \n")
    with pytest.raises(ValueError, match="contains no names"):
        data.load_names(f)
    g = write(tmp_path / "digits.txt", "123\n--\n")
    with pytest.raises(ValueError, match="does not look like a names file: only 0 of its 2 lines"):
        data.load_names(g)


# -----------------------------------------------------------------------------
# cache and download

def test_download_lands_in_cache_then_cache_is_used(monkeypatch, tmp_path, served, capsys):
    fake = FakeDownload(served)
    monkeypatch.setattr(sources, "download", fake)
    first = data.load_names_with_source()
    assert first.source == "download" and len(fake.calls) == 1
    assert (fake.calls[0], fake.timeouts[0]) == (names_module.URLS[0], sources.TIMEOUT)
    cached = tmp_path / "cache" / names_module.FILENAME
    assert cached.read_bytes() == served
    assert [p.name for p in cached.parent.iterdir()] == [names_module.FILENAME]  # no temp file left
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "downloaded from" in out and "checksum verified" in out
    assert str(tmp_path) not in out

    second = data.load_names_with_source()
    assert len(fake.calls) == 1  # not downloaded again
    assert second.source == "cache" and second.names == first.names
    assert len(second.names) == expected_count(served)
    cached = tmp_path / "cache" / "allnames.txt"
    assert capsys.readouterr().out == f"Names: {len(second.names):,} from the cache ({cached}, checksum verified)\n"


def test_second_url_is_tried(monkeypatch, served):
    calls = []

    def flaky(url, timeout):
        calls.append(url)
        if url == names_module.URLS[0]:
            raise urllib.error.HTTPError(url, 404, "Not Found", {}, None)
        return served

    monkeypatch.setattr(sources, "download", flaky)
    loaded = data.load_names_with_source(verbose=False)
    assert loaded.source == "download" and loaded.location == names_module.URLS[1]
    assert calls == list(names_module.URLS[:2])


@pytest.mark.parametrize("damage", ["truncate", "corrupt"])
def test_bad_cache_is_reported_deleted_and_replaced(monkeypatch, tmp_path, served, capsys, damage):
    cached = tmp_path / "cache" / names_module.FILENAME
    cached.parent.mkdir(parents=True)
    cached.write_bytes(served[: len(served) // 2] if damage == "truncate" else b"X" + served[1:])
    fake = FakeDownload(served)
    monkeypatch.setattr(sources, "download", fake)
    loaded = data.load_names_with_source()
    assert len(fake.calls) == 1 and loaded.source == "download"
    assert cached.read_bytes() == served
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "failed its checksum" in out and "deleted" in out


def test_bad_cache_offline_is_deleted_and_is_a_one_line_error(monkeypatch, tmp_path, unshipped):
    cached = tmp_path / "cache" / names_module.FILENAME
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"Lin")
    monkeypatch.setenv("TUTOR_OFFLINE", "1")
    with pytest.raises(errors.NoDataError, match="failed its checksum") as info:
        data.load_names_with_source()
    assert not cached.exists() and "\n" not in str(info.value)


# -----------------------------------------------------------------------------
# offline: the package copy, else a one-line error (never another list of names)

def test_offline_the_package_copy_is_used(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("TUTOR_OFFLINE", "1")
    loaded = data.load_names_with_source()
    assert loaded.source == "package" and len(loaded.names) == data.NUM_NAMES
    assert loaded.names[:3] == ["linda", "james", "michael"] and data.is_full_data_set(loaded)
    assert capsys.readouterr().out == "Names: 100,364 from the package (allnames.txt.gz, checksum verified)\n"
    assert not (tmp_path / "cache").exists()  # nothing cached, nothing downloaded
    monkeypatch.delenv("TUTOR_OFFLINE")
    assert data.load_names_with_source(verbose=False).source == "package"  # online too: no download needed


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_a_corrupted_package_copy_is_never_used(monkeypatch, tmp_path, capsys, damage):
    cut = {"truncated": lambda b: b[: len(b) // 2], "flipped": lambda b: b[:-20] + bytes([b[-20] ^ 0xFF]) + b[-19:]}
    damaged_package(monkeypatch, tmp_path, cut[damage])
    with pytest.raises(errors.NoDataError) as info:
        data.load_names(offline=True)
    message = str(info.value)
    assert message.startswith("No names available (the packaged ") and "\n" not in message
    assert "allnames.txt.gz failed its checksum and was not used (reinstall the course)" in message
    assert "To fix it: reinstall the course" in message and "TUTOR_NAMES=/path/to/allnames.txt" in message
    assert capsys.readouterr().out == ""  # no names were announced: none were loaded


@pytest.mark.parametrize("error", [
    urllib.error.URLError(socket.gaierror(-3, "Temporary failure in name resolution")),
    TimeoutError("timed out"),
    urllib.error.URLError(TimeoutError("timed out")),
])
def test_a_failed_download_without_a_package_copy_is_a_one_line_error(monkeypatch, tmp_path, unshipped, error):
    fake = FakeDownload(error)
    monkeypatch.setattr(sources, "download", fake)
    with pytest.raises(errors.NoDataError) as info:
        data.load_names_with_source()
    assert fake.calls == list(names_module.URLS)
    message = str(info.value)
    assert "\n" not in message and message.startswith("No names available (offline (could not download allnames.txt")
    if isinstance(error, TimeoutError) or isinstance(error.reason, TimeoutError):
        assert "timed out" in message
    else:
        assert "no internet connection" in message and "gaierror" not in message and "Errno" not in message
    # the line says what to do, and where the download would be cached
    assert str(tmp_path / "cache") in message and "TUTOR_NAMES=/path/to/allnames.txt" in message
    assert not (tmp_path / "cache" / names_module.FILENAME).exists()


def test_wrong_checksum_download_is_never_used_nor_cached(monkeypatch, tmp_path, unshipped):
    monkeypatch.setattr(sources, "download", FakeDownload(b"<html>rate limited</html>\n"))
    with pytest.raises(errors.NoDataError, match="could not download allnames.txt: checksum mismatch"):
        data.load_names_with_source()
    assert not (tmp_path / "cache" / names_module.FILENAME).exists()  # never cached


@pytest.mark.parametrize("how", ["env", "argument"])
def test_offline_never_downloads(monkeypatch, unshipped, how):
    fake = FakeDownload(AssertionError("must not be called"))
    monkeypatch.setattr(sources, "download", fake)
    if how == "env":
        monkeypatch.setenv("TUTOR_OFFLINE", "1")
    with pytest.raises(errors.NoDataError, match="no download tried"):
        data.load_names_with_source(offline=True if how == "argument" else None)
    assert fake.calls == []


def test_offline_still_uses_a_good_cache(monkeypatch, tmp_path, served):
    cached = tmp_path / "cache" / names_module.FILENAME
    cached.parent.mkdir(parents=True)
    cached.write_bytes(served)
    monkeypatch.setenv("TUTOR_OFFLINE", "1")
    loaded = data.load_names_with_source(verbose=False)
    assert loaded.source == "cache" and len(loaded.names) == expected_count(served)


# -----------------------------------------------------------------------------
# cleaning

def test_cleaning(tmp_path, capsys):
    f = write(tmp_path / "messy.txt", "LAIKA\nAnne-Marie\nR2d2\n\n  Mary Ann  \n123\nzoë\n")
    loaded = data.load_names_with_source(f)
    assert loaded.names == ["laika", "annemarie", "rd", "maryann", "zo"]
    # '-', '2', '2', ' ', '1', '2', '3', 'ë'; "123" loses everything and is dropped
    assert loaded.dropped_chars == 8 and loaded.changed_names == 5 and loaded.dropped_names == 1
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert "dropped 8 characters outside a–z from 5 names" in out
    assert "dropped 1 name with no letter a–z" in out


def test_clean_names_keeps_duplicates():
    names, dropped, changed, empty = data.clean_names(["Ann", "ann", "ANN"])
    assert names == ["ann", "ann", "ann"] and (dropped, changed, empty) == (0, 0, 0)


# -----------------------------------------------------------------------------
# the seed file

@needs_seed_file
def test_seed_file_count_and_max_length(capsys):
    names = data.load_names(ALLNAMES)
    assert len(names) == data.NUM_NAMES == 100_364
    assert data.max_name_length(names) == 15
    assert all(LETTERS_ONLY.match(n) for n in names)
    assert names[:3] == ["linda", "james", "michael"]
    assert capsys.readouterr().out == "Names: 100,364 from allnames.txt\n"


# -----------------------------------------------------------------------------
# splitting and batching

def test_reexports():
    assert data.vocab_size == 28 and data.alphabet[0] == " " and data.alphabet[-1] == "."
    assert data.PAD_X == 0 and data.PAD_Y == 27
    assert data.encode("laika") == [12, 1, 9, 11, 1]
    assert data.decode([12, 1, 9, 11, 1]) == "laika"
    assert data.stoi["a"] == 1 and data.itos[26] == "z"


def test_split_deterministic_disjoint_covering():
    names = [f"n{chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(500)]
    train, val = data.split_names(names, val_fraction=0.1, seed=3)
    assert len(val) == 50 and len(train) == 450
    assert set(train).isdisjoint(val)
    assert sorted(train + val) == sorted(names)
    assert data.split_names(names, 0.1, seed=3) == (train, val)
    assert data.split_names(names, 0.1, seed=4) != (train, val)
    assert val != names[:50]  # shuffled
    assert names == [f"n{chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(500)]  # untouched
    with pytest.raises(ValueError, match="val_fraction"):
        data.split_names(names, val_fraction=1.0)


def test_dataset_items():
    ds = data.NamesDataset(["laika", "ab"])
    assert len(ds) == 2
    x, y = ds[0]
    assert x.dtype == torch.long and y.dtype == torch.long
    assert x.tolist() == [0, 12, 1, 9, 11, 1]
    assert y.tolist() == [12, 1, 9, 11, 1, 0]
    with pytest.raises(ValueError, match="a-z"):
        data.NamesDataset(["anne-marie"])


def test_collate_pads_x_with_space_and_y_with_dot():
    ds = data.NamesDataset(["laika", "ab", "bob"])
    X, Y = data.collate([ds[0], ds[1], ds[2]])
    assert X.shape == Y.shape == (3, 6)
    assert X.dtype == Y.dtype == torch.long
    assert X.tolist() == [
        [0, 12, 1, 9, 11, 1],
        [0, 1, 2, 0, 0, 0],
        [0, 2, 15, 2, 0, 0],
    ]
    assert Y.tolist() == [
        [12, 1, 9, 11, 1, 0],
        [1, 2, 0, 27, 27, 27],
        [2, 15, 2, 0, 27, 27],
    ]


def test_make_loader_is_seeded_and_covers_everything():
    names = ["ann", "bob", "cy", "dorothea", "ed", "flo", "gus"]
    batches = list(data.make_loader(names, batch_size=3, seed=1))
    assert [X.shape[0] for X, _ in batches] == [3, 3, 1]
    seen = sorted(data.decode(x[1:]).strip() for X, _ in batches for x in X)
    assert seen == sorted(names)
    again = list(data.make_loader(names, batch_size=3, seed=1))
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(batches, again))
    other = list(data.make_loader(names, batch_size=7, seed=2))[0][0]
    first = torch.cat([X[:, :2] for X, _ in batches])  # first letters, in order
    assert not torch.equal(first, other[:, :2])
    dropped = list(data.make_loader(names, batch_size=3, drop_last=True))
    assert len(dropped) == 2
    ordered = next(iter(data.make_loader(names, batch_size=7, shuffle=False)))[0]
    assert data.decode(ordered[0]).strip() == "ann"


# -----------------------------------------------------------------------------
# bad input, pinned download, the full data set

@pytest.mark.parametrize("payload", [
    bytes(range(256)) * 8,  # every byte value
    __import__("random").Random(0).randbytes(4096),  # random bytes
    b"PK\x03\x04" + b"\x00" * 40 + b"allnames.txt" + b"\x00\x01\x02" * 50,  # a zip header
])
def test_a_binary_file_is_rejected_in_one_line(tmp_path, payload):
    f = tmp_path / "names.bin"
    f.write_bytes(payload)
    with pytest.raises(errors.DataFileError, match="is not a text file") as info:
        data.load_names(f)
    assert "\n" not in str(info.value) and str(f) in str(info.value)
    assert isinstance(info.value, ValueError)  # `except ValueError` still catches it


def test_a_text_file_that_is_mostly_not_names_is_rejected(tmp_path):
    code = "\n".join(f"def function_{i}(x, y):\n    return x + y * {i}  # adds" for i in range(30))
    f = write(tmp_path / "script.py", code)
    with pytest.raises(errors.DataFileError, match=r"does not look like a names file: only \d+ of its 60 lines"):
        data.load_names(f)


def test_a_names_file_with_some_noise_is_accepted(tmp_path, capsys):
    f = write(tmp_path / "names.txt", "Laika\nAnne-Marie\nMary Ann\nzoë\nname,count\n42\nR2d2\n")
    assert data.load_names(f) == ["laika", "annemarie", "maryann", "zo", "namecount", "rd"]


def test_the_error_renders_as_one_line_in_ipython(tmp_path):
    f = tmp_path / "random.bin"
    f.write_bytes(bytes(range(256)))
    with pytest.raises(errors.DataFileError) as info:
        data.load_names(f)
    rendered = info.value._render_traceback_()  # what IPython and Jupyter show instead of a traceback
    assert len(rendered) == 1 and rendered[0].startswith("DataFileError: The names file")


def test_missing_file_error_is_one_line_and_still_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        data.load_names(tmp_path / "nope.txt")
    assert isinstance(info.value, errors.DataFileNotFoundError)
    assert errors.NamesFileNotFoundError is errors.DataFileNotFoundError  # the old name still works
    assert info.value._render_traceback_() == [f"DataFileNotFoundError: {info.value}"]


def test_the_first_url_is_pinned_to_the_upstream_commit_and_the_branch_is_a_second_candidate():
    assert names_module.URLS[0] == ("https://raw.githubusercontent.com/hackerb9/ssa-baby-names/"
                            "0b1a1316457d55447d1a1f7bfe57ee15e53cc2f0/allnames.txt")
    assert any("/master/" in url for url in names_module.URLS[1:])


def test_is_full_data_set(monkeypatch, tmp_path, served):
    monkeypatch.setattr(sources, "download", FakeDownload(served))
    assert data.is_full_data_set(data.load_names_with_source(verbose=False))  # download
    assert data.is_full_data_set(data.load_names_with_source(verbose=False))  # cache
    offline = data.load_names_with_source(verbose=False, offline=True, path=None)
    assert offline.source == "cache" and data.is_full_data_set(offline)  # the cache is still used offline
    small = write(tmp_path / "few.txt", "laika\nmary\n")
    assert not data.is_full_data_set(data.load_names_with_source(small, verbose=False))


def test_the_package_copy_is_the_full_data_set():
    assert data.is_full_data_set(data.load_names_with_source(verbose=False, offline=True))


@needs_seed_file
def test_the_seed_file_given_as_a_path_counts_as_the_full_data_set():
    assert data.is_full_data_set(data.load_names_with_source(ALLNAMES, verbose=False))


# --- length-bucketed ("sortish") batches ------------------------------------------------------------


SORTISH_NAMES = ["ann", "bob", "cy", "dorothea", "ed", "flo", "gus", "maximilian", "zoe", "al", "eve", "kate",
                 "liam", "noah", "olivia", "emma", "jo", "sue", "beatrice", "max"] * 3


def test_sortish_batches_use_every_name_once_per_pass():
    sampler = data.SortishBatchSampler([len(n) for n in SORTISH_NAMES], batch_size=4, seed=0, pool=3)
    for _ in range(2):
        batches = list(sampler)
        assert sorted(i for b in batches for i in b) == list(range(len(SORTISH_NAMES)))
        assert len(batches) == len(sampler)


def test_sortish_batches_group_similar_lengths():
    lengths = [len(n) for n in SORTISH_NAMES]
    sampler = data.SortishBatchSampler(lengths, batch_size=4, seed=0, pool=100)  # one pool: fully sorted
    spreads = [max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in sampler]
    shuffled = [b for b in torch.randperm(len(lengths), generator=torch.Generator().manual_seed(0)).split(4)]
    plain = [max(lengths[i] for i in b.tolist()) - min(lengths[i] for i in b.tolist()) for b in shuffled]
    assert sum(spreads) < sum(plain) / 3
    assert max(spreads) <= 2


def test_sortish_batches_are_seeded_reshuffled_each_pass_and_served_in_shuffled_order():
    lengths = [len(n) for n in SORTISH_NAMES]
    a, b = (data.SortishBatchSampler(lengths, 4, seed=1, pool=100) for _ in range(2))
    first = list(a)
    assert first == list(b)  # same seed, same batches
    assert list(a) != first  # the next pass is shuffled differently
    assert list(data.SortishBatchSampler(lengths, 4, seed=2, pool=100)) != first
    widths = [max(lengths[i] for i in batch) for batch in first]
    assert widths != sorted(widths) and widths != sorted(widths, reverse=True)  # not shortest-first


def test_sortish_drop_last_and_len():
    sampler = data.SortishBatchSampler([3] * 10, batch_size=4, pool=2, drop_last=True)  # pools of 8 and 2
    assert [len(b) for b in sampler] == [4, 4] and len(sampler) == 2
    keep = data.SortishBatchSampler([3] * 10, batch_size=4, pool=2)
    assert sorted(len(b) for b in keep) == [2, 4, 4] and len(keep) == 3
    with pytest.raises(ValueError):
        data.SortishBatchSampler([3], batch_size=0)


def test_sortish_loader_gives_collate_batches_with_little_padding():
    loader = data.make_sortish_loader(SORTISH_NAMES, batch_size=4, seed=0, pool=100)
    seen = []
    for X, Y in loader:
        assert X.dtype == Y.dtype == torch.long and X.shape == Y.shape
        for x, y in zip(X, Y):
            name = data.decode(x[1:]).strip()
            assert torch.equal(y[:len(name) + 1], torch.tensor(data.encode(name + " ")))
            seen.append(name)
    assert sorted(seen) == sorted(SORTISH_NAMES)
    plain = data.padding_fraction(data.make_loader(SORTISH_NAMES, batch_size=4, seed=0))
    assert data.padding_fraction(loader) < plain / 3
    assert data.padding_fraction(data.make_loader(["abc", "def"], batch_size=2)) == 0.0
    assert data.padding_fraction(data.make_loader(["a", "abc"], batch_size=2, shuffle=False)) == 2 / 8

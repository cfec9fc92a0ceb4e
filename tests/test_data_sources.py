"""tutor.data.sources: the one loading order (your file, the environment variable, the package, the cache,
a download, else a one-line error: no fallback), the same for the names and for tiny Shakespeare; and the
copies that really ship in tutor/data/ (gzipped, checksummed, listed as package data).

No test touches the network (`sources.download` is replaced); the cache and the package data live in
`tmp_path`, except in the tests of the real shipped copies.
"""

import dataclasses
import gzip
import sys
import uuid

import pytest
from datakit import FakeDownload, damaged_package, isolated  # noqa: F401  (isolated: an autouse fixture)

from conftest import ROOT
from tutor import errors
from tutor.data import names as names_module
from tutor.data import shakespeare, sources
from tutor.files import sha256

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

PAYLOAD = b"laika\nbelka\nstrelka\n"  # stands in for the real file: the data sets are pinned to its checksum
DATA_SETS = {"names": names_module.DATA_SET, "shakespeare": shakespeare.DATA_SET}


@pytest.fixture
def package(monkeypatch, tmp_path):
    """A temporary package standing in for `tutor.data` as the home of the shipped data files."""
    name = f"tutor_test_data_{uuid.uuid4().hex}"
    folder = tmp_path / "site" / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(sources, "PACKAGE", name)
    return folder


@pytest.fixture(params=sorted(DATA_SETS))
def data_set(request):
    """Each data set, pinned to PAYLOAD and declaring a packaged copy `shipped.txt`."""
    return dataclasses.replace(DATA_SETS[request.param], sha256=sha256(PAYLOAD), package_file="shipped.txt")


def test_the_loading_order_is_the_same_for_every_data_set(data_set, package, tmp_path, monkeypatch):
    mine, theirs = tmp_path / "mine.txt", tmp_path / "theirs.txt"
    mine.write_text("ada\ngrace\n")
    theirs.write_text("alan\n")
    (package / "shipped.txt").write_bytes(PAYLOAD)
    cached = sources.cache_dir() / data_set.filename
    cached.parent.mkdir(parents=True)
    cached.write_bytes(PAYLOAD)
    fake = FakeDownload(PAYLOAD)
    monkeypatch.setattr(sources, "download", fake)
    monkeypatch.setenv(data_set.env_var, str(theirs))

    loaded = sources.load(data_set, mine)  # 1. path= before everything
    assert (loaded.source, loaded.location, loaded.where) == ("file", str(mine), "from mine.txt")
    loaded = sources.load(data_set)  # 2. then the environment variable
    assert (loaded.source, loaded.location) == ("file", str(theirs))
    assert loaded.where == f"from theirs.txt ({data_set.env_var})"
    monkeypatch.delenv(data_set.env_var)
    loaded = sources.load(data_set)  # 3. then the package
    assert loaded.source == "package" and loaded.data == PAYLOAD
    assert loaded.where == "from the package (shipped.txt, checksum verified)"
    data_set = dataclasses.replace(data_set, package_file=None)
    loaded = sources.load(data_set)  # 4. then the cache
    assert (loaded.source, loaded.location) == ("cache", str(cached)) and fake.calls == []
    cached.unlink()
    loaded = sources.load(data_set)  # 5. then a download, into the cache
    assert loaded.source == "download" and fake.calls == [data_set.urls[0]]
    assert cached.read_bytes() == PAYLOAD
    cached.unlink()
    monkeypatch.setattr(sources, "download", FakeDownload(TimeoutError("timed out")))
    with pytest.raises(errors.NoDataError) as info:  # 6. then a one-line error: nothing stands in
        sources.load(data_set)
    assert str(info.value).startswith(f"No {data_set.name} available (offline (could not download "
                                      f"{data_set.filename}: timed out after 5 s)). To fix it: ")


def test_every_data_set_loads_from_the_package_through_its_own_loader(package, monkeypatch, capsys):
    (package / "shipped.txt").write_bytes(PAYLOAD)
    for module in (names_module, shakespeare):
        pinned = dataclasses.replace(module.DATA_SET, sha256=sha256(PAYLOAD), package_file="shipped.txt")
        monkeypatch.setattr(module, "DATA_SET", pinned)
    loaded = names_module.load_names_with_source()
    assert loaded.source == "package" and loaded.names == ["laika", "belka", "strelka"]
    assert names_module.is_full_data_set(loaded)
    text = shakespeare.load_shakespeare_with_source()
    assert text.source == "package" and text.text == PAYLOAD.decode()
    assert capsys.readouterr().out.splitlines() == [
        "Names: 3 from the package (shipped.txt, checksum verified)",
        f"Text: {len(PAYLOAD)} characters from the package (shipped.txt, checksum verified)",
    ]


def test_a_packaged_file_with_a_bad_checksum_is_never_used(data_set, package, monkeypatch):
    (package / "shipped.txt").write_bytes(b"tampered\n")
    cached = sources.cache_dir() / data_set.filename
    cached.parent.mkdir(parents=True)
    cached.write_bytes(PAYLOAD)
    loaded = sources.load(data_set)
    assert loaded.source == "cache" and loaded.data == PAYLOAD
    (remark,) = loaded.remarks
    assert "shipped.txt failed its checksum and was not used" in remark
    assert (package / "shipped.txt").read_bytes() == b"tampered\n"  # the package is never written to
    cached.unlink()
    with pytest.raises(errors.NoDataError) as info:  # and offline with no cache: an error, never another text
        sources.load(data_set, offline=True)
    message = str(info.value)
    assert "\n" not in message and "shipped.txt failed its checksum and was not used (reinstall the course)" in message
    assert "To fix it: reinstall the course" in message and f"{data_set.env_var}=/path/to/" in message


def test_a_missing_packaged_file_is_said_and_skipped(data_set, package):
    with pytest.raises(errors.NoDataError, match="shipped.txt is missing"):
        sources.load(data_set, offline=True)
    cached = sources.cache_dir() / data_set.filename
    cached.parent.mkdir(parents=True)
    cached.write_bytes(PAYLOAD)
    loaded = sources.load(data_set, offline=True)
    assert loaded.source == "cache" and "shipped.txt is missing" in loaded.remarks[0]


@pytest.mark.parametrize("damage", ["good", "truncated", "not gzip", "other text"])
def test_a_gzipped_packaged_file_is_checked_once_unzipped(data_set, package, damage):
    data_set = dataclasses.replace(data_set, package_file="shipped.txt.gz")
    zipped = gzip.compress(PAYLOAD, mtime=0)
    (package / "shipped.txt.gz").write_bytes({"good": zipped, "truncated": zipped[:-6], "not gzip": PAYLOAD,
                                              "other text": gzip.compress(b"alan\n")}[damage])
    if damage == "good":
        loaded = sources.load(data_set, offline=True)
        assert loaded.source == "package" and loaded.data == PAYLOAD and loaded.remarks == ()
        assert loaded.where == "from the package (shipped.txt.gz, checksum verified)"
    else:
        with pytest.raises(errors.NoDataError, match="shipped.txt.gz failed its checksum and was not used"):
            sources.load(data_set, offline=True)


@pytest.mark.parametrize("problem", ["missing", "directory", "binary"])
def test_a_bad_file_of_yours_is_the_same_one_line_error_for_every_data_set(tmp_path, problem):
    path = tmp_path / "mine.txt"
    if problem == "directory":
        path.mkdir()
    elif problem == "binary":
        path.write_bytes(bytes(range(256)) * 4)
    expected = {"missing": errors.DataFileNotFoundError, "directory": errors.DataFileIsADirectoryError,
                "binary": errors.DataFileError}[problem]
    builtin = {"missing": FileNotFoundError, "directory": IsADirectoryError, "binary": ValueError}[problem]
    caught = []
    for load in (names_module.load_names, shakespeare.load_shakespeare):
        with pytest.raises(builtin) as info:
            load(path, verbose=False)
        caught.append(info.value)
        assert type(info.value) is expected and str(path) in str(info.value) and "given as path=" in str(info.value)
        assert info.value._render_traceback_() == [f"{expected.__name__}: {info.value}"]
    names_error, text_error = caught
    assert str(names_error).startswith(("Names file", "The names file"))
    assert str(text_error).startswith(("Text file", "The text file"))


def test_the_old_error_names_are_the_new_classes():
    assert errors.NamesFileError is errors.DataFileError
    assert errors.NamesFileNotFoundError is errors.DataFileNotFoundError
    assert errors.NamesFileIsADirectoryError is errors.DataFileIsADirectoryError
    assert errors.NoNamesError is errors.NoDataError


def test_nothing_else_working_is_a_one_line_error_that_says_what_to_do(data_set):
    bare = dataclasses.replace(data_set, package_file=None)
    with pytest.raises(errors.NoDataError) as info:
        sources.load(bare, offline=True)
    message = str(info.value)
    assert "\n" not in message and "no download tried" in message and "reinstall" not in message
    assert message.endswith(f"To fix it: run once with internet (it is then cached in {sources.cache_dir()}) "
                            f"or set {bare.env_var}=/path/to/{bare.filename}")
    assert info.value._render_traceback_() == [f"NoDataError: {message}"]


def test_no_data_set_has_a_fallback():
    fields = {field.name for field in dataclasses.fields(sources.DataSet)}
    assert not {"fallback", "fallback_note"} & fields  # a missing data set is never replaced by another text


# -----------------------------------------------------------------------------
# the copies that really ship

SHIPPED = {"names": ("allnames.txt.gz", names_module.SHA256), "shakespeare": ("tinyshakespeare.txt.gz",
                                                                             shakespeare.SHAKESPEARE_SHA256)}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_data_set_ships_gzipped_with_its_checksum(name):
    filename, digest = SHIPPED[name]
    data_set = DATA_SETS[name]
    assert data_set.package_file == filename and data_set.sha256 == digest
    shipped = ROOT / "tutor" / "data" / filename
    assert sha256(gzip.decompress(shipped.read_bytes())) == digest
    assert shipped.stat().st_size < 500_000  # gzipped: ~331 KB and ~435 KB
    loaded = sources.load(data_set, offline=True)
    assert (loaded.source, loaded.remarks) == ("package", ())
    assert loaded.where == f"from the package ({filename}, checksum verified)"


def test_the_shipped_files_are_package_data_with_their_attribution():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["tutor.data"]
    folder = ROOT / "tutor" / "data"
    listed = {path.name for pattern in patterns for path in folder.glob(pattern)}
    assert {filename for filename, _ in SHIPPED.values()} | {"DATA.md"} <= listed
    notes = (folder / "DATA.md").read_text(encoding="utf-8")
    for filename, digest in SHIPPED.values():
        assert filename in notes and digest in notes
    assert "hackerb9/ssa-baby-names" in notes and "karpathy/char-rnn" in notes and "public domain" in notes


@pytest.mark.parametrize("damage", [lambda b: b[:-100], lambda b: b[:50] + bytes([b[50] ^ 1]) + b[51:]],
                         ids=["truncated", "one bit"])
def test_a_damaged_shipped_copy_is_never_used(monkeypatch, tmp_path, damage):
    folder = damaged_package(monkeypatch, tmp_path, damage)
    for data_set in DATA_SETS.values():
        with pytest.raises(errors.NoDataError) as info:
            sources.load(data_set, offline=True)
        assert f"the packaged {folder / data_set.package_file} failed its checksum and was not used" in str(info.value)


def test_offline_by_argument_or_by_environment_variable(data_set, monkeypatch):
    data_set = dataclasses.replace(data_set, package_file=None)
    with pytest.raises(errors.NoDataError, match=r"available \(offline: no download tried\)"):
        sources.load(data_set, offline=True)
    monkeypatch.setenv("TUTOR_OFFLINE", "yes")
    with pytest.raises(errors.NoDataError, match=r"available \(offline \(TUTOR_OFFLINE=1\): no download tried\)"):
        sources.load(data_set)
    fake = FakeDownload(PAYLOAD)
    monkeypatch.setattr(sources, "download", fake)
    assert sources.load(data_set, offline=False).source == "download"  # the argument wins


def test_a_download_that_cannot_be_cached_is_still_used_and_said(data_set, monkeypatch, tmp_path):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    monkeypatch.setenv("TUTOR_CACHE_DIR", str(blocker))  # the cache cannot be created inside a file
    monkeypatch.setattr(sources, "download", FakeDownload(PAYLOAD))
    loaded = sources.load(dataclasses.replace(data_set, package_file=None))
    assert loaded.source == "download" and loaded.data == PAYLOAD
    assert loaded.remarks[0].startswith("could not write the cache")


def test_the_cache_dir_follows_the_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("TUTOR_CACHE_DIR", str(tmp_path / "somewhere"))
    assert sources.cache_dir() == tmp_path / "somewhere"
    monkeypatch.delenv("TUTOR_CACHE_DIR")
    assert sources.cache_dir().name == sources.CACHE_APP

"""Helpers for the tests of tutor.data: a stand-in for the network, a cache in tmp_path, and the package copies.

A test file imports the autouse fixture ``isolated`` (``from datakit import isolated  # noqa: F401``) and every
test in it runs with the cache in ``tmp_path``, no ``TUTOR_*`` data variable set and no network. The copies
that ship in ``tutor/data/`` are still there (they come first after your own file): ``without_package_copy``
takes one away, to test the cache and the download; ``damaged_package`` puts damaged copies in their place.
"""

import dataclasses
import importlib.resources
import uuid

import pytest

from tutor.data import sources


def without_package_copy(monkeypatch, module):
    """Pretend the data set of ``module`` (``tutor.data.names`` or ``.shakespeare``) does not ship in the package."""
    monkeypatch.setattr(module, "DATA_SET", dataclasses.replace(module.DATA_SET, package_file=None))


def damaged_package(monkeypatch, tmp_path, damage):
    """A temporary package, put in the place of ``tutor.data`` as the home of the shipped files, holding a copy
    of each shipped ``.gz`` file damaged by ``damage(bytes) -> bytes``. Returns its folder."""
    name = f"tutor_damaged_data_{uuid.uuid4().hex}"
    folder = tmp_path / "site" / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    for shipped in importlib.resources.files(sources.PACKAGE).iterdir():
        if shipped.name.endswith(".gz"):
            (folder / shipped.name).write_bytes(damage(shipped.read_bytes()))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(sources, "PACKAGE", name)
    return folder


class FakeDownload:
    """Stands in for `tutor.data.sources.download`, the only network access.

    Each call answers with the next of `responses` (the last one repeats): bytes are served, an exception is
    raised. With no responses every call is unexpected. `calls` lists the URLs asked for, `timeouts` their
    timeouts.
    """

    def __init__(self, *responses):
        self.responses, self.calls, self.timeouts = list(responses), [], []

    def __call__(self, url, timeout):
        self.calls.append(url)
        self.timeouts.append(timeout)
        if not self.responses:
            raise AssertionError(f"unexpected download of {url}")
        response = self.responses.pop(0) if len(self.responses) > 1 else self.responses[0]
        if isinstance(response, BaseException):
            raise response
        return response


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """The cache in tmp_path, no TUTOR_* data variable set, and a download that fails the test if called."""
    monkeypatch.setenv("TUTOR_CACHE_DIR", str(tmp_path / "cache"))
    for var in ("TUTOR_NAMES", "TUTOR_SHAKESPEARE", "TUTOR_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    guard = FakeDownload()  # answers no download: any call is reported after the test
    monkeypatch.setattr(sources, "download", guard)
    yield
    assert guard.calls == [], f"unexpected downloads: {guard.calls}"

"""Helpers for the tests of tutor.data: a stand-in for the network, and a cache in tmp_path.

A test file imports the autouse fixture ``isolated`` (``from datakit import isolated  # noqa: F401``) and every
test in it runs with the cache in ``tmp_path``, no ``TUTOR_*`` data variable set and no network.
"""

import pytest

from tutor.data import sources


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

"""Fixtures of the browser tests: one JupyterLab server and one headless Chromium per session.

The tests run only when asked for (``python -m pytest -m browser tests/browser``); the default
``python -m pytest`` deselects them. Without Chromium and chromedriver they are skipped with one
line, unless ``TUTOR_BROWSER_REQUIRED=1`` (set by .ci/run once apt installed them): then they fail.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # for `import labkit` (this folder is a package)
import labkit as _lab

MARK = "browser"
SHOTS_ENV = "TUTOR_BROWSER_SHOTS"
_shots_dir: Path | None = None


def pytest_configure(config):
    config.addinivalue_line("markers", f"{MARK}: runs the notebooks in JupyterLab in headless Chromium "
                                       f"(slow; run with `python -m pytest -m {MARK} tests/browser`)")


def _asked_for(config) -> bool:
    return MARK in (config.getoption("markexpr", "") or "") or os.environ.get("TUTOR_BROWSER_TESTS") == "1"


def pytest_collection_modifyitems(config, items):
    if _asked_for(config):
        return
    browser_items = [item for item in items if item.get_closest_marker(MARK)]
    if browser_items:
        config.hook.pytest_deselected(items=browser_items)
        items[:] = [item for item in items if not item.get_closest_marker(MARK)]


def shots_dir() -> Path:
    global _shots_dir
    if _shots_dir is None:
        default = Path(os.environ.get("TMPDIR", "/tmp")) / f"tutor-browser-{time.strftime('%Y%m%d-%H%M%S')}"
        _shots_dir = Path(os.environ.get(SHOTS_ENV) or default).resolve()
        _shots_dir.mkdir(parents=True, exist_ok=True)
    return _shots_dir


def pytest_terminal_summary(terminalreporter, config):
    if _shots_dir is not None:
        terminalreporter.write_line(f"browser tests: screenshots and JupyterLab's log are in {_shots_dir}")


@pytest.fixture(scope="session")
def browser_paths():
    found = _lab.find_browser()
    if found is None:
        message = ("browser tests skipped: no Chromium and chromedriver here "
                   "(install them with `apt-get install chromium chromium-driver`)")
        if os.environ.get("TUTOR_BROWSER_REQUIRED") == "1":
            pytest.fail(message.replace("skipped", "cannot run"))
        pytest.skip(message)
    return found


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    """A copy of solutions/ and notebooks/: the tests run and save notebooks, never the repository's."""
    root = tmp_path_factory.mktemp("lab-root")
    for name in ("solutions", "notebooks"):
        (root / name).mkdir()
        for path in sorted((_lab.ROOT / name).glob("*.ipynb")):
            if ".backup" not in path.name:
                shutil.copy2(path, root / name / path.name)
    return root


@pytest.fixture(scope="session")
def lab(browser_paths, workdir, tmp_path_factory):
    home = tmp_path_factory.mktemp("lab-home")
    # TUTOR_QUICK=1: notebook 08 trains 60 steps instead of ~2 minutes (its checks, widgets and
    # plots are the same; only the samples are worse). It does not change the other notebooks.
    server = _lab.LabServer(workdir, home, env={"TUTOR_QUICK": "1"})
    with server:
        yield server
    log = server.log_path.read_text(errors="replace")
    shutil.copy2(server.log_path, shots_dir() / "jupyterlab.log")
    assert server.token not in log, "the server's token leaked into its log"
    driver_log = shots_dir() / "chromedriver.log"
    if driver_log.exists():
        assert server.token not in driver_log.read_text(errors="replace"), "the token leaked into chromedriver's log"


@pytest.fixture(scope="session")
def browser(browser_paths, tmp_path_factory):
    chromium, driver = browser_paths
    profile = tmp_path_factory.mktemp("chromium-profile")
    chrome = _lab.start_browser(chromium, driver, profile, shots_dir() / "chromedriver.log")
    try:
        yield chrome
    finally:
        chrome.quit()


@pytest.fixture
def shots():
    return shots_dir()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    chrome = item.funcargs.get("browser") if hasattr(item, "funcargs") else None
    if report.when == "call" and report.failed and chrome is not None:
        name = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in item.name)
        path = shots_dir() / f"FAILED-{name}.png"
        try:
            chrome.save_screenshot(str(path))
            report.sections.append(("browser", f"screenshot of the failure: {path}"))
            print(f"\nbrowser test failed: screenshot saved to {path}")
        except Exception as error:  # noqa: BLE001 - a failed screenshot must not hide the test's own failure
            report.sections.append(("browser", f"no screenshot: {error}"))

"""JupyterLab and Chromium for the browser tests: a private server, a headless browser, and the
few things a test does in a notebook (open, Run All, save, read what the page shows).

The server runs on a free localhost port with its own config, runtime, data, settings and
workspace folders, a random token that is written only into its private config file (never on
the command line or in the log), and the ``tutor_jupyter`` extension that saves widgets as
pictures. The page is driven through JupyterLab's own command registry (``window.jupyterapp``,
exposed with ``LabApp.expose_app_in_browser``) and through real clicks and key presses where the
test is about what a learner does with a widget.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DRIVER_NAMES = ("chromedriver",)
# Flags that work in a container on a closed network (without the networking ones, Chromium's
# background requests are refused and slow everything down).
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1400,1100", "--force-device-scale-factor=1")

# JupyterLab settings for a quiet, fully rendered page: no news or update pop-ups, and every
# cell in the DOM (JupyterLab 4 otherwise renders only the cells in view).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                        "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}


def find_browser() -> tuple[str, str] | None:
    """(chromium, chromedriver) paths, from $TUTOR_CHROMIUM / $TUTOR_CHROMEDRIVER or the PATH."""
    browser = os.environ.get("TUTOR_CHROMIUM") or next(filter(None, map(shutil.which, CHROMIUM_NAMES)), None)
    driver = os.environ.get("TUTOR_CHROMEDRIVER") or next(filter(None, map(shutil.which, DRIVER_NAMES)), None)
    return (browser, driver) if browser and driver else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    """``jupyter lab`` serving ``root`` with private folders under ``home``; use as a context manager."""

    def __init__(self, root: Path, home: Path, env: dict | None = None, start_timeout: float = 180):
        self.root, self.home = Path(root), Path(home)
        self.port = free_port()
        self.token = secrets.token_hex(24)
        self.base = f"http://127.0.0.1:{self.port}"
        self.extra_env = env or {}
        self.start_timeout = start_timeout
        self.log_path = self.home / "jupyterlab.log"
        self.process = None

    def _write_config(self) -> dict:
        dirs = {name: self.home / name for name in ("config", "runtime", "data", "settings", "workspaces", "ipython")}
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
            d.chmod(0o700)
        config = {
            "ServerApp": {"ip": "127.0.0.1", "port": self.port, "port_retries": 0, "open_browser": False,
                          "root_dir": str(self.root), "log_level": "WARN",
                          "allow_root": hasattr(os, "geteuid") and os.geteuid() == 0,  # CI runs as root
                          "jpserver_extensions": {"tutor_jupyter": True}},
            "IdentityProvider": {"token": self.token},
            "LabApp": {"expose_app_in_browser": True, "news_url": None},
        }
        (dirs["config"] / "jupyter_server_config.json").write_text(json.dumps(config, indent=1))
        for name, value in LAB_SETTINGS.items():
            path = dirs["settings"] / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(value))
        env = {k: v for k, v in os.environ.items() if k not in ("TUTOR_STRICT", "MPLBACKEND", "JUPYTER_TOKEN")}
        env.update({
            "JUPYTER_CONFIG_DIR": str(dirs["config"]), "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
            "JUPYTER_DATA_DIR": str(dirs["data"]), "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
            "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]), "IPYTHONDIR": str(dirs["ipython"]),
            "JUPYTER_PLATFORM_DIRS": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "TUTOR_OFFLINE": "1",
        })
        env.update(self.extra_env)
        return env

    def start(self) -> LabServer:
        env = self._write_config()
        log = open(self.log_path, "wb")
        self.process = subprocess.Popen([sys.executable, "-m", "jupyterlab"], cwd=self.root, env=env,
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.process.returncode}; see {self.log_path}")
            try:
                self.api("status")
                return self
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(1)
        raise TimeoutError(f"JupyterLab did not answer within {self.start_timeout:.0f} s; see {self.log_path}")

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(f"{self.base}/api/{path}", method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self) -> None:
        for session in self.api("sessions") or []:
            try:
                self.api(f"sessions/{session['id']}", method="DELETE")
            except urllib.error.URLError:
                pass

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:  # the process group: the server and its kernels
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=10)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()


def start_browser(browser: str, driver: str, profile: Path, log: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    # WARNING level: chromedriver would otherwise log every command, the page URL (and its token) included
    service = Service(executable_path=driver, log_output=str(log), service_args=["--log-level=WARNING"])
    chrome = webdriver.Chrome(service=service, options=options)
    # Headless Chromium (150 here) gives the page no focus: JupyterLab's shell then has no current widget, and its
    # commands act on nothing. Focus emulation gives the page focus, as a window on a desktop has it.
    chrome.execute_cdp_cmd("Emulation.setFocusEmulationEnabled", {"enabled": True})
    chrome.set_page_load_timeout(180)
    chrome.set_script_timeout(600)
    return chrome


# --------------------------------------------------------------------------------------------
# A notebook in the page. JavaScript runs in the page through selenium; `app` is JupyterLab.

JS_PANEL = """
const app = window.jupyterapp;
if (!app) return null;
const w = app.shell.currentWidget;
if (!w || !w.content || !w.context || !w.context.isReady) return null;
"""


class Notebook:
    """The notebook open in the page's main area."""

    def __init__(self, driver, lab: LabServer, path: str):
        self.driver, self.lab, self.path = driver, lab, path

    def open(self, timeout: float = 240, kernel: bool = True) -> Notebook:
        self.driver.get(f"{self.lab.base}/lab/tree/{self.path}?reset&token={self.lab.token}")
        self.wait(JS_PANEL + "return w.context.path;", timeout, what="the notebook to open",
                  check=lambda path: path == self.path)
        if kernel:
            self.wait(JS_PANEL + "const k = w.sessionContext.session && w.sessionContext.session.kernel;"
                      "return k ? k.status : null;", timeout, what="the kernel to start",
                      check=lambda status: status == "idle")
        return self

    def js(self, script: str, *args):
        return self.driver.execute_script(script, *args)

    def wait(self, script: str, timeout: float, what: str, check=bool, interval: float = 0.5):
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            try:
                value = self.js(script)
            except Exception:  # noqa: BLE001 - the page may be loading: poll again until the deadline
                value = None
            if value is not None and check(value):
                return value
            time.sleep(interval)
        raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what} (last value: {value!r})")

    def command(self, name: str, args: dict | None = None, wait: bool = True):
        """Run a JupyterLab command; ``wait=False`` returns at once (Run All resolves only when done)."""
        if not wait:
            self.js("window.jupyterapp.commands.execute(arguments[0], arguments[1] || {});", name, args or {})
            return
        self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "window.jupyterapp.commands.execute(arguments[0], arguments[1] || {})"
            ".then(() => done(null), (e) => done(String(e)));", name, args or {})

    def run_all(self, timeout: float) -> float:
        """Run All (Run > Run All Cells) and wait until no cell is queued or running; returns seconds."""
        start = time.monotonic()
        self.command("notebook:run-all-cells", wait=False)
        settled = JS_PANEL + """
        const k = w.sessionContext.session && w.sessionContext.session.kernel;
        const busy = w.content.widgets.some(c => c.model.type === 'code' &&
            ((c.model.executionState === 'running') || /\\*/.test(c.promptNode ? c.promptNode.textContent : '')));
        return (k && k.status === 'idle' && !busy) ? 'settled' : 'busy';
        """
        time.sleep(2)
        for _ in range(2):  # settled twice in a row, a second apart
            self.wait(settled, timeout, what="Run All to finish", check=lambda v: v == "settled")
            time.sleep(1)
        return time.monotonic() - start

    def cells(self) -> list[dict]:
        """Each cell: type, source, its outputs as JSON (from the page's model) and the text shown."""
        return self.js(JS_PANEL + """
        return w.content.widgets.map((c, i) => ({
            index: i, type: c.model.type, source: c.model.sharedModel.getSource(),
            outputs: c.model.type === 'code' ? c.model.outputs.toJSON() : [],
            text: c.model.type === 'code' && c.outputArea ? c.outputArea.node.innerText : ''}));
        """)

    def check_boxes(self) -> list[dict]:
        """Each rendered check result: its first line and the colours of its box."""
        return self.js(JS_PANEL + """
        const found = [];
        for (const c of w.content.widgets) {
            if (c.model.type !== 'code' || !c.outputArea) continue;
            for (const node of c.outputArea.node.querySelectorAll('.jp-OutputArea-output')) {
                const text = node.innerText.trim();
                if (!/^(✅|❌|⏳) \\w+:/u.test(text)) continue;
                const box = node.querySelector('div[style*="border-left"]') || node;
                const style = getComputedStyle(box);
                found.push({cell: c.model.sharedModel.getSource().split('\\n').pop(), text: text.split('\\n')[0],
                            border: style.borderLeftColor, background: style.backgroundColor,
                            html: !!node.querySelector('div[style*="border-left"]')});
            }
        }
        return found;
        """)

    def save(self, timeout: float = 60) -> None:
        self.command("docmanager:save")
        self.wait(JS_PANEL + "return w.context.model.dirty ? 'dirty' : 'clean';", timeout,
                  what="the notebook to be saved", check=lambda v: v == "clean")

    def close(self) -> None:
        self.command("application:close-all")

    def widget_cells(self) -> list[int]:
        """Indices of cells whose output area holds a live widget."""
        return self.js(JS_PANEL + """
        return w.content.widgets.map((c, i) => [c, i]).filter(([c, i]) => c.model.type === 'code' && c.outputArea &&
            c.outputArea.node.querySelector(
                '.jupyter-widgets.widget-container, .jupyter-widgets.widget-inline-hbox, .widget-vbox'))
            .map(([c, i]) => i);
        """)

    def cell_node(self, index: int):
        return self.js(JS_PANEL + "return w.content.widgets[arguments[0]].node;", index)

    def scroll_to(self, index: int) -> None:
        self.js(JS_PANEL + "w.content.widgets[arguments[0]].node.scrollIntoView({block: 'center'});", index)

    def images_in(self, index: int) -> list[dict]:
        return self.js(JS_PANEL + """
        const c = w.content.widgets[arguments[0]];
        return Array.from(c.outputArea.node.querySelectorAll('img')).map(img => ({
            src: img.src.slice(-200) + ':' + img.src.length, natural: [img.naturalWidth, img.naturalHeight],
            shown: [img.clientWidth, img.clientHeight]}));
        """, index)

    def cut_labels(self, index: int) -> list[str]:
        """Widget labels in a cell whose text does not fit (shown with an ellipsis)."""
        return self.js(JS_PANEL + """
        const c = w.content.widgets[arguments[0]];
        return Array.from(c.outputArea.node.querySelectorAll('.widget-label, label'))
            .filter(l => l.offsetParent !== null && l.scrollWidth > l.clientWidth + 1).map(l => l.textContent);
        """, index)


def read_saved(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))

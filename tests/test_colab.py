"""Colab: the setup cell keeps Colab's torch, IPython and ipywidgets, and the package works with them.

Colab has long shipped IPython 7.34 and ipywidgets 7.7, and upgrading either in a running session
is a known way to break it. So:

- the setup cell installs the course with ``--no-deps``, then only what Colab lacks (checked here
  against pyproject.toml, so a new dependency cannot be forgotten);
- pyproject.toml accepts IPython 7.34 and ipywidgets 7.7;
- ``test_the_package_works_with_colabs_ipython_and_ipywidgets`` builds a venv with exactly those
  versions (``python -m venv --system-site-packages``, then pip) and runs a small notebook in a
  kernel of that venv: checks, widgets with their static pictures, the data notice, a one-line
  TutorError. It needs the package index and takes about a minute, so it runs only when
  ``TUTOR_COLAB_TEST=1`` (CI sets it: see .ci/run); ``TUTOR_COLAB_VENV=DIR`` reuses a venv.
"""

import json
import os
import pathlib
import re
import subprocess
import sys
import sysconfig

import nbformat
import pytest
from packaging.requirements import Requirement

from conftest import ROOT
from tutor.course import catalog

COLAB_IPYTHON, COLAB_IPYWIDGETS = "7.34.0", "7.7.5"
COLAB_PYTHON = "3.12"
# What Colab has preinstalled (and must keep): the setup cell installs none of these.
COLAB_PREINSTALLED = {"torch", "numpy", "matplotlib", "ipython", "ipywidgets", "nbformat", "tqdm"}


def setup_cell(n) -> str:
    nb = nbformat.read(ROOT / "solutions" / n.filename, as_version=4)
    return next(c for c in nb.cells if c.cell_type == "code").source


def pip_lists(source: str) -> list[list[str]]:
    """The string arguments of each ``subprocess.run(pip + [...])`` in a setup cell."""
    return [re.findall(r'"([^"]+)"', args) for args in re.findall(r"pip \+ \[([^\]]*)\]", source)]


def package_requirements() -> list[Requirement]:
    # (tomllib is Python 3.11+, and the course supports 3.10: the list is simple enough to read)
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.M | re.S).group(1)
    return [Requirement(line) for line in re.findall(r'^\s*"([^"]+)"', block, re.M)]


@pytest.mark.parametrize("n", catalog.NOTEBOOKS, ids=[n.slug for n in catalog.NOTEBOOKS])
def test_the_colab_setup_keeps_colabs_packages(n):
    source = setup_cell(n)
    colab = source.split('if "google.colab" in sys.modules:', 1)[1].split("\n\n", 1)[0]
    installs = pip_lists(colab)
    assert installs, f"{n.filename}: the Colab branch installs nothing"
    assert installs[0] == ["--no-deps", "git+{REPO_URL}@v{VERSION}"], (
        f"{n.filename}: install the course's tag of this notebook's version, with --no-deps")
    assert installs[1] == ["--no-deps", "git+{REPO_URL}"], f"{n.filename}: where the tag is missing, the main branch"
    extra = {name for args in installs[2:] for name in args}
    assert not {"-U", "--upgrade", "--force-reinstall"} & extra
    assert not extra & COLAB_PREINSTALLED, (
        f"{n.filename}: the Colab branch must not reinstall {extra & COLAB_PREINSTALLED}")
    on_colab = {"python_version": COLAB_PYTHON, "python_full_version": f"{COLAB_PYTHON}.0", "sys_platform": "linux",
                "platform_system": "Linux", "os_name": "posix"}
    needed = {r.name.lower() for r in package_requirements()
              if r.marker is None or r.marker.evaluate(on_colab)} - COLAB_PREINSTALLED  # tomli: Python < 3.11 only
    assert needed <= extra, f"{n.filename}: the Colab branch misses {needed - extra} (a dependency in pyproject.toml)"
    declared = {r.name.lower() for r in package_requirements()}
    assert extra <= declared, f"{n.filename}: the Colab branch installs {extra - declared}, which the package lacks"


def test_the_package_accepts_colabs_ipython_and_ipywidgets():
    requirements = {r.name.lower(): r for r in package_requirements()}
    assert requirements["ipython"].specifier.contains(COLAB_IPYTHON)
    assert requirements["ipywidgets"].specifier.contains(COLAB_IPYWIDGETS)


def _colab_venv(tmp_path_factory) -> pathlib.Path:
    given = os.environ.get("TUTOR_COLAB_VENV")
    venv = pathlib.Path(given) if given else tmp_path_factory.mktemp("colab") / "venv"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=300)
        if sys.prefix != sys.base_prefix:  # we run in a venv (as in CI): see its packages too, after the new venv's own
            site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip()
            outer = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
            (pathlib.Path(site) / "_outer_env.pth").write_text("\n".join(sorted(outer)) + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    f"ipython=={COLAB_IPYTHON}", "ipywidgets==7.7.*"], check=True, timeout=600)
    return python


@pytest.mark.skipif(os.environ.get("TUTOR_COLAB_TEST") != "1" or sys.platform == "win32",
                    reason="set TUTOR_COLAB_TEST=1 (needs the package index, about a minute)")
def test_the_package_works_with_colabs_ipython_and_ipywidgets(tmp_path_factory, tmp_path):
    python = _colab_venv(tmp_path_factory)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg", "TUTOR_OFFLINE": "1",
           "TUTOR_CACHE_DIR": str(tmp_path / "cache")}
    for name in ("TUTOR_NAMES", "TUTOR_DEVICE", "TUTOR_STRICT"):
        env.pop(name, None)
    result = subprocess.run([str(python), str(ROOT / "tests" / "colab_compat.py")], capture_output=True,
                            text=True, env=env, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    versions, setup, passed, failed, widget, explorer, names, device = json.loads(result.stdout.splitlines()[-1])

    assert versions == [{"type": "stream", "text": f"{COLAB_IPYTHON} {COLAB_IPYWIDGETS}\n"}]
    assert setup[0]["text"].startswith("Using device: ")
    assert passed[0]["text"].startswith("✅ softmax: passed")
    assert failed[0]["text"].startswith("❌ softmax:") and "Likely cause" in failed[0]["text"]
    for out in (widget, explorer):  # the live widget (ipywidgets 7 view) and its static picture
        assert out[0]["mimetypes"] == ["application/vnd.jupyter.widget-view+json", "image/png", "text/plain"]
    # offline with an empty cache: the full list that ships in the package, in one line
    assert names[0]["text"] == "Names: 100,364 from the package (allnames.txt.gz, checksum verified)\n"
    (error,) = device
    assert error["ename"] == "DeviceError" and len(error["traceback"]) == 1

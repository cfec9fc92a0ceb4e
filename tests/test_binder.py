"""binder/ installs CPU-only torch, JupyterLab 4, ipywidgets 8 and the package."""

import os

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from conftest import ROOT

BINDER = ROOT / "binder"


def requirements():
    lines = (BINDER / "requirements.txt").read_text().splitlines()
    return {r.name.lower(): r for r in (Requirement(line.split("#")[0].strip()) for line in lines
                                         if line.split("#")[0].strip() and not line.startswith("-"))}


def test_binder_requirements_pin_the_major_versions():
    reqs = requirements()
    assert Version("4.2") in reqs["jupyterlab"].specifier and Version("5.0") not in reqs["jupyterlab"].specifier
    assert Version("8.1") in reqs["ipywidgets"].specifier and Version("9.0") not in reqs["ipywidgets"].specifier
    assert "torch" not in reqs, "torch from PyPI would pull CUDA; postBuild installs the CPU build"


def test_postbuild_installs_cpu_torch_before_the_package():
    post = BINDER / "postBuild"
    assert os.access(post, os.X_OK), "binder/postBuild must be executable"
    lines = [line for line in post.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert lines[0].startswith("set -e") or "set -euo pipefail" in lines[0]
    torch_line = next(i for i, line in enumerate(lines) if "install" in line and " torch" in line)
    package_line = next(i for i, line in enumerate(lines) if "install" in line and "-e ." in line)
    assert "download.pytorch.org/whl/cpu" in lines[torch_line]
    assert torch_line < package_line


def test_package_metadata():
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] != "tutor", "the name `tutor` on PyPI belongs to another project"
    assert project["requires-python"] == ">=3.10"
    names = {Requirement(d).name for d in project["dependencies"]}
    assert {"torch", "einops", "matplotlib", "ipywidgets", "tqdm", "nbformat"} <= names

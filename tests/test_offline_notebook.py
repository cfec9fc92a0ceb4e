"""Notebook 10 runs offline by construction: with no network, no ``TUTOR_*`` data variable and an empty cache,
the learner notebook runs top to bottom on the tiny Shakespeare that ships in the package.

The network is blocked for real where the machine allows it: the notebook's kernel (and every process it
starts, such as ``python -m tutor.scale``) runs in a new network namespace (``unshare -rn``) in which only the
loopback interface exists, brought up so that the kernel can talk to nbclient and Gloo to itself. Where
``unshare`` is missing or not allowed (macOS, some containers), the test falls back to ``TUTOR_OFFLINE=1`` and
proxies pointing at a closed port (127.0.0.1:9); which one ran is in the test's id-free output (``-rA``) and in
the assertion messages.
"""

import json
import os
import shutil
import subprocess
import sys

import nbformat

from conftest import ROOT
from tutor.course import build, catalog

NOTEBOOK = catalog.notebook(10)
PACKAGE_LINE = "Text: 1,115,394 characters from the package (tinyshakespeare.txt.gz, checksum verified)"

# Runs in the blocked namespace: brings the loopback interface up, checks that the internet is unreachable,
# executes the notebook with nbclient (kernel and driver in the same namespace), and writes it back.
DRIVER = r'''
import fcntl, json, socket, struct, sys
from nbclient import NotebookClient
import nbformat

source, target, cwd, isolated = sys.argv[1:5]
if isolated == "namespace":
    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sh22x", fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sh22x", b"lo", 0)))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | IFF_UP))
probe = "reachable"
try:
    socket.create_connection(("1.1.1.1", 443), timeout=3).close()
except OSError as error:
    probe = f"unreachable ({error})"
nb = nbformat.read(source, as_version=4)
NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": cwd}}).execute()
nbformat.write(nb, target)
print(json.dumps({"probe": probe}))
'''


def _namespace_works() -> bool:
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=30).returncode == 0


def _outputs(nb) -> str:
    texts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            texts.append(output.get("text", "") if output.get("output_type") == "stream"
                         else output.get("data", {}).get("text/plain", ""))
    return "\n".join(texts)


def test_notebook_10_runs_offline_on_the_packaged_text(tmp_path):
    # the learner notebook, built in memory exactly as `python -m tutor build` writes notebooks/ (test_build
    # checks that notebooks/ holds this build), so that a learner's saved work there cannot fail the test
    nb = build.make_learner_notebook(build.read_notebook(ROOT / "solutions" / NOTEBOOK.filename),
                                     f"solutions/{NOTEBOOK.filename}")
    source, target, cache = tmp_path / "in.ipynb", tmp_path / "out.ipynb", tmp_path / "empty-cache"
    nbformat.write(nb, source)
    cache.mkdir()
    (tmp_path / "driver.py").write_text(DRIVER)

    env = {key: value for key, value in os.environ.items()
           if key not in ("TUTOR_NAMES", "TUTOR_SHAKESPEARE", "TUTOR_OFFLINE", "TUTOR_GPT2_ENCODER",
                          "TUTOR_GPT2_MERGES", "TUTOR_STRICT")}
    env.update(TUTOR_QUICK="1", TUTOR_STRICT="0", TUTOR_CACHE_DIR=str(cache), MPLBACKEND="Agg")
    command = [sys.executable, str(tmp_path / "driver.py"), str(source), str(target), str(ROOT / "notebooks")]
    if _namespace_works():
        isolation = "namespace"  # no network at all; TUTOR_OFFLINE stays unset: nothing needs it
        command = ["unshare", "-rn"] + command + [isolation]
    else:
        isolation = "proxies"  # no namespace here: never try, and any try goes to a closed port
        closed = "http://127.0.0.1:9"
        env.update(TUTOR_OFFLINE="1", HTTP_PROXY=closed, HTTPS_PROXY=closed, ALL_PROXY=closed, http_proxy=closed,
                   https_proxy=closed, all_proxy=closed, NO_PROXY="", no_proxy="")
        command = command + [isolation]
    print(f"network blocked by: {isolation}")

    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)
    assert result.returncode == 0, f"[{isolation}] {result.stdout[-3000:]}{result.stderr[-5000:]}"
    probe = json.loads(result.stdout.strip().splitlines()[-1])["probe"]
    if isolation == "namespace":
        assert probe.startswith("unreachable"), f"the namespace let the network through: {probe}"

    out = _outputs(nbformat.read(target, as_version=4))
    assert PACKAGE_LINE in out, f"[{isolation}] the text did not come from the package copy:\n{out[:3000]}"
    assert "No tiny Shakespeare available" not in out and "downloaded from" not in out
    # nothing was downloaded into the cache (the CPU's measured matmul peak, for MFU, may be cached there)
    assert [p.name for p in cache.iterdir() if p.name != "cpu-peak.json"] == []

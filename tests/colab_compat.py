"""Run by tests/test_colab.py with a venv's Python that has Colab's IPython 7.34 and ipywidgets 7.7.

Executes a small notebook in a kernel of that Python (the same IPython and ipywidgets), and
prints one JSON line with what came out. Not a test module itself (its name has no test_ prefix).
"""

import json
import os
import sys

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

CELLS = [
    "import IPython, ipywidgets\nprint(IPython.__version__, ipywidgets.__version__)",
    "import torch\nimport tutor\nfrom tutor import checks, reference as ref, viz\ntutor.seed_everything(0)\n"
    "device = tutor.get_device(verbose=True)",
    "checks.softmax(ref.softmax)",
    "def softmax(x, dim=-1):\n    return x.exp() / x.exp().sum(dim=dim, keepdim=True)\nchecks.softmax(softmax)",
    "import ipywidgets as widgets\nimport matplotlib.pyplot as plt\nfrom tutor.viz.core import interactive\n"
    "def draw(a=1):\n    fig, ax = plt.subplots()\n    ax.plot([0, a])\n    ax.set_title('a line')\n    return fig\n"
    "interactive(draw, a=widgets.IntSlider(value=1, min=0, max=3))",
    "from tutor.viz.attention import word_explorer\nword_explorer('laika')",
    "from tutor.data import load_names\nnames = load_names()",
    "import os\nos.environ['TUTOR_DEVICE'] = 'gpu'\ntutor.get_device()",
]


def main() -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in CELLS])
    client = NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": os.getcwd()}})
    client.execute()
    report = []
    for cell in nb.cells:
        outputs = []
        for output in cell.outputs:
            if output.output_type == "stream":
                outputs.append({"type": "stream", "text": output.text})
            elif output.output_type == "error":
                outputs.append({"type": "error", "ename": output.ename, "traceback": output.traceback})
            else:
                outputs.append({"type": output.output_type, "mimetypes": sorted(output.get("data", {})),
                                "text": output.get("data", {}).get("text/plain", "")})
        report.append(outputs)
    print(json.dumps(report))


if __name__ == "__main__":
    try:
        main()
    except CellExecutionError as error:  # pragma: no cover - allow_errors=True
        sys.exit(str(error))

"""Loading a script of benchmarks/ as a module, for the smoke tests of the benchmarks."""

import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_benchmark(name: str):
    """``benchmarks/<name>.py`` as a fresh module (its ``main`` and helpers; nothing runs on import)."""
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as importlib's recipe does: a dataclass in it looks its module up there
    spec.loader.exec_module(module)
    return module

"""The package's layout stays what CONTRIBUTING says: one room per job.

- CONTRIBUTING.md's package map names every module and package of ``tutor/`` (and nothing that is not there);
- no module is over ~500 lines, except the per-notebook check tables (``tutor/checks/nbNN_*.py``);
- no module imports another package's private names (``from tutor.x import _y``);
- every ``TUTOR_*`` variable the package reads is declared in ``tutor/env.py``;
- importing each module alone, in a fresh interpreter, works (no import cycle) and warns about nothing;
- every preset of a run (a module-level ``TrainConfig``) is defined in ``tutor/train/presets.py``;
- the training engine keeps a small surface: what a longer run plugs into ``fit`` goes into ``Hooks``;
- a constant that another module imports has one definition in the package (``LETTERS`` once meant four things);
- no code reaches into another object's private attributes (``reference._stable_end(...)``), but a few of Python's,
  PyTorch's and ipywidgets' own, each with its reason.
"""

import ast
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tutor"
MAX_LINES = 520  # "about 500"


def modules():
    """Every module of the package as (dotted name, path)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        yield name, path


def test_the_package_map_matches_the_tree():
    """CONTRIBUTING.md's "Where things live" is the one map of the package."""
    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = contributing.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `tutor")]
    named = set()
    for row in rows:
        first = row.split("|")[1]
        named |= {name.split("(")[0] for name in re.findall(r"`(tutor[\w.()]*)`", first)}
    top_level = {name for name, _ in modules() if name.count(".") == 1}
    missing = sorted(top_level - named - {"tutor.__main__"})
    assert not missing, f"CONTRIBUTING.md's package map does not list {missing}"
    for name in named:  # and every name in it exists (a module, or a function of the package)
        module, _, attribute = name.rpartition(".")
        exists = (PACKAGE.parent / name.replace(".", "/")).with_suffix(".py").exists() or \
            (PACKAGE.parent / name.replace(".", "/")).is_dir() or \
            f"def {attribute}" in (PACKAGE.parent / module.replace(".", "/") / "__init__.py").read_text()
        assert exists, f"CONTRIBUTING.md's package map names {name}, which is not in tutor/"


def test_no_module_is_over_about_500_lines_except_the_check_tables():
    long = {name: n for name, path in modules()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
            and not re.fullmatch(r"tutor\.checks\.nb\d\d_\w+", name)}
    assert not long, f"split these by job: {long}"


def test_no_private_names_are_imported_across_modules():
    found = []
    for name, path in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tutor"):
                found += [f"{name}: from {node.module} import {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert not found, found


def test_no_private_names_are_used_across_modules():
    # `import tutor.reference as ref` then `ref._words(...)`: the same coupling as importing `_words`
    found = []
    for name, path in modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        ours = set()  # the names this module binds to modules of the package
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                ours |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("tutor")}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tutor"):
                ours |= {a.asname or a.name for a in node.names}
        found += [f"{name}:{node.lineno}: {node.value.id}.{node.attr}" for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ours
                  and node.attr.startswith("_") and not node.attr.startswith("__")]
    assert not found, found


def test_every_tutor_variable_is_declared_in_env():
    declared = set(re.findall(r'"(TUTOR_[A-Z_]+)"', (PACKAGE / "env.py").read_text(encoding="utf-8")))
    read = set()
    for _, path in modules():
        read |= set(re.findall(r"\b(TUTOR_[A-Z_]+)\b", path.read_text(encoding="utf-8")))
    assert read - declared == set(), f"declare these in tutor/env.py: {sorted(read - declared)}"


def test_every_module_imports_alone_without_a_warning():
    names = [name for name, _ in modules() if name != "tutor.__main__"]
    script = ("import importlib, sys, warnings\nwarnings.simplefilter('error')\nfailed = []\n"
              "for name in sys.argv[1:]:\n"
              "    for loaded in [m for m in sys.modules if m == 'tutor' or m.startswith('tutor.')]:\n"
              "        del sys.modules[loaded]\n"
              "    try:\n        importlib.import_module(name)\n"
              "    except Exception as error:\n        failed.append(f'{name}: {type(error).__name__}: {error}')\n"
              "print('\\n'.join(failed))\n")
    done = subprocess.run([sys.executable, "-c", script, *names], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", done.stdout


CONFIG_CLASSES = {"TrainConfig", "ScaleConfig", "PayoffConfig"}


def test_every_preset_is_defined_in_the_presets_module():
    found = []
    for name, path in modules():
        if name == "tutor.train.presets":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:  # module level only
            calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)] if isinstance(node, ast.Assign) else []
            found += [f"{name}:{node.lineno}" for call in calls
                      if getattr(call.func, "id", getattr(call.func, "attr", None)) in CONFIG_CLASSES]
    assert not found, f"define presets in tutor/train/presets.py (a run's module may name them): {found}"


def test_the_engine_keeps_a_small_surface():
    import inspect

    from tutor.train import Hooks, fit, long_run

    # rasbt's train_model_simple takes 10; a hook of a longer run is a field of Hooks, not one more argument
    assert len(inspect.signature(fit).parameters) <= 11, "put what a longer run adds into tutor.train.Hooks"
    assert len(inspect.signature(long_run.train).parameters) <= 12
    assert {"callback", "metrics", "runner", "optimizer"} <= set(inspect.signature(Hooks).parameters)


def _constants_defined(tree) -> set:
    """The UPPER_CASE names a module binds at its top to a value of its own (not to another module's object)."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and not isinstance(node.value, (ast.Attribute, ast.Name, ast.Tuple)):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            names.add(node.target.id)
    return {name for name in names if re.fullmatch(r"[A-Z][A-Z0-9_]*", name)}


def test_an_imported_constant_has_one_definition():
    defined, imported = {}, set()
    for name, path in modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for constant in _constants_defined(tree):
            defined.setdefault(constant, []).append(name)
        imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                     and (node.module or "").startswith("tutor") for a in node.names}
    twice = {c: where for c, where in defined.items() if c in imported and len(where) > 1}
    assert not twice, f"one definition each (give the others their own names): {twice}"


# Private attributes the package may use on objects that are not its own, with the reason.
OTHERS_PRIVATE = {
    ("os", "_exit"): "a forked child exits without running the parent's atexit handlers",
    ("widget", "_handle_displayed"): "ipywidgets 7 runs its on-displayed callbacks only through it",
    ("torch", "_dynamo"): "mark_static_address (a CUDA graph's fixed KV buffers) has no public name in torch.compiler",
    ("m", "_forward_pre_hooks"): "nn.Module lists its hooks nowhere public: a hook left behind (nb 14)",
    ("m", "_forward_hooks"): "nn.Module lists its hooks nowhere public: a hook left behind (nb 14)",
}


def test_no_private_attribute_of_another_object_is_used():
    found = []
    for name, path in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            owner = node.value.id if isinstance(node.value, ast.Name) else getattr(node.value, "attr", "")
            if owner not in ("self", "cls") and (owner, node.attr) not in OTHERS_PRIVATE:
                found.append(f"{name}:{node.lineno}: {owner}.{node.attr}")
    assert not found, f"use a public name (or add it to OTHERS_PRIVATE with the reason): {found}"

"""The package a graded notebook runs with: the course's own, without the model answers of the exercises graded.

:func:`write_package` writes the ``tutor`` package for one notebook's kernel. In it, each model answer being graded
(the ``tutor.reference`` function or class of the exercise, and the private helpers only it uses) is a stub of the
same name that raises ``ModelAnswerLocked``, and the checks' own modules (which compute the expected values, and
hold the classic mistakes) are left out. The sandbox (``tutor.grading.sandbox``) shows the kernel this package and
not the course's folder, so the learner's code cannot read, import or copy the answers it is graded on.

The answers of the other exercises stay: a notebook builds on the ones before it (``yours_or_reference``). Within
the notebook graded, an exercise's answer is handed to the kernel once its check has given its verdict
(:func:`unlock_sources`, run by the kernel's server in ``tutor.grading.kernel``): a later exercise may then use it,
as it would in the notebook, and nothing can change the verdict already given.
"""

from __future__ import annotations

import ast
import functools
import pathlib
from dataclasses import dataclass

import tutor
from tutor.course import catalog

LOCKED_MODULE = '''"""The model answers the grader hid from this process (tutor.grading.lock), and those handed back."""

UNLOCKED = {}  # "tutor.reference.attention.softmax" -> the model answer, once its exercise has its verdict


class ModelAnswerLocked(RuntimeError):
    """A model answer was used while its exercise is graded."""


def answer(name):
    found = UNLOCKED.get(name)
    if found is None:
        raise ModelAnswerLocked(f"the model answer {name} cannot be used while its exercise is graded")
    return found
'''

# The checks' modules that compute expected values and hold the classic mistakes: not in a graded kernel's package.
LEFT_OUT = ("checks/common.py", "checks/compare.py")


@dataclass(frozen=True)
class Hidden:
    """One top-level definition of ``tutor/reference`` left out of a graded kernel's package."""

    module: str  # "tutor.reference.attention"
    name: str  # "softmax"
    kind: str  # "def" or "class"
    source: str  # its source, decorators included

    @property
    def qualified(self) -> str:
        return f"{self.module}.{self.name}"


def _module_path(module: str) -> pathlib.Path:
    """The file of ``tutor.x.y``: ``tutor/x/y.py``."""
    root = pathlib.Path(tutor.__file__).resolve().parent
    return root.joinpath(*module.split(".")[1:]).with_suffix(".py")


@functools.cache
def _definitions(module: str) -> tuple[str, dict]:
    """The module's source and its top-level definitions: name -> (node, the private names it uses)."""
    source = _module_path(module).read_text(encoding="utf-8")
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id.startswith("_")
                    and not n.id.startswith("__")}
            found[node.name] = (node, used)
    return source, found


def _answer_module(exercise: catalog.Exercise) -> str:
    from tutor import reference

    return getattr(reference, exercise.reference).__module__


def hidden(exercises) -> dict[str, list[Hidden]]:
    """Exercise name -> the definitions hidden for it: its model answer, the private helpers that only hidden
    definitions use (a helper also used by an answer that stays, stays), and the definitions elsewhere in the package
    that do its work (``catalog.EQUIVALENTS``)."""
    chosen = [catalog.BY_NAME[name] for name in exercises]
    by_module: dict[str, set] = {}
    for exercise in chosen:
        by_module.setdefault(_answer_module(exercise), set()).add(exercise.reference)
    out: dict[str, list[Hidden]] = {}
    for module, answers in by_module.items():
        source, definitions = _definitions(module)
        owners = {}  # helper -> the answers that reach it
        for answer in answers:
            todo, seen = [answer], set()
            while todo:
                name = todo.pop()
                for used in definitions.get(name, (None, set()))[1]:
                    if used in definitions and used not in seen:
                        seen.add(used)
                        todo.append(used)
            for helper in seen:
                owners.setdefault(helper, set()).add(answer)
        kept = [name for name in definitions if name not in answers and name not in owners]
        needed_by_kept = set()
        todo = list(kept)
        while todo:
            for used in definitions[todo.pop()][1]:
                if used in definitions and used not in needed_by_kept:
                    needed_by_kept.add(used)
                    todo.append(used)
        for exercise in chosen:
            if _answer_module(exercise) != module:
                continue
            names = [exercise.reference] + sorted(h for h, who in owners.items()
                                                  if exercise.reference in who and h not in needed_by_kept)
            out[exercise.name] = [_hidden(module, source, definitions, name) for name in names]
    for exercise in chosen:  # what does the exercise's work elsewhere in the package (catalog.EQUIVALENTS)
        for qualified in catalog.EQUIVALENTS.get(exercise.name, ()):
            module, name = qualified.rsplit(".", 1)
            source, definitions = _definitions(module)
            out[exercise.name].append(_hidden(module, source, definitions, name))
    return out


def _hidden(module, source, definitions, name) -> Hidden:
    node = definitions[name][0]
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    lines = source.splitlines(keepends=True)[first - 1:node.end_lineno]
    return Hidden(module, name, "class" if isinstance(node, ast.ClassDef) else "def", "".join(lines))


def stub(item: Hidden) -> str:
    """The source that stands in for a hidden definition: the same name, which raises until it is handed back."""
    call = f'__import__("tutor._locked", fromlist=["answer"]).answer({item.qualified!r})(*args, **kwargs)'
    if item.kind == "class":
        return (f"class {item.name}:  # the model answer, hidden while its exercise is graded (tutor.grading.lock)\n"
                f"    def __new__(cls, *args, **kwargs):\n        return {call}\n")
    return (f"def {item.name}(*args, **kwargs):  # the model answer, hidden while its exercise is graded "
            f"(tutor.grading.lock)\n    return {call}\n")


def locked_source(module: str, items: list[Hidden]) -> str:
    """The module's source with ``items`` replaced by their stubs."""
    source, definitions = _definitions(module)
    lines = source.splitlines(keepends=True)
    spans = []
    for item in items:
        node = definitions[item.name][0]
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        spans.append((first, node.end_lineno, stub(item)))
    for first, last, text in sorted(spans, reverse=True):
        lines[first - 1:last] = [text]
    return "".join(lines)


def package_files(exercises) -> dict[str, bytes]:
    """The files of the package a notebook whose ``exercises`` are graded runs with (paths relative to the folder
    that holds ``tutor``)."""
    root = pathlib.Path(tutor.__file__).resolve().parent
    items = dict.fromkeys(item for group in hidden(exercises).values() for item in group)  # (one answer, two exercises)
    by_module: dict[str, list[Hidden]] = {}
    for item in items:
        by_module.setdefault(item.module, []).append(item)
    files = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if not path.is_file() or "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
            continue
        if rel in LEFT_OUT or (rel.startswith("checks/nb") and rel.endswith(".py")):
            continue
        module = "tutor." + rel[:-3].replace("/", ".") if rel.endswith(".py") else None
        data = path.read_bytes()
        if module in by_module:
            data = locked_source(module, by_module[module]).encode("utf-8")
        files[f"tutor/{rel}"] = data
    files["tutor/_locked.py"] = LOCKED_MODULE.encode("utf-8")
    return files


def write_package(exercises, directory: pathlib.Path) -> pathlib.Path:
    """Write :func:`package_files` into ``directory`` (readable by everyone: the sandbox's user reads it)."""
    for rel, data in package_files(exercises).items():
        out = directory / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        out.chmod(0o644)
    for folder in [directory, *(p for p in directory.rglob("*") if p.is_dir())]:
        folder.chmod(0o755)
    return directory


def unlock_sources(exercise: str, exercises) -> list[list[str]]:
    """``[[module, name, source], ...]``: what the kernel runs to have ``exercise``'s model answer back (see the
    module's docstring), for a notebook whose ``exercises`` are graded."""
    return [[item.module, item.name, item.source] for item in hidden(exercises).get(exercise, [])]

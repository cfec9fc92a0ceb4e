"""A static look at the learner's cells, for the instructor: :func:`flags` and :func:`same_as_answer`.

Nothing here changes a score. The grade is decided by the judge, apart from the learner's code (see
``tutor.grading.judge``); what the learner's code does in its own process cannot reach it. Two things are still
worth an instructor's look, and are flagged for review with the cell, the line and why:

- code that reaches for the machinery of a process (frames, hooks, memory, other processes, the grader's own
  modules). No exercise of the course needs any of it (a test checks that no solution notebook is flagged): in a
  notebook that uses it, someone tried something;
- a definition that is the model answer's with only names and formatting changed (:func:`same_as_answer`): the
  answers ship with the course, so a learner can copy them at home. The grader hides them while it grades, which
  stops their use, not their copy;
- a learner's cell that imports a library which does an exercise's work (``LIBRARIES``: PEFT's LoRA layer, GPT-2
  from ``transformers``, TransformerLens's hooks, tiktoken's BPE). The course uses them in its own cells to prove
  parity, and those are not the learner's; in an exercise, or a cell the learner added, the grade may be the
  library's.
"""

from __future__ import annotations

import ast
import copy
import inspect
import os
import re
from dataclasses import dataclass

from tutor.course import catalog

# Modules (and their submodules) that can reach the grader's process, by what they do.
MODULES = {
    "threading": "starts threads", "_thread": "starts threads", "concurrent": "starts threads or processes",
    "asyncio": "schedules code to run later", "multiprocessing": "starts processes", "subprocess": "starts processes",
    "pty": "starts processes", "signal": "replaces signal handlers", "atexit": "runs code at exit",
    "gc": "reaches any object in memory", "ctypes": "writes to memory", "cffi": "writes to memory",
    "mmap": "maps memory", "socket": "opens channels to other processes", "resource": "changes process limits",
    "IPython.core": "reaches IPython's hooks and display machinery", "ipykernel": "reaches the kernel",
    "zmq": "reaches the kernel's channels", "jupyter_client": "reaches the kernel", "comm": "reaches the kernel",
    "builtins": "replaces built-in functions", "importlib": "imports modules by name or reloads them",
    "inspect": "reads frames and source", "dis": "reads bytecode", "code": "runs code built at run time",
    "marshal": "loads code objects", "pydoc": "imports modules by name (pydoc.locate)",
    "pkgutil": "imports modules by name", "runpy": "runs modules by name", "pickle": "loads objects by name",
    "tutor.grading": "reaches the grader",
    "tutor.checks.harness": "reaches the checks' machinery",
}
# Libraries that do exercises' work: the course's parity cells use them, a learner's cells need not.
LIBRARIES = {
    "peft": "notebook 13's LoRA", "transformers": "notebook 12's GPT-2 and its loading",
    "transformer_lens": "notebook 14's hooks and patterns", "tiktoken": "notebook 11's BPE",
}
# Attributes that reach the machinery whatever they are read from.
ATTRIBUTES = {
    "settrace": "installs a trace hook", "setprofile": "installs a profile hook",
    "monitoring": "installs monitoring hooks", "addaudithook": "installs an audit hook (it cannot be removed)",
    "_getframe": "reads frames", "_current_frames": "reads other threads' frames", "f_back": "reads frames",
    "f_globals": "reads frames", "f_locals": "reads frames", "f_builtins": "reads frames", "tb_frame": "reads frames",
    "gi_frame": "reads frames", "cr_frame": "reads frames", "f_trace": "reads frames",
    "__code__": "replaces or reads a function's code", "__globals__": "reaches a function's globals",
    "__closure__": "reaches a function's closure", "__builtins__": "replaces built-in functions",
    "__subclasses__": "reaches classes through their bases", "CodeType": "builds code objects",
    "FunctionType": "builds functions", "get_ipython": "reaches IPython's hooks",
    "display_pub": "reaches IPython's display machinery", "publish_display_data": "reaches IPython's display machinery",
    "input_transformers_cleanup": "reaches IPython's input transformers",
    "input_transformers_post": "reaches IPython's input transformers",
    "input_transformer_manager": "reaches IPython's input transformers",
    "ast_transformers": "reaches IPython's AST transformers", "register_magic_function": "adds an IPython magic",
    "TorchFunctionMode": "changes how torch runs every operation",
    "TorchDispatchMode": "changes how torch runs every operation",
    "__torch_function__": "changes how torch runs operations",
    "__torch_dispatch__": "changes how torch runs operations",
}
STORED = {"__class__": "changes an object's class"}  # only when assigned
# Attributes of a module (as imported by the cell) that reach the machinery.
MODULE_ATTRIBUTES = {
    "sys": {"modules": "reaches sys.modules", "displayhook": "replaces the display hook",
            "excepthook": "replaces the exception hook", "meta_path": "adds an import hook",
            "path_hooks": "adds an import hook"},
    "os": dict.fromkeys(["fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "execv", "execve",
                         "execvp", "execvpe", "execl", "execle", "execlp", "execlpe", "spawnv", "spawnve", "spawnl",
                         "spawnle", "spawnvp", "spawnlp", "register_at_fork"], "starts processes")
    | dict.fromkeys(["kill", "killpg", "abort", "_exit"], "stops or signals processes")
    | dict.fromkeys(["setsid", "setpgid", "setpgrp"], "leaves its process group")
    | dict.fromkeys(["dup", "dup2", "fdopen", "write", "open", "close", "pipe", "read"], "uses file descriptors"),
    "torch": {"library": "registers operator implementations", "overrides": "changes how torch runs operations"},
}
MODULE_ATTRIBUTES["posix"] = MODULE_ATTRIBUTES["os"]
CALLS = {"exec": "runs code built at run time", "eval": "runs code built at run time",
         "compile": "builds code at run time", "__import__": "imports modules by name",
         "globals": "reaches the notebook's namespace", "get_ipython": "reaches IPython's hooks",
         "breakpoint": "starts a debugger"}
BY_NAME_CALLS = {"setattr": "sets a library attribute by name", "delattr": "deletes a library attribute by name"}
STRINGS = ("__tutor_grade", "tutor-grade", "/proc/", "tutor.grading")


@dataclass(frozen=True)
class Flag:
    """One line of learner code that could reach the grader, and why."""

    cell: str  # "cell 7 (a cell you added)"
    line: int
    code: str  # the line, stripped
    why: tuple[str, ...]  # ("starts threads (threading)", ...)

    def text(self) -> str:
        return f"{self.cell}, line {self.line}: `{self.code}` {'; '.join(self.why)}"


def _module_reason(name: str) -> str | None:
    if name.split(".")[0] in LIBRARIES:
        return (f"imports a library that does exercises' work, {LIBRARIES[name.split('.')[0]]} ({name}): "
                "see that the exercise is the learner's own")
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        key = ".".join(parts[:end])
        if key in MODULES and MODULES[key]:
            return f"{MODULES[key]} ({name})"
    return None


def _dotted(node) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def flags(source: str, cell: str) -> list[Flag]:
    """What in ``source`` (one cell's code) could reach the grader, one :class:`Flag` per line and reason."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    lines = source.splitlines()
    imported: dict[str, str] = {}  # local name -> what it is ("os", "torch.nn.functional", "sys.modules")
    found: dict[int, list[str]] = {}  # line -> reasons

    def flag(node, why):
        reasons = found.setdefault(getattr(node, "lineno", 1), [])
        if why not in reasons:
            reasons.append(why)

    def attribute_reason(module: str, attr: str) -> str | None:
        table = MODULE_ATTRIBUTES.get(module.split(".")[0], {}) if module.count(".") == 0 else {}
        return table.get(attr)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                imported[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname \
                    else alias.name.split(".")[0]
                why = _module_reason(alias.name)
                if why:
                    flag(node, why)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                imported[alias.asname or alias.name] = full
                why = _module_reason(full) or attribute_reason(node.module, alias.name) \
                    or ATTRIBUTES.get(alias.name)
                if why:
                    flag(node, why if "(" in why else f"{why} ({full})")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            base = dotted.split(".")[0] if dotted else ""
            owner = imported.get(base, "") if dotted.count(".") == 1 else ""
            why = ATTRIBUTES.get(node.attr) or attribute_reason(owner, node.attr) \
                or (STORED.get(node.attr) if isinstance(node.ctx, ast.Store) else None)
            if why:
                flag(node, f"{why} ({dotted or node.attr})")
            if isinstance(node.ctx, (ast.Store, ast.Del)) and base in imported:
                flag(node, f"replaces a library attribute ({dotted})")
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id.startswith("__") \
                and node.id in ATTRIBUTES:
            flag(node, f"{ATTRIBUTES[node.id]} ({node.id})")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in CALLS:
                flag(node, f"{CALLS[node.func.id]} ({node.func.id})")
            elif node.func.id in BY_NAME_CALLS and node.args and _dotted(node.args[0]).split(".")[0] in imported:
                flag(node, f"{BY_NAME_CALLS[node.func.id]} ({node.func.id}({_dotted(node.args[0])}, ...))")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            hit = next((s for s in STRINGS if s in node.value), None)
            if hit:
                flag(node, f"names the grader's machinery ({hit!r})")
            library = re.fullmatch(r"(\w+)(\.[\w.]*)?", node.value.strip())
            if library and library.group(1) in LIBRARIES:  # a module path in a string: imported by name
                flag(node, _module_reason(node.value.strip()))
    return [Flag(cell, line, (lines[line - 1].strip() if 0 < line <= len(lines) else "")[:100], tuple(why))
            for line, why in sorted(found.items())]


# --------------------------------------------------------------------------------------
# The same source, names and formatting aside


class _Normalise(ast.NodeTransformer):
    """Names become n0, n1 ... in order of first appearance; docstrings and annotations go."""

    def __init__(self):
        self.names: dict[str, str] = {}

    def _name(self, name: str) -> str:
        return self.names.setdefault(name, f"n{len(self.names)}")

    def visit_Name(self, node):
        return ast.copy_location(ast.Name(self._name(node.id), node.ctx), node)

    def visit_arg(self, node):
        return ast.copy_location(ast.arg(self._name(node.arg), None), node)

    def generic_visit(self, node):
        node = super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):  # statements that do nothing (pass, a bare constant) go
            body = getattr(node, field, None)
            if isinstance(body, list) and body and all(isinstance(b, ast.stmt) for b in body):
                kept = [b for b in body if not _does_nothing(b)]
                setattr(node, field, kept or ([ast.Pass()] if field == "body" else []))
        return node

    def _body(self, node):
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
        return node

    def visit_FunctionDef(self, node):
        node = self._body(node)
        node.name = self._name(node.name)
        node.returns = None
        node.decorator_list = []
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        node = self._body(node)
        node.name = self._name(node.name)
        self.generic_visit(node)
        return node

    def visit_AnnAssign(self, node):
        if node.value is None:
            return None
        return ast.copy_location(ast.Assign([self.visit(node.target)], self.visit(node.value)), node)


def _does_nothing(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Pass) or (isinstance(statement, ast.Expr)
                                               and isinstance(statement.value, ast.Constant))


def normalised(node: ast.AST) -> str:
    """``ast.dump`` of ``node`` with names, docstrings and annotations normalised away."""
    return ast.dump(_Normalise().visit(node), annotate_fields=False)


def definition(source: str, name: str) -> ast.AST | None:
    """The last top-level ``def``/``class`` called ``name`` in ``source``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    found = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
             and n.name == name]
    return found[-1] if found else None


def statements(node: ast.AST | None) -> int:
    """How many statements ``node`` holds (a definition's body, nested bodies included)."""
    return 0 if node is None else sum(isinstance(n, ast.stmt) for n in ast.walk(node)) - 1


def answer_definition(exercise: catalog.Exercise) -> ast.AST | None:
    """The model answer's ``def``/``class`` of ``exercise``, parsed from its module's source."""
    from tutor import reference

    answer = inspect.unwrap(getattr(reference, exercise.reference))
    try:
        return definition(inspect.getsource(inspect.getmodule(answer)), answer.__name__)
    except (OSError, TypeError):
        return None


def same_as_answer(source: str, exercise: catalog.Exercise) -> str | None:
    """``"tutor/reference/attention.py"`` when a definition in ``source`` is the model answer's with only names,
    formatting, comments, docstrings, annotations or statements that do nothing changed. Any ``def``/``class`` of
    the cell counts, whatever its name and however deep (a copy renamed and bound to the exercise's name later, or
    one under ``if True:``)."""
    from tutor import reference

    theirs = answer_definition(exercise)
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    if theirs is None:
        return None
    target = normalised(theirs)
    for mine in ast.walk(tree):
        if type(mine) is type(theirs) and normalised(copy.deepcopy(mine)) == target:  # (normalising edits a tree)
            answer = inspect.unwrap(getattr(reference, exercise.reference))
            return "tutor/reference/" + os.path.basename(inspect.getsourcefile(answer))
    return None

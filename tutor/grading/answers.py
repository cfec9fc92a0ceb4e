"""Does a learner's code use the model answer? Seen while its check runs (:class:`Watch`), and in its source
(:func:`same_as_answer`).

The model answers ship with the course (``tutor.reference``): every notebook runs with them and learners
check themselves against them. For marks, an exercise earns nothing when the code its check runs calls
into that exercise's model answer, by whatever route: an alias (``softmax = ref.softmax``), a wrapper, a
subclass, another import name, ``importlib``, a module attribute, or ``exec`` of its source.

The model answer of an exercise (its :class:`Footprint`) is the code of its ``tutor.reference`` object (a
function, or every method of a class, nested functions included) and of the private reference helpers that
only it uses (``_fill`` for ``load_gpt2``). Answers of other exercises stay allowed: a notebook builds on the
model answers of the ones before it (``yours_or_reference``).

:class:`Watch` is a profile hook (``sys.setprofile``) in the process that runs one check. A call into the
footprint counts when the code is any copy but the checker's own (the copy the learner's cells imported,
another import of the files, ``exec`` of their source), or when it is the checker's own copy and the
nearest caller that is not library code is the learner's (an import inside the learner's function).
Code typed into a cell that compiles to the model answer's is not counted here (:func:`typed_in_cell`):
:func:`same_as_answer` flags it for review.
"""

from __future__ import annotations

import ast
import dis
import inspect
import linecache
import os
import re
import sys
import sysconfig
import textwrap
import threading
import types
from dataclasses import dataclass, field
from tokenize import TokenError

from tutor.course import catalog

CELL_FILE = re.compile(r"ipykernel_\d+|<ipython-input-")  # where IPython compiles a notebook cell's code
PACKAGE_DIR = "tutor" + os.sep + "reference" + os.sep


# --------------------------------------------------------------------------------------
# The model answer's code


@dataclass
class Footprint:
    """The code of one exercise's model answer: by identity (the checker's copy), by place in a file of
    ``tutor/reference`` (any copy), and by compiled content (``exec`` of its source)."""

    exercise: str
    answer: str  # "tutor.reference.softmax"
    ids: set = field(default_factory=set)  # id() of the checker's own code objects
    codes: list = field(default_factory=list)  # ... kept alive, so that the ids stay theirs
    places: dict = field(default_factory=dict)  # (file under tutor/reference, name, first line) -> "module.name"
    contents: dict = field(default_factory=dict)  # fingerprint -> "module.name"
    names: set = field(default_factory=set)  # the names of its functions (a cheap first test)


def _unwrap(obj):
    while hasattr(obj, "__wrapped__"):
        obj = obj.__wrapped__
    return obj


def _codes_of(obj) -> list[types.CodeType]:
    """The code objects of a function, or of every function a class defines, nested ones included."""
    obj = _unwrap(obj)
    functions = []
    if isinstance(obj, type):
        for value in vars(obj).values():
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if isinstance(value, property):
                functions += [f for f in (value.fget, value.fset, value.fdel) if f is not None]
            elif isinstance(value, types.FunctionType):
                functions.append(_unwrap(value))
    elif isinstance(obj, types.FunctionType):
        functions.append(obj)
    codes, todo = [], [f.__code__ for f in functions]
    while todo:
        code = todo.pop()
        codes.append(code)
        todo += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return codes


def _helpers(obj, reference_modules: dict) -> dict:
    """``{id: function or class}``: the private ``tutor.reference`` functions and classes (``_fill``) that
    ``obj``'s code names, and theirs, transitively. Public ones (``GPTConfig``, ``bytes_to_unicode``) are
    tools a notebook may hand to learners, not part of an answer."""
    found, todo = {}, [obj]
    while todo:
        current = todo.pop()
        module = reference_modules.get(getattr(current, "__module__", ""), None)
        if module is None:
            continue
        for code in _codes_of(current):
            for name in code.co_names:
                if not name.startswith("_") or name.startswith("__"):
                    continue
                value = _unwrap(vars(module).get(name))
                if isinstance(value, (types.FunctionType, type)) and id(value) not in found \
                        and str(getattr(value, "__module__", "")).startswith("tutor.reference"):
                    found[id(value)] = value
                    todo.append(value)
    return found


# Instructions that say how, not what: left out of a fingerprint, or named alike. (The same source compiled
# alone, as ``exec`` compiles it, and inside its module differ in these: ``torch.exp`` is a LOAD_ATTR where
# ``torch`` is the module's import, a LOAD_METHOD elsewhere.)
_HOW = {"CACHE", "PRECALL", "RESUME", "NOP", "EXTENDED_ARG", "COPY_FREE_VARS", "MAKE_CELL", "PUSH_NULL"}
_SAME = {"LOAD_METHOD": "LOAD_ATTR", "CALL_METHOD": "CALL", "CALL_FUNCTION": "CALL"}
_JUMPS = set(dis.hasjrel) | set(dis.hasjabs)


def fingerprint(code: types.CodeType) -> tuple:
    """What a code object computes: its instructions and their names and constants, without where it was
    compiled (file, lines, offsets) or how the compiler chose to call a method."""
    out = []
    for ins in dis.get_instructions(code):
        if ins.opname in _HOW:
            continue
        if ins.opcode in _JUMPS:
            arg = None
        elif isinstance(ins.argval, types.CodeType):
            arg = fingerprint(ins.argval)
        else:
            arg = repr(ins.argval)
        out.append((_SAME.get(ins.opname, ins.opname), arg))
    return code.co_name, tuple(out)


def _place(code: types.CodeType):
    """(file under tutor/reference, name, first line), or None for code elsewhere."""
    filename = code.co_filename.replace("/", os.sep)
    at = filename.rfind(PACKAGE_DIR)
    if at < 0:
        return None
    return filename[at + len(PACKAGE_DIR):].replace(os.sep, "/"), code.co_name, code.co_firstlineno


def footprints(exercises, reference_modules: dict) -> dict[str, Footprint]:
    """``{exercise: Footprint}`` for the exercises named, from the checker's copy of ``tutor.reference``
    (``reference_modules``: module name -> module). A helper counts for an exercise when no other
    exercise's answer uses it."""
    reference = reference_modules["tutor.reference"]
    helpers = {e.reference: _helpers(getattr(reference, e.reference), reference_modules) for e in catalog.EXERCISES}
    out = {}
    for name in exercises:
        exercise = catalog.BY_NAME[name]
        answer = getattr(reference, exercise.reference)
        shared = set()
        for other, found in helpers.items():
            if other != exercise.reference:
                shared |= set(found)
        parts = [answer] + [h for key, h in helpers[exercise.reference].items() if key not in shared]
        fp = Footprint(name, f"tutor.reference.{exercise.reference}")
        for part in parts:
            label = f"{part.__module__}.{getattr(part, '__qualname__', part.__name__)}"
            for code in _codes_of(part):
                fp.ids.add(id(code))
                fp.codes.append(code)
                place = _place(code)
                if place is not None:
                    fp.places[place] = label
                fp.contents[fingerprint(code)] = label
                fp.names.add(code.co_name)
        out[name] = fp
    return out


def identity(obj, fp: Footprint) -> str | None:
    """``"tutor.reference.attention.softmax"`` when ``obj`` is the model answer itself (an alias, a partial,
    a decorated copy, or a class that inherits it), else None."""
    seen = obj
    for _ in range(8):
        if hasattr(seen, "func") and callable(seen.func):  # functools.partial
            seen = seen.func
        elif hasattr(seen, "__func__"):  # a bound method
            seen = seen.__func__
        else:
            break
    candidates = list(type.mro(seen)) if isinstance(seen, type) else [seen]
    for candidate in candidates:
        for code in _codes_of(candidate):
            place = _place(code)
            where = fp.places.get(place) if place else None
            if where or id(code) in fp.ids:
                return where or fp.answer
    return None


def typed_in_cell(code: types.CodeType) -> bool:
    """Whether ``code`` was compiled from a notebook cell that holds its definition (IPython keeps each cell's
    source in ``linecache``): typed by the learner, not ``exec`` of a string under a cell's file name."""
    if not CELL_FILE.search(code.co_filename):
        return False
    lines = linecache.getlines(code.co_filename)
    if not lines or code.co_firstlineno > len(lines):
        return False
    try:
        block = inspect.getblock(lines[code.co_firstlineno - 1:])
    except (SyntaxError, IndentationError, TokenError):
        return False
    return definition(textwrap.dedent("".join(block)), code.co_name) is not None


# --------------------------------------------------------------------------------------
# Watching a check


def library_dirs(*extra) -> tuple[str, ...]:
    """The folders whose code is library code, not the learner's: Python's own, installed packages, and
    ``extra`` (the copies of ``tutor``)."""
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        dirs.add(sysconfig.get_paths().get(key, ""))
    dirs |= {p for p in sys.path if "site-packages" in p or "dist-packages" in p}
    dirs |= set(extra)
    dirs = {os.path.realpath(d) for d in dirs if d}
    return tuple(sorted(d + os.sep for d in dirs if d != os.sep))


class Watch:
    """Records the calls into one exercise's model answer while its check runs (see the module docstring).

    ``start(fd)`` installs the hook in this thread and in threads started later; every new finding is
    written to ``fd`` as a line (so that processes the check forks report too). ``stop()`` removes it and
    says whether it was still in place."""

    def __init__(self, fp: Footprint, library: tuple[str, ...]):
        self._floor = None
        self.fp = fp
        self.library = library
        self.found: list[str] = []
        self._verdicts: dict[int, tuple] = {}
        self._is_library: dict[str, bool] = {}

    def _library(self, filename: str) -> bool:
        known = self._is_library.get(filename)
        if known is None:
            real = filename if filename.startswith("<") else os.path.realpath(filename)
            known = self._is_library[filename] = real.startswith("<frozen") or real.startswith(self.library)
        return known

    def _classify(self, code):
        """(kind, where) for the footprint's code: "checker" (its own copy), "copy" or "exec"; else None."""
        if id(code) in self.fp.ids:
            return ("checker", self.fp.places.get(_place(code), self.fp.answer))
        place = _place(code)
        if place is not None and place in self.fp.places:
            return ("copy", self.fp.places[place])
        if code.co_name in self.fp.names and code.co_name.isidentifier() and not typed_in_cell(code):
            where = self.fp.contents.get(fingerprint(code))
            if where:
                return ("exec", where)
        return None

    def _learner_called(self, frame) -> bool:
        floor = self._floor
        while frame is not None and frame is not floor:
            if not self._library(frame.f_code.co_filename):
                return True
            frame = frame.f_back
        return False

    def start(self, fd: int) -> None:
        self._floor = sys._getframe(1)  # the grader's frame that calls the check: callers above it are the grader
        verdicts, classify, learner_called, found = self._verdicts, self._classify, self._learner_called, self.found
        write = os.write

        def hook(frame, event, arg):
            if event != "call":
                return
            code = frame.f_code
            entry = verdicts.get(id(code))
            if entry is None:
                entry = verdicts[id(code)] = (code, classify(code))
            verdict = entry[1]
            if verdict is None or (verdict[0] == "checker" and not learner_called(frame.f_back)):
                return
            line = f"{verdict[0]} {verdict[1]}"
            if line not in found:
                found.append(line)
                write(fd, (line + "\n").encode())

        self._hook = hook
        threading.setprofile(hook)
        sys.setprofile(hook)

    def stop(self) -> bool:
        intact = sys.getprofile() is self._hook
        sys.setprofile(None)
        threading.setprofile(None)
        return intact


def describe(findings: list[str], learner_name: str) -> str:
    """One sentence for the feedback from the lines a :class:`Watch` wrote."""
    how = {"copy": "calls", "checker": "imports and calls", "exec": "runs a copy (exec of the source) of"}
    parts = []
    for line in findings:
        kind, _, where = line.partition(" ")
        text = f"{how.get(kind, 'calls')} `{where}`"
        if text not in parts:
            parts.append(text)
    return f"your `{learner_name}` " + " and ".join(parts) + ", the model answer"


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


def same_as_answer(source: str, exercise: catalog.Exercise, reference_module) -> str | None:
    """``"tutor/reference/attention.py"`` when the learner's definition of the exercise in ``source`` is the
    model answer's with only names, formatting, comments, docstrings or annotations changed."""
    mine = definition(source, exercise.learner_name)
    answer = _unwrap(getattr(reference_module, exercise.reference))
    try:
        theirs = definition(inspect.getsource(inspect.getmodule(answer)), answer.__name__)
    except (OSError, TypeError):
        return None
    if mine is None or theirs is None or type(mine) is not type(theirs):
        return None
    if normalised(mine) != normalised(theirs):
        return None
    return "tutor/reference/" + os.path.basename(inspect.getsourcefile(answer))

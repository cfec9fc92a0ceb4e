"""The learner's side of a check: the process that holds the learner's objects and does what the judge asks.

:func:`serve` answers one exercise's requests on a socket: get an attribute, set one, call, index, iterate,
compare, find a library object by name (``resolve``, for what a check builds beside the learner's code). Each
answer is plain data or a handle (``tutor.grading.wire``); an exception raised by the learner's code is sent as
plain data too, with the line of the learner's code that raised it. Arguments that a call changed in place
(tensors, lists, dicts, sets) are sent back, so that the judge sees what the learner's code did to them.

It runs in a process where the learner's code runs (the grading kernel, or a fork of a test), so nothing here
is trusted by the judge: the judge checks what arrives (``wire.decode``) and computes every expected value itself.
"""

from __future__ import annotations

import importlib
import json
import operator
import os
import sys
import traceback

from tutor.grading import wire

# Requests that run one operator on the object (the judge's ``Remote`` sends them for its special methods).
UNARY = {"len": len, "bool": bool, "repr": repr, "str": str, "hash": hash, "int": int, "float": float,
         "index": operator.index, "neg": operator.neg, "abs": abs}
BINARY = {name: getattr(operator, name) for name in
          ("eq", "ne", "lt", "le", "gt", "ge", "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul",
           "and_", "or_", "xor", "contains", "getitem")}
STOP = object()


def learner_line(error: BaseException) -> str | None:
    """'line 4 in f(): return x / x.sum()' for the innermost frame outside torch, tutor and the libraries."""
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        name = frame.filename.replace("\\", "/")
        if "/tutor/" in name or "/torch/" in name or "/site-packages/" in name or "/lib/python" in name:
            continue
        code = (frame.line or "").strip()
        return f"line {frame.lineno} in {frame.name}(): {code}" if code else f"line {frame.lineno} in {frame.name}()"
    return None


class Handles:
    """The objects the judge holds handles to: id -> object (the same object always gets the same id)."""

    def __init__(self):
        self.objects: dict[int, object] = {}
        self.ids: dict[int, int] = {}

    def add(self, obj) -> dict:
        key = id(obj)
        number = self.ids.get(key)
        if number is None:
            number = self.ids[key] = len(self.objects) + 1
            self.objects[number] = obj
        kind = type(obj)
        mro = []
        try:
            mro = [f"{c.__module__}.{c.__qualname__}" for c in type.__getattribute__(kind, "__mro__")][:30]
        except Exception:  # noqa: BLE001 - an odd class: its mro stays unknown
            pass
        what = ("class" if isinstance(obj, type) else "function" if callable(obj) and not hasattr(obj, "__dict__")
                or type(obj).__name__ in ("function", "method", "builtin_function_or_method") else
                "module" if type(obj).__name__ == "module" else "object")
        return {"$": "handle", "id": number, "name": str(kind.__name__)[:200], "module": str(kind.__module__)[:200],
                "mro": mro, "callable": bool(callable(obj)), "kind": what}

    def get(self, tree) -> object:
        number = tree.get("id")
        if number not in self.objects:
            raise wire.WireError(f"no object has handle {number}")
        return self.objects[number]


# The course's modules whose helpers a check builds beside the learner's code, as they were before that code ran
# (:func:`keep_pristine`, called by the kernel's preamble): module name -> {attribute: (value, its code, and for a
# class of the module's own, every attribute it defines)}.
COURSE_HELPERS = ("tutor.checks.beside", "tutor.distributed")  # (and TORCH_RELIED_ON below)
_PRISTINE: dict[str, dict] = {}


# What the helpers rely on in torch to see how the learner's code ran (gradients on or off).
TORCH_RELIED_ON = ("is_grad_enabled", "is_inference_mode_enabled", "no_grad", "enable_grad", "set_grad_enabled",
                   "inference_mode")


# What Python itself adds to a class as it is used (copy and pickle cache __slotnames__): not a change.
_RUNTIME_CACHES = ("__dict__", "__weakref__", "__slotnames__", "_abc_impl")


def _class_state(cls) -> dict:
    """Every attribute a class defines (methods, properties, values), each with its code where it has one."""
    return {k: (v, getattr(v, "__code__", None)) for k, v in vars(cls).items() if k not in _RUNTIME_CACHES}


def _fingerprint(value, module: str | None = None):
    """The value, its code, and, for a class defined in ``module`` itself, its own attributes."""
    own = isinstance(value, type) and (module is None or getattr(value, "__module__", None) == module)
    return value, getattr(value, "__code__", None), _class_state(value) if own else None


def keep_pristine() -> None:
    """Remember the course's helper modules as they are now, before the learner's code runs: a check that asks for
    one of their helpers gets it only if the learner's code left the module alone."""
    for name in COURSE_HELPERS:
        module = importlib.import_module(name)
        _PRISTINE[name] = {k: _fingerprint(v, name) for k, v in vars(module).items() if not k.startswith("__")}
    import torch

    _PRISTINE["torch"] = {k: _fingerprint(getattr(torch, k)) for k in TORCH_RELIED_ON if hasattr(torch, k)}


def _tampered(module_name: str) -> str | None:
    """The first attribute of a course helper module that the learner's code replaced or changed, else None."""
    module = sys.modules.get(module_name)
    for name, (value, code, methods) in _PRISTINE.get(module_name, {}).items():
        now = getattr(module, name, None)
        if now is not value or getattr(now, "__code__", None) is not code:
            return name
        if methods is not None:
            current = _class_state(value)
            if current.keys() != methods.keys() or any(
                    current[k][0] is not v or current[k][1] is not c for k, (v, c) in methods.items()):
                return name
    return None


def _resolve(path: str):
    """``"torch.optim.SGD"`` or ``"tutor.checks.beside:FakeLM"``: the object of that name in this process. A helper
    of the course's (``COURSE_HELPERS``) is refused if the learner's code changed its module."""
    module_name, _, attribute = path.partition(":")
    if not attribute:
        module_name, _, attribute = path.rpartition(".")
    if module_name in _PRISTINE:
        for name in (module_name, "torch"):
            changed = _tampered(name)
            if changed is not None:
                raise RuntimeError(f"the notebook changed {name}.{changed}, which the course's check helpers rely "
                                   "on: a check cannot trust them")
    obj = importlib.import_module(module_name)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj


class Session:
    """One exercise's requests, answered in order."""

    def __init__(self, sock, root):
        self.sock = sock
        self.handles = Handles()
        self.root = root

    def args(self, header, blobs):
        mutable: list = []
        args = wire.decode(header.get("args", []), blobs, self.handles.get, mutable=mutable)
        kwargs = wire.decode(header.get("kwargs", {"$": "dict", "v": []}), blobs, self.handles.get, mutable=mutable)
        if type(args) is not list or type(kwargs) is not dict:
            raise wire.WireError("a call's arguments are not a list and a dict")
        return args, kwargs, mutable

    def run(self, header, blobs):
        op = header.get("op")
        if op == "root":
            return self.root, []
        if op == "resolve":
            return _resolve(str(header.get("path"))), []
        target = self.handles.get(header) if header.get("id") is not None else None
        if op == "getattr":
            return getattr(target, str(header.get("name"))), []
        if op == "setattr":
            args, _, _ = self.args(header, blobs)
            setattr(target, str(header.get("name")), args[0])
            return None, []
        if op == "delattr":
            delattr(target, str(header.get("name")))
            return None, []
        if op in ("call", "setitem", "delitem", "binary"):
            args, kwargs, mutable = self.args(header, blobs)
            before = [fingerprint(m) for m in mutable]
            if op == "call":
                result = self.call(target, args, kwargs, header, blobs)
            elif op == "setitem":
                target[args[0]] = args[1]
                result = None
            elif op == "delitem":
                del target[args[0]]
                result = None
            else:
                function = BINARY[str(header.get("name"))]
                result = function(target, args[0]) if not header.get("reflected") else function(args[0], target)
            return result, mutated(mutable, before), mutable
        if op == "unary":
            return UNARY[str(header.get("name"))](target), []
        if op == "iter":
            return iter(target), []
        if op == "next":
            return next(target, STOP), []
        raise wire.WireError(f"no request is called {op!r}")

    def call(self, target, args, kwargs, header, blobs):
        import torch

        context = header.get("context") or {}
        rng = context.get("rng")
        if type(rng) is int and 0 <= rng < len(blobs):
            torch.set_rng_state(torch.frombuffer(bytearray(blobs[rng]), dtype=torch.uint8).clone())
        dtype = wire.dtypes().get(context.get("dtype"))
        if dtype is not None:
            torch.set_default_dtype(dtype)
        with torch.set_grad_enabled(bool(context.get("grad", True))):
            return target(*args, **kwargs)

    def answer(self, header, blobs) -> None:
        encoder = wire.Encoder(handle=self.handles.add, loose=True)
        try:
            outcome = self.run(header, blobs)
            result, changed = outcome[0], outcome[1]
            if result is STOP:
                reply = {"stop": True}
            else:
                reply = {"ok": encoder.value(result)}
            if changed:
                mutable = outcome[2]
                reply["changed"] = [[i, encoder.value(mutable[i])] for i in changed]
        except BaseException as error:  # noqa: BLE001 - whatever the learner's code raised goes to the judge as data
            encoder = wire.Encoder(loose=True)
            reply = {"raise": error_value(error, learner_line(error), encoder)}
        wire.write_frame(self.sock, reply, encoder.blobs)


def quiet() -> None:
    """Standard streams to the null device, and IPython's display machinery silenced: no one reads them here."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    sys.stdin = open(os.devnull)
    sys.stdout = sys.stderr = open(os.devnull, "w")
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None:
        try:
            shell.display_pub.publish = lambda *args, **kwargs: None
            shell.displayhook = lambda *args, **kwargs: None
        except Exception:  # noqa: BLE001 - an odd shell: its display stays as it is
            pass


def serve(sock, root) -> None:
    """Answer requests about ``root`` (the learner's object) on ``sock`` until the judge closes it, on one thread: a
    fork's OpenMP threads can hang where its parent had used them (a torch.compile'd kernel), and the checks'
    tensors are small."""
    import torch

    torch.set_num_threads(1)
    session = Session(sock, root)
    while True:
        try:
            frame = wire.read_frame(sock)
        except (OSError, wire.WireError):
            return
        if frame is None:
            return
        header, blobs, _ = frame
        try:
            session.answer(header, blobs)
        except (OSError, wire.WireError):
            return


# --------------------------------------------------------------------------------------
# Errors, and what a call changed


def error_value(error: BaseException, where: str | None = None, encoder: wire.Encoder | None = None) -> dict:
    """An exception as plain data: its class's name, module and bases (names only), its message, where in the
    learner's code it was raised, and, for the course's own exceptions, their attributes (``RanksStopped.results``),
    encoded by ``encoder`` (whose blobs go with the frame)."""
    kind = type(error)
    bases = [f"{c.__module__}.{c.__qualname__}" for c in kind.__mro__]
    try:
        message = str(error)
    except Exception:  # noqa: BLE001 - an exception whose str() fails
        message = f"<{kind.__name__}>"
    out = {"type": kind.__name__, "module": kind.__module__, "bases": bases[:20], "message": message[:wire.MAX_TEXT],
           "where": where}
    if encoder is not None:  # the arguments, where they are plain data (a KeyError's key)
        blobs = len(encoder.blobs)
        try:
            out["args"] = encoder.value(tuple(error.args)[:8])
        except (wire.WireError, TypeError):
            del encoder.blobs[blobs:]
    if encoder is not None and kind.__module__.startswith("tutor."):
        attributes = {}
        for name, value in list(getattr(error, "__dict__", {}).items())[:20]:
            blobs = len(encoder.blobs)
            try:
                attributes[str(name)] = encoder.value(value)
            except wire.WireError:
                del encoder.blobs[blobs:]
        out["attributes"] = attributes
    return out


def mutated(mutable: list, before: list[bytes]) -> list[int]:
    """The indices of ``mutable`` (see :class:`Encoder`) whose encoding differs from ``before``."""
    return [i for i, (obj, old) in enumerate(zip(mutable, before)) if fingerprint(obj) != old]


def fingerprint(obj) -> bytes:
    """The bytes of one encoded value, to tell whether a call changed it."""
    encoder = wire.Encoder(handle=lambda v: {"$": "handle", "id": id(v)}, loose=True)
    tree = encoder.value(obj)
    return json.dumps(tree, sort_keys=True).encode() + b"".join(encoder.blobs)

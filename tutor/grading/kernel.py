"""The grader's code in the grading kernel: the preamble, before any learner code, and the start of the checker.

The runner sends this module's source text in the first cell of every kernel (the preamble), which
executes it into a module of its own and calls :func:`start` before any learner code has run. ``start``
caps the memory, imports what the checks will need, takes a :func:`snapshot` of every module, class and
function loaded, opens the grader's channel (a Unix socket to the runner) and leaves one thread waiting on
it: the watchdog. Then the learner's cells run, each exercise followed by a cell that keeps its definitions
(:func:`make_capture`).

After the last of them, the runner writes ``fork`` on the channel. No cell runs again in this kernel:

1. the watchdog forks. The child keeps only the watchdog's thread: every thread the learner started stays
   behind, and the runner kills the kernel (the parent) and its process group as soon as the child is there;
2. the child, before it runs any code that learner code could have replaced, stops garbage collection,
   puts back every module attribute, class attribute and function body the snapshot holds
   (:func:`restore`: IPython's hooks, display machinery and transformer lists included), resets signal
   handlers and trace, profile and monitoring hooks, sends the runner what had changed, and waits;
3. the runner writes a pristine copy of ``tutor`` to a new folder and sends ``go``; the child imports the
   pristine ``tutor.grading.checker`` from it and hands over (see that module).

The watchdog's path to the fork uses only functions bound while :func:`start` ran (default arguments),
so that learner code that replaces module attributes (``os.fork``, ``json.loads``) cannot run in it.

Only the standard library is imported at module level: this runs before the setup cell.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import signal
import socket
import sys
import threading
import types

FORK = b'\x00\x00\x00\x06"fork"'  # the one message the watchdog reads: a frame (see encode) holding "fork"


# --------------------------------------------------------------------------------------
# The channel: frames of 4-byte big-endian length + JSON


def encode(message) -> bytes:
    """One frame: ``len`` (4 bytes, big-endian) then the message as JSON (UTF-8)."""
    data = json.dumps(message, ensure_ascii=False).encode("utf-8")
    return len(data).to_bytes(4, "big") + data


def send(fd: int, message) -> None:
    """Write one frame to the file descriptor ``fd``."""
    data = encode(message)
    while data:
        data = data[os.write(fd, data):]


def recv(fd: int):
    """Read one frame from ``fd``; ``None`` at the end of the stream."""
    head = _read_exactly(fd, 4)
    if head is None:
        return None
    body = _read_exactly(fd, int.from_bytes(head, "big"))
    return None if body is None else json.loads(body.decode("utf-8"))


def _read_exactly(fd, n, _read=os.read, _len=len):
    data = b""
    while _len(data) < n:
        chunk = _read(fd, n - _len(data))
        if not chunk:
            return None
        data += chunk
    return data


# --------------------------------------------------------------------------------------
# Snapshot and restore


class Snapshot:
    """Every module's attributes, the attributes of the classes they hold, the code and defaults of their
    functions, ``sys``'s import lists, signal handlers and IPython's hooks, as they were when taken."""

    def __init__(self):
        self.modules = {}  # name -> (the module's __dict__, a copy of it)
        self.module_objects = {}  # name -> the module sys.modules held
        self.classes = {}  # id -> (class, dict of its attributes, "module.Class")
        self.functions = {}  # id -> (function, __code__, __defaults__, __kwdefaults__)
        self.lists = []  # (label, list object, its items): sys.meta_path, IPython's transformers ...
        self.objects = []  # (label, object, its __dict__, its traitlets values): IPython's shell, display_pub ...
        self.signals = {}  # signal number -> handler
        self.torch_library = None  # the operator implementations torch.library had registered


def snapshot() -> Snapshot:
    """Take a :class:`Snapshot` now (before any learner code)."""
    snap = Snapshot()
    main = vars(sys.modules["__main__"]) if "__main__" in sys.modules else None
    shell = _shell()
    learners = {id(main), id(getattr(shell, "user_ns", None))}
    for name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType) or id(vars(module)) in learners:
            continue  # the learner's namespace (__main__, and __mp_main__ where IPython aliases it)
        namespace = vars(module)
        snap.modules[name] = (namespace, dict(namespace))
        snap.module_objects[name] = module
    todo = [value for _, attrs in snap.modules.values() for value in attrs.values()]
    while todo:  # (type(), not isinstance: no object's __class__ or __getattr__ runs)
        value = todo.pop()
        kind = type(value)
        if kind is staticmethod or kind is classmethod:
            value = value.__func__
            kind = type(value)
        if kind is property:
            todo += [value.fget, value.fset, value.fdel]
        elif kind is types.FunctionType and id(value) not in snap.functions:
            snap.functions[id(value)] = (value, value.__code__, value.__defaults__, value.__kwdefaults__)
        elif issubclass(kind, type) and id(value) not in snap.classes:
            attrs = dict(type.__getattribute__(value, "__dict__"))
            label = f"{attrs.get('__module__', '?')}.{type.__getattribute__(value, '__qualname__')}"
            snap.classes[id(value)] = (value, attrs, label)
            todo += list(attrs.values())
    snap.lists = [(label, items, list(items)) for label, items in _hook_lists()]
    snap.objects = [(label, obj, dict(vars(obj)), dict(vars(obj).get("_trait_values", {})))
                    for label, obj in _hook_objects()]
    for number in signal.valid_signals():
        try:
            snap.signals[number] = signal.getsignal(number)
        except (OSError, ValueError, RuntimeError):
            pass
    library = sys.modules.get("torch.library")
    snap.torch_library = set(getattr(library, "_impls", ()) or ())
    return snap


def _shell():
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def _hook_lists():
    """The lists through which code can be made to run at import or in every cell."""
    found = [("sys.meta_path", sys.meta_path), ("sys.path_hooks", sys.path_hooks), ("sys.path", sys.path)]
    warnings = sys.modules.get("warnings")
    if warnings is not None:  # ("error" would turn the warning os.fork gives in Python 3.12+ into an exception)
        found.append(("warnings.filters", warnings.filters))
    shell = _shell()
    if shell is not None:
        manager = shell.input_transformer_manager
        found += [("IPython input_transformers_cleanup", manager.cleanup_transforms),
                  ("IPython line_transforms", manager.line_transforms),
                  ("IPython token_transformers", manager.token_transformers),
                  ("IPython input_transformers_post", shell.input_transformers_post),
                  ("IPython ast_transformers", shell.ast_transformers)]
        found += [(f"IPython events {event}", callbacks) for event, callbacks in shell.events.callbacks.items()]
    return found


def _hook_objects():
    """IPython's shell and the objects it displays and transforms with, and the kernel."""
    shell = _shell()
    if shell is None:
        return []
    found = [("IPython shell", shell), ("IPython events", shell.events),
             ("IPython input_transformer_manager", shell.input_transformer_manager)]
    for attr in ("display_pub", "displayhook", "display_formatter", "kernel"):
        obj = getattr(shell, attr, None)
        if obj is not None and hasattr(obj, "__dict__"):
            found.append((f"IPython {attr}", obj))
    return found


def _by_learner(value, _type=type, _get=type.__getattribute__, _oget=object.__getattribute__,
                _function=types.FunctionType, _issubclass=issubclass):
    """Whether ``value`` was made by the learner's code: a function defined in a cell (``__main__``), or a class
    or an instance of a class defined there. The library's own changes while cells run (caches, lazy
    attributes) are not. Reads only what calls no code of the learner's (no ``__getattr__``)."""
    kind = _type(value)
    if kind is staticmethod or kind is classmethod:
        value = _oget(value, "__func__")
    elif kind is property:
        value = _oget(value, "fget")
    kind = _type(value)
    if kind is _function:
        module = _oget(value, "__module__")
    else:
        cls = value if _issubclass(kind, type) else kind
        module = _get(cls, "__dict__").get("__module__")
    return _type(module) is str and module == "__main__"


def _put_back(now: dict, saved: dict, keep: list, missing, drop, named) -> list:
    """Make the dict ``now`` hold ``saved``'s items again, and lose the keys added since for which
    ``drop(value)``; returns the keys whose replaced value ``named(value)`` says to name. What it replaces
    goes into ``keep``. Calls nothing but dict and list methods and the two functions it is given."""
    keys = []
    for key, value in saved.items():
        current = now.get(key, missing)
        if current is not value:
            keep.append(current)
            now[key] = value
            if current is not missing and named(current):
                keys.append(key)
    for key in [k for k in now if k not in saved]:
        if drop(now[key]):
            value = now.pop(key)
            keep.append(value)
            if named(value):
                keys.append(key)
    return keys


def restore(snap: Snapshot, keep: list, _vars=vars, _isinstance=isinstance, _list=list, _by_learner=_by_learner,
            _put_back=_put_back, _modules=sys.modules,
            _setattr=type.__setattr__, _delattr=type.__delattr__, _module=types.ModuleType,
            _classdict=type.__getattribute__, _function=(types.FunctionType, types.MethodType)) -> list[str]:
    """Put back everything :func:`snapshot` holds; returns the names of what the learner's code had changed
    (where the value it put there was made in a cell; the rest, deletions too, is put back silently).

    What it replaces goes into ``keep``, so that no object of the learner's is freed (and no ``__del__``
    runs) here. Until ``builtins`` is back it uses only what was bound when this module was loaded.
    """
    changed = []
    missing = keep  # a sentinel no attribute holds
    for name, module in snap.module_objects.items():  # (a module replaced in sys.modules: import gets it)
        current = _modules.get(name, missing)
        if current is not module:
            keep.append(current)
            _modules[name] = module
            if current is not missing:
                changed.append(f"sys.modules[{name!r}]")
    for name, (now, attrs) in snap.modules.items():
        keys = _put_back(now, attrs, keep, missing, drop=lambda v: not _isinstance(v, _module), named=_by_learner)
        changed += [f"{name}.{key}" for key in keys]  # (submodules imported since stay: torch.fx ...)
    for cls, attrs, label in snap.classes.values():
        now = _classdict(cls, "__dict__")
        for key, value in attrs.items():
            current = now.get(key, missing)
            if current is not value and key != "__dict__":
                try:
                    _setattr(cls, key, value)
                    keep.append(current)
                    if current is not missing and _by_learner(current):
                        changed.append(f"{label}.{key}")
                except (TypeError, AttributeError):
                    pass
        for key in [k for k in now if k not in attrs]:
            try:
                value = now[key]
                _delattr(cls, key)
                keep.append(value)
                if _by_learner(value):
                    changed.append(f"{label}.{key}")
            except (TypeError, AttributeError):
                pass
    for function, code, defaults, kwdefaults in snap.functions.values():
        if function.__code__ is not code or function.__defaults__ is not defaults \
                or function.__kwdefaults__ is not kwdefaults:
            keep += [function.__code__, function.__defaults__, function.__kwdefaults__]
            function.__code__, function.__defaults__, function.__kwdefaults__ = code, defaults, kwdefaults
            changed.append(f"{function.__module__}.{function.__qualname__} (its code)")
    for label, items, saved in snap.lists:
        added = [item for item in items if not any(item is s for s in saved)]
        if any(_by_learner(item) for item in added) or not all(any(s is i for i in items) for s in saved):
            changed.append(label)
        keep.append(_list(items))
        items[:] = saved
    def learners_function(value):  # IPython's state changes as cells run: only the learner's functions are named
        return _isinstance(value, _function) and _by_learner(value)

    for label, obj, attrs, traits in snap.objects:
        keys = _put_back(_vars(obj), attrs, keep, missing, drop=lambda v: True, named=learners_function)
        changed += [f"{label}.{key}" for key in keys]
        values = _vars(obj).get("_trait_values")
        if _isinstance(values, dict):
            keys = _put_back(values, traits, keep, missing, drop=lambda v: False, named=_by_learner)
            changed += [f"{label}.{key}" for key in keys]
    return changed


def reset_process(snap: Snapshot) -> list[str]:
    """After :func:`restore`: signal handlers as they were, no trace, profile or monitoring hook, standard
    streams to the null device (the kernel's threads that read them are gone). Returns what it reset."""
    reset = []
    for number, handler in snap.signals.items():
        try:
            current = signal.getsignal(number)
            if current is not handler:
                signal.signal(number, handler if handler is not None else signal.SIG_DFL)
                if _by_learner(current):
                    reset.append(f"a handler of {signal.Signals(number).name}")
        except (OSError, ValueError, RuntimeError, TypeError):
            pass
    if sys.gettrace() is not None or sys.getprofile() is not None:
        reset.append("sys.settrace/sys.setprofile")
    sys.settrace(None)
    sys.setprofile(None)
    threading.settrace(None)
    threading.setprofile(None)
    monitoring = getattr(sys, "monitoring", None)  # Python 3.12+
    if monitoring is not None:
        for tool in range(6):
            if monitoring.get_tool(tool) is not None:
                reset.append(f"sys.monitoring tool {tool} ({monitoring.get_tool(tool)})")
                monitoring.set_events(tool, 0)
                for event in vars(monitoring.events).values():
                    if isinstance(event, int) and event and not event & (event - 1):
                        monitoring.register_callback(tool, event, None)
                monitoring.free_tool_id(tool)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    sys.stdin = open(os.devnull)
    sys.stdout = sys.stderr = open(os.devnull, "w")
    return reset


# --------------------------------------------------------------------------------------
# The preamble and the watchdog


def cap_memory(limit: int) -> None:
    """Cap this process's address space (``RLIMIT_AS``) at ``limit`` bytes; 0 means no cap."""
    try:
        import resource  # imported here: Unix only; without it the kernel runs uncapped

        if limit > 0:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except Exception as error:  # noqa: BLE001 - no cap (not Unix, limit refused): grade uncapped, say so
        print("tutor grade: no memory cap:", error)


def make_capture():
    """Returns ``capture``: ``capture(names, namespace)`` keeps those names' current values; ``capture()``
    returns everything kept so far."""
    captured = {}

    def capture(names=None, namespace=None):
        """Keep the learner's definitions as their exercise cell left them (later cells may rebind the names)."""
        if names is None:
            return dict(captured)
        for name in names:
            if name in namespace:
                captured[name] = namespace[name]

    return capture


def start(channel: str, memory: int, notebook: int):
    """The preamble: cap the memory, import what the checks of ``notebook`` use, take the snapshot, connect to
    the runner's socket at ``channel`` and start the watchdog. Returns ``capture`` (see :func:`make_capture`)."""
    cap_memory(memory)
    import torch
    import torch.nn.functional  # noqa: F401

    checks = importlib.import_module("tutor.checks")
    module = checks.check_module(notebook)
    for name in getattr(module, "IMPORTED_WHEN_CHECKING", ()):  # what its checks import only when they run
        try:
            importlib.import_module(name)
        except ImportError:  # an optional package (transformers): the checks do without it
            pass
    snap = snapshot()
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(channel)
    fd = connection.detach()
    capture = make_capture()
    send(fd, {"kernel": os.getpid()})
    watchdog = threading.Thread(target=watch, args=(fd, snap, capture), name="tutor grade", daemon=True)
    watchdog.start()
    return capture


def watch(fd, snap, capture, _read_exactly=_read_exactly, _fork=os.fork, _exit=os._exit, _gc=gc.disable,
          _restore=restore, _list=list, _fork_message=FORK, _base=BaseException):
    """The watchdog: wait for ``fork``, fork, and in the child become the checker (see the module's docstring)."""
    if _read_exactly(fd, len(_fork_message)) != _fork_message:
        return
    if _fork() != 0:
        return  # the kernel: the runner stops it now
    keep = _list()
    try:
        _gc()
        changed = _restore(snap, keep)
        become_checker(fd, snap, capture, changed, keep)
    except _base as error:
        try:
            send(fd, {"fatal": f"{type(error).__name__}: {error}"})
        except _base:
            pass
    finally:
        _exit(0)


def become_checker(fd, snap, capture, changed, keep) -> None:
    """The forked child, after :func:`restore`: reset the process, tell the runner, wait for ``go``, then run
    ``tutor.grading.checker`` from the pristine copy the runner wrote."""
    reset = reset_process(snap)
    os.setsid()  # out of the kernel's process group, which the runner kills
    library = sys.modules.get("torch.library")
    registered = set(getattr(library, "_impls", ()) or ()) - (snap.torch_library or set())
    send(fd, {"checker": os.getpid(), "changed": changed, "reset": reset, "torch_library": sorted(registered)})
    go = recv(fd)
    if not isinstance(go, dict) or "package" not in go:
        return
    os.environ.clear()
    os.environ.update(go["environ"])
    os.chdir(go["workdir"])
    setup = {name: module for name, module in sys.modules.items() if name == "tutor" or name.startswith("tutor.")}
    keep.append(setup)
    for name in setup:
        del sys.modules[name]
    sys.path.insert(0, go["package"])
    importlib.invalidate_caches()
    checker = importlib.import_module("tutor.grading.checker")
    checker.serve(fd, go, capture(), setup, keep)

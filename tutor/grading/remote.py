"""The judge's side of a check: handles to the learner's objects, which live in another process.

A :class:`Peer` is one exercise's connection to the process that holds the learner's objects
(``tutor.grading.serve``). What comes back is plain data, rebuilt by ``tutor.grading.wire.decode`` (a tensor is
a plain ``torch.Tensor`` made from its dtype, shape and bytes), or a :class:`Remote`: a stand-in whose every
attribute, call, index, iteration and comparison is a request to that process. So a check's code runs unchanged
on a learner's function or class: ``fn(x)`` sends ``x`` and gets the result back as data.

What a check must build beside the learner's code (an optimizer over the learner's parameters, a deep copy of the
learner's model, a stand-in model the learner's ``generate`` calls) it asks for with ``peer.resolve`` (see
``tutor.checks.harness.at``). An exception raised by the learner's code arrives as one of Python's own exception
classes with the learner's name and message (:func:`rebuild_error`), so the checks catch it as before.

A stand-in never runs anything it receives: a learner's class of the same name as one of ``torch.nn``'s makes
the stand-in an instance of that class (``isinstance(model, nn.Module)``), and every method, even those, is a
request.
"""

from __future__ import annotations

import builtins
import contextlib
import re
import socket
import time
import weakref

from tutor.checks.harness import CheckTimeout, Unreachable
from tutor.grading import wire

# Where a learner's class may name a judge-side class as its base, so that isinstance() answers as it would in
# the learner's process: torch's modules, optimizers and data sets, and the course's own classes.
LOCKED = "tutor._locked.ModelAnswerLocked"  # what a model answer hidden from the learner's process raises there
SHADOW_PREFIXES = ("torch.nn.modules.", "torch.nn.parameter.", "torch.optim.", "torch.utils.data.", "tutor.")


class RemoteError(Unreachable):
    """The process holding the learner's objects broke the protocol or stopped answering."""


class Peer:
    """One exercise's connection to the learner's process; every request waits at most ``timeout`` seconds."""

    def __init__(self, sock: socket.socket, timeout: float = 60.0):
        self.sock = sock
        self.timeout = timeout
        self.broken: str | None = None
        self.changed: list[str] = []  # what the learner's code changed in place, for the harness
        self.locked: set[str] = set()  # the model answers hidden from the learner's process that its code called
        self._remotes: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self._classes: dict = {}
        self._rng_sent: bytes | None = None
        self.reseeded = False  # the check seeded the generator since the last call (``tutor.checks.harness.seed``)
        self.requests = 0

    # --- requests ----------------------------------------------------------------------------------------------

    def request(self, header: dict, encoder: wire.Encoder | None = None):
        """Send one request and return its answer (decoded), raising what the learner's code raised."""
        if self.broken:
            raise RemoteError(self.broken)
        encoder = encoder or wire.Encoder()
        self.requests += 1
        try:
            self.sock.settimeout(self.timeout)
            wire.write_frame(self.sock, header, encoder.blobs)
            frame = wire.read_frame(self.sock)
        except TimeoutError:
            self.broken = f"the learner's process did not answer within {self.timeout:.0f} s"
            raise CheckTimeout(self.broken) from None
        except wire.WireError as error:
            self.broken = f"the learner's process sent a message the grader refuses: {error}"
            raise RemoteError(self.broken) from None
        except OSError as error:
            self.broken = f"the learner's process stopped ({error.strerror or error})"
            raise RemoteError(self.broken) from None
        except BaseException:
            self.broken = "a request was interrupted"  # (a check's time limit): its answer would come out of order
            raise
        if frame is None:
            self.broken = "the learner's process stopped while it was checked"
            raise RemoteError(self.broken)
        reply, blobs, _ = frame
        try:
            if "raise" in reply:
                error = rebuild_error(reply["raise"], blobs)
                bases = reply["raise"].get("bases") if isinstance(reply["raise"], dict) else None
                if isinstance(bases, list) and bases and bases[0] == LOCKED:
                    found = re.search(r"model answer (\S+) cannot", str(error))
                    self.locked.add(found.group(1) if found else "tutor.reference")
                raise error
            if reply.get("stop") is True:
                raise StopIteration
            if "ok" not in reply:
                raise wire.WireError("an answer without a value")
            value = wire.decode(reply["ok"], blobs, self._handle)
            changes = reply.get("changed") or []
            if changes:
                self._write_back(changes, blobs, encoder.mutable)
            return value
        except wire.WireError as error:
            self.broken = f"the learner's process sent a message the grader refuses: {error}"
            raise RemoteError(self.broken) from None

    def _write_back(self, changes, blobs, mutable) -> None:
        """Put into the judge's own arguments what the learner's code changed in them (a call works in place on
        tensors, lists and dicts), and note it for the harness."""
        import torch

        if type(changes) is not list:
            raise wire.WireError("changes that are not a list")
        for change in changes:
            if type(change) is not list or len(change) != 2 or type(change[0]) is not int \
                    or not 0 <= change[0] < len(mutable):
                raise wire.WireError("a change to an argument that was not sent")
            mine, new = mutable[change[0]], wire.decode(change[1], blobs, self._handle)
            if isinstance(mine, torch.Tensor):
                if not isinstance(new, torch.Tensor) or new.dtype != mine.dtype:
                    raise wire.WireError("a tensor argument sent back as something else")
                with torch.no_grad():
                    if new.shape == mine.shape:
                        mine.copy_(new)
                    else:
                        mine.data = new
                self.changed.append(f"a tensor of shape {tuple(mine.shape)}")
            elif type(mine) is list and type(new) is list:
                mine[:] = new
                self.changed.append("a list")
            elif type(mine) is dict and type(new) is dict:
                mine.clear()
                mine.update(new)
                self.changed.append("a dict")
            elif type(mine) is set and type(new) is set:
                mine.clear()
                mine.update(new)
                self.changed.append("a set")
            elif type(mine) is bytearray and type(new) is bytearray:
                mine[:] = new
                self.changed.append("a bytearray")
            elif type(mine) is type(new) and hasattr(mine, "__dataclass_fields__"):
                for name in mine.__dataclass_fields__:
                    object.__setattr__(mine, name, getattr(new, name))
                self.changed.append(f"a {type(mine).__name__}")
            else:
                raise wire.WireError("an argument sent back as something else")

    def encoder(self) -> wire.Encoder:
        return wire.Encoder(handle=self._send_handle, loose=True)

    def _send_handle(self, value) -> dict:
        if isinstance(value, Remote) and object.__getattribute__(value, "_peer") is self:
            return {"$": "handle", "id": object.__getattribute__(value, "_id")}
        if isinstance(value, Remote):
            raise wire.Refused("a handle of another exercise's process")
        kind = type(value)
        raise wire.Refused(f"a {kind.__module__}.{kind.__qualname__} of the judge's (build it beside the learner's "
                           "code with tutor.checks.harness.at)")

    def send(self, op: str, target=None, *, args=(), kwargs=None, **fields):
        """A request about ``target`` (a :class:`Remote` of this peer, or None) with ``args`` as values."""
        encoder = self.encoder()
        header = {"op": op, **fields}
        if target is not None:
            header["id"] = object.__getattribute__(target, "_id")
        if args or kwargs is not None:
            header["args"] = encoder.value(list(args))
            header["kwargs"] = encoder.value(dict(kwargs or {}))
        if op == "call":
            header["context"] = self._context(encoder)
        return self.request(header, encoder)

    def _context(self, encoder: wire.Encoder) -> dict:
        """What a call in the learner's process shares with the judge: grad mode, the default dtype, and the
        random generator. The generator's state is sent when the judge's has changed since the last call, or the
        check seeded it (``harness.seed``); else the learner's process goes on from where its last call left it, as
        the learner's code would in one process. The judge never takes a state back: nothing the learner's process
        answers changes the numbers the judge draws next."""
        import torch

        context = {"grad": torch.is_grad_enabled(), "dtype": str(torch.get_default_dtype()).removeprefix("torch.")}
        state = torch.get_rng_state().numpy().tobytes()
        if state != self._rng_sent or self.reseeded:
            context["rng"] = encoder.blob(state)
            self._rng_sent, self.reseeded = state, False
        return context

    def root(self):
        """The learner's object of this exercise."""
        return self.send("root")

    def resolve(self, path: str):
        """The learner's process's own object named ``path`` (``"torch.optim.SGD"``, ``"copy:deepcopy"``)."""
        return self.send("resolve", path=path)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    # --- handles -----------------------------------------------------------------------------------------------

    def _handle(self, tree: dict):
        number = tree["id"]
        existing = self._remotes.get(number)
        if existing is not None:
            return existing
        cls = self._class(tree)
        remote = object.__new__(cls)
        object.__setattr__(remote, "_peer", self)
        object.__setattr__(remote, "_id", number)
        self._remotes[number] = remote
        return remote

    def _class(self, tree: dict) -> type:
        name = _identifier(wire.text(tree.get("name"), 100)) or "object"
        module = wire.text(tree.get("module"), 200)
        mro = tree.get("mro") if type(tree.get("mro")) is list else []
        callable_ = tree.get("callable") is True
        base = next((c for c in (_judge_class(wire.text(n, 300)) for n in mro) if c is not None), None)
        key = (name, module, base, callable_)
        if key not in self._classes:
            bases = (RemoteCallable if callable_ else Remote,) + ((base,) if base is not None else ())
            try:
                cls = type(name, bases, {"__module__": module or "?"})
            except TypeError:  # a base whose layout cannot be mixed in (__slots__, a C type)
                cls = type(name, bases[:1], {"__module__": module or "?"})
            self._classes[key] = cls
        return self._classes[key]


def _identifier(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return cleaned if cleaned and not cleaned[0].isdigit() else ""


def _judge_class(qualified: str):
    """The judge's own class of that qualified name, where a stand-in may derive from it (:data:`SHADOW_PREFIXES`)
    and it is already imported; else None. Nothing is imported here."""
    import sys

    if not qualified.startswith(SHADOW_PREFIXES):
        return None
    module_name, _, qualname = qualified.rpartition(".")
    while module_name and module_name not in sys.modules:
        module_name, _, head = module_name.rpartition(".")
        qualname = f"{head}.{qualname}"
    module = sys.modules.get(module_name)
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None) if obj is not None and part.isidentifier() else None
    if isinstance(obj, type) and obj.__module__.startswith(("torch", "tutor")) and not issubclass(obj, BaseException):
        import torch

        if issubclass(obj, torch.Tensor):
            return None
        return obj
    return None


# --------------------------------------------------------------------------------------
# The stand-in


def _send(self, op, *args, **fields):
    return object.__getattribute__(self, "_peer").send(op, self, args=args, **fields)


class Remote:
    """A learner's object in another process (see the module's docstring)."""

    def __getattribute__(self, name):
        if name in ("_peer", "_id", "__class__"):
            return object.__getattribute__(self, name)
        return object.__getattribute__(self, "_peer").send("getattr", self, name=name)

    def __setattr__(self, name, value):
        _send(self, "setattr", value, name=name)

    def __delattr__(self, name):
        object.__getattribute__(self, "_peer").send("delattr", self, name=name)

    def __getitem__(self, key):
        return _send(self, "binary", key, name="getitem")

    def __setitem__(self, key, value):
        _send(self, "setitem", key, value)

    def __delitem__(self, key):
        _send(self, "delitem", key)

    def __len__(self):
        return _unary(self, "len")

    def __bool__(self):
        return _unary(self, "bool")

    def __repr__(self):
        return wire.text(_unary(self, "repr"), 2000)

    def __str__(self):
        return wire.text(_unary(self, "str"), 2000)

    def __hash__(self):
        return hash((id(object.__getattribute__(self, "_peer")), object.__getattribute__(self, "_id")))

    def __int__(self):
        return _unary(self, "int")

    def __float__(self):
        return _unary(self, "float")

    def __index__(self):
        return _unary(self, "index")

    def __iter__(self):
        iterator = object.__getattribute__(self, "_peer").send("iter", self)
        while True:
            try:
                yield object.__getattribute__(iterator, "_peer").send("next", iterator)
            except StopIteration:
                return

    def __next__(self):
        return object.__getattribute__(self, "_peer").send("next", self)

    def __contains__(self, item):
        return bool(_send(self, "binary", item, name="contains"))

    def __copy__(self):
        raise TypeError("a learner's object cannot be copied in the judge: use at(copy.copy)(obj)")

    def __deepcopy__(self, memo):
        raise TypeError("a learner's object cannot be copied in the judge: use at(copy.deepcopy)(obj)")

    def __reduce_ex__(self, protocol):
        raise TypeError("a learner's object cannot be pickled in the judge")

    def __dir__(self):
        return []


def _unary(self, name):
    return object.__getattribute__(self, "_peer").send("unary", self, name=name)


def _binary(name, reflected=False):
    def method(self, other):
        try:
            return _send(self, "binary", other, name=name, reflected=reflected)
        except wire.Refused:  # compared with, or added to, something of the judge's only
            return NotImplemented

    method.__name__ = f"__{'r' if reflected else ''}{name.rstrip('_')}__"
    return method


for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    setattr(Remote, f"__{_name}__", _binary(_name))
for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and_", "or_", "xor"):
    setattr(Remote, f"__{_name.rstrip('_')}__", _binary(_name))
    setattr(Remote, f"__r{_name.rstrip('_')}__", _binary(_name, reflected=True))
Remote.__neg__ = lambda self: _unary(self, "neg")
Remote.__abs__ = lambda self: _unary(self, "abs")


class RemoteCallable(Remote):
    """A learner's function, class or other callable object in another process."""

    def __call__(self, *args, **kwargs):
        return object.__getattribute__(self, "_peer").send("call", self, args=args, kwargs=kwargs)


def is_remote(obj) -> bool:
    return isinstance(obj, Remote)


def peer_of(obj) -> Peer | None:
    return object.__getattribute__(obj, "_peer") if isinstance(obj, Remote) else None


# --------------------------------------------------------------------------------------
# Exceptions


_ERRORS: dict = {}


def _builtin_exception(qualified: str):
    module, _, name = qualified.rpartition(".")
    if module != "builtins":
        return None
    value = getattr(builtins, name, None)
    if isinstance(value, type) and issubclass(value, BaseException):
        if not issubclass(value, Exception):  # KeyboardInterrupt, SystemExit ...: an error like any other here
            return Exception
        return value
    return None


def _course_exception(qualified: str):
    """The judge's own exception class of that name, for the course's stand-ins and launchers
    (``tutor.checks.beside``, ``tutor.distributed``): already imported here, or None."""
    import sys

    module, _, name = qualified.rpartition(".")
    if module not in ("tutor.checks.beside", "tutor.distributed"):
        return None
    value = getattr(sys.modules.get(module), name, None)
    return value if isinstance(value, type) and issubclass(value, Exception) else None


def rebuild_error(data, blobs=()) -> BaseException:
    """The learner's exception as one of the judge's own classes: the course's own (``tutor.checks.beside``,
    ``tutor.distributed``), else the nearest built-in class, named as the learner's was (``class MyError(ValueError)``
    arrives as a ``ValueError`` subclass named ``MyError``). Its ``__tutor_where__`` is the line of the learner's code
    that raised it; the course's exceptions get their attributes back (``RanksStopped.results``)."""
    if type(data) is not dict:
        raise wire.WireError("an exception that is not described")
    name = _identifier(wire.text(data.get("type"), 100)) or "Exception"
    module = wire.text(data.get("module"), 200)
    bases = [wire.text(b, 300) for b in data.get("bases", [])] if type(data.get("bases")) is list else []
    message = wire.text(data.get("message"))
    cls = _course_exception(bases[0]) if bases else None
    attributes = {}
    if cls is not None and type(data.get("attributes")) is dict:
        for key, tree in data["attributes"].items():
            if key.isidentifier() and not key.startswith("__"):
                attributes[key] = wire.decode(tree, list(blobs))
    if cls is None:
        base = next((b for b in map(_builtin_exception, bases) if b is not None), Exception)
        key = (name, module, base)
        if base.__name__ == name and module == "builtins":
            cls = base
        else:
            if key not in _ERRORS:
                _ERRORS[key] = type(name, (base,), {"__module__": module or "?"})
            cls = _ERRORS[key]
    args = wire.decode(data["args"], list(blobs)) if "args" in data else None
    error = cls.__new__(cls)
    error.args = args if type(args) is tuple else (message,)
    for key, value in attributes.items():
        setattr(error, key, value)
    error.__tutor_where__ = wire.text(data.get("where"), 500) or None
    error.__tutor_remote__ = True
    return error


# --------------------------------------------------------------------------------------
# A learner's object in a fork of this process (tests)


@contextlib.contextmanager
def forked(obj, timeout: float = 60.0):
    """``(handle, peer)``: ``obj`` served by a fork of this process (``tutor.grading.serve``), as the grader serves a
    learner's object from its kernel. Tests run every check this way with ``TUTOR_CHECK_REMOTE=1``."""
    import os
    import warnings

    mine, theirs = socket.socketpair()
    with warnings.catch_warnings():  # Python 3.12+ warns that torch's threads may not survive: they need not
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: serves, then exits without running anything of the parent's
        try:
            mine.close()
            from tutor.grading import serve

            serve.quiet()
            serve.serve(theirs, obj)
        finally:
            os._exit(0)
    theirs.close()
    peer = Peer(mine, timeout=timeout + 5)
    try:
        yield peer.root(), peer
    finally:
        peer.close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.005)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
            os.waitpid(pid, 0)

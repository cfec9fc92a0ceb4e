"""The grader's wire: every message between its processes, and the plain data that may cross.

A **frame** is a 4-byte big-endian length, a JSON header of that many bytes (UTF-8), then the binary blobs the
header lists in ``"blobs"`` (their sizes), back to back. Tensors and bytes travel as blobs; everything else is in
the JSON. One reader (:func:`read_frame`) and one writer (:func:`write_frame`) serve every channel of the grader.

A **value** is plain data: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``complex``, lists,
tuples, dicts, sets, slices, ``...``, ``torch.dtype``, ``torch.device``, tensors (rebuilt from dtype, shape and
bytes as a plain ``torch.Tensor``, or an ``nn.Parameter``, with their ``requires_grad`` flag and gradient), and
the course's own dataclasses (``GPTConfig`` ...: :data:`DATACLASSES`). Anything else is a **handle**: a number
that names an object kept by the process that sent it. How a handle is made and what it becomes on arrival is
the caller's (:class:`Encoder` takes ``handle``, :func:`decode` takes ``make_handle``).

:func:`decode` is where the judge meets what a learner's process sent: it builds only the types above, checks
every size against the limits below, and calls nothing that the data names. Whatever arrives, the worst it can be
is wrong data, refused with a :class:`WireError`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import socket

MAX_HEADER = 64 << 20  # bytes of JSON in one frame
MAX_BLOBS = 1 << 30  # bytes of tensors and bytes in one frame
MAX_DEPTH = 64  # nesting of lists, tuples and dicts
MAX_DIMS = 16
MAX_TEXT = 20_000  # characters of a message or a repr kept from the other side


class WireError(Exception):
    """A frame or a value that breaks the wire's rules (too large, malformed, a type not allowed)."""


class Refused(WireError):
    """A value the sender may not send (a judge-side object that is not plain data): a check's mistake."""

    check_bug = True


# --------------------------------------------------------------------------------------
# Frames


def write_frame(sock: socket.socket, header: dict, blobs=(), fds=()) -> None:
    """Send one frame on ``sock``; ``fds`` (file descriptors) ride along with its first byte (SCM_RIGHTS)."""
    blobs = [bytes(b) if not isinstance(b, (bytes, memoryview)) else b for b in blobs]
    head = json.dumps({**header, "blobs": [len(b) for b in blobs]}, ensure_ascii=False,
                      allow_nan=False).encode("utf-8")
    data = b"".join([len(head).to_bytes(4, "big"), head, *blobs])
    if fds:
        sent = socket.send_fds(sock, [data[:1]], list(fds))
        data = data[sent:]
    sock.sendall(data)


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket, *, fds: int = 0) -> tuple[dict, list[bytes], list[int]] | None:
    """The next frame on ``sock``: ``(header, blobs, fds)``; ``None`` when the other side closed it. ``fds``: how
    many file descriptors to accept with it. Raises :class:`WireError` for a frame that breaks the rules."""
    received: list[int] = []
    if fds:
        first, received, _, _ = socket.recv_fds(sock, 4, fds)
        if not first:
            return None
        rest = _read_exactly(sock, 4 - len(first))
        if rest is None:
            return None
        size = int.from_bytes(first + rest, "big")
    else:
        raw = _read_exactly(sock, 4)
        if raw is None:
            return None
        size = int.from_bytes(raw, "big")
    if size > MAX_HEADER:
        raise WireError(f"a frame's header of {size} bytes (at most {MAX_HEADER})")
    raw = _read_exactly(sock, size)
    if raw is None:
        return None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as error:
        raise WireError(f"a frame's header is not JSON ({type(error).__name__})") from None
    if type(header) is not dict:
        raise WireError("a frame's header is not a JSON object")
    sizes = header.pop("blobs", [])
    if type(sizes) is not list or not all(type(n) is int and n >= 0 for n in sizes) or sum(sizes) > MAX_BLOBS:
        raise WireError("a frame's blob sizes are not a list of sizes within the limit")
    blobs = []
    for n in sizes:
        blob = _read_exactly(sock, n)
        if blob is None:
            return None
        blobs.append(blob)
    return header, blobs, received


def text(value, limit: int = MAX_TEXT) -> str:
    """A string from the other side, kept short and valid UTF-8 (a lone surrogate becomes U+FFFD): anything else
    becomes ``""``."""
    return value[:limit].encode("utf-8", "surrogatepass").decode("utf-8", "replace") if type(value) is str else ""


# --------------------------------------------------------------------------------------
# Values


def _dataclasses() -> dict:
    """The course's dataclasses that travel by value, by their qualified names."""
    from tutor.reference import model
    from tutor.train import config

    found = {}
    for module in (model, config):
        for value in vars(module).values():
            if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == module.__name__:
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


_DATACLASSES: dict | None = None


def dataclass_types() -> dict:
    global _DATACLASSES
    if _DATACLASSES is None:
        _DATACLASSES = _dataclasses()
    return _DATACLASSES


def _dtypes() -> dict:
    import torch

    names = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
             "complex64", "complex128"]
    return {name: getattr(torch, name) for name in names}


_DTYPES: dict | None = None


def dtypes() -> dict:
    global _DTYPES
    if _DTYPES is None:
        _DTYPES = _dtypes()
    return _DTYPES


def _float(value: float):
    if math.isfinite(value):
        return value
    return {"$": "float", "v": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}


class Encoder:
    """Turns a value into its JSON form and blobs. ``handle(obj) -> dict`` is called for what is not plain data
    (None: refuse it). ``mutable`` collects, in encoding order, the lists, dicts, sets, bytearrays and tensors
    encoded, so that a call's changes to them can be sent back (see :func:`changes`)."""

    def __init__(self, handle=None, loose: bool = False):
        self.blobs: list[bytes] = []
        self.handle = handle
        self.loose = loose  # subclasses of the plain types (OrderedDict, namedtuple ...) travel as the plain type
        self.mutable: list = []

    def blob(self, data: bytes) -> int:
        self.blobs.append(data)
        return len(self.blobs) - 1

    def value(self, v, depth: int = 0):
        if depth > MAX_DEPTH:
            raise WireError(f"a value nested more than {MAX_DEPTH} levels deep")
        if v is None or v is True or v is False:
            return v
        kind = type(v)
        if kind is int:
            return v
        if kind is float:
            return _float(v)
        if kind is str:
            return v
        if kind is list:
            self.mutable.append(v)
            return [self.value(x, depth + 1) for x in v]
        if kind is tuple:
            return {"$": "tuple", "v": [self.value(x, depth + 1) for x in v]}
        if kind is dict:
            self.mutable.append(v)
            return {"$": "dict", "v": [[self.value(k, depth + 1), self.value(x, depth + 1)] for k, x in v.items()]}
        if kind is bytes:
            return {"$": "bytes", "b": self.blob(v)}
        if kind is bytearray:
            self.mutable.append(v)
            return {"$": "bytearray", "b": self.blob(bytes(v))}
        if kind is set or kind is frozenset:
            if kind is set:
                self.mutable.append(v)
            return {"$": kind.__name__, "v": [self.value(x, depth + 1) for x in v]}
        if kind is complex:
            return {"$": "complex", "v": [_float(v.real), _float(v.imag)]}
        if kind is slice:
            return {"$": "slice", "v": [self.value(x, depth + 1) for x in (v.start, v.stop, v.step)]}
        if v is Ellipsis:
            return {"$": "ellipsis"}
        torch = _torch()
        if torch is not None:
            if isinstance(v, torch.Tensor):
                return self.tensor(v, depth)
            if kind is torch.dtype:
                return {"$": "dtype", "v": str(v).removeprefix("torch.")}
            if kind is torch.device:
                return {"$": "device", "v": str(v)}
            if kind is torch.Size:
                return {"$": "tuple", "v": [int(x) for x in v]}
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            name = f"{kind.__module__}.{kind.__qualname__}"
            if dataclass_types().get(name) is kind:
                self.mutable.append(v)
                return {"$": "dataclass", "cls": name,
                        "v": [[f.name, self.value(getattr(v, f.name), depth + 1)] for f in dataclasses.fields(v)]}
        if self.loose:
            for base in (int, float, str):
                if isinstance(v, base):
                    return self.value(base(v), depth)
            if isinstance(v, dict):
                return self.value(dict(v), depth)
            if isinstance(v, tuple):
                return self.value(tuple(v), depth)
            if isinstance(v, list):
                return self.value(list(v), depth)
        if self.handle is None:
            raise Refused(f"{kind.__module__}.{kind.__qualname__} is not plain data")
        return self.handle(v)

    def tensor(self, t, depth: int):
        torch = _torch()
        self.mutable.append(t)
        param = isinstance(t, torch.nn.Parameter)
        requires_grad = bool(t.requires_grad)
        grad = t.grad if t.is_leaf else None
        t = t.detach().as_subclass(torch.Tensor) if type(t) is not torch.Tensor else t
        name = str(t.dtype).removeprefix("torch.")
        if name not in dtypes():
            raise Refused(f"a tensor of dtype {t.dtype} (dense tensors of the usual dtypes only)")
        if t.layout != torch.strided:
            raise Refused(f"a {t.layout} tensor (dense tensors only)")
        out = {"$": "tensor", "dtype": name, "shape": list(t.shape), "rg": requires_grad, "param": param}
        if t.dim() and not t.is_contiguous() and t.numel():  # a view keeps its layout (.view() fails on some)
            out["stride"] = list(t.stride())
        if t.device.type == "meta":
            out["meta"] = True
        else:
            data = t.detach().to("cpu").contiguous()
            out["b"] = self.blob(data.reshape(-1).view(torch.uint8).numpy().tobytes() if data.numel() else b"")
        if grad is not None and depth < MAX_DEPTH:
            out["grad"] = self.tensor(grad, depth + 1)
            self.mutable.pop()  # the gradient is read, never sent back
        return out


def _torch():
    import sys

    return sys.modules.get("torch")


def decode(tree, blobs: list[bytes], make_handle=None, *, mutable: list | None = None, depth: int = 0):
    """The value ``tree`` (with its ``blobs``) describes. ``make_handle(tag_dict)`` turns a handle into an object
    (None: refuse handles). ``mutable``, when given, collects the lists, dicts, sets, bytearrays and tensors built,
    in the order :class:`Encoder` counts them."""
    if depth > MAX_DEPTH:
        raise WireError(f"a value nested more than {MAX_DEPTH} levels deep")
    if tree is None:
        return None
    kind = type(tree)
    if kind is bool or kind is int or kind is str:
        return tree
    if kind is float:
        return tree
    if kind is list:
        out = []
        if mutable is not None:
            mutable.append(out)
        out.extend(decode(x, blobs, make_handle, mutable=mutable, depth=depth + 1) for x in tree)
        return out
    if kind is not dict:
        raise WireError(f"a value of JSON type {kind.__name__}")
    tag = tree.get("$")
    if tag == "tuple":
        return tuple(decode(x, blobs, make_handle, mutable=mutable, depth=depth + 1) for x in _items(tree))
    if tag == "dict":
        out = {}
        if mutable is not None:
            mutable.append(out)
        for pair in _items(tree):
            if type(pair) is not list or len(pair) != 2:
                raise WireError("a dict item that is not a [key, value] pair")
            key = decode(pair[0], blobs, make_handle, mutable=mutable, depth=depth + 1)
            try:
                out[key] = decode(pair[1], blobs, make_handle, mutable=mutable, depth=depth + 1)
            except TypeError:
                raise WireError("a dict key that cannot be a key") from None
        return out
    if tag in ("bytes", "bytearray"):
        data = _blob(tree, blobs)
        if tag == "bytes":
            return data
        out = bytearray(data)
        if mutable is not None:
            mutable.append(out)
        return out
    if tag in ("set", "frozenset"):
        items = []
        out = set() if tag == "set" else None
        if out is not None and mutable is not None:
            mutable.append(out)
        try:
            items = [decode(x, blobs, make_handle, mutable=mutable, depth=depth + 1) for x in _items(tree)]
            if out is None:
                return frozenset(items)
            out.update(items)
        except TypeError:
            raise WireError("a set item that cannot be in a set") from None
        return out
    if tag == "float":
        value = tree.get("v")
        if value not in ("nan", "inf", "-inf"):
            raise WireError("a float that is not nan, inf or -inf")
        return float(value)
    if tag == "complex":
        parts = [decode(x, blobs, depth=depth + 1) for x in _items(tree)]
        if len(parts) != 2 or not all(type(p) in (int, float) for p in parts):
            raise WireError("a complex number that is not two numbers")
        return complex(*parts)
    if tag == "slice":
        parts = [decode(x, blobs, make_handle, depth=depth + 1) for x in _items(tree)]
        if len(parts) != 3:
            raise WireError("a slice that is not three values")
        return slice(*parts)
    if tag == "ellipsis":
        return Ellipsis
    if tag == "dtype":
        dtype = dtypes().get(tree.get("v"))
        if dtype is None:
            raise WireError(f"an unknown dtype {text(tree.get('v'), 40)!r}")
        return dtype
    if tag == "device":
        torch = _import_torch()
        name = tree.get("v")
        if type(name) is not str or name.split(":")[0] not in ("cpu", "cuda", "mps", "meta"):
            raise WireError(f"an unknown device {text(name, 40)!r}")
        try:
            return torch.device(name)
        except RuntimeError:
            raise WireError(f"an unknown device {text(name, 40)!r}") from None
    if tag == "tensor":
        return _tensor(tree, blobs, mutable, depth)
    if tag == "dataclass":
        cls = dataclass_types().get(tree.get("cls"))
        if cls is None:
            raise WireError(f"an unknown dataclass {text(tree.get('cls'), 80)!r}")
        fields = {f.name for f in dataclasses.fields(cls)}
        values, slot = {}, None
        if mutable is not None:
            slot = len(mutable)
            mutable.append(None)  # its place in the order the encoder counted (before its fields)
        for pair in _items(tree):
            if type(pair) is not list or len(pair) != 2 or pair[0] not in fields:
                raise WireError(f"a field of {cls.__name__} that it does not have")
            values[pair[0]] = decode(pair[1], blobs, make_handle, mutable=mutable, depth=depth + 1)
        try:
            out = cls(**values)
        except Exception as error:  # noqa: BLE001 - the course's own dataclass refused these values
            raise WireError(f"{cls.__name__} refused its fields: {type(error).__name__}") from None
        if slot is not None:
            mutable[slot] = out
        return out
    if tag == "handle":
        if make_handle is None or type(tree.get("id")) is not int:
            raise WireError("a handle where none may be")
        return make_handle(tree)
    raise WireError(f"an unknown kind of value {text(tag, 40)!r}")


def _items(tree) -> list:
    items = tree.get("v")
    if type(items) is not list:
        raise WireError("a container without its items")
    return items


def _blob(tree, blobs) -> bytes:
    index = tree.get("b")
    if type(index) is not int or not 0 <= index < len(blobs):
        raise WireError("a reference to a blob the frame does not have")
    return blobs[index]


def _import_torch():
    import torch

    return torch


def _strided(t, stride):
    """``t``'s values in a tensor laid out with ``stride`` (a transposed or sliced view, as the sender had it)."""
    torch = _import_torch()
    if type(stride) is not list or len(stride) != t.dim() or not all(type(n) is int and n >= 0 for n in stride):
        raise WireError("a tensor's strides that are not one size per axis")
    storage = 1 + sum((n - 1) * step for n, step in zip(t.shape, stride))
    if storage > 4 * t.numel() + 1024:
        raise WireError("a tensor's strides that spread it over far more memory than its values")
    try:
        out = torch.empty_strided(tuple(t.shape), tuple(stride), dtype=t.dtype)
        out.copy_(t)
    except RuntimeError:
        raise WireError("a tensor's strides under which its values overlap") from None
    return out


def _tensor(tree, blobs, mutable, depth):
    torch = _import_torch()
    dtype = dtypes().get(tree.get("dtype"))
    shape = tree.get("shape")
    if dtype is None:
        raise WireError(f"a tensor of an unknown dtype {text(tree.get('dtype'), 40)!r}")
    if type(shape) is not list or len(shape) > MAX_DIMS or not all(type(n) is int and n >= 0 for n in shape):
        raise WireError("a tensor whose shape is not a list of sizes")
    numel = math.prod(shape)
    itemsize = torch.empty((), dtype=dtype).element_size()
    if numel * itemsize > MAX_BLOBS:
        raise WireError("a tensor larger than the limit")
    if tree.get("meta") is True:
        t = torch.empty(shape, dtype=dtype, device="meta")
    else:
        data = _blob(tree, blobs)
        if len(data) != numel * itemsize:
            raise WireError(f"a tensor of shape {tuple(shape)} and dtype {dtype} with {len(data)} bytes")
        if numel == 0:
            t = torch.empty(shape, dtype=dtype)
        else:
            raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            t = (raw != 0) if dtype == torch.bool else raw.view(dtype)
            t = t.reshape(shape)
            stride = tree.get("stride")
            if stride is not None:
                t = _strided(t, stride)
    grad_tree = tree.get("grad")
    if tree.get("param") is True:
        t = torch.nn.Parameter(t, requires_grad=tree.get("rg") is True and (t.is_floating_point() or t.is_complex()))
    elif tree.get("rg") is True and (t.is_floating_point() or t.is_complex()):
        t.requires_grad_(True)
    if grad_tree is not None:
        grad = _tensor(grad_tree, blobs, None, depth + 1) if type(grad_tree) is dict else None
        if grad is None or grad.shape != t.shape or grad.dtype != t.dtype or grad.device != t.device:
            raise WireError("a gradient that does not fit its tensor")
        t.grad = grad.detach()
    if mutable is not None:
        mutable.append(t)
    return t

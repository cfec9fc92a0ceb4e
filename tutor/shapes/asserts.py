"""The shape asserts: reading a pattern, matching a shape against it, and saying what is wrong.

``expect_shape`` and ``Dims`` check tensors; ``explain`` words a wrong shape the same way for the
checks in ``tutor.checks``. See ``tutor.shapes`` for the pattern language.
"""

import itertools
import math
import operator
import re
from collections.abc import Mapping
from functools import lru_cache

from einops import EinopsError
from einops.parsing import AnonymousAxis, ParsedExpression, _ellipsis


class ShapeError(AssertionError):
    """A tensor does not have the shape its pattern describes (a kind of failed ``assert``)."""


ShapeError.__module__ = "tutor.shapes"  # the name learners see in a traceback and catch: tutor.shapes.ShapeError


# ----------------------------------------------------------------------------- parsing

@lru_cache(maxsize=512)
def _parse(pattern):
    """'B T (H d)' -> (items, texts): per axis, a tuple of atoms (name, '_' or int) or None for '...'."""
    if not isinstance(pattern, str):
        raise TypeError(f"a shape pattern is a string such as 'B T C', not {type(pattern).__name__}")
    try:  # einops' own parser, so a pattern that works here works in einops.rearrange too
        parsed = ParsedExpression(pattern, allow_underscore=True, allow_duplicates=True)
    except EinopsError as e:
        raise ValueError(f"invalid shape pattern {pattern!r}: {e}") from None
    if parsed.has_ellipsis_parenthesized:
        raise ValueError(f"invalid shape pattern {pattern!r}: '...' cannot be inside parentheses")
    items = []
    for group in parsed.composition:
        if group == _ellipsis:
            items.append(None)
            continue
        atoms = tuple(a.value if isinstance(a, AnonymousAxis) else a for a in group)
        if len(atoms) > 1 and "_" in atoms:
            raise ValueError(f"invalid shape pattern {pattern!r}: '_' cannot be inside parentheses")
        items.append(atoms)
    texts = [t if t[0] != "(" else "(" + " ".join(t[1:-1].split()) + ")"
             for t in re.findall(r"\([^)]*\)|[^\s()]+", pattern)]
    if len(texts) != len(items):  # cannot happen for a valid pattern; fall back to plain names
        texts = ["..." if it is None else " ".join(map(str, it)) or "1" for it in items]
    return tuple(items), tuple(texts)


def _size(name, value):
    try:
        size = operator.index(value)
    except TypeError:
        raise TypeError(f"size {name}={value!r} must be an int") from None
    if size < 0:
        raise ValueError(f"size {name}={size} must not be negative")
    return size


def _shape_of(tensor, label, pattern):
    """The shape as a tuple of ints, or a ShapeError that says what was passed instead."""
    shape = getattr(tensor, "shape", None)
    try:
        return tuple(int(s) for s in shape)
    except TypeError:
        pass
    kind = type(tensor).__name__
    if tensor is None:
        got = "got None. Did a function forget to `return` its result?"
    elif isinstance(tensor, tuple) and all(isinstance(s, int) for s in tensor):
        got = f"got the tuple {tensor!r}. Pass the tensor itself, not its .shape."
    elif isinstance(tensor, (list, tuple)):
        got = f"got a {kind}. Make it a tensor first, e.g. torch.tensor(...) or torch.stack(...)."
    else:
        got = f"got a {kind}, which has no .shape."
    raise ShapeError(f"{label}: expected a tensor to check against {pattern!r}, but {got}")


# ----------------------------------------------------------------------------- matching

def _positions(ndim, items):
    """Where each non-'...' item sits in a shape of `ndim` axes."""
    ell = next((i for i, it in enumerate(items) if it is None), None)
    return {i: (i if ell is None or i < ell else ndim - (len(items) - i))
            for i, it in enumerate(items) if it is not None}


def _match(shape, items, texts, known, where):
    """Match `shape` against a parsed pattern, given `known` sizes (name -> int).

    Returns (sizes, where, problem): all sizes known after the match, where each came from
    (a string, or an axis int for this tensor), and None or (item index, axis, clause).
    """
    sizes, where = dict(known), dict(where)
    n_fixed = sum(it is not None for it in items)
    if len(shape) < n_fixed or (len(shape) > n_fixed and None not in items):
        return sizes, where, "rank"
    pos = _positions(len(shape), items)
    groups = []
    for i, p in pos.items():
        atoms, got = items[i], shape[p]
        if len(atoms) > 1:
            groups.append(i)  # products last, so their factors can be bound by plain axes
        elif atoms == ("_",):
            continue
        elif atoms and isinstance(atoms[0], str):
            name = atoms[0]
            if name not in sizes:
                sizes[name], where[name] = got, p
            elif got != sizes[name]:
                origin = where[name]
                origin = f"from axis {origin} of this tensor" if isinstance(origin, int) else origin
                return sizes, where, (i, p, f", but {name} = {sizes[name]} ({origin})")
        elif got != (atoms[0] if atoms else 1):
            return sizes, where, (i, p, f", but the pattern says {atoms[0] if atoms else 1}")
    for i in groups:
        atoms, p = items[i], pos[i]
        got = shape[p]
        unknown = list(dict.fromkeys(a for a in atoms if isinstance(a, str) and a not in sizes))
        if len(unknown) > 1 or (unknown and atoms.count(unknown[0]) > 1):
            raise ValueError(f"cannot infer {' and '.join(unknown)} from {texts[i]!r} "
                             f"in {' '.join(texts)!r}: "
                             f"give all but one as keywords, e.g. {unknown[0]}=...")
        factors = [a for a in atoms if a not in unknown]
        product = math.prod(sizes[a] if isinstance(a, str) else a for a in factors)
        formula = "*".join(map(str, factors))
        values = "*".join(str(sizes[a]) if isinstance(a, str) else str(a) for a in factors)
        formula = formula if formula == str(product) else f"{formula} = {product}" if values == str(product) \
            else f"{formula} = {values} = {product}"
        if not unknown and got != product:
            return sizes, where, (i, p, f", but {formula}")
        if unknown and (got % product if product else got):
            return sizes, where, (i, p, f", which is not a multiple of {formula}")
        if unknown and product:
            sizes[unknown[0]], where[unknown[0]] = got // product, p
    return sizes, where, None


def _fits(shape, items, texts, known, where):
    try:
        return _match(shape, items, texts, known, where)[2] is None
    except ValueError:
        return False


def _hint(shape, items, texts, known, where, problem, var):
    """One line suggesting the likely fix, or ''."""
    ndim, n_fixed = len(shape), sum(it is not None for it in items)
    has_ell = None in items
    n_before = items.index(None) if has_ell else len(items)
    fits = lambda s, its=items, txt=texts: _fits(tuple(s), its, txt, known, where)  # noqa: E731

    if problem == "rank" and ndim < n_fixed:
        merged = _merged_hint(shape, items, texts, known, var)
        if merged:
            return merged
        if ndim == n_fixed - 1:
            for k, it in enumerate(items):
                if it is None or not fits(shape, items[:k] + items[k + 1:], texts[:k] + texts[k + 1:]):
                    continue
                size = _resolve(it, known)
                dim = k if k < n_before else k - len(items)
                if k == 0 and size not in (None, 1):
                    return (f"Hint: the first axis {texts[0]!r} (size {size}) looks missing. Is this "
                            f"one example instead of a batch? ({var}.unsqueeze(0) makes a batch of one.)")
                if k == 0:
                    return (f"Hint: the first axis {texts[0]!r} looks missing, often the batch axis; "
                            f"add it with {var}.unsqueeze(0) (or {var}[None]).")
                if size in (None, 1):
                    return f"Hint: axis {texts[k]!r} looks missing; add it with {var}.unsqueeze({dim})."
                return f"Hint: axis {texts[k]!r} (size {size}) looks missing."
        return f"Hint: add an axis with {var}.unsqueeze(dim), or split one with {var}.reshape(...)."

    if problem == "rank":  # too many axes
        if ndim == n_fixed + 1:
            for k in range(ndim):
                if shape[k] == 1 and fits(shape[:k] + shape[k + 1:]):
                    return f"Hint: axis {k} has size 1; drop it with {var}.squeeze({k})."
        if fits(shape, (None,) + items, ("...",) + texts):
            return (f"Hint: if extra leading (batch) axes are fine here, write the pattern as "
                    f"{' '.join(('...',) + texts)!r}.")
        if ndim == n_fixed + 1:
            for k in range(ndim - 1):
                merged = shape[:k] + (shape[k] * shape[k + 1],) + shape[k + 2:]
                if fits(merged):
                    return (f"Hint: axes {k} and {k + 1} ({shape[k]} x {shape[k + 1]}) look like one axis "
                            f"split in two; merge them with {var}.flatten({k}, {k + 1}) or .reshape(...).")
        if ndim == n_fixed + 1:  # an axis split off and moved away (e.g. heads not merged back)
            for i, j in itertools.permutations(range(ndim), 2):
                if abs(i - j) == 1 or shape[i] == 1:
                    continue
                to = j - 1 if i < j else j + 1  # next to axis j, as its major (i < j) or minor part
                moved = list(shape)
                moved.insert(to, moved.pop(i))
                lo = min(to, j)
                merged = moved[:lo] + [moved[lo] * moved[lo + 1]] + moved[lo + 2:]
                if fits(merged):
                    move = f"transpose({i}, {to})" if abs(i - to) == 1 else f"movedim({i}, {to})"
                    return (f"Hint: axis {i} (size {shape[i]}) looks split off axis {j} (size {shape[j]}) and not "
                            f"merged back; try {var}.{move}.flatten({lo}, {lo + 1}).")
        return f"Hint: drop size-1 axes with {var}.squeeze(dim), or merge axes with {var}.flatten(...)."

    # a wrong size: is the shape a permutation of one that fits?
    at = lambda d: d - ndim if has_ell and d >= n_before else d  # noqa: E731  (index to show)
    name_at = {p: texts[i] for i, p in _positions(ndim, items).items()}
    swaps = [(i, j) for i, j in itertools.combinations(range(ndim), 2) if shape[i] != shape[j]]
    swaps = [(i, j) for i, j in swaps if fits(_swapped(shape, i, j))]
    swaps.sort(key=lambda ij: problem[1] not in ij)  # prefer one that moves the failing axis
    if swaps:
        i, j = swaps[0]
        names = f" ({name_at[i]!r})" if i in name_at else "", f" ({name_at[j]!r})" if j in name_at else ""
        return (f"Hint: axes {at(i)}{names[0]} and {at(j)}{names[1]} look swapped; "
                f"try {var}.transpose({at(i)}, {at(j)}).")
    if ndim <= 6:
        perms = [p for p in itertools.permutations(range(ndim))
                 if tuple(shape[d] for d in p) != shape and fits(shape[d] for d in p)]
        if perms:
            perm = min(perms, key=lambda p: sum(a != b for a, b in enumerate(p)))
            return f"Hint: the axes look out of order; try {var}.permute{perm}."
    return ""


def _merged_hint(shape, items, texts, known, var):
    """'axis H looks merged into d_head' when the shape is the expected one with two axes multiplied together."""
    if None in items or len(shape) != len(items) - 1:
        return ""
    sizes = [_resolve(it, known) for it in items]
    if any(s is None for s in sizes):
        return ""
    for k, j in itertools.permutations(range(len(items)), 2):
        rest = [s for i, s in enumerate(sizes) if i != k]
        at = j if j < k else j - 1
        rest[at] *= sizes[k]
        if sizes[k] > 1 and sizes[j] > 1 and tuple(rest) == tuple(shape):
            a, b = sorted((k, j))
            how = f"{var}.unflatten({at}, ({sizes[a]}, {sizes[b]}))"
            new = at if k < j else at + 1  # where the split-off axis lands
            if new != k:
                how += f".transpose({k}, {new})" if abs(new - k) == 1 else f".movedim({new}, {k})"
            return (f"Hint: axis {texts[k]!r} (size {sizes[k]}) looks merged into axis {texts[j]!r}: "
                    f"axis {at} has size {shape[at]} = {sizes[a]}*{sizes[b]}. Split it with {how}.")
    return ""


def explain(shape, expected, names=None, var="x", output=False):
    """Why ``shape`` is not ``expected``, in the words of ``expect_shape``: a list of lines.

    The first line names the axis and both sizes, the last (when it can tell) is a ``Hint:``
    naming the likely fix (a transpose, an unsqueeze, a squeeze, an axis merged into another).
    ``names`` (e.g. ``"B H T d_head"``) names the expected axes; without it the axes are numbered.
    ``output=True`` words the hints for a function's result (a lost axis, not a missing batch).
    The checks in ``tutor.checks`` use it, so a wrong shape reads the same everywhere.
    """
    shape, expected = tuple(int(s) for s in shape), tuple(int(s) for s in expected)
    if names is not None:
        names = names.split() if isinstance(names, str) else list(names)
    if names is None or len(names) != len(expected) or len(set(names)) != len(names):
        names = [f"a{i}" for i in range(len(expected))]
        texts = [str(e) for e in expected]
    else:
        texts = list(names)
    items = tuple((n,) for n in names)
    known = dict(zip(names, expected))
    where = dict.fromkeys(names, "expected")
    problem = _match(shape, items, tuple(texts), known, where)[2]
    if problem is None:
        return []
    n = len(expected)
    if problem == "rank":
        first = f"{len(shape)} dimension{'s' * (len(shape) != 1)}, expected {n}"
    else:
        _, p, _ = problem
        label = f" ({texts[p]!r})" if texts[p] != str(expected[p]) else ""
        first = f"axis {p} (= {p - n}){label} has size {shape[p]}, expected {expected[p]}"
    tup = lambda t: "(" + ", ".join(map(str, t)) + ("," if len(t) == 1 else "") + ")"  # noqa: E731
    lines = [f"expected shape {tup(expected)}, got {tup(shape)}: {first}."]
    hint = _hint(shape, items, tuple(texts), known, where, problem, var)
    if texts and texts[0] == str(expected[0]) and names[0] == "a0":  # unnamed axes: drop the "('4')" labels
        hint = re.sub(r" \('\d+'\)", "", hint)
        hint = re.sub(r"the first axis '\d+'", "the first axis", hint)
        hint = re.sub(r"axis '(\d+)' \(size \d+\)", r"an axis of size \1", hint)
        hint = re.sub(r"into axis '(\d+)'", r"into the axis of size \1", hint)
        hint = re.sub(r"axis '(\d+)' looks", r"an axis of size \1 looks", hint)
    keep = "Keep every leading axis of the input: an [0], a squeeze() or a loop over one example drops it."
    if output and "Is this one example instead of a batch?" in hint:
        hint = hint[:hint.index("Is this")] + keep
    elif output and "looks missing, often the batch axis" in hint:
        hint = hint[:hint.index(", often the batch axis")] + ". " + keep
    return lines + ([hint] if hint else [])


def _swapped(shape, i, j):
    s = list(shape)
    s[i], s[j] = s[j], s[i]
    return s


def _resolve(atoms, sizes):
    """The size of one pattern item if it is known, else None."""
    if atoms is None or atoms == ("_",):
        return None
    if any(isinstance(a, str) and a not in sizes for a in atoms):
        return None
    return math.prod(sizes[a] if isinstance(a, str) else a for a in atoms)


def _expected(items, texts, sizes):
    """The expected shape as text, e.g. '(2, 5, C)'; '' when nothing about it is known."""
    parts = ["..." if it is None else _resolve(it, sizes) for it in items]
    if not any(isinstance(p, int) for p in parts):
        return ""
    parts = [t if p is None else str(p) for p, t in zip(parts, texts)]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def _check(tensor, pattern, name, known, where):
    """Match one tensor; return (sizes, where) with new bindings, or raise ShapeError."""
    items, texts = _parse(pattern)
    label = name if name else "tensor"
    var = name if isinstance(name, str) and name.isidentifier() else "x"
    shape = _shape_of(tensor, label, pattern)
    sizes, found_where, problem = _match(shape, items, texts, known, where)
    if problem is None:
        return sizes, found_where
    n_fixed, ndim = sum(it is not None for it in items), len(shape)
    if problem == "rank":
        need = f"at least {n_fixed}" if None in items else str(n_fixed)
        first = f"{label}: has {ndim} dimension{'s' * (ndim != 1)}, but pattern {pattern!r} needs {need}."
        second = f"  shape {shape}"
    else:
        i, p, clause = problem
        axis = f"axis {p} (= {p - ndim}, {texts[i]!r})" if None in items else f"axis {p} ({texts[i]!r})"
        first = f"{label}: {axis} has size {shape[p]}{clause}."
        second = f"  shape {shape}, pattern {pattern!r}"
    expected = _expected(items, texts, sizes)
    lines = [first, second + (f", expected {expected}." if expected else ".")]
    hint = _hint(shape, items, texts, known, where, problem, var)
    if hint:
        lines.append("  " + hint)
    raise ShapeError("\n".join(lines))


def _in_pattern(items):
    return list(dict.fromkeys(a for it in items if it for a in it if isinstance(a, str) and a != "_"))


def _keywords(pattern, sizes, fn):
    items, _ = _parse(pattern)
    names = _in_pattern(items)
    unknown = [k for k in sizes if k not in names]
    if unknown:
        raise ValueError(f"{fn}: {', '.join(map(repr, unknown))} "
                         f"{'is' if len(unknown) == 1 else 'are'} not in pattern {pattern!r} (a typo?)")
    return names, {k: _size(k, v) for k, v in sizes.items()}


# ----------------------------------------------------------------------------- public API

def expect_shape(tensor, pattern, /, name=None, **sizes):
    """Check that `tensor` has the shape described by `pattern`; return the sizes of its named axes.

    `name` is used in error messages (e.g. name="scores"). Keyword sizes must match, and
    names bind only within this call (like ``einops.parse_shape``):

        >>> import torch
        >>> expect_shape(torch.zeros(2, 5, 5), "B T T", T=5)
        {'B': 2, 'T': 5}

    Raises ShapeError (an AssertionError) on a mismatch or when `tensor` has no shape.
    """
    names, sizes = _keywords(pattern, sizes, "expect_shape")
    where = {k: f"bound by the keyword {k}={v}" for k, v in sizes.items()}
    found, _ = _check(tensor, pattern, name, sizes, where)
    return {k: found[k] for k in names if k in found}


class Dims(Mapping):
    """Sizes of named dimensions, shared by every tensor you check with ``expect``.

        >>> import torch
        >>> dims = Dims(B=2, T=5)
        >>> dims.expect(torch.zeros(2, 5, 8), "B T d_k", name="q")   # binds d_k on first use
        {'B': 2, 'T': 5, 'd_k': 8}
        >>> dims.expect(torch.zeros(2, 5, 8), "B T d_k", name="k")   # checks it afterwards
        {'B': 2, 'T': 5, 'd_k': 8}
        >>> dims["d_k"], dims.d_k, "H" in dims
        (8, 8, False)

    A ``Dims`` is a read-only mapping (``dict(dims)``, ``dims == {"B": 2, ...}``) and a context
    manager (``with Dims(B=2) as dims: ...``). Read a size whose name clashes with a method
    (``keys``, ``expect``...) as ``dims["keys"]``.
    """

    def __init__(self, **sizes):
        self._sizes = {k: _size(k, v) for k, v in sizes.items()}
        self._where = {k: f"bound by Dims({k}={v})" for k, v in self._sizes.items()}

    def expect(self, tensor, pattern, /, name=None, **sizes):
        """Check `tensor` against `pattern` and the sizes bound so far; bind the new names.

        Returns the sizes of the names in `pattern`. Keyword sizes are bound too (they must agree
        with earlier bindings). Nothing is bound when the check fails.
        """
        names, sizes = _keywords(pattern, sizes, "Dims.expect")
        label = name if name else "tensor"
        known, where = dict(self._sizes), dict(self._where)
        for k, v in sizes.items():
            if k in known and known[k] != v:
                raise ShapeError(f"{label}: the keyword {k}={v} conflicts with "
                                 f"{k} = {known[k]} ({where[k]}).")
            known[k], where[k] = v, f"bound by the keyword {k}={v}"
        found, found_where = _check(tensor, pattern, name, known, where)
        for k, origin in found_where.items():
            if isinstance(origin, int):  # bound by this tensor: remember which one, for later messages
                found_where[k] = (f"bound by `{name}`, axis {origin}" if name else f"bound by axis "
                                  f"{origin} of an unnamed tensor of shape {tuple(tensor.shape)}")
        self._sizes, self._where = found, found_where
        return {k: found[k] for k in names if k in found}

    def __getitem__(self, key):
        try:
            return self._sizes[key]
        except KeyError:
            raise KeyError(f"{key!r} is not bound yet; {self!r}") from None

    def __getattr__(self, attr):
        if attr.startswith("_"):
            raise AttributeError(attr)
        try:
            return self._sizes[attr]
        except KeyError:
            raise AttributeError(f"{attr!r} is not bound yet; {self!r}") from None

    def __iter__(self):
        return iter(self._sizes)

    def __len__(self):
        return len(self._sizes)

    def __repr__(self):
        return "Dims(" + ", ".join(f"{k}={v}" for k, v in self._sizes.items()) + ")"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

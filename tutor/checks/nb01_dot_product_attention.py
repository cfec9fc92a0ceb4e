"""Checks for notebook 01: dot-product attention on "laika"."""

import torch

from tutor import reference as ref
from tutor.checks import beside
from tutor.checks.common import LAIKA, laika_one_hot
from tutor.checks.compare import expect_close, expect_equal, kind_cases, shape_mismatch
from tutor.checks.harness import LearnerError, Mismatch, at, call, case, check
from tutor.course import catalog

__all__ = catalog.check_names(__name__)  # this notebook's exercises (tutor.course.catalog)

BATCH_HINT = ("it must work with batch dimensions too: transpose only the last two axes with "
              "x.transpose(-2, -1) (x.T reverses every axis)")


# --- encode / decode ------------------------------------------------------------------


@check
def encode(fn):
    for name in ["laika", "a", "zoe", "maximilian", ""]:
        with case(repr(name)):
            got = call(fn, name, what=f"encode({name!r})")
            if isinstance(got, torch.Tensor):
                raise Mismatch("encode should return a list of ints, got a tensor",
                               hint="return ids.tolist(), or build a list")
            if not isinstance(got, list):
                raise Mismatch(f"encode should return a list of ints, got {type(got).__name__}")
            odd = next((g for g in got if type(g) is not int), None)
            if odd is not None:
                raise Mismatch(f"encode should return a list of Python ints, but it holds a {type(odd).__name__}",
                               hint="use .tolist() on a tensor, or int(i) for each id")
            expected = ref.encode(name)
            if got and [g - 1 for g in got] == expected:
                raise Mismatch("every id is one too large", [f"expected {expected}", f"got      {got}"],
                               hint="index the alphabet list itself: "
                                    "alphabet.index(ch) or a dict built with enumerate(alphabet)")
            if got and [g + 1 for g in got] == expected:
                raise Mismatch("every id is one too small", [f"expected {expected}", f"got      {got}"],
                               hint="' ' is index 0, so 'a' is 1: "
                                    "look the letter up in `alphabet`, don't use ord(ch) - ord('a')")
            expect_equal(got, expected, f"encode({name!r})")
    for text in [" laika", "zoe ", " ana.."]:  # a training input is ' ' + name; targets are padded with '.'
        with case(f"{text!r} (with the start/padding characters ' ' and '.')"):
            try:
                got = call(fn, text, what=f"encode({text!r})")
            except LearnerError as e:
                raise Mismatch(f"encode({text!r}) raised an exception", [f"{type(e.error).__name__}: {e.error}"],
                               hint=SPECIAL_HINT) from None
            expected = ref.encode(text)
            if got != expected and isinstance(got, list) and len(got) == len(expected) and all(
                    g == e for g, e, ch in zip(got, expected, text) if ch.isalpha()):
                raise Mismatch(f"encode({text!r}) gets the letters right but not ' ' or '.'",
                               [f"expected {expected}", f"got      {got}"], hint=SPECIAL_HINT)
            expect_equal(got, expected, f"encode({text!r})", hint=SPECIAL_HINT)
    with case("'Laika' (upper case)"):
        try:
            got = call(fn, "Laika", what="encode('Laika')")
        except LearnerError as e:
            raise Mismatch("encode('Laika') raised an exception", [f"{type(e.error).__name__}: {e.error}"],
                           hint="lowercase the name first: name.lower()") from None
        expect_equal(got, LAIKA, "encode('Laika')", hint="lowercase the name first: name.lower()")
    return "9 names, with ' ' and '.'"


SPECIAL_HINT = ("' ' (index 0) and '.' (the last index) are characters of the alphabet too: look every character "
                "up in `alphabet` (e.g. a dict built with enumerate(alphabet)); ord(ch) - ord('a') + 1 only works "
                "for letters")


@check
def decode(fn):
    for ids in [LAIKA, [0, 12, 1, 27], [26, 15, 5, 0], []]:
        with case(repr(ids)):
            got = call(fn, list(ids), what=f"decode({ids})")
            expected = ref.decode(ids)
            if not isinstance(got, str):
                raise Mismatch(f"decode should return a str, got {type(got).__name__}",
                               hint="join the characters: ''.join(...)")
            stripped = {expected.strip(" ."), expected.strip(), expected.strip("."),
                        expected.replace(" ", "").replace(".", "")}
            if got in stripped and got != expected:
                raise Mismatch(f"decode({ids}) dropped the ' ' or '.' characters",
                               [f"expected {expected!r}", f"got      {got!r}"],
                               hint="decode must be the exact inverse of encode: keep ' ' and '.'")
            expect_equal(got, expected, f"decode({ids})")
    with case("a 1-D tensor"):
        ids = torch.tensor(LAIKA)
        try:
            got = call(fn, ids, what="decode(torch.tensor([12, 1, 9, 11, 1]))")
        except LearnerError as e:
            raise Mismatch("decode fails on a tensor", [f"{type(e.error).__name__}: {e.error}"],
                           hint="convert first: ids.tolist() if it is a tensor, or int(i) for each element") from None
        expect_equal(got, "laika", "decode(torch.tensor([12, 1, 9, 11, 1]))",
                     hint="convert a tensor with ids.tolist() (or int(i) per element) before looking ids up")
    with case("round trip"):
        names = ["laika", "zoe", "anna", " laika", "zoe ", " ana.."]
        for name in names:
            expect_equal(call(fn, ref.encode(name)), name, f"decode(encode({name!r}))")
    return "10 inputs"


# --- one_hot --------------------------------------------------------------------------


@check
def one_hot(fn):
    cases = [
        ("'laika', 28 classes", torch.tensor(LAIKA), 28),
        ("T = 1", torch.tensor([3]), 5),
        ("batch [2, 3, 4], 7 classes", torch.randint(0, 7, (2, 3, 4)), 7),
    ]
    for label, ids, n in cases:
        with case(label, hint_on_error="make it work for any number of leading axes: "
                                       "torch.zeros(*ids.shape, num_classes) and scatter_, or F.one_hot(...).float()"):
            before = ids.clone()
            got = call(fn, ids, n, what=f"one_hot(ids of shape {list(ids.shape)}, {n})")
            if not torch.equal(ids, before):  # first: every comparison below would be with the changed ids
                raise Mismatch("one_hot changed its input ids in place",
                               [f"ids before: {before.tolist()}", f"ids after:  {ids.tolist()}"] if ids.numel() <= 8
                               else [], hint="don't modify `ids` (no unsqueeze_, zero_, scatter_ on it): work on a "
                                             "new tensor")
            expected = ref.one_hot(ids, n)
            if isinstance(got, torch.Tensor) and ids.dim() > 1 and got.dim() == 2 and got.shape[-1] == n:
                m = shape_mismatch(got.shape, expected.shape, "the one-hot tensor")
                m.hint = (f"your one_hot only works on 1-D input: it must keep every axis of `ids` {tuple(ids.shape)} "
                          f"and add one of size num_classes; build it with torch.zeros(*ids.shape, num_classes) "
                          f"and scatter_ on the last axis, or F.one_hot(ids, num_classes).float()")
                raise m
            expect_close(got, expected, "the one-hot tensor", atol=0, rtol=0, mistakes=[
                ("each vector has the 1 one place too far: the ids are already 0-based",
                 lambda: ref.one_hot((ids + 1) % n, n)),
                ("the last two axes are swapped: the result is [..., T, num_classes]",
                 lambda: expected.transpose(-2, -1)),
            ])
    kind_cases(fn, (torch.randint(0, 5, (2, 3)), 5), ref.one_hot, "one_hot(ids of shape [2, 3], 5)", kinds=("meta",))
    return "{cases} cases, on the meta device too"


# --- similarity -------------------------------------------------------------------------


@check
def similarity(fn):
    x = laika_one_hot()
    cases = [("one-hot 'laika' [5, 28]", x), ("random [2, 3, 6, 4]", torch.randn(2, 3, 6, 4)),
             ("T = 1", torch.randn(1, 8))]
    for label, inp in cases:
        with case(label, hint_on_error=BATCH_HINT):
            got = call(fn, inp.clone(), what=f"similarity(x of shape {list(inp.shape)})")
            expected = ref.similarity(inp)
            expect_close(got, expected, "the similarity matrix", mistakes=[
                ("you computed xᵀ x (a [C, C] matrix); similarity between positions is x xᵀ, shape [T, T]",
                 lambda: inp.transpose(-2, -1) @ inp),
                (".T reverses every axis of a batched tensor: use x.transpose(-2, -1)",
                 lambda: inp @ inp.permute(*reversed(range(inp.dim())))),
                ("x * x multiplies element by element; use the matrix product x @ x.transpose(-2, -1)",
                 lambda: inp * inp),
            ])
    kind_cases(fn, (torch.randn(2, 4, 3),), ref.similarity, "similarity(x of shape [2, 4, 3])")
    return "{cases} cases, float64 and meta"


# --- softmax ----------------------------------------------------------------------------

def _forbidden(name: str) -> bool:
    """torch.softmax, F.softmax, Tensor.softmax, log_softmax, logsumexp, torch.special.* ..."""
    return "softmax" in name or "logsumexp" in name


@check
def softmax(fn):
    with case("a random square matrix [4, 4], dim=-1"):
        s = torch.randn(4, 4) * 3
        got, seen = call(at(beside.torch_calls), fn, s.clone(), dim=-1, what="softmax(x, dim=-1)")
        used = sorted(n for n in seen if _forbidden(n))
        if used:
            raise Mismatch(f"softmax uses torch's own {', '.join(used)}",
                           hint="build it from torch.exp, .max and .sum: that is the point of the exercise")
        expect_close(got, ref.softmax(s, -1), "softmax(x, dim=-1)", mistakes=_softmax_mistakes(s, -1))

    r = torch.randn(2, 3, 4, 5) * 3
    for dim in (-1, 1, 0):
        with case(f"random [2, 3, 4, 5], dim={dim}"):
            got = call(fn, r.clone(), dim=dim, what=f"softmax(x, dim={dim})")
            expected = ref.softmax(r, dim=dim)
            expect_close(got, expected, f"softmax(x, dim={dim})", mistakes=_softmax_mistakes(r, dim))

    with case("laika similarity, dim=-1"):
        x = ref.similarity(laika_one_hot())
        got = call(fn, x.clone(), dim=-1, what="softmax(x, dim=-1)")
        expect_close(got, ref.softmax(x), "softmax(x)", atol=1e-4, mistakes=_softmax_mistakes(x, -1))

    with case("large logits [1000, 999, 0]"):
        big = torch.tensor([[1000.0, 999.0, 0.0], [-1000.0, -1001.0, -2000.0]])
        got = call(fn, big.clone(), dim=-1, what="softmax(tensor([[1000., 999., 0.], ...]))")
        expect_close(got, ref.softmax(big), "softmax of large logits",
                     hint="subtract the maximum along `dim` before exp")

    with case("the input is left unchanged"):
        inp = torch.randn(3, 4)
        before = inp.clone()
        call(fn, inp, dim=-1)
        if not torch.equal(inp, before):
            raise Mismatch("softmax changed its input in place",
                           hint="use x - x.max(...) (a new tensor), not x -= ... or x.sub_(...)")
    kind_cases(fn, (torch.randn(2, 3, 4), -1), ref.softmax, "softmax(x of shape [2, 3, 4], dim=-1)")
    return "{cases} cases, including logits of 1000, float64 and meta"


def _softmax_mistakes(x, dim):
    other = 0 if dim not in (0, -x.dim()) else -1
    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    keepdim = "the sum is not kept as a column: use .sum(dim=dim, keepdim=True) so it divides along the right axis"
    e_flat = lambda: torch.exp(x - x.max(dim=dim).values)  # noqa: E731  (max without keepdim)
    return [
        (keepdim, lambda: torch.exp(x) / torch.exp(x).sum(dim=dim)),
        (keepdim, lambda: e / e.sum(dim=dim)),
        ("neither the maximum nor the sum is kept as a column, so both broadcast along the wrong axis: "
         "use keepdim=True in .max(dim=dim, keepdim=True) and .sum(dim=dim, keepdim=True)",
         lambda: e_flat() / e_flat().sum(dim=dim)),
        (f"softmax over the wrong axis: you normalised along dim={other}, the exercise asks for dim={dim}",
         lambda: ref.softmax(x, dim=other)),
        ("softmax over the wrong axis: you always use dim=-1, ignoring the `dim` argument",
         lambda: ref.softmax(x, dim=-1)),
        ("softmax over the wrong axis: you always use dim=0, ignoring the `dim` argument",
         lambda: ref.softmax(x, dim=0)),
        ("the maximum is not kept as a column: use .max(dim=dim, keepdim=True).values",
         lambda: _softmax_bad_max(x, dim)),
        ("the exponentials are not divided by their sum", lambda: e),
    ]


def _softmax_bad_max(x, dim):
    m = x.max(dim=dim).values.unsqueeze(0)
    e = torch.exp(x - m)
    return e / e.sum(dim=dim, keepdim=True)


# --- dot_product_attention ------------------------------------------------------------------


@check
def dot_product_attention(fn):
    x = laika_one_hot()
    with case("one-hot 'laika'"):
        got = call(fn, x.clone(), what="dot_product_attention(one-hot 'laika')")
        expected = ref.dot_product_attention(x)
        expect_close(got, expected, "the attention output", mistakes=_attention_mistakes(x))
        decoded = ref.decode(got.argmax(dim=-1))
        if decoded != "laika":
            raise Mismatch(f"the argmax of the output decodes to {decoded!r}, not 'laika'")
    for label, shape in [("random [2, 3, 6, 4]", (2, 3, 6, 4)), ("T = 1", (1, 5))]:
        with case(label, hint_on_error=BATCH_HINT):
            inp = torch.randn(*shape)
            got = call(fn, inp.clone(), what=f"dot_product_attention(x of shape {list(shape)})")
            expect_close(got, ref.dot_product_attention(inp), "the attention output", mistakes=_attention_mistakes(inp))
    kind_cases(fn, (torch.randn(2, 4, 3),), ref.dot_product_attention, "dot_product_attention(x of shape [2, 4, 3])")
    return "{cases} cases, float64 and meta; 'laika' decodes back to 'laika'"


def _attention_mistakes(x):
    s = ref.similarity(x)
    return [
        ("no softmax: the weights must be softmax(x xᵀ), rows that sum to 1", lambda: s @ x),
        ("softmax over the wrong axis: each row (dim=-1) of the weights must sum to 1",
         lambda: ref.softmax(s, dim=-2) @ x),
        ("the scores are scaled: in notebook 01 attention is softmax(x xᵀ) x, unscaled (scaling comes in 02)",
         lambda: ref.softmax(s / x.shape[-1] ** 0.5) @ x),
    ]

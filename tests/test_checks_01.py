"""Checks of notebook 01: accept the reference, report the stub, reject realistic mistakes."""

import string

import pytest
import torch
import torch.nn.functional as F
from checkkit import not_done, passes, rejects, stub

from tutor import checks
from tutor import reference as ref
from tutor.course import catalog

NAMES = [e.name for e in catalog.exercises(1)]  # an exercise added to the catalog is tested here too


@pytest.mark.parametrize("name", NAMES)
def test_accepts_reference(name):
    passes(getattr(checks, name), getattr(ref, name))


@pytest.mark.parametrize("name", NAMES)
def test_stub_is_not_done(name):
    not_done(getattr(checks, name), stub)


@pytest.mark.parametrize("name", NAMES)
def test_not_a_function(name):
    result = getattr(checks, name)("softmax")
    assert result.status == "failed" and "pass your" in result.summary


# --- encode -----------------------------------------------------------------------------


def encode_from_ord(name):
    return [ord(ch) - ord("a") for ch in name.lower()]


def encode_index_plus_one(name):
    return [ref.alphabet.index(ch) + 1 for ch in name.lower()]


def encode_no_lower(name):
    return [ref.alphabet.index(ch) for ch in name]


def encode_tensor(name):
    return torch.tensor([ref.alphabet.index(ch) for ch in name.lower()])


def encode_no_return(name):
    [ref.alphabet.index(ch) for ch in name.lower()]


def encode_letters_only(name):  # forgets that ' ' comes first in the alphabet
    return [string.ascii_lowercase.index(ch) for ch in name.lower()]


def test_encode_rejects():
    rejects(checks.encode, encode_from_ord, "one too small", "' ' is index 0")
    rejects(checks.encode, encode_letters_only, "one too small")
    rejects(checks.encode, encode_index_plus_one, "one too large")
    rejects(checks.encode, encode_no_lower, "Laika", "lowercase")
    rejects(checks.encode, encode_tensor, "list", "tolist")
    rejects(checks.encode, encode_no_return, "list", "NoneType")


# --- decode -----------------------------------------------------------------------------


def decode_strip(ids):
    return "".join(ref.alphabet[i] for i in ids).strip(" .")


def decode_no_tensor(ids):
    return "".join(ref.itos[i] for i in ids)  # a 0-d tensor is not the key 12 of a dict


def decode_list(ids):
    return [ref.alphabet[int(i)] for i in ids]


def decode_off_by_one(ids):
    return "".join(ref.alphabet[int(i) - 1] for i in ids)


def test_decode_rejects():
    rejects(checks.decode, decode_strip, "dropped", "keep ' ' and '.'")
    rejects(checks.decode, decode_no_tensor, "tensor", "tolist")
    rejects(checks.decode, decode_list, "should return a str", "join")
    rejects(checks.decode, decode_off_by_one, "decode(", "expected 'laika'")


# --- one_hot ----------------------------------------------------------------------------


def one_hot_int(ids, num_classes):
    return F.one_hot(ids, num_classes)


def one_hot_transposed(ids, num_classes):
    return F.one_hot(ids, num_classes).float().transpose(-2, -1)


def one_hot_shifted(ids, num_classes):
    return F.one_hot((ids + 1) % num_classes, num_classes).float()


def one_hot_2d_only(ids, num_classes):
    out = torch.zeros(len(ids), num_classes)
    out[torch.arange(len(ids)), ids] = 1.0
    return out


def one_hot_float64(ids, num_classes):
    return torch.eye(num_classes, dtype=torch.float64)[ids]


def test_one_hot_rejects():
    rejects(checks.one_hot, one_hot_int, "dtype torch.int64", ".float()")
    rejects(checks.one_hot, one_hot_transposed, "wrong shape", "axes are swapped")
    rejects(checks.one_hot, one_hot_shifted, "one place too far")
    rejects(checks.one_hot, one_hot_2d_only, "batch [2, 3, 4]", "any number of leading axes")
    rejects(checks.one_hot, one_hot_float64, "float64")


# --- similarity -------------------------------------------------------------------------


def similarity_xtx(x):
    return x.transpose(-2, -1) @ x


def similarity_T(x):
    return x @ x.T if x.dim() == 2 else x @ x.permute(*reversed(range(x.dim())))


def similarity_elementwise(x):
    return x * x


def similarity_2d_only(x):
    return torch.mm(x, x.t())


def test_similarity_rejects():
    rejects(checks.similarity, similarity_xtx, "xᵀ x", "[T, T]")
    rejects(checks.similarity, similarity_T, ".T reverses every axis", "transpose(-2, -1)")
    rejects(checks.similarity, similarity_elementwise, "element by element")
    rejects(checks.similarity, similarity_2d_only, "exception", "random [2, 3, 6, 4]")


# --- softmax ----------------------------------------------------------------------------


def softmax_unstable(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def softmax_last_axis_always(x, dim=-1):
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def softmax_first_axis(x, dim=-1):
    e = torch.exp(x - x.max(dim=0, keepdim=True).values)
    return e / e.sum(dim=0, keepdim=True)


def softmax_no_keepdim(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim)


def softmax_builtin(x, dim=-1):
    return F.softmax(x, dim=dim)


def softmax_logsumexp(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))


def softmax_in_place(x, dim=-1):
    x -= x.max(dim=dim, keepdim=True).values
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def softmax_numpy(x, dim=-1):
    import numpy as np

    a = x.numpy()
    e = np.exp(a - a.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


def test_softmax_rejects_no_max_subtraction_with_nan_at_1000():
    result = rejects(checks.softmax, softmax_unstable, "nan", "subtract the maximum")
    assert "1000" in str(result)


def test_softmax_rejects_wrong_axis():
    rejects(checks.softmax, softmax_last_axis_always, "wrong axis", "ignoring the `dim` argument")
    rejects(checks.softmax, softmax_first_axis, "wrong axis")


def test_softmax_rejects_other_mistakes():
    rejects(checks.softmax, softmax_no_keepdim, "keepdim=True")
    rejects(checks.softmax, softmax_builtin, "torch's own softmax")
    rejects(checks.softmax, softmax_logsumexp, "logsumexp")
    rejects(checks.softmax, softmax_in_place, "in place")
    rejects(checks.softmax, softmax_numpy, "torch.Tensor", "numpy")


# --- dot_product_attention ----------------------------------------------------------------


def attention_no_softmax(x):
    return (x @ x.transpose(-2, -1)) @ x


def attention_columns(x):
    return torch.softmax(x @ x.transpose(-2, -1), dim=-2) @ x


def attention_weights_only(x):
    return torch.softmax(x @ x.transpose(-2, -1), dim=-1)


def attention_scaled(x):  # jumps ahead to notebook 02
    return torch.softmax(x @ x.transpose(-2, -1) / x.shape[-1] ** 0.5, dim=-1) @ x


def attention_2d_only(x):
    return torch.softmax(x @ x.T, dim=-1) @ x


@pytest.mark.filterwarnings("ignore:The use of `x.T`")  # attention_2d_only uses x.T on purpose
def test_dot_product_attention_rejects():
    rejects(checks.dot_product_attention, attention_no_softmax, "no softmax")
    rejects(checks.dot_product_attention, attention_columns, "wrong axis")
    rejects(checks.dot_product_attention, attention_weights_only, "wrong shape", "expected shape (5, 28), got (5, 5)")
    rejects(checks.dot_product_attention, attention_scaled, "unscaled", "comes in 02")
    rejects(checks.dot_product_attention, attention_2d_only, "random [2, 3, 6, 4]", "x.transpose(-2, -1)")


# --- the framework, seen through these checks -------------------------------------------------


def test_a_hang_is_stopped(monkeypatch):
    from tutor.checks import harness

    def forever(x, dim=-1):
        while True:
            pass

    monkeypatch.setattr(harness, "DEFAULT_TIMEOUT", 0.5)
    # the timeout is bound when the check is defined: rebuild the check with a short one
    quick = harness.check(checks.softmax.__wrapped__, timeout=0.5)
    result = quick(forever)
    assert result.status == "failed" and "stopped" in result.summary


def test_strict_mode_raises(monkeypatch):
    monkeypatch.setenv("TUTOR_STRICT", "1")
    with pytest.raises(checks.CheckFailed, match="not done yet"):
        checks.softmax(stub)
    assert checks.softmax(ref.softmax).passed


def test_checks_leave_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    checks.softmax(ref.softmax)
    assert torch.equal(torch.rand(3), expected)


def test_result_shows_as_text_and_html():
    result = checks.softmax(softmax_unstable)
    assert str(result).startswith("❌ softmax:")
    html = result._repr_html_()
    assert "❌" in html and "softmax" in html and "<div" in html
    assert bool(checks.softmax(ref.softmax)) is True


def test_yours_or_reference(capsys):
    def softmax(x, dim=-1):
        raise NotImplementedError()

    checks.softmax(softmax)
    assert checks.yours_or_reference(softmax) is ref.softmax
    assert "tutor.reference.softmax" in capsys.readouterr().out
    good = ref.softmax
    checks.softmax(good)
    assert checks.yours_or_reference(good) is good


# --- found in review ----------------------------------------------------------------------------


def test_softmax_rejects_torch_special():
    rejects(checks.softmax, lambda x, dim=-1: torch.special.softmax(x, dim), "torch's own special_softmax")


def test_right_values_in_the_wrong_dtype_get_the_dtype_hint():
    result = rejects(checks.softmax, lambda x, dim=-1: ref.softmax(x.double(), dim), "float64", "dtype")
    assert "wrong axis" not in str(result)


def test_encode_wants_python_ints():
    rejects(checks.encode, lambda s: list(torch.tensor(ref.encode(s))), "python ints", "tolist")


def test_decode_names_a_plain_strip():
    rejects(checks.decode, lambda ids: ref.decode(ids).strip(), "dropped the ' ' or '.'")


# --- issue 7: blind spots and messages ------------------------------------------------------


def test_encode_rejects_an_ord_based_encoder_on_start_and_padding_characters():
    # right for every letter, so it passed while encode never saw ' ' or '.'
    def encode_by_ord(name):
        return [ord(ch) - ord("a") + 1 for ch in name.lower()]

    rejects(checks.encode, encode_by_ord, "letters right but not ' ' or '.'", "ord(ch) - ord('a') + 1 only works")


def test_encode_rejects_an_encoder_that_drops_spaces():
    def encode_letters_only(name):
        return [ref.alphabet.index(ch) for ch in name.lower() if ch.isalpha()]

    rejects(checks.encode, encode_letters_only, "' '", "look every character up in `alphabet`")


def test_decode_round_trip_keeps_start_and_padding_characters():
    def decode_strips(ids):
        return "".join(ref.itos[int(i)] for i in ids).strip()

    rejects(checks.decode, decode_strips, "dropped the ' ' or '.'", "exact inverse")


def test_softmax_without_any_keepdim_names_keepdim():
    def softmax_no_keepdim(x, dim=-1):
        e = torch.exp(x - x.max(dim=dim).values)
        return e / e.sum(dim=dim)

    rejects(checks.softmax, softmax_no_keepdim, "wrong values", "keepdim=True")


def test_one_hot_that_only_works_on_1d_input_names_the_cause():
    def one_hot_1d(ids, num_classes):  # flattens any batch down to its first axis
        first = ids.reshape(ids.shape[0], -1)[:, 0]
        out = torch.zeros(ids.shape[0], num_classes)
        out[torch.arange(ids.shape[0]), first] = 1
        return out

    rejects(checks.one_hot, one_hot_1d, "wrong shape", "only works on 1-D input", "torch.zeros(*ids.shape")


def test_one_hot_names_ids_changed_in_place_even_when_the_result_is_right():
    """A learner's: the right one-hot tensor, built by changing `ids` on the way; the check blamed 1-D input or
    wrong values, because it compared with the changed ids."""
    def unsqueezes_ids(ids, num_classes):
        ids.unsqueeze_(-1)
        return (ids == torch.arange(num_classes, device=ids.device)).float()

    def zeroes_ids(ids, num_classes):
        out = (ids.unsqueeze(-1) == torch.arange(num_classes, device=ids.device)).float()
        ids.zero_()
        return out

    rejects(checks.one_hot, unsqueezes_ids, "changed its input ids in place", "unsqueeze_")
    rejects(checks.one_hot, zeroes_ids, "changed its input ids in place")

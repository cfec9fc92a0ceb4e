"""Tests for tutor.shapes: expect_shape, Dims and the messages of ShapeError."""

import numpy as np
import pytest
import torch

from tutor.shapes import Dims, ShapeError, expect_shape


def message(fn, *args, **kwargs):
    """The ShapeError message raised by fn(*args, **kwargs)."""
    with pytest.raises(ShapeError) as info:
        fn(*args, **kwargs)
    return str(info.value)


# ----------------------------------------------------------------------------- passing cases

def test_named_axes_return_their_sizes():
    assert expect_shape(torch.zeros(2, 5, 16), "B T C") == {"B": 2, "T": 5, "C": 16}


def test_literal_and_underscore():
    assert expect_shape(torch.zeros(2, 5, 16), "B 5 _") == {"B": 2}
    assert expect_shape(torch.zeros(2, 1), "B 1") == {"B": 2}


def test_underscore_may_repeat_with_different_sizes():
    assert expect_shape(torch.zeros(2, 3, 4), "_ _ C") == {"C": 4}


def test_ellipsis_at_front_matches_any_number_of_leading_axes():
    for shape in [(5, 4), (2, 5, 4), (3, 2, 5, 4)]:
        assert expect_shape(torch.zeros(shape), "... T C", T=5) == {"T": 5, "C": 4}


def test_ellipsis_in_the_middle():
    assert expect_shape(torch.zeros(2, 7, 7, 4), "B ... C") == {"B": 2, "C": 4}
    assert expect_shape(torch.zeros(2, 4), "B ... C") == {"B": 2, "C": 4}


def test_repeated_name_must_be_equal():
    assert expect_shape(torch.zeros(2, 5, 5), "B T T") == {"B": 2, "T": 5}
    text = message(expect_shape, torch.zeros(2, 5, 4), "B T T", name="scores")
    assert "scores: axis 2 ('T') has size 4" in text
    assert "T = 5 (from axis 1 of this tensor)" in text


def test_keyword_sizes_are_checked():
    assert expect_shape(torch.zeros(2, 5, 16), "B T C", T=5, C=16)["C"] == 16
    text = message(expect_shape, torch.zeros(2, 5, 16), "B T C", C=8)
    assert "axis 2 ('C') has size 16" in text and "C = 8 (bound by the keyword C=8)" in text


def test_keyword_not_in_pattern_is_a_typo():
    with pytest.raises(ValueError, match="'b' is not in pattern"):
        expect_shape(torch.zeros(2, 5), "B T", b=2)


def test_numpy_arrays_work():
    assert expect_shape(np.zeros((2, 3)), "B 3") == {"B": 2}
    with pytest.raises(ShapeError):
        expect_shape(np.zeros((2, 3)), "B 4")


def test_zero_dim_tensor_matches_empty_pattern():
    assert expect_shape(torch.tensor(1.0), "") == {}
    assert expect_shape(torch.tensor(1.0), "...") == {}


def test_product_binds_the_unknown_factor():
    assert expect_shape(torch.zeros(2, 5, 32), "B T (H d)", H=4) == {"B": 2, "T": 5, "H": 4, "d": 8}
    # a factor bound by a plain axis anywhere in the pattern counts
    assert expect_shape(torch.zeros(2, 4, 32), "B H (H d)")["d"] == 8


def test_product_mismatch():
    text = message(expect_shape, torch.zeros(2, 5, 32), "B T (H d)", H=4, d=7)
    assert "axis 2 ('(H d)') has size 32, but H*d = 4*7 = 28" in text
    text = message(expect_shape, torch.zeros(2, 5, 30), "B T (H d)", H=4)
    assert "not a multiple of H = 4" in text


def test_product_with_two_unknowns_is_a_usage_error():
    with pytest.raises(ValueError, match="cannot infer H and d"):
        expect_shape(torch.zeros(2, 5, 32), "B T (H d)")


def test_invalid_pattern_is_a_value_error():
    for pattern in ["B T)", "B ... ...", "B (...) C", "B (_ d)", "B T-1"]:
        with pytest.raises(ValueError, match="invalid shape pattern"):
            expect_shape(torch.zeros(2, 5), pattern)


# ----------------------------------------------------------------------------- the messages

def test_shape_error_is_an_assertion_error():
    assert issubclass(ShapeError, AssertionError)
    with pytest.raises(AssertionError):
        expect_shape(torch.zeros(2, 3), "B 4")


def test_message_names_tensor_axis_expected_got_shape_and_pattern():
    text = message(expect_shape, torch.zeros(2, 6, 8), "B T C", name="k", T=5)
    first = text.splitlines()[0]
    assert first == "k: axis 1 ('T') has size 6, but T = 5 (bound by the keyword T=5)."
    assert "shape (2, 6, 8), pattern 'B T C', expected (2, 5, C)." in text


def test_unnamed_tensor_is_called_tensor():
    assert message(expect_shape, torch.zeros(2, 3), "B 4").startswith("tensor: axis 1 ('4') has size 3")


def test_literal_mismatch_says_what_the_pattern_wants():
    assert "has size 3, but the pattern says 4" in message(expect_shape, torch.zeros(2, 3), "B 4")


def test_axis_is_counted_from_the_end_with_ellipsis():
    text = message(expect_shape, torch.zeros(3, 2, 5, 7), "... T C", name="h", T=5, C=4)
    assert "h: axis 3 (= -1, 'C') has size 7, but C = 4" in text
    assert "expected (..., 5, 4)" in text


def test_transpose_suggested_for_swapped_axes():
    text = message(expect_shape, torch.zeros(2, 4, 5), "B T C", name="x", T=5, C=4)
    assert "axis 1 ('T') has size 4" in text
    assert "axes 1 ('T') and 2 ('C') look swapped; try x.transpose(1, 2)" in text


def test_transpose_suggested_for_sequence_first_input():
    text = message(expect_shape, torch.zeros(5, 2, 16), "B T C", name="x", B=2)
    assert "try x.transpose(0, 1)" in text


def test_transpose_uses_negative_axes_after_ellipsis():
    text = message(expect_shape, torch.zeros(3, 2, 8, 5), "... T d", name="q", T=5, d=8)
    assert "try q.transpose(-2, -1)" in text


def test_permute_suggested_when_more_than_two_axes_moved():
    # [B, T, H, d] where [B, H, T, d] was expected: heads not moved in front, plus d swapped
    text = message(expect_shape, torch.zeros(2, 5, 8, 4), "B H T d", name="q", H=4, T=5, d=8)
    assert "look out of order; try q.permute(0, 3, 1, 2)" in text
    assert torch.zeros(2, 5, 8, 4).permute(0, 3, 1, 2).shape == (2, 4, 5, 8)


def test_no_transpose_hint_when_sizes_are_not_a_permutation():
    text = message(expect_shape, torch.zeros(2, 5, 4), "B T T", name="scores", T=5)
    assert "transpose" not in text and "permute" not in text


def test_missing_batch_axis():
    text = message(expect_shape, torch.zeros(5, 16), "B T C", name="x", T=5)
    assert text.startswith("x: has 2 dimensions, but pattern 'B T C' needs 3.")
    assert "x.unsqueeze(0)" in text and "batch" in text


def test_missing_axis_in_the_middle_suggests_unsqueeze():
    text = message(expect_shape, torch.zeros(2, 5), "B 1 T", T=5)
    assert "try" not in text.splitlines()[0]
    assert "x.unsqueeze(1)" in text


def test_extra_size_one_axis_suggests_squeeze():
    text = message(expect_shape, torch.zeros(2, 1, 5, 16), "B T C", T=5)
    assert "has 4 dimensions, but pattern 'B T C' needs 3" in text
    assert "x.squeeze(1)" in text


def test_split_axis_suggests_flatten():
    text = message(expect_shape, torch.zeros(2, 5, 4, 8), "B T C", name="out", C=32)
    assert "out.flatten(2, 3)" in text


def test_extra_leading_axes_suggest_ellipsis():
    text = message(expect_shape, torch.zeros(2, 5, 4), "T C", T=5)
    assert "'... T C'" in text


def test_too_few_axes_for_ellipsis_pattern():
    text = message(expect_shape, torch.zeros(3), "... T T")
    assert "has 1 dimension, but pattern '... T T' needs at least 2" in text


def test_messages_stay_short():
    text = message(expect_shape, torch.zeros(2, 4, 5), "B T C", T=5, C=4)
    assert len(text.splitlines()) <= 4


# ----------------------------------------------------------------------------- non-tensors

@pytest.mark.parametrize("value, words", [
    ([[1, 2], [3, 4]], "got a list"),
    (None, "got None"),
    (3.5, "got a float"),
    (torch.Size([2, 3]), "not its .shape"),
])
def test_non_tensor_raises_shape_error(value, words):
    text = message(expect_shape, value, "B T", name="out")
    assert text.startswith("out: expected a tensor to check against 'B T'")
    assert words in text


# ----------------------------------------------------------------------------- Dims

def test_dims_binds_on_first_use_and_checks_later():
    dims = Dims(B=2, T=5)
    assert dims.expect(torch.zeros(2, 5, 8), "B T d_k", name="q") == {"B": 2, "T": 5, "d_k": 8}
    assert dims.expect(torch.zeros(2, 5, 8), "B T d_k", name="k") == {"B": 2, "T": 5, "d_k": 8}
    assert dims["d_k"] == 8 and dims.d_k == 8 and dims.T == 5
    assert dims == {"B": 2, "T": 5, "d_k": 8}
    assert "d_k" in dims and "H" not in dims and len(dims) == 3


def test_dims_conflict_names_the_earlier_tensor():
    dims = Dims(B=2)
    dims.expect(torch.zeros(2, 5, 8), "B T d_k", name="q")
    text = message(dims.expect, torch.zeros(2, 5, 7), "B T d_k", name="k")
    assert text.splitlines()[0] == "k: axis 2 ('d_k') has size 7, but d_k = 8 (bound by `q`, axis 2)."
    assert "shape (2, 5, 7), pattern 'B T d_k', expected (2, 5, 8)" in text


def test_dims_conflict_with_constructor_size():
    dims = Dims(T=5)
    text = message(dims.expect, torch.zeros(2, 6, 8), "B T C", name="x")
    assert "T = 5 (bound by Dims(T=5))" in text


def test_dims_conflict_with_unnamed_earlier_tensor_describes_it():
    dims = Dims()
    dims.expect(torch.zeros(2, 5), "B T")
    text = message(dims.expect, torch.zeros(3, 5), "B T")
    assert "B = 2 (bound by axis 0 of an unnamed tensor of shape (2, 5))" in text


def test_dims_keyword_sizes_bind_and_conflict():
    dims = Dims(T=5)
    dims.expect(torch.zeros(2, 5, 32), "B T (H d)", name="x", H=4)
    assert (dims.H, dims.d) == (4, 8)
    text = message(dims.expect, torch.zeros(2, 6), "B T", T=6)
    assert "the keyword T=6 conflicts with T = 5 (bound by Dims(T=5))" in text


def test_dims_binds_nothing_when_a_check_fails():
    dims = Dims(T=5)
    with pytest.raises(ShapeError):
        dims.expect(torch.zeros(2, 6, 8), "B T C")
    assert dict(dims) == {"T": 5}


def test_dims_unbound_name():
    dims = Dims(B=2)
    with pytest.raises(AttributeError, match="'d_k' is not bound yet"):
        dims.d_k
    with pytest.raises(KeyError, match="'d_k' is not bound yet"):
        dims["d_k"]


def test_dims_as_context_manager_and_repr():
    with Dims(B=2) as dims:
        dims.expect(torch.zeros(2, 5), "B T", name="x")
        with pytest.raises(ShapeError, match=r"T = 5 \(bound by `x`, axis 1\)"):
            dims.expect(torch.zeros(2, 4), "B T", name="y")
    assert repr(dims) == "Dims(B=2, T=5)"


def test_expect_shape_forgets_between_calls():
    expect_shape(torch.zeros(2, 5), "B T")
    assert expect_shape(torch.zeros(3, 7), "B T") == {"B": 3, "T": 7}


def test_sizes_must_be_ints():
    with pytest.raises(TypeError, match="must be an int"):
        Dims(T=5.0)
    with pytest.raises(ValueError, match="must not be negative"):
        expect_shape(torch.zeros(2), "T", T=-1)


def test_docstring_examples_run():
    import doctest

    import tutor.shapes
    from tutor.shapes import annotations, asserts

    attempted = 0
    for module in (tutor.shapes, asserts, annotations):  # the package's docstring, then its two modules'
        result = doctest.testmod(module)
        assert result.failed == 0, module.__name__
        attempted += result.attempted
    assert attempted >= 23


# ----------------------------------------------------------------------------- explain (the checks' voice)

from tutor.shapes import explain  # noqa: E402


def test_explain_names_the_axis_and_a_transpose():
    lines = explain((2, 5, 4, 8), (2, 4, 5, 8), "B H T d_head", var="out")
    assert lines[0] == "expected shape (2, 4, 5, 8), got (2, 5, 4, 8): axis 1 (= -3) ('H') has size 5, expected 4."
    assert lines[1] == "Hint: axes 1 ('H') and 2 ('T') look swapped; try out.transpose(1, 2)."


def test_explain_a_missing_head_axis_merged_into_the_width():
    lines = explain((2, 5, 32), (2, 4, 5, 8), "B H T d_head", var="out")
    assert "3 dimensions, expected 4" in lines[0]
    assert "axis 'H' (size 4) looks merged into axis 'd_head'" in lines[1]
    assert "out.unflatten(2, (4, 8)).transpose(1, 2)" in lines[1]
    assert torch.zeros(2, 5, 32).unflatten(2, (4, 8)).transpose(1, 2).shape == (2, 4, 5, 8)


def test_explain_heads_not_merged_back():
    lines = explain((2, 4, 6, 4), (2, 6, 16), "B T C", var="out")
    assert "axis 1 (size 4) looks split off axis 3 (size 4) and not merged back" in lines[1]
    assert "out.transpose(1, 2).flatten(2, 3)" in lines[1]
    assert torch.zeros(2, 4, 6, 4).transpose(1, 2).flatten(2, 3).shape == (2, 6, 16)


def test_explain_a_missing_batch_axis():
    lines = explain((5, 16), (2, 5, 16), "B T C", output=True)
    assert "the first axis 'B' (size 2) looks missing" in lines[1]
    assert "Keep every leading axis of the input" in lines[1]
    assert "Is this one example" in explain((5, 16), (2, 5, 16), "B T C")[1]  # for your own code


def test_explain_a_missing_size_1_axis_and_an_extra_one():
    assert "add it with x.unsqueeze(1)" in explain((2, 5, 8), (2, 1, 5, 8))[1]
    assert "drop it with x.squeeze(1)" in explain((2, 1, 5, 8), (2, 5, 8))[1]


def test_explain_without_names_numbers_the_axes():
    lines = explain((2, 5, 4, 8), (2, 4, 5, 8))
    assert lines == ["expected shape (2, 4, 5, 8), got (2, 5, 4, 8): axis 1 (= -3) has size 5, expected 4.",
                     "Hint: axes 1 and 2 look swapped; try x.transpose(1, 2)."]
    assert explain((2, 4), (2, 4)) == []

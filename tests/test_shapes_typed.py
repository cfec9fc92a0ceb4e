"""tutor.shapes.typed: jaxtyping annotations checked at run time (by jaxtyping with beartype),
with the messages of tutor.shapes."""

import pytest
import torch
from jaxtyping import Float, Int
from torch import Tensor

from tutor.shapes import ShapeError, typed


@typed
def scores(q: Float[Tensor, "B H T d_head"], k: Float[Tensor, "B H S d_head"]) -> Float[Tensor, "B H T S"]:
    return q @ k.transpose(-2, -1)


def message(fn, *args, error=ShapeError):
    with pytest.raises(error) as info:
        fn(*args)
    return str(info.value)


def test_right_shapes_pass_and_the_result_is_returned():
    out = scores(torch.ones(2, 4, 5, 8), torch.ones(2, 4, 6, 8))
    assert out.shape == (2, 4, 5, 6)
    assert out[0, 0, 0, 0].item() == 8.0
    assert scores.__name__ == "scores"  # functools.wraps: the learner's function keeps its name


@pytest.mark.parametrize("k_shape, axis, words", [
    ((3, 4, 6, 8), "axis 0 ('B') has size 3", "B = 2 (bound by `q`, axis 0)"),
    ((2, 2, 6, 8), "axis 1 ('H') has size 2", "H = 4 (bound by `q`, axis 1)"),
    ((2, 4, 6, 16), "axis 3 ('d_head') has size 16", "d_head = 8 (bound by `q`, axis 3)"),
])
def test_each_wrong_axis_is_named(k_shape, axis, words):
    text = message(scores, torch.ones(2, 4, 5, 8), torch.ones(*k_shape))
    assert text.startswith(f"k: {axis}")
    assert words in text
    assert "annotation of `k` in scores: Float[Tensor, 'B H S d_head']" in text


def test_a_swapped_pair_gets_the_transpose_hint():
    text = message(scores, torch.ones(2, 4, 5, 8), torch.ones(2, 6, 4, 8))
    assert "k: axis 1 ('H') has size 6, but H = 4" in text
    assert "Hint: axes 1 ('H') and 2 ('S') look swapped; try k.transpose(1, 2)." in text


def test_a_missing_axis_is_named():
    text = message(scores, torch.ones(4, 5, 8), torch.ones(2, 4, 6, 8))
    assert "q: has 3 dimensions, but pattern 'B H T d_head' needs 4." in text
    assert "looks missing" in text


def test_the_return_value_is_checked():
    @typed
    def wrong(x: Float[Tensor, "B T C"]) -> Float[Tensor, "B T C"]:
        return x.transpose(1, 2)

    text = message(wrong, torch.ones(2, 3, 4))
    assert text.startswith("the return value: axis 1 ('T') has size 4, but T = 3 (bound by `x`, axis 1).")
    assert "look swapped" in text
    assert "return annotation of test_the_return_value_is_checked.<locals>.wrong" in text


def test_a_forward_method_with_variadic_batch_axes():
    class Head(torch.nn.Module):
        @typed
        def forward(self, x: Float[Tensor, "*batch T C"], positions: Int[Tensor, " T"]) -> Float[Tensor, "*batch T C"]:
            return x

    head = Head()
    assert head(torch.ones(2, 3, 5, 4), torch.arange(5)).shape == (2, 3, 5, 4)
    text = message(head, torch.ones(2, 5, 4), torch.arange(6))
    assert text.startswith("positions: axis 0 ('T') has size 6, but T = 5 (bound by `x`, axis 1).")


def test_a_wrong_dtype_is_named():
    text = message(scores, torch.ones(2, 4, 5, 8, dtype=torch.long), torch.ones(2, 4, 6, 8), error=TypeError)
    assert "q: has dtype torch.int64, but its annotation asks for a Float tensor. Convert it with .float()." in text


def test_what_only_jaxtyping_can_say_keeps_its_message():
    from jaxtyping import TypeCheckError

    @typed
    def grow(x: Float[Tensor, "T"]) -> Float[Tensor, "T+1"]:  # noqa: F821 - jaxtyping's axis names, not Python names
        return x

    assert grow.__wrapped__ is not None
    with pytest.raises(TypeCheckError):
        grow(torch.ones(3))


def test_the_result_is_not_kept_alive_after_the_call():
    # A typed forward must not hold its last output (and the autograd graph behind it) until the
    # next call.
    import gc
    import weakref

    out = scores(torch.ones(2, 4, 5, 8), torch.ones(2, 4, 6, 8))
    ref = weakref.ref(out)
    del out
    gc.collect()
    assert ref() is None


@typed
def depth(x: Float[Tensor, "B T"], n: int) -> Float[Tensor, "B T"]:
    """Calls itself n times; the outermost call (n == 2) returns its input transposed."""
    inner = x if n == 0 else depth(x, n - 1)
    return inner.T if n == 2 else inner


def test_a_typed_function_may_call_itself():
    assert depth(torch.ones(2, 3), 1).shape == (2, 3)
    text = message(depth, torch.ones(2, 3), 2)
    assert text.startswith("the return value: axis 0 ('B') has size 3, but B = 2")  # the outer call's result
    assert "shape (3, 2)" in text

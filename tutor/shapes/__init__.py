"""Shape-checking asserts for your own code.

State the shape you expect after each step, in the notation of einops, and get a clear
message the moment a tensor is not what you think it is:

    >>> import torch
    >>> from tutor.shapes import Dims, ShapeError, expect_shape
    >>> x = torch.zeros(2, 5, 16)
    >>> expect_shape(x, "B T C", T=5)          # returns the sizes it found
    {'B': 2, 'T': 5, 'C': 16}

A pattern is a list of axes separated by spaces:

    B T C        named axes: any size, but one name means one size ("T T" must be square)
    B 5 C        a literal size
    B _ C        any size, not remembered
    ... T C      "..." stands for any number of axes (none too), at most once per pattern
    B T (H d)    a product: the last axis has size H*d (one of H, d may be unknown)

Sizes given as keywords (``T=5``) must match. A name seen for the first time is bound to the
size found. ``expect_shape`` forgets its bindings after the call and returns them. To check
several tensors against the same sizes, use a ``Dims``, which remembers every size it sees:

    >>> q, k = torch.zeros(2, 5, 8), torch.zeros(2, 6, 8)
    >>> dims = Dims(B=2)
    >>> dims.expect(q, "B T d_k", name="q")    # binds T and d_k from q
    {'B': 2, 'T': 5, 'd_k': 8}
    >>> dims.d_k, dims["d_k"]
    (8, 8)
    >>> dims.expect(k, "B T d_k", name="k")    # k must agree with q
    Traceback (most recent call last):
    tutor.shapes.ShapeError: k: axis 1 ('T') has size 6, but T = 5 (bound by `q`, axis 1).
      shape (2, 6, 8), pattern 'B T d_k', expected (2, 5, 8).

``with Dims(B=2) as dims:`` does the same for a block of code. A mismatch raises
``ShapeError`` (an ``AssertionError``) naming the tensor, the axis, what was expected and,
when it can tell, the likely fix:

    >>> expect_shape(torch.zeros(2, 4, 5), "B T C", name="x", T=5, C=4)
    Traceback (most recent call last):
    tutor.shapes.ShapeError: x: axis 1 ('T') has size 4, but T = 5 (bound by the keyword T=5).
      shape (2, 4, 5), pattern 'B T C', expected (2, 5, 4).
      Hint: axes 1 ('T') and 2 ('C') look swapped; try x.transpose(1, 2).

Works with anything that has a ``.shape`` (torch tensors, NumPy arrays). The checks are plain
Python on the shape, so they cost next to nothing inside a model's ``forward``.

The code: ``asserts`` (the patterns, ``expect_shape``, ``Dims``, ``explain``) and ``annotations``
(``typed``: jaxtyping annotations checked with the same messages).
"""

from tutor.shapes.annotations import typed
from tutor.shapes.asserts import Dims, ShapeError, expect_shape, explain

__all__ = ["ShapeError", "expect_shape", "Dims", "explain", "typed"]

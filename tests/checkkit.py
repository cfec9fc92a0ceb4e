"""Helpers for testing checks: a check must accept the reference, report a blank stub as
"not done yet" without raising, and reject wrong implementations naming the mistake."""

import re

import torch.nn as nn


def passes(check, obj):
    result = check(obj)
    assert result.passed is True, f"expected a pass, got:\n{result}"
    return result


def not_done(check, obj):
    result = check(obj)  # must not raise
    assert result.passed is False
    assert result.status == "not done", f"expected 'not done yet', got:\n{result}"
    assert "not done yet" in str(result)
    return result


def rejects(check, obj, *needles):
    """The check fails and its message contains every needle (case-insensitive).

    At least one needle must be found outside the "(case: ...)" label, so that the test proves
    the message names the mistake, not only which input showed it.
    """
    result = check(obj)
    assert result.passed is False, f"a wrong implementation passed:\n{result}"
    assert result.status == "failed", f"expected a failure, got:\n{result}"
    text = str(result).lower()
    for needle in needles:
        assert needle.lower() in text, f"{needle!r} is not in the message:\n{result}"
    without_label = re.sub(r"\(case: .*?\)$", "", str(result), flags=re.M).lower()
    assert any(n.lower() in without_label for n in needles), (
        f"every needle {needles} is only in the case label; name the mistake:\n{result}")
    return result


def stub(*args, **kwargs):
    """What the build puts in place of a solution."""
    raise NotImplementedError()


class StubInit(nn.Module):
    """What a learner notebook holds for a class exercise before it is done: ``__init__`` not written."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        raise NotImplementedError()

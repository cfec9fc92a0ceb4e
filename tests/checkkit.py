"""Helpers for testing checks: a check must accept the reference, report a blank stub as
"not done yet" without raising, and reject wrong implementations naming the mistake."""


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
    """The check fails and its message contains every needle (case-insensitive)."""
    result = check(obj)
    assert result.passed is False, f"a wrong implementation passed:\n{result}"
    assert result.status == "failed", f"expected a failure, got:\n{result}"
    text = str(result).lower()
    for needle in needles:
        assert needle.lower() in text, f"{needle!r} is not in the message:\n{result}"
    return result


def stub(*args, **kwargs):
    """What the build puts in place of a solution."""
    raise NotImplementedError()

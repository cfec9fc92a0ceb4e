"""The checks' random inputs start from a salt: 0 in a notebook (the same inputs every run), a fresh one for every
exercise the grader checks. A table of the inputs a check used at home, with the model answer's outputs, passed
every graded check until stop 48 (a hostile student's, for notebook 14); with the salt it answers nothing."""

import torch

from tutor import checks
from tutor import reference as ref
from tutor.checks import harness


def _key(args):
    return tuple((str(a.dtype), tuple(a.shape), a.double().numpy().tobytes()) if isinstance(a, torch.Tensor)
                 else repr(a) for a in args)


def _table_and_replay():
    table = {}

    def record(q, k, v, mask=None):
        out = ref.scaled_dot_product_attention(q, k, v, mask)
        if q.device.type != "meta":
            table[_key((q, k, v))] = out.clone()
        return out

    def replay(q, k, v, mask=None):
        if q.device.type == "meta":
            return torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device="meta")
        return table[_key((q, k, v))].clone()  # a KeyError for any input it has not seen

    return record, replay


def test_a_table_recorded_at_home_passes_at_home_and_fails_once_salted():
    record, replay = _table_and_replay()
    try:
        harness.set_salt(0)
        assert checks.scaled_dot_product_attention(record).status == "passed"
        assert checks.scaled_dot_product_attention(replay).status == "passed"  # the table does work at home
        harness.set_salt(12345)
        result = checks.scaled_dot_product_attention(replay)
        assert result.status == "failed", result
        assert checks.scaled_dot_product_attention(ref.scaled_dot_product_attention).status == "passed"
    finally:
        harness.set_salt(0)


def test_without_a_salt_the_inputs_are_the_same_every_run():
    seen = []

    def spy(q, k, v, mask=None):
        seen.append(q.detach().clone())
        return ref.scaled_dot_product_attention(q, k, v, mask)

    harness.set_salt(0)
    checks.scaled_dot_product_attention(spy)
    first, seen[:] = list(seen), []
    checks.scaled_dot_product_attention(spy)
    assert len(first) == len(seen) and all(torch.equal(a, b) for a, b in zip(first, seen) if a.device.type != "meta")
    assert harness.salted(5) == 5



def test_an_input_changed_in_place_while_it_needs_its_gradient_is_named():
    """Which case meets a forward that clamps its input in place depends on the inputs: with this salt no value is
    clipped until the backward case, where torch refuses the in-place change. That message names the cause too."""
    from test_checks_13 import make_lora

    try:
        harness.set_salt(987654)
        result = checks.LoRALinear(make_lora(in_place=True))
    finally:
        harness.set_salt(0)
    assert result.status == "failed", result
    assert "in-place operation" in str(result) and "changed a tensor your code was given" in str(result), result


def test_the_schedule_check_draws_one_setting_of_its_own():
    """A hostile student's table of lr_schedule's answers for the check's settings (they were all fixed)."""
    table = {}

    def record(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
        table[(step, max_lr, warmup_steps, total_steps, min_lr)] = value = ref.lr_schedule(
            step, max_lr, warmup_steps, total_steps, min_lr)
        return value

    def replay(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
        return table[(step, max_lr, warmup_steps, total_steps, min_lr)]

    try:
        harness.set_salt(0)
        assert checks.lr_schedule(record).status == "passed"
        assert checks.lr_schedule(replay).status == "passed"
        harness.set_salt(4242)
        assert checks.lr_schedule(replay).status == "failed"
    finally:
        harness.set_salt(0)


def test_a_helper_or_torch_changed_by_the_notebook_is_seen():
    """The kernel's memory of the course's helpers covers every class attribute (a property added to
    PatternCounter) and the torch functions they rely on (torch.is_grad_enabled)."""
    from tutor.checks import beside
    from tutor.grading import serve

    serve.keep_pristine()
    assert serve._tampered("tutor.checks.beside") is None and serve._tampered("torch") is None
    beside.PatternCounter.frozen = property(lambda self: 1)
    try:
        assert serve._tampered("tutor.checks.beside") == "PatternCounter"
    finally:
        del beside.PatternCounter.frozen
    original = torch.is_grad_enabled
    torch.is_grad_enabled = lambda: False
    try:
        assert serve._tampered("torch") == "is_grad_enabled"
    finally:
        torch.is_grad_enabled = original
    assert serve._tampered("tutor.checks.beside") is None and serve._tampered("torch") is None

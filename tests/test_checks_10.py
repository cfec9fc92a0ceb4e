"""Checks of notebook 10 (get_batch, flops_per_token, average_gradients): they pass the reference and
learner-style versions, report a stub as "not done yet", and reject realistic wrong implementations,
naming the mistake. average_gradients runs in real 2- and 3-process Gloo groups."""

import random

import pytest
import torch
import torch.distributed as dist
from checkkit import not_done, passes, rejects, stub

from tutor import checks
from tutor import reference as ref
from tutor.checks import nb10_scaling_up

# ============================================================================================
# get_batch


def learner_get_batch(data, block_size, batch_size, generator=None):
    """Correct, with index arithmetic instead of a list of slices."""
    ix = torch.randint(0, len(data) - block_size, (batch_size,), generator=generator)
    steps = torch.arange(block_size)
    return data[ix[:, None] + steps], data[ix[:, None] + steps + 1]


def test_get_batch_passes():
    passes(checks.get_batch, ref.get_batch)
    passes(checks.get_batch, learner_get_batch)


def test_get_batch_stub_is_not_done():
    not_done(checks.get_batch, stub)


def test_get_batch_rejects_offsets_past_the_last_window():
    def wrong(data, block_size, batch_size, generator=None):
        ix = torch.randint(len(data) - block_size + 1, (batch_size,), generator=generator)  # one too many
        x = torch.stack([data[i:i + block_size] for i in ix])
        y = torch.stack([torch.cat([data[i + 1:i + 1 + block_size], data[:1]])[:block_size] for i in ix])
        return x, y

    rejects(checks.get_batch, wrong, "past the end", "N - block_size - 1")


@pytest.mark.parametrize("form", ["stack", "indexing"])
def test_get_batch_names_a_window_cut_short_at_the_end(form):
    def wrong(data, block_size, batch_size, generator=None):
        ix = torch.randint(len(data) - block_size + 1, (batch_size,), generator=generator)  # one too many
        if form == "stack":
            return (torch.stack([data[i:i + block_size] for i in ix]),
                    torch.stack([data[i + 1:i + 1 + block_size] for i in ix]))
        offsets = ix[:, None] + torch.arange(block_size)
        return data[offsets], data[offsets + 1]

    rejects(checks.get_batch, wrong, "past the end of data", "N - block_size - 1")


def test_get_batch_rejects_never_drawing_the_last_window():
    def wrong(data, block_size, batch_size, generator=None):
        ix = torch.randint(len(data) - block_size - 1, (batch_size,), generator=generator)
        return (torch.stack([data[i:i + block_size] for i in ix]),
                torch.stack([data[i + 1:i + block_size + 1] for i in ix]))

    rejects(checks.get_batch, wrong, "last window", "upper bound")


def test_get_batch_rejects_y_not_shifted():
    def wrong(data, block_size, batch_size, generator=None):
        ix = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
        x = torch.stack([data[i:i + block_size] for i in ix])
        return x, x.clone()

    rejects(checks.get_batch, wrong, "y is x itself", "next")


def test_get_batch_rejects_windows_one_too_long():
    def wrong(data, block_size, batch_size, generator=None):
        ix = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
        return (torch.stack([data[i:i + block_size + 1] for i in ix]),
                torch.stack([data[i + 1:i + block_size + 2] for i in ix]))

    rejects(checks.get_batch, wrong, "windows are", "slices exclude the end")


def test_get_batch_rejects_ignoring_the_generator():
    def wrong(data, block_size, batch_size, generator=None):
        ix = [random.randint(0, len(data) - block_size - 1) for _ in range(batch_size)]
        return (torch.stack([data[i:i + block_size] for i in ix]),
                torch.stack([data[i + 1:i + block_size + 1] for i in ix]))

    rejects(checks.get_batch, wrong, "same seed", "generator=generator")


_MODULE_GENERATOR = torch.Generator()


@pytest.mark.parametrize("fresh", ["or", "seeded", "is_none"])
def test_get_batch_rejects_a_fresh_generator_when_none_is_given(fresh):
    """generator=None must mean torch's global generator, not a new one made at every call."""
    def wrong(data, block_size, batch_size, generator=None):
        if fresh == "or":
            generator = generator or torch.Generator()
        elif fresh == "seeded" and generator is None:
            generator = torch.Generator().manual_seed(0)
        elif generator is None:
            generator = torch.Generator()
            generator.manual_seed(1234)
        return ref.get_batch(data, block_size, batch_size, generator)

    rejects(checks.get_batch, wrong, "generator=None, two calls in a row gave the same batch",
            "pass it on", "torch.Generator()")


def test_get_batch_rejects_a_generator_kept_between_calls_when_none_is_given():
    def wrong(data, block_size, batch_size, generator=None):
        return ref.get_batch(data, block_size, batch_size, generator if generator is not None else _MODULE_GENERATOR)

    rejects(checks.get_batch, wrong, "torch.manual_seed(5) twice gave two different batches", "global generator")


def test_get_batch_rejects_a_seed_of_its_own_when_none_is_given():
    def wrong(data, block_size, batch_size, generator=None):
        if generator is None:  # a new seed every call, but not from torch's global generator
            generator = torch.Generator().manual_seed(random.randrange(2**31))
        return ref.get_batch(data, block_size, batch_size, generator)

    rejects(checks.get_batch, wrong, "torch.manual_seed(5) twice gave two different batches")


def test_get_batch_leaves_the_global_generator_of_the_learner_alone():
    torch.manual_seed(42)
    expected = torch.rand(3)
    torch.manual_seed(42)
    passes(checks.get_batch, ref.get_batch)
    assert torch.equal(torch.rand(3), expected)


def test_get_batch_rejects_one_offset_for_the_whole_batch():
    def wrong(data, block_size, batch_size, generator=None):
        i = int(torch.randint(len(data) - block_size, (1,), generator=generator))
        return data[i:i + block_size].repeat(batch_size, 1), data[i + 1:i + block_size + 1].repeat(batch_size, 1)

    rejects(checks.get_batch, wrong, "same offset", "batch_size offsets")


def test_get_batch_rejects_y_shifted_the_wrong_way():
    def wrong(data, block_size, batch_size, generator=None):
        ix = torch.randint(1, len(data) - block_size, (batch_size,), generator=generator)
        return (torch.stack([data[i:i + block_size] for i in ix]),
                torch.stack([data[i - 1:i - 1 + block_size] for i in ix]))

    rejects(checks.get_batch, wrong, "wrong way")


def test_get_batch_rejects_float_batches():
    def wrong(data, block_size, batch_size, generator=None):
        x, y = ref.get_batch(data, block_size, batch_size, generator)
        return x.float(), y.float()

    rejects(checks.get_batch, wrong, "torch.long")


# ============================================================================================
# flops_per_token


def test_flops_per_token_passes():
    passes(checks.flops_per_token, ref.flops_per_token)
    passes(checks.flops_per_token, lambda n_params, n_layers, d_model, block_size:
           2 * 3 * n_params + 12 * n_layers * d_model * block_size)


def test_flops_per_token_stub_is_not_done():
    not_done(checks.flops_per_token, stub)


def test_flops_per_token_rejects_6n_alone():
    rejects(checks.flops_per_token, lambda n_params, n_layers, d_model, block_size: 6 * n_params,
            "only the 6N term")


def test_flops_per_token_rejects_forward_only():
    rejects(checks.flops_per_token,
            lambda n_params, n_layers, d_model, block_size: 2 * n_params + 12 * n_layers * d_model * block_size,
            "forward pass only")


def test_flops_per_token_rejects_quadratic_attention_term():
    rejects(checks.flops_per_token,
            lambda n_params, n_layers, d_model, block_size: 6 * n_params + 12 * n_layers * d_model * block_size ** 2,
            "not T²")


def test_flops_per_token_rejects_per_sequence():
    rejects(checks.flops_per_token,
            lambda n_params, n_layers, d_model, block_size: (6 * n_params + 12 * n_layers * d_model * block_size)
            * block_size, "per sequence")


def test_flops_per_token_rejects_a_float():
    rejects(checks.flops_per_token,
            lambda n_params, n_layers, d_model, block_size: 6.0 * n_params + 12 * n_layers * d_model * block_size,
            "should return an int")


def test_flops_per_token_rejects_missing_layers():
    rejects(checks.flops_per_token,
            lambda n_params, n_layers, d_model, block_size: 6 * n_params + 12 * d_model * block_size,
            "missing n_layers")


@pytest.mark.parametrize("wrong, needle", [
    (lambda N, L, d, T: 6 * N + 12 * L * T, "missing d_model"),
    (lambda N, L, d, T: 6 * N + 12 * d * T, "missing n_layers"),
    (lambda N, L, d, T: 6 * N + 12 * L * d, "missing block_size"),
    (lambda N, L, d, T: 6 * N + 12 * L * d * d, "uses d_model twice"),
    (lambda N, L, d, T: 6 * N + L * d * T, "needs its factor 12"),
    (lambda N, L, d, T: 6 * N + 6 * L * d * T, "not 6"),
    (lambda N, L, d, T: 6 * N + 12 * L * d * T * T, "not T²"),
    (lambda N, L, d, T: 2 * N + 4 * L * d * T, "multiply by 3"),
    (lambda N, L, d, T: 2 * N, "attention term is missing: 6N + 12 L d T"),
    (lambda N, L, d, T: 6 * N, "only the 6N term"),
], ids=["no d_model", "no n_layers", "no block_size", "d_model twice", "no 12", "6 not 12", "T squared",
        "forward only", "2N", "6N"])
def test_flops_per_token_names_each_wrong_term(wrong, needle):
    rejects(checks.flops_per_token, lambda n_params, n_layers, d_model, block_size:
            wrong(n_params, n_layers, d_model, block_size), needle)


def test_flops_per_token_cases_tell_every_mistake_apart():
    """The four arguments differ in every case, so no two known mistakes (or a mistake and the right answer)
    give the same number: each is named for what it is."""
    for label, N, L, d, T in nb10_scaling_up.flops_cases():
        assert len({N, L, d, T}) == 4 and 1 not in (N, L, d, T), label
        values = [value for value, _ in nb10_scaling_up._flops_mistakes(N, L, d, T)]
        values.append(ref.flops_per_token(N, L, d, T))
        assert len(set(values)) == len(values), label


def test_flops_per_token_label_is_the_model_notebook_10_trains():
    from tutor.train import long_run
    from tutor.train.models import make_model

    config = long_run.preset("cpu", "cpu")
    label, N, L, d, T = nb10_scaling_up.flops_cases()[0]
    assert (N, L, d, T) == (long_run.n_params(make_model(config)), config.n_layers, config.d_model, config.block_size)
    assert f"N={N:,}, {L} layers, d_model {d}, block_size {T}" in label


# ============================================================================================
# average_gradients (real process groups: each test starts 5 processes, forked on Linux)

needs_gloo = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()), reason="no Gloo")


def learner_average_gradients(model):
    """Correct, as a learner writes it."""
    world = dist.get_world_size()
    for param in model.parameters():
        if param.grad is None:
            continue
        dist.all_reduce(param.grad)  # SUM is the default
        param.grad.div_(world)


@needs_gloo
def test_average_gradients_passes():
    passes(checks.average_gradients, ref.average_gradients)
    passes(checks.average_gradients, learner_average_gradients)


@needs_gloo
def test_average_gradients_accepts_reduce_op_avg_or_names_gloo():
    result = checks.average_gradients(avg_op)
    assert result.passed or "ReduceOp.AVG" in str(result)


@needs_gloo
def test_average_gradients_passes_with_spawn_and_source(monkeypatch):
    """macOS and Windows start processes with spawn: the function travels as source code."""
    monkeypatch.setenv("TUTOR_DIST_START", "spawn")
    result = passes(checks.average_gradients, learner_average_gradients)
    assert "spawn" in str(result)


@needs_gloo
def test_average_gradients_spawn_without_source_says_so(monkeypatch):
    monkeypatch.setenv("TUTOR_DIST_START", "spawn")
    result = checks.average_gradients(lambda model: None)
    assert result.passed is False and "could not start a process group" in str(result)
    assert "source" in str(result)


@needs_gloo
def test_average_gradients_stub_is_not_done():
    not_done(checks.average_gradients, stub)


def test_average_gradients_without_distributed_says_so(monkeypatch):
    monkeypatch.setattr(dist, "is_gloo_available", lambda: False)
    result = checks.average_gradients(ref.average_gradients)
    assert result.passed is False and result.status == "failed"
    assert "could not start a process group" in str(result) and "Gloo" in str(result)


def sum_only(model):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)


def divide_twice(model):
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            p.grad /= world
            dist.all_reduce(p.grad)
            p.grad /= world


def average_weights(model):
    world = dist.get_world_size()
    for p in model.parameters():
        dist.all_reduce(p.data)
        p.data /= world


def reduce_a_copy(model):
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            g = p.grad.clone()
            dist.all_reduce(g)
            g /= world


def divide_by_two(model):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= 2


def no_none_check(model):
    world = dist.get_world_size()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world


def reduce_to_rank0(model):
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.reduce(p.grad, dst=0)
            p.grad /= world


def avg_op(model):
    """ReduceOp.AVG gives the mean in one call (Gloo has it in recent PyTorch): accepted."""
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)


@needs_gloo
@pytest.mark.parametrize("wrong, needles", [
    (sum_only, ("not divided by the number of processes",)),
    (divide_twice, ("divided by the number of processes twice",)),
    (average_weights, ("not the parameters",)),
    (reduce_a_copy, ("in place",)),
    (divide_by_two, ("you divide by 2",)),
    (no_none_check, ("no gradient",)),
    (reduce_to_rank0, ("all_reduce",)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_average_gradients_rejects(wrong, needles):
    rejects(checks.average_gradients, wrong, *needles)


def reduce_on_rank0_only(model):
    if dist.get_rank() == 0:
        ref.average_gradients(model)


def reduce_twice_on_rank0(model):
    world = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            if dist.get_rank() == 0:
                dist.all_reduce(p.grad)  # one call too many: the next parameter's call on rank 1 meets it
            p.grad /= world


@needs_gloo
def test_average_gradients_on_rank_0_only_names_the_mismatched_calls():
    result = rejects(checks.average_gradients, reduce_on_rank0_only, "did not make the same collective calls",
                     "every process must call all_reduce, the same number of times, in the same order")
    assert "rank 1: none" in str(result)


@needs_gloo
def test_average_gradients_reducing_twice_on_one_rank_names_the_mismatched_calls(capfd):
    result = rejects(checks.average_gradients, reduce_twice_on_rank0, "collective calls",
                     "the same number of times, in the same order")
    assert "did not finish" not in str(result)
    err = capfd.readouterr().err
    assert "terminate called" not in err and "EnforceNotMet" not in err  # no stray C++ report in the notebook


def test_crash_reason_and_gloo_reason_in_words():
    from tutor.distributed import _crash_reason, gloo_reason

    stderr = ("terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
              "  what():  [enforce fail at /__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] "
              "op.preamble.length <= op.nbytes. 24 vs 20. Received data size doesn't match expected size.\n")
    assert _crash_reason(stderr, -6) == ("gloo::EnforceNotMet: op.preamble.length <= op.nbytes. 24 vs 20. "
                                         "Received data size doesn't match expected size.")
    assert _crash_reason("", -9) == "killed by SIGKILL"
    assert gloo_reason("RuntimeError: [/x/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
                       "[127.0.0.1]:39595. This is typically caused by a remote worker crashing. GLHF!") == (
        "RuntimeError: Connection closed by peer [127.0.0.1]:39595.")


def test_start_method_override(monkeypatch):
    monkeypatch.setenv("TUTOR_DIST_START", "spawn")
    assert nb10_scaling_up.start_method() == "spawn"
    monkeypatch.setenv("TUTOR_DIST_START", "fork")
    assert nb10_scaling_up.start_method() == "fork"

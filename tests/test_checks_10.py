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


def test_start_method_override(monkeypatch):
    monkeypatch.setenv("TUTOR_DIST_START", "spawn")
    assert nb10_scaling_up.start_method() == "spawn"
    monkeypatch.setenv("TUTOR_DIST_START", "fork")
    assert nb10_scaling_up.start_method() == "fork"

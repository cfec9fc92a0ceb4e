"""Checks of notebook 08 (lm_loss, lr_schedule, train_step, evaluate): they pass the reference and
learner-style versions, report a stub as "not done yet", and reject realistic wrong
implementations, naming the mistake."""

import math

import pytest
import torch
import torch.nn.functional as F
from checkkit import not_done, passes, rejects, stub

from tutor import checks
from tutor import reference as ref

# ============================================================================================
# lm_loss


def learner_lm_loss(logits, targets, ignore_index):
    """Correct, written as in the notebook's hint: flatten, then F.cross_entropy."""
    B, T, V = logits.shape
    return F.cross_entropy(logits.view(B * T, V), targets.view(B * T), ignore_index=ignore_index)


def learner_lm_loss_by_hand(logits, targets, ignore_index):
    """Correct, by hand: log_softmax, pick the target's log-probability, average where real."""
    logp = F.log_softmax(logits, dim=-1)
    real = targets != ignore_index
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * real).sum() / real.sum()


def test_lm_loss_passes():
    passes(checks.lm_loss, ref.lm_loss)
    passes(checks.lm_loss, learner_lm_loss)
    passes(checks.lm_loss, learner_lm_loss_by_hand)
    passes(checks.lm_loss, lambda logits, targets, ignore_index: F.cross_entropy(
        logits.transpose(1, 2), targets, ignore_index=ignore_index))


def test_lm_loss_stub_is_not_done():
    not_done(checks.lm_loss, stub)


def test_lm_loss_rejects_padding_that_counts():
    def wrong(logits, targets, ignore_index):
        V = logits.shape[-1]
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))

    rejects(checks.lm_loss, wrong, "padding targets are counted", "ignore_index")


def test_lm_loss_rejects_double_softmax():
    def wrong(logits, targets, ignore_index):
        probs = torch.softmax(logits, dim=-1)
        return F.cross_entropy(probs.reshape(-1, probs.shape[-1]), targets.reshape(-1), ignore_index=ignore_index)

    rejects(checks.lm_loss, wrong, "softmax is applied twice")


def test_lm_loss_rejects_a_loss_per_token():
    def wrong(logits, targets, ignore_index):
        V = logits.shape[-1]
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=ignore_index, reduction="none")

    rejects(checks.lm_loss, wrong, "wrong shape", "a single number", "reduction='mean'")


def test_lm_loss_rejects_reduction_sum():
    def wrong(logits, targets, ignore_index):
        V = logits.shape[-1]
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=ignore_index, reduction="sum")

    rejects(checks.lm_loss, wrong, "reduction='sum'")


def test_lm_loss_rejects_logits_flattened_in_another_order():
    def wrong(logits, targets, ignore_index):
        V = logits.shape[-1]
        flat = logits.transpose(0, 1).reshape(-1, V)  # [T, B, V] order
        return F.cross_entropy(flat, targets.reshape(-1), ignore_index=ignore_index)

    rejects(checks.lm_loss, wrong, "flattened in different orders")


def test_lm_loss_rejects_targets_flattened_in_another_order():
    def wrong(logits, targets, ignore_index):
        V = logits.shape[-1]
        return F.cross_entropy(logits.reshape(-1, V), targets.t().reshape(-1), ignore_index=ignore_index)

    rejects(checks.lm_loss, wrong, "flattened in different orders")


def test_lm_loss_rejects_cross_entropy_on_unflattened_logits():
    def wrong(logits, targets, ignore_index):
        return F.cross_entropy(logits, targets, ignore_index=ignore_index)

    rejects(checks.lm_loss, wrong, "classes on dim 1")


def test_lm_loss_rejects_mean_of_sequence_means():
    def wrong(logits, targets, ignore_index):
        losses = []
        for b in range(logits.shape[0]):
            keep = targets[b] != ignore_index
            if keep.any():
                losses.append(F.cross_entropy(logits[b][keep], targets[b][keep]))
        return torch.stack(losses).mean()

    rejects(checks.lm_loss, wrong, "mean of means")


def test_lm_loss_rejects_dividing_by_every_position():
    def wrong(logits, targets, ignore_index):
        V = logits.shape[-1]
        per_token = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=ignore_index,
                                    reduction="none")
        return per_token.mean()  # the ignored positions are 0 but still counted

    rejects(checks.lm_loss, wrong, "divide by the number of real targets")


def test_lm_loss_rejects_unstable_log_of_softmax():
    def wrong(logits, targets, ignore_index):
        probs = logits.exp() / logits.exp().sum(-1, keepdim=True)
        real = targets != ignore_index
        picked = probs.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        return -(picked.log() * real).sum() / real.sum()

    rejects(checks.lm_loss, wrong, "large logits", "log_softmax")


def test_lm_loss_rejects_a_python_float():
    def wrong(logits, targets, ignore_index):
        return learner_lm_loss(logits, targets, ignore_index).item()

    rejects(checks.lm_loss, wrong, "0-d tensor", "backward")


def test_lm_loss_rejects_a_fixed_ignore_index():
    def wrong(logits, targets, ignore_index):
        V = logits.shape[-1]
        return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=27)

    rejects(checks.lm_loss, wrong, "fixed index 27", "instead of the ignore_index argument")


def test_lm_loss_rejects_a_detached_loss():
    def wrong(logits, targets, ignore_index):
        return learner_lm_loss(logits.detach(), targets, ignore_index)

    rejects(checks.lm_loss, wrong, "requires_grad")


# ============================================================================================
# lr_schedule


def learner_lr_schedule(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
    if step < warmup_steps:
        return max_lr * step / warmup_steps
    if step > total_steps:
        return min_lr
    ratio = (step - warmup_steps) / (total_steps - warmup_steps)
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return min_lr + coeff * (max_lr - min_lr)


def test_lr_schedule_passes():
    passes(checks.lr_schedule, ref.lr_schedule)
    passes(checks.lr_schedule, learner_lr_schedule)


def test_lr_schedule_stub_is_not_done():
    not_done(checks.lr_schedule, stub)


def test_lr_schedule_rejects_warmup_off_by_one():
    def wrong(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
        if step < warmup_steps:
            return max_lr * (step + 1) / warmup_steps
        return learner_lr_schedule(step, max_lr, warmup_steps, total_steps, min_lr)

    rejects(checks.lr_schedule, wrong, "off by one")


def test_lr_schedule_rejects_no_decay():
    def wrong(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
        if step < warmup_steps:
            return max_lr * step / warmup_steps
        return max_lr

    rejects(checks.lr_schedule, wrong, "does not decay")


def test_lr_schedule_rejects_cosine_to_zero():
    def wrong(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
        if step < warmup_steps:
            return max_lr * step / warmup_steps
        if step >= total_steps:
            return min_lr
        progress = (step - warmup_steps) / (total_steps - warmup_steps)
        return max_lr * 0.5 * (1 + math.cos(math.pi * progress))

    rejects(checks.lr_schedule, wrong, "ends at 0 instead of min_lr")


def test_lr_schedule_rejects_cosine_that_never_reaches_min_lr():
    def wrong(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
        if step < warmup_steps:
            return max_lr * step / warmup_steps
        if step >= total_steps:
            return min_lr
        progress = (step - warmup_steps) / total_steps
        return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))

    rejects(checks.lr_schedule, wrong, "never reaches min_lr")


def test_lr_schedule_rejects_a_cosine_counted_from_step_0():
    def wrong(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
        if step < warmup_steps:
            return max_lr * step / warmup_steps
        if step >= total_steps:
            return min_lr
        return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * step / total_steps))

    rejects(checks.lr_schedule, wrong, "starts at step 0 instead of at the end of the warm-up")


def test_lr_schedule_rejects_no_warmup():
    def wrong(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
        if step >= total_steps:
            return min_lr
        return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * step / total_steps))

    rejects(checks.lr_schedule, wrong, "no warm-up")


def test_lr_schedule_rejects_division_by_zero_without_warmup():
    def wrong(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
        warm = max_lr * step / warmup_steps
        if step < warmup_steps:
            return warm
        return learner_lr_schedule(step, max_lr, warmup_steps, total_steps, min_lr)

    rejects(checks.lr_schedule, wrong, "divides by zero", "warmup_steps = 0")


def test_lr_schedule_rejects_a_cosine_that_goes_up_again():
    def wrong(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
        if step < warmup_steps:
            return max_lr * step / warmup_steps
        progress = (step - warmup_steps) / (total_steps - warmup_steps)
        return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))

    rejects(checks.lr_schedule, wrong, "goes up again")


def test_lr_schedule_rejects_linear_decay():
    def wrong(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
        if step < warmup_steps:
            return max_lr * step / warmup_steps
        if step >= total_steps:
            return min_lr
        return max_lr - (max_lr - min_lr) * (step - warmup_steps) / (total_steps - warmup_steps)

    rejects(checks.lr_schedule, wrong, "straight line")


def test_lr_schedule_rejects_a_tensor():
    def wrong(step, max_lr, warmup_steps, total_steps, min_lr=0.0):
        if step < warmup_steps:
            return torch.tensor(max_lr * step / warmup_steps)
        return torch.tensor(learner_lr_schedule(step, max_lr, warmup_steps, total_steps, min_lr))

    rejects(checks.lr_schedule, wrong, "python float")


# ============================================================================================
# train_step


def learner_train_step(model, batch, optimizer, ignore_index, clip=1.0):
    device = next(model.parameters()).device
    x, y = batch
    x, y = x.to(device), y.to(device)
    logits = model(x)
    loss = ref.lm_loss(logits, y, ignore_index)
    optimizer.zero_grad()
    loss.backward()
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip)
    optimizer.step()
    return loss.item()


def test_train_step_passes():
    passes(checks.train_step, ref.train_step)
    passes(checks.train_step, learner_train_step)


def test_train_step_stub_is_not_done():
    not_done(checks.train_step, stub)


def test_train_step_rejects_missing_zero_grad():
    def wrong(model, batch, optimizer, ignore_index, clip=1.0):
        x, y = batch
        loss = ref.lm_loss(model(x), y, ignore_index)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        return loss.item()

    rejects(checks.train_step, wrong, "gradients add up across calls", "zero_grad")


def test_train_step_rejects_step_before_backward():
    def wrong(model, batch, optimizer, ignore_index, clip=1.0):
        x, y = batch
        optimizer.zero_grad()
        loss = ref.lm_loss(model(x), y, ignore_index)
        optimizer.step()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        return loss.item()

    rejects(checks.train_step, wrong, "did not change", "before backward")


def test_train_step_rejects_clipping_after_the_step():
    def wrong(model, batch, optimizer, ignore_index, clip=1.0):
        x, y = batch
        optimizer.zero_grad()
        loss = ref.lm_loss(model(x), y, ignore_index)
        loss.backward()
        optimizer.step()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        return loss.item()

    rejects(checks.train_step, wrong, "not clipped before the step")


def test_train_step_rejects_no_clipping():
    def wrong(model, batch, optimizer, ignore_index, clip=1.0):
        x, y = batch
        optimizer.zero_grad()
        loss = ref.lm_loss(model(x), y, ignore_index)
        loss.backward()
        optimizer.step()
        return loss.item()

    rejects(checks.train_step, wrong, "clip_grad_norm_")


def test_train_step_rejects_clipping_when_clip_is_none():
    def wrong(model, batch, optimizer, ignore_index, clip=1.0):
        x, y = batch
        optimizer.zero_grad()
        loss = ref.lm_loss(model(x), y, ignore_index)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip or 1.0)
        optimizer.step()
        return loss.item()

    rejects(checks.train_step, wrong, "clip=None must mean no clipping")


def test_train_step_rejects_a_fixed_clip():
    def wrong(model, batch, optimizer, ignore_index, clip=1.0):
        x, y = batch
        optimizer.zero_grad()
        loss = ref.lm_loss(model(x), y, ignore_index)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss.item()

    rejects(checks.train_step, wrong, "`clip` argument is ignored")


def test_train_step_rejects_clipping_by_value():
    def wrong(model, batch, optimizer, ignore_index, clip=1.0):
        x, y = batch
        optimizer.zero_grad()
        loss = ref.lm_loss(model(x), y, ignore_index)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_value_(model.parameters(), clip)
        optimizer.step()
        return loss.item()

    rejects(checks.train_step, wrong, "global norm")


def test_train_step_rejects_returning_the_tensor():
    def wrong(model, batch, optimizer, ignore_index, clip=1.0):
        x, y = batch
        optimizer.zero_grad()
        loss = ref.lm_loss(model(x), y, ignore_index)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        return loss

    rejects(checks.train_step, wrong, "returned a tensor", "loss.item()")


def test_train_step_rejects_forcing_train_mode():
    def wrong(model, batch, optimizer, ignore_index, clip=1.0):
        model.train()
        return learner_train_step(model, batch, optimizer, ignore_index, clip)

    rejects(checks.train_step, wrong, "left the model in train mode")


def test_train_step_rejects_forcing_eval_mode_at_the_end():
    def wrong(model, batch, optimizer, ignore_index, clip=1.0):
        model.train()
        loss = learner_train_step(model, batch, optimizer, ignore_index, clip)
        model.eval()
        return loss

    rejects(checks.train_step, wrong, "left the model in eval mode")


def test_train_step_rejects_a_loss_that_counts_padding():
    def wrong(model, batch, optimizer, ignore_index, clip=1.0):
        x, y = batch
        optimizer.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        return loss.item()

    rejects(checks.train_step, wrong, "padding targets are counted")


def test_train_step_rejects_a_hard_coded_device():
    def wrong(model, batch, optimizer, ignore_index, clip=1.0):
        x, y = batch
        x, y = x.to("cuda:7"), y.to("cuda:7")
        return learner_train_step(model, (x, y), optimizer, ignore_index, clip)

    # The error depends on the torch build (a CPU build: "Torch not compiled with CUDA enabled"; a CUDA
    # build without a GPU: "Found no NVIDIA driver ..."); the hint must come with either.
    rejects(checks.train_step, wrong, "raised an exception", "next(model.parameters()).device")


def test_train_step_rejects_a_batch_left_on_the_cpu():
    # passes every case of a CPU-only machine; on a GPU, model(x) fails (a learner's mistake, and the third bug of
    # notebook 08's "find the bug")
    def wrong(model, batch, optimizer, ignore_index, clip=1.0):
        x, y = batch
        optimizer.zero_grad()
        loss = ref.lm_loss(model(x), y, ignore_index)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        return loss.item()

    rejects(checks.train_step, wrong, "stays on the CPU", "next(model.parameters()).device")

    def only_x(model, batch, optimizer, ignore_index, clip=1.0):
        x, y = batch
        return wrong(model, (x.to(next(model.parameters()).device), y), optimizer, ignore_index, clip)

    rejects(checks.train_step, only_x, "stays on the CPU", "y.to(device)")


@pytest.mark.parametrize("message", [
    "Torch not compiled with CUDA enabled",  # a CPU build of torch
    "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver "
    "from http://www.nvidia.com/Download/index.aspx",  # a CUDA build on a machine without a GPU
    "No CUDA GPUs are available",
    "CUDA error: invalid device ordinal",
    "No HIP GPUs are available",  # ROCm
    "PyTorch is not linked with support for mps devices",  # asking for MPS on Linux
    "The MPS backend is supported on MacOS 12.3+.",
    "Torch not compiled with XPU enabled",
    "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
])
def test_train_step_device_hint_recognises_every_build(message):
    from tutor.checks.nb08_training import is_device_error

    assert is_device_error(RuntimeError(message))

    def wrong(model, batch, optimizer, ignore_index, clip=1.0):
        raise RuntimeError(message)  # what x.to("cuda") raises on this build

    rejects(checks.train_step, wrong, "raised an exception", "next(model.parameters()).device")


def test_device_hint_is_not_given_for_other_errors():
    from tutor.checks.nb08_training import is_device_error

    assert not is_device_error(ValueError("too many values to unpack (expected 2)"))
    assert not is_device_error(RuntimeError("mat1 and mat2 shapes cannot be multiplied (15x5 and 7x5)"))


def test_train_step_rejects_zero_grad_between_backward_and_step():
    def wrong(model, batch, optimizer, ignore_index, clip=1.0):
        x, y = batch
        loss = ref.lm_loss(model(x), y, ignore_index)
        loss.backward()
        optimizer.zero_grad()  # too late: this clears the gradients the step needs
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        return loss.item()

    result = rejects(checks.train_step, wrong, "gradients were cleared before the step", "before loss.backward()")
    assert "in that order" not in str(result)  # not the step-before-backward message


def test_train_step_messages_say_the_parameter_belongs_to_the_checks_test_model():
    def wrong(model, batch, optimizer, ignore_index, clip=1.0):
        x, y = batch
        optimizer.zero_grad()
        loss = ref.lm_loss(model(x), y, ignore_index)
        loss.backward()
        for p in model.parameters():
            p.grad *= 0.5
        optimizer.step()
        return loss.item()

    rejects(checks.train_step, wrong, "`emb.weight` of the check's small test model", "not a model of yours")


def test_train_step_rejects_ignoring_the_last_class_instead_of_ignore_index():
    # right whenever ignore_index == V - 1, as in every case the check used to run
    def wrong(model, batch, optimizer, ignore_index, clip=1.0):
        x, y = batch
        optimizer.zero_grad()
        logits = model(x)
        loss = ref.lm_loss(logits, y, logits.shape[-1] - 1)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        return loss.item()

    rejects(checks.train_step, wrong, "ignore the last class", "instead of the ignore_index argument")


# ============================================================================================
# evaluate


@torch.no_grad()
def learner_evaluate(model, loader, ignore_index, max_batches=None):
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total_loss, total_tokens = 0.0, 0
    for i, (x, y) in enumerate(loader):
        if max_batches is not None and i == max_batches:
            break
        x, y = x.to(device), y.to(device)
        n = (y != ignore_index).sum().item()
        total_loss += ref.lm_loss(model(x), y, ignore_index).item() * n
        total_tokens += n
    model.train(was_training)
    return total_loss / total_tokens


def test_evaluate_passes():
    passes(checks.evaluate, ref.evaluate)
    passes(checks.evaluate, learner_evaluate)


def test_evaluate_stub_is_not_done():
    not_done(checks.evaluate, stub)


def test_evaluate_rejects_missing_no_grad():
    def wrong(model, loader, ignore_index, max_batches=None):
        return learner_evaluate.__wrapped__(model, loader, ignore_index, max_batches)

    rejects(checks.evaluate, wrong, "gradients enabled", "no_grad")


def test_evaluate_rejects_leaving_eval_mode():
    @torch.no_grad()
    def wrong(model, loader, ignore_index, max_batches=None):
        model.eval()
        total, count = 0.0, 0
        for i, (x, y) in enumerate(loader):
            if max_batches is not None and i >= max_batches:
                break
            n = (y != ignore_index).sum().item()
            total += ref.lm_loss(model(x), y, ignore_index).item() * n
            count += n
        return total / count

    rejects(checks.evaluate, wrong, "leaves the model in eval mode")


def test_evaluate_rejects_always_switching_back_to_train():
    @torch.no_grad()
    def wrong(model, loader, ignore_index, max_batches=None):
        model.eval()
        total, count = 0.0, 0
        for i, (x, y) in enumerate(loader):
            if max_batches is not None and i >= max_batches:
                break
            n = (y != ignore_index).sum().item()
            total += ref.lm_loss(model(x), y, ignore_index).item() * n
            count += n
        model.train()
        return total / count

    rejects(checks.evaluate, wrong, "switches the model to train mode")


def test_evaluate_rejects_averaging_batch_means():
    @torch.no_grad()
    def wrong(model, loader, ignore_index, max_batches=None):
        was_training = model.training
        model.eval()
        losses = []
        for i, (x, y) in enumerate(loader):
            if max_batches is not None and i >= max_batches:
                break
            losses.append(ref.lm_loss(model(x), y, ignore_index).item())
        model.train(was_training)
        return sum(losses) / len(losses)

    rejects(checks.evaluate, wrong, "average the batch means")


def test_evaluate_rejects_ignoring_max_batches():
    @torch.no_grad()
    def wrong(model, loader, ignore_index, max_batches=None):
        was_training = model.training
        model.eval()
        total, count = 0.0, 0
        for x, y in loader:
            n = (y != ignore_index).sum().item()
            total += ref.lm_loss(model(x), y, ignore_index).item() * n
            count += n
        model.train(was_training)
        return total / count

    rejects(checks.evaluate, wrong, "max_batches is ignored")


def test_evaluate_rejects_one_batch_too_many():
    @torch.no_grad()
    def wrong(model, loader, ignore_index, max_batches=None):
        was_training = model.training
        model.eval()
        total, count = 0.0, 0
        for i, (x, y) in enumerate(loader):
            if max_batches is not None and i > max_batches:
                break
            n = (y != ignore_index).sum().item()
            total += ref.lm_loss(model(x), y, ignore_index).item() * n
            count += n
        model.train(was_training)
        return total / count

    rejects(checks.evaluate, wrong, "one batch too many")


def test_evaluate_rejects_a_tensor():
    @torch.no_grad()
    def wrong(model, loader, ignore_index, max_batches=None):
        was_training = model.training
        model.eval()
        total, count = torch.tensor(0.0), 0
        for i, (x, y) in enumerate(loader):
            if max_batches is not None and i >= max_batches:
                break
            logits = model(x)
            total = total + F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                            ignore_index=ignore_index, reduction="sum")
            count += (y != ignore_index).sum().item()
        model.train(was_training)
        return total / count

    rejects(checks.evaluate, wrong, "returned a tensor", "python float")


def test_evaluate_rejects_counting_padding():
    @torch.no_grad()
    def wrong(model, loader, ignore_index, max_batches=None):
        was_training = model.training
        model.eval()
        total, count = 0.0, 0
        for i, (x, y) in enumerate(loader):
            if max_batches is not None and i >= max_batches:
                break
            logits = model(x)
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum").item()
            count += y.numel()
        model.train(was_training)
        return total / count

    rejects(checks.evaluate, wrong, "padding targets are counted")


def test_evaluate_rejects_a_sum_not_divided():
    @torch.no_grad()
    def wrong(model, loader, ignore_index, max_batches=None):
        was_training = model.training
        model.eval()
        total = 0.0
        for i, (x, y) in enumerate(loader):
            if max_batches is not None and i >= max_batches:
                break
            logits = model(x)
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                     ignore_index=ignore_index, reduction="sum").item()
        model.train(was_training)
        return total

    rejects(checks.evaluate, wrong, "summed loss")


# ============================================================================================
# every check stays fast and leaves the learner's RNG alone


def test_checks_do_not_touch_the_global_rng():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    for name in ("lm_loss", "lr_schedule", "train_step", "evaluate"):
        getattr(checks, name)(getattr(ref, name))
    assert torch.equal(torch.rand(3), expected)


def test_checks_keep_the_thread_count():
    threads = torch.get_num_threads()
    checks.train_step(ref.train_step)
    assert torch.get_num_threads() == threads


def test_train_step_names_a_wrong_clip_default():
    def wrong(model, batch, optimizer, ignore_index, clip=None):
        return ref.train_step(model, batch, optimizer, ignore_index, clip)

    rejects(checks.train_step, wrong, "default of `clip` is None", "clip=1.0")


def test_evaluate_rejects_ignoring_the_last_class_instead_of_ignore_index():
    @torch.no_grad()
    def wrong(model, loader, ignore_index, max_batches=None):
        was_training = model.training
        model.eval()
        total, count = 0.0, 0
        for i, (x, y) in enumerate(loader):
            if max_batches is not None and i >= max_batches:
                break
            logits = model(x)
            V = logits.shape[-1]
            total += F.cross_entropy(logits.reshape(-1, V), y.reshape(-1), ignore_index=V - 1, reduction="sum").item()
            count += (y != V - 1).sum().item()
        model.train(was_training)
        return total / count

    rejects(checks.evaluate, wrong, "ignore the last class", "instead of the ignore_index argument")

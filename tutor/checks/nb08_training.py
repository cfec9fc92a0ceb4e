"""Checks for notebook 08: the loss, the learning-rate schedule, one training step and evaluation."""

import copy
import inspect
import math

import torch
import torch.nn.functional as F

from tutor import reference as ref
from tutor.checks import beside
from tutor.checks.compare import expect_close, first_difference, kind_cases
from tutor.checks.harness import LearnerError, Mismatch, at, call, case, check, error_details, generator, seed, twin
from tutor.course import catalog
from tutor.data import NamesDataset, collate, make_loader

__all__ = catalog.check_names(__name__)  # this notebook's exercises (tutor.course.catalog)


def _padded_targets(B, T, V, ignore_index, lengths):
    """Targets [B, T] with real classes (never ``ignore_index``) up to each row's length, then ``ignore_index``."""
    y = torch.randint(0, V - 1, (B, T))
    if ignore_index < V - 1 and ignore_index >= 0:  # keep real targets away from the ignored class
        y = torch.where(y >= ignore_index, y + 1, y)
    for b, n in enumerate(lengths):
        y[b, n:] = ignore_index
    return y


# --- lm_loss --------------------------------------------------------------------------------


def _loss_mistakes(logits, y, ignore_index):
    V = logits.shape[-1]
    flat, ty = logits.reshape(-1, V), y.reshape(-1)
    real = y != ignore_index
    per_token = F.cross_entropy(flat, ty.clamp(0, V - 1), reduction="none").view_as(y) * real
    mistakes = []
    if 0 <= ignore_index < V:
        mistakes.append(("the padding targets are counted: pass ignore_index=ignore_index to F.cross_entropy "
                         "(or average only where targets != ignore_index)",
                         lambda: F.cross_entropy(flat, ty)))
    mistakes += [
        ("softmax is applied twice: F.cross_entropy takes raw logits and applies log_softmax itself; "
         "don't softmax the logits first",
         lambda: F.cross_entropy(torch.softmax(flat, -1), ty, ignore_index=ignore_index)),
        ("the loss is summed (reduction='sum'); the exercise asks for the mean over the real targets",
         lambda: F.cross_entropy(flat, ty, ignore_index=ignore_index, reduction="sum")),
        ("the padding losses are zeroed but you divide by every position; divide by the number of real targets",
         lambda: per_token.sum() / y.numel()),
        ("you average each sequence first, then the batch (a mean of means); "
         "average over all real targets of the batch at once",
         lambda: (per_token.sum(1) / real.sum(1).clamp(min=1))[real.any(1)].mean()),
        ("logits and targets are flattened in different orders (one of them transposed): "
         "use logits.reshape(-1, V) and targets.reshape(-1), or F.cross_entropy(logits.transpose(1, 2), targets)",
         lambda: F.cross_entropy(logits.transpose(0, 1).reshape(-1, V), ty, ignore_index=ignore_index)),
        ("logits and targets are flattened in different orders (one of them transposed): "
         "use logits.reshape(-1, V) and targets.reshape(-1), or F.cross_entropy(logits.transpose(1, 2), targets)",
         lambda: F.cross_entropy(flat, y.transpose(0, 1).reshape(-1), ignore_index=ignore_index)),
        ("the log-probabilities are taken over the wrong axis: log_softmax over the vocabulary, dim=-1",
         lambda: F.nll_loss(F.log_softmax(logits, dim=1).reshape(-1, V), ty, ignore_index=ignore_index)),
        ("this is the loss in bits (log base 2); cross-entropy uses the natural log",
         lambda: F.cross_entropy(flat, ty, ignore_index=ignore_index) / math.log(2)),
    ]
    if ignore_index != ref.PAD_Y and 0 <= ref.PAD_Y < V:
        mistakes.append((f"you ignore the fixed index {ref.PAD_Y} ('.') instead of the ignore_index argument",
                         lambda: F.cross_entropy(flat, ty, ignore_index=ref.PAD_Y)))
    if ignore_index != V - 1:
        mistakes.append(("you ignore the last class (V - 1) instead of the ignore_index argument",
                         lambda: F.cross_entropy(flat, ty, ignore_index=V - 1)))
    return mistakes


LOSS_SHAPE_HINT = ("F.cross_entropy wants the classes on dim 1: flatten with logits.reshape(-1, V) and "
                   "targets.reshape(-1), or pass logits.transpose(1, 2) with targets [B, T]")


def _run_loss(fn, logits, y, ignore_index, label, hint=None):
    leaf = logits.clone().requires_grad_(True)
    try:
        got, grad = call(at(beside.value_and_grad), fn, leaf, y.clone(), ignore_index,
                         what=f"lm_loss(logits {list(logits.shape)}, targets {list(y.shape)}, "
                              f"ignore_index={ignore_index})")
    except LearnerError as e:
        msg = str(e.error)
        if ("Expected target size" in msg or "expected input batch_size" in msg.lower()
                or "only batches of spatial" in msg):
            raise Mismatch("F.cross_entropy got the logits and targets in shapes it does not expect",
                           error_details(e), hint=LOSS_SHAPE_HINT) from None
        if isinstance(e.error, IndexError) or "out of bounds" in msg:
            raise Mismatch(f"a target is out of range: did you ignore targets equal to ignore_index={ignore_index}?",
                           error_details(e), hint="pass ignore_index=ignore_index to F.cross_entropy") from None
        raise
    if isinstance(got, (float, int)) and not isinstance(got, bool):
        raise Mismatch(f"lm_loss returned a Python {type(got).__name__}; it should return a 0-d tensor",
                       hint="return the loss tensor itself, not loss.item(): train_step calls loss.backward() on it")
    if isinstance(got, torch.Tensor) and got.dim() != 0 and got.numel() == 1:
        raise Mismatch(f"the loss has shape {tuple(got.shape)}; it should be a 0-d tensor (shape ())",
                       hint="reduce to a scalar with .mean() or .sum() without keepdim, or .squeeze()")
    with torch.no_grad():
        expected = ref.lm_loss(logits, y, ignore_index)
    expect_close(got, expected, "the loss", atol=1e-5, rtol=1e-4, mistakes=_loss_mistakes(logits, y, ignore_index),
                 hint=hint)
    if not got.requires_grad:
        raise Mismatch("the loss does not depend on the logits through autograd (requires_grad is False)",
                       hint="don't use .item(), .detach(), numpy or torch.no_grad() inside lm_loss: "
                            "train_step must be able to call loss.backward()")
    leaf_ref = logits.clone().requires_grad_(True)
    (expected_grad,) = torch.autograd.grad(ref.lm_loss(leaf_ref, y, ignore_index), leaf_ref)
    if grad is None:
        raise Mismatch("the loss's gradient does not reach the logits",
                       hint="compute the loss from `logits` with torch operations")
    expect_close(grad, expected_grad, "the gradient of the loss with respect to the logits", atol=1e-6, rtol=1e-4)
    return got


@check
def lm_loss(fn):
    seed(0)
    V, ignore = 28, 27
    cases = [
        ("names batch: logits [3, 6, 28], padded targets, ignore_index=27", 3, 6, V, ignore, [6, 4, 2]),
        ("logits [3, 5, 28], ignore_index=0 (27 is a real target here)", 3, 5, V, 0, [5, 3, 2]),
        ("no padding: logits [2, 5, 28]", 2, 5, V, ignore, [5, 5]),
        ("T = 1: logits [4, 1, 28], one row is padding", 4, 1, V, ignore, [1, 1, 0, 1]),
        ("B ≠ T: logits [5, 3, 7], ignore_index=0", 5, 3, 7, 0, [3, 1, 2, 3, 1]),
        ("ignore_index=-100 (PyTorch's default): logits [2, 4, 6]", 2, 4, 6, -100, [4, 2]),
    ]
    for label, B, T, Vc, ign, lengths in cases:
        with case(label):
            logits = torch.randn(B, T, Vc) * 2
            y = _padded_targets(B, T, Vc, ign, lengths)
            if ign != ref.PAD_Y and ref.PAD_Y < Vc:
                y[:, 0] = ref.PAD_Y  # '.' as a real target: a loss that always ignores 27 shows here
            _run_loss(fn, logits, y, ign, label)
    with case("large logits (about 1000): logits [2, 4, 28]"):
        logits = torch.randn(2, 4, V) * 1000
        y = _padded_targets(2, 4, V, ignore, [4, 3])
        _run_loss(fn, logits, y, ignore, "large", hint=(
            "log(softmax(x)) gives log(0) = -inf when a probability underflows: compute log-probabilities with "
            "F.log_softmax or use F.cross_entropy, which are stable"))
    kind_cases(fn, (torch.randn(3, 6, V), _padded_targets(3, 6, V, ignore, [6, 4, 2]), ignore), ref.lm_loss,
               "lm_loss(logits [3, 6, 28], targets [3, 6], ignore_index=27)")
    return "{cases} cases, padding ignored, gradients match, float64 and meta"


# --- lr_schedule ---------------------------------------------------------------------------


def _cos(max_lr, min_lr, progress):
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))


def _schedule_mistakes(max_lr, warmup, total, min_lr):
    W, N = warmup, total

    def warm(step):
        return max_lr * step / W

    def after(fn):
        return lambda s: (warm(s) if s < W else (min_lr if s >= N else fn(s)))

    progress = lambda s: (s - W) / (N - W)  # noqa: E731
    mistakes = [
        ("the warm-up is off by one: at step 0 the rate must be 0, i.e. max_lr * step / warmup_steps (not step + 1)",
         lambda s: (max_lr * (s + 1) / W if s < W else (min_lr if s >= N else _cos(max_lr, min_lr, progress(s))))),
        ("the rate does not decay after the warm-up: follow a cosine from max_lr down to min_lr at total_steps",
         lambda s: warm(s) if s < W else max_lr),
        ("the cosine ends at 0 instead of min_lr: min_lr + 0.5 * (max_lr - min_lr) * (1 + cos(pi * progress))",
         after(lambda s: 0.5 * max_lr * (1 + math.cos(math.pi * progress(s))))),
        ("the cosine starts at max_lr + min_lr: scale the cosine by (max_lr - min_lr), not max_lr",
         after(lambda s: min_lr + 0.5 * max_lr * (1 + math.cos(math.pi * progress(s))))),
        ("the cosine never reaches min_lr: progress must be (step - warmup_steps) / (total_steps - warmup_steps), "
         "which is 1 at total_steps",
         after(lambda s: _cos(max_lr, min_lr, (s - W) / N))),
        ("the cosine starts at step 0 instead of at the end of the warm-up: progress must be (step - warmup_steps) "
         "/ (total_steps - warmup_steps), which is 0 when the warm-up ends and 1 at total_steps",
         after(lambda s: _cos(max_lr, min_lr, s / N))),
        ("there is no warm-up: for step < warmup_steps the rate rises linearly, max_lr * step / warmup_steps",
         lambda s: min_lr if s >= N else _cos(max_lr, min_lr, s / N)),
        ("there is no warm-up: for step < warmup_steps the rate rises linearly, max_lr * step / warmup_steps",
         lambda s: min_lr if s >= N else (max_lr if s < W else _cos(max_lr, min_lr, progress(s)))),
        ("the rate decays along a straight line; the exercise asks for a cosine: "
         "min_lr + 0.5 * (max_lr - min_lr) * (1 + cos(pi * progress))",
         after(lambda s: max_lr - (max_lr - min_lr) * progress(s))),
        ("after total_steps the rate goes up again: return min_lr for step >= total_steps",
         lambda s: warm(s) if s < W else _cos(max_lr, min_lr, progress(s))),
        ("the cosine is upside down: it should start at max_lr and end at min_lr",
         after(lambda s: _cos(min_lr, max_lr, progress(s)))),
    ]
    return mistakes


def _learner_curve(fn, steps, max_lr, warmup, total, min_lr, pass_min):
    values = []
    for s in steps:
        args = (s, max_lr, warmup, total) + ((min_lr,) if pass_min else ())
        shown = f"lr_schedule({s}, max_lr={max_lr:g}, warmup_steps={warmup}, total_steps={total}" + (
            f", min_lr={min_lr:g})" if pass_min else ")")
        try:
            got = call(fn, *args, what=shown)
        except LearnerError as e:
            if isinstance(e.error, ZeroDivisionError) and warmup == 0:
                raise Mismatch("lr_schedule divides by zero when warmup_steps = 0", error_details(e),
                               hint="with warmup_steps = 0 there is no warm-up: test step < warmup_steps "
                                    "before dividing by warmup_steps") from None
            raise
        if isinstance(got, torch.Tensor):
            raise Mismatch(f"{shown} returned a tensor; it should return a Python float",
                           hint="use math.cos and math.pi (or float(...)): the optimizer wants a plain number")
        if isinstance(got, bool) or not isinstance(got, (float, int)):
            raise Mismatch(f"{shown} returned {type(got).__name__}; it should return a float",
                           hint="did you forget `return`?" if got is None else None)
        values.append(float(got))
    return values


def _compare_curve(got, steps, max_lr, warmup, total, min_lr):
    expected = [ref.lr_schedule(s, max_lr, warmup, total, min_lr) for s in steps]
    close = lambda a, b: abs(a - b) <= 1e-9 + 1e-6 * abs(b)  # noqa: E731
    bad = [i for i, (g, e) in enumerate(zip(got, expected)) if not close(g, e)]
    if not bad:
        return
    i = bad[0]
    cause = None
    for description, curve in _schedule_mistakes(max_lr, warmup, total, min_lr) if warmup > 0 else []:
        try:
            if all(close(g, curve(s)) for g, s in zip(got, steps)):
                cause = description
                break
        except Exception:  # noqa: BLE001 - a candidate mistake that fails on this input is skipped
            continue
    if cause is None and warmup == 0 and steps[i] == 0:
        cause = "with warmup_steps = 0 there is no warm-up: step 0 already gets max_lr"
    if cause is None:
        s = steps[i]
        cause = ("during the warm-up (step < warmup_steps) the rate is max_lr * step / warmup_steps" if s < warmup else
                 "from step >= total_steps on the rate stays at min_lr" if s >= total else
                 "after the warm-up: min_lr + 0.5 * (max_lr - min_lr) * (1 + cos(pi * (step - warmup_steps) / "
                 "(total_steps - warmup_steps)))")
    details = [f"first difference at step {steps[i]}: expected {expected[i]:.6g}, got {got[i]:.6g}"]
    for j in bad[1:3]:
        details.append(f"also at step {steps[j]}: expected {expected[j]:.6g}, got {got[j]:.6g}")
    raise Mismatch("wrong learning rate", details, cause)


@check
def lr_schedule(fn):
    settings = [
        ("max_lr=1e-3, warmup_steps=10, total_steps=100, min_lr=1e-4", 1e-3, 10, 100, 1e-4, True),
        ("max_lr=3e-3, warmup_steps=100, total_steps=1500, min_lr=3e-4", 3e-3, 100, 1500, 3e-4, True),
        ("min_lr left at its default 0: max_lr=0.5, warmup_steps=4, total_steps=20", 0.5, 4, 20, 0.0, False),
        ("no warm-up: max_lr=2e-3, warmup_steps=0, total_steps=50, min_lr=2e-4", 2e-3, 0, 50, 2e-4, True),
    ]
    # and one drawn from the check's seed: the same in a notebook, new for every graded run (no table of answers)
    u = torch.rand(4, generator=generator(7)).tolist()
    max_lr, warmup = round(1e-4 + u[0] * 9.9e-3, 6), 1 + int(u[1] * 40)
    total, min_lr = warmup + 20 + int(u[2] * 300), round(max_lr * u[3] * 0.2, 8)
    settings.append((f"max_lr={max_lr:g}, warmup_steps={warmup}, total_steps={total}, min_lr={min_lr:g}",
                     max_lr, warmup, total, min_lr, True))
    for label, max_lr, warmup, total, min_lr, pass_min in settings:
        with case(label):
            stride = max(1, total // 100)
            steps = sorted(set(range(0, min(warmup + 3, total)))
                           | set(range(0, total + 1, stride)) | {total - 1, total, total + 1, total + 7, 2 * total})
            got = _learner_curve(fn, steps, max_lr, warmup, total, min_lr, pass_min)
            _compare_curve(got, steps, max_lr, warmup, total, min_lr)
    return "5 schedules, warm-up, cosine, min_lr and after the end"


# --- train_step -----------------------------------------------------------------------------


def _toy_batch(B, T, V, lengths, ignore_index):
    x = torch.randint(0, V - 1, (B, T))
    y = _padded_targets(B, T, V, ignore_index, lengths)
    for b, n in enumerate(lengths):
        x[b, n:] = 0
    return x, y


def _simulate(model, batches, make_opt, ignore_index, clip, variant="right"):
    """What the parameters and losses are after running ``train_step`` (or a known mistake) on ``batches``."""
    model = copy.deepcopy(model)
    opt = make_opt(model)
    losses = []
    for i, (x, y) in enumerate(batches):
        if variant != "no zero_grad":
            opt.zero_grad(set_to_none=True)
        logits = model(x)
        if variant == "padding counted":
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        elif variant == "last class":
            loss = ref.lm_loss(logits, y, logits.shape[-1] - 1)
        else:
            loss = ref.lm_loss(logits, y, ignore_index)
        if variant == "step before backward":
            opt.step()
            loss.backward()
            losses.append(loss.item())
            continue
        loss.backward()
        if variant == "clip by value" and clip is not None:
            torch.nn.utils.clip_grad_value_(model.parameters(), clip)
        elif variant == "clip each tensor" and clip is not None:
            for p in model.parameters():
                if p.grad is not None:
                    torch.nn.utils.clip_grad_norm_([p], clip)
        elif variant == "clip at 1.0":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        elif variant in ("right", "no zero_grad", "padding counted", "last class") and clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(loss.item())
    return model, losses


def _params(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _same_params(a, b, atol=1e-6, rtol=1e-5):
    return all(torch.allclose(a[n], b[n], atol=atol, rtol=rtol) for n in b)


TRAIN_STEP_MISTAKES = {
    "no zero_grad": "the gradients add up across calls: call optimizer.zero_grad() before loss.backward()",
    "no clipping": "the gradients are not clipped before the step: "
                   "call torch.nn.utils.clip_grad_norm_(model.parameters(), clip) "
                   "after loss.backward() and before optimizer.step() (clipping after the step does nothing)",
    "always clips": "clip=None must mean no clipping: only call clip_grad_norm_ when clip is not None",
    "clip at 1.0": "the `clip` argument is ignored: clip the gradient norm to `clip`, not a fixed 1.0",
    "clip by value": "clip_grad_value_ clips every number on its own; the exercise asks for the global norm: "
                     "torch.nn.utils.clip_grad_norm_(model.parameters(), clip)",
    "clip each tensor": "each parameter's gradient is clipped on its own; clip the global norm of all of them at once: "
                        "torch.nn.utils.clip_grad_norm_(model.parameters(), clip)",
    "unchanged": "the parameters did not change: call loss.backward() and then optimizer.step(), in that order "
                 "(a step before backward has no gradients to use)",
    "cleared": "the gradients were cleared before the step, so optimizer.step() had nothing to apply: call "
               "optimizer.zero_grad() once at the start of train_step, before loss.backward(), never between "
               "backward() and step()",
    "last class": "you ignore the last class (logits.shape[-1] - 1) instead of the ignore_index argument: "
                  "pass ignore_index on to lm_loss(logits, y, ignore_index)",
    "padding counted": "the padding targets are counted in the loss: use lm_loss(logits, y, ignore_index)",
}


def _run_train_step(fn, model, there, batches, make_opt, ignore_index, clip, label, pass_clip=True):
    """Run the learner's train_step on a copy of ``model`` (``there``: ``model`` where the learner's code runs, see
    ``harness.twin``); compare losses and parameters with the reference."""
    mine = at(copy.deepcopy)(there)
    opt = make_opt(mine)
    got_losses = []
    for i, (x, y) in enumerate(batches):
        kwargs = {"clip": clip} if pass_clip else {}
        args_text = "model, (x, y), optimizer, ignore_index" + (f", clip={clip}" if pass_clip else "")
        xb, yb = x.clone(), y.clone()
        try:
            got = call(fn, mine, (xb, yb), opt, ignore_index, what=f"train_step({args_text}), call {i + 1}", **kwargs)
        except LearnerError as e:
            if is_device_error(e.error):
                e.hint = ("move the batch to the model's device, whatever it is: "
                          "device = next(model.parameters()).device, "
                          "then x, y = x.to(device), y.to(device) (don't write \"cuda\" in train_step)")
            elif "out of bounds" in str(e.error) and ignore_index < 0:
                e.hint = (f"a padding target ({ignore_index}) reached the loss: ignore the targets equal to the "
                          f"ignore_index argument (lm_loss(logits, y, ignore_index)), not a class you derive")
            raise
        if isinstance(got, torch.Tensor):
            raise Mismatch("train_step returned a tensor; it should return the loss as a Python float",
                           hint="return loss.item(): a float, which also frees the computation graph")
        if isinstance(got, bool) or not isinstance(got, (float, int)):
            raise Mismatch(f"train_step returned {type(got).__name__}; it should return the loss as a Python float",
                           hint="did you forget `return loss.item()`?" if got is None else "return loss.item()")
        if not (torch.equal(xb, x) and torch.equal(yb, y)):
            raise Mismatch("train_step changed the batch it was given", hint="don't modify x or y in place")
        got_losses.append(float(got))
    grads_left = [p.grad for p in mine.parameters()]
    reference, expected_losses = _simulate(model, batches, make_opt, ignore_index, clip if pass_clip else 1.0)
    got_p, exp_p = _params(mine), _params(reference)

    variants = ["no zero_grad", "no clipping", "clip by value", "clip each tensor",
                "padding counted"]
    if pass_clip and clip is None:
        variants.append("always clips")
    if pass_clip and clip not in (None, 1.0):
        variants.append("clip at 1.0")

    def diagnose_params():
        if _same_params(got_p, _params(model)):
            if all(g is None or not g.any() for g in grads_left):  # backward ran, yet no gradient is left
                return TRAIN_STEP_MISTAKES["cleared"]
            return TRAIN_STEP_MISTAKES["unchanged"]
        for variant in variants:
            if variant == "no zero_grad" and len(batches) < 2:
                continue
            sim_clip = (1.0 if variant == "always clips"
                        else (None if variant == "no clipping" else (clip if pass_clip else 1.0)))
            sim_variant = "right" if variant in ("no clipping", "always clips") else variant
            candidate, _ = _simulate(model, batches, make_opt, ignore_index, sim_clip, sim_variant)
            if _same_params(got_p, _params(candidate)):
                return TRAIN_STEP_MISTAKES[variant]
        return None

    for i, (g, e) in enumerate(zip(got_losses, expected_losses)):
        if not math.isclose(g, e, rel_tol=1e-4, abs_tol=1e-5):
            _, padded = _simulate(model, batches, make_opt, ignore_index, clip, "padding counted")
            hint = TRAIN_STEP_MISTAKES["padding counted"] if math.isclose(g, padded[i], rel_tol=1e-4) else None
            if hint is None and ignore_index != model_vocab(model) - 1:
                try:
                    _, last = _simulate(model, batches, make_opt, ignore_index, clip, "last class")
                    if math.isclose(g, last[i], rel_tol=1e-4):
                        hint = TRAIN_STEP_MISTAKES["last class"]
                except Exception:  # noqa: BLE001 - only a diagnosis: if it cannot run, give no hint
                    pass
            if hint is None and i > 0:
                hint = diagnose_params()
            raise Mismatch(f"the loss returned by call {i + 1} is wrong",
                           [f"expected {e:.6g}, got {g:.6g}"],
                           hint or "return the loss of this batch, computed with lm_loss before the step: loss.item()")
    for name, expected in exp_p.items():
        if not torch.allclose(got_p[name], expected, atol=1e-6, rtol=1e-5):
            raise Mismatch(f"after {len(batches)} call(s) the parameter `{name}` of the check's small test model "
                           f"({describe(model)}) differs from the reference",
                           [first_difference(got_p[name], expected, 1e-6, 1e-5)],
                           diagnose_params() or "zero the gradients, loss, backward, clip, then optimizer.step()")
    return mine


def model_vocab(model):
    return model.config.vocab_size


def describe(model):
    """How a message names the check's own test model (its parameter names are not the learner's)."""
    if isinstance(model, beside.Toy):
        return "an nn.Embedding `emb` and an nn.Linear `out`, not a model of yours"
    return f"a {type(model).__name__} built by the check"


def is_device_error(error) -> bool:
    """Whether an exception says a device is missing or mixed, in the words of any torch build.

    A CPU build says "Torch not compiled with CUDA enabled", a CUDA build on a machine without a GPU
    "Found no NVIDIA driver on your system" or "No CUDA GPUs are available", ROCm "No HIP GPUs ...",
    macOS or Linux "MPS backend ..." / "not linked with support for mps devices", and any build
    "Expected all tensors to be on the same device".
    """
    text = str(error).lower()
    words = ("cuda", "device", "nvidia", "driver", "gpu", "mps", "hip", "rocm", "xpu", "not compiled with",
             "not linked with support")
    return any(w in text for w in words)


def _sgd(lr):
    return lambda m: at(torch.optim.SGD, near=m)(m.parameters(), lr=lr)


NO_DEFAULT = inspect.Parameter.empty


def _parameter_default(fn, name):
    """The default value of ``fn``'s parameter ``name``, or NO_DEFAULT when there is none."""
    found, default = at(beside.parameter_default)(fn, name)
    return default if found else NO_DEFAULT


@check
def train_step(fn):
    return _check_train_step(fn)


def _check_train_step(fn):
    clip = _parameter_default(fn, "clip")
    if clip is not NO_DEFAULT and clip != 1.0:
        raise Mismatch(f"the default of `clip` is {clip!r}; the exercise asks for 1.0",
                       hint="def train_step(model, batch, optimizer, ignore_index, clip=1.0):")
    seed(0)
    V, ignore = 7, 6
    toy = beside.Toy(V)
    there = twin(toy, V)
    b1 = _toy_batch(3, 5, V, [5, 3, 2], ignore)
    b2 = _toy_batch(2, 4, V, [4, 1], ignore)

    with case("one step, SGD(lr=0.1), the default clip=1.0 (the gradient norm is above 1)"):
        _run_train_step(fn, toy, there, [b1], _sgd(0.1), ignore, None, "", pass_clip=False)
    with case("two calls in a row, SGD(lr=0.1), clip=1.0"):
        _run_train_step(fn, toy, there, [b1, b2], _sgd(0.1), ignore, 1.0, "")
    with case("clip=None (no clipping), SGD(lr=0.1)"):
        _run_train_step(fn, toy, there, [b1, b2], _sgd(0.1), ignore, None, "")
    with case("clip=0.25, SGD(lr=0.1)"):
        _run_train_step(fn, toy, there, [b1], _sgd(0.1), ignore, 0.25, "")
    for other in (0, -100):  # an ignore_index that is not V - 1: the argument must be used, not derived
        with case(f"ignore_index={other} (the last class, {V - 1}, is a real target here), SGD(lr=0.1)"):
            batches = [_toy_batch(3, 5, V, [5, 3, 2], other), _toy_batch(2, 4, V, [4, 1], other)]
            for _, yb in batches:
                yb[:, 0] = V - 1
            _run_train_step(fn, toy, there, batches, _sgd(0.1), other, 1.0, "")

    with case("a small GPT (V=28, 2 layers) with AdamW, a padded batch of names"):
        config = ref.GPTConfig(vocab_size=28, max_len=8, d_model=16, n_heads=2, n_layers=2)
        gpt = ref.GPT(config)
        x, y = ref_batch(["laika", "zoe", "ana"])
        adamw = lambda m: at(torch.optim.AdamW, near=m)(m.parameters(), lr=1e-2)  # noqa: E731
        _run_train_step(fn, gpt, twin(gpt, config), [(x, y), (x, y)], adamw, ref.PAD_Y, 1.0, "")

    for mode in ("eval", "train"):
        with case(f"the model is in {mode} mode before the call"):
            model = at(beside.Recorder)(at(beside.Toy)(V, dropout=0.0))
            model.train(mode == "train")
            opt = at(torch.optim.SGD)(model.parameters(), lr=0.1)
            call(fn, model, b1, opt, ignore, what="train_step(model, (x, y), optimizer, ignore_index)")
            if model.training != (mode == "train"):
                now = "train" if model.training else "eval"
                raise Mismatch(f"train_step left the model in {now} mode; the caller had set {mode} mode",
                               hint="don't call model.train() or model.eval() inside train_step: "
                                    "the caller decides the mode (and `fit` sets it once)")
            if not model.seen:
                raise Mismatch("train_step never ran the model", hint="logits = model(x)")
    with case("the model on a GPU, the batch on the CPU (PyTorch's 'meta' device stands in for the GPU)"):
        model = at(beside.Toy)(V, dropout=0.0).to("meta")
        opt = at(torch.optim.SGD)(model.parameters(), lr=0.1)
        try:
            call(at(beside.like_a_gpu), fn, model, b1, opt, ignore,
                 what="train_step(model on the meta device, (x, y) on the CPU, optimizer, ignore_index)")
        except LearnerError as error:
            if "at least two devices" in str(error.error):
                raise Mismatch("the batch stays on the CPU while the model is on another device: on a GPU, "
                               "model(x) fails with tensors on two devices",
                               [str(error.error)[:200]],
                               hint="move both x and y to the model's device first: "
                                    "device = next(model.parameters()).device, then x, y = x.to(device), "
                                    "y.to(device)") from None
            # anything else is what a meta tensor cannot do (loss.item() has no value to give): not this case's
    return ("{cases} cases: clipping on and off, two calls in a row, ignore_index 6, 0 and -100, a GPT with AdamW, "
            "modes kept, the batch moved to the model's device")


def ref_batch(names):

    return collate([NamesDataset(names)[i] for i in range(len(names))])


# --- evaluate -------------------------------------------------------------------------------


def _eval_candidates(model, loader, ignore_index, max_batches):
    """Values of the classic mistakes."""
    per_batch_sum, per_batch_n, per_batch_all, per_batch_numel = [], [], [], []
    with torch.no_grad():
        for i, (x, y) in enumerate(loader):
            logits = model(x)
            V = logits.shape[-1]
            per_batch_sum.append(F.cross_entropy(logits.reshape(-1, V), y.reshape(-1), ignore_index=ignore_index,
                                                 reduction="sum").item())
            per_batch_n.append((y != ignore_index).sum().item())
            per_batch_all.append(F.cross_entropy(logits.reshape(-1, V), y.reshape(-1).clamp(0, V - 1)).item())
            per_batch_numel.append(y.numel())

    def total(k):
        s, n = per_batch_sum[:k], per_batch_n[:k]
        return sum(s) / max(sum(n), 1)

    k = len(per_batch_sum) if max_batches is None else min(max_batches, len(per_batch_sum))
    means = [s / n for s, n in zip(per_batch_sum[:k], per_batch_n[:k])]
    last_class = None
    try:
        with torch.no_grad():
            pairs = list(loader)[:k]
            logits = [model(x) for x, _ in pairs]
            V = logits[0].shape[-1]
            if ignore_index != V - 1:
                total_last = sum(F.cross_entropy(lg.reshape(-1, V), y.reshape(-1), ignore_index=V - 1,
                                                 reduction="sum").item() for lg, (_, y) in zip(logits, pairs))
                last_class = total_last / max(sum((y != V - 1).sum().item() for _, y in pairs), 1)
    except Exception:  # noqa: BLE001 - only a diagnosis: if it cannot run, no 'last class' figure
        last_class = None
    return [
        ("you ignore the last class (logits.shape[-1] - 1) instead of the ignore_index argument: "
         "use ignore_index=ignore_index", last_class),
        ("you average the batch means; divide the summed loss of all real targets by their number "
         "(batches have different numbers of real targets)", sum(means) / len(means)),
        ("the padding targets are counted: use ignore_index",
         sum(a * n for a, n in zip(per_batch_all[:k], per_batch_numel[:k])) / sum(per_batch_numel[:k])),
        ("the padding targets are counted: use ignore_index", sum(per_batch_all[:k]) / k),
        ("you return the summed loss; divide it by the number of real target tokens", sum(per_batch_sum[:k])),
        ("max_batches is ignored: stop after max_batches batches", total(len(per_batch_sum))),
        ("one batch too many: evaluate exactly max_batches batches (batches 0 ... max_batches - 1)",
         total(k + 1) if max_batches is not None else None),
        ("one batch too few: evaluate exactly max_batches batches (batches 0 ... max_batches - 1)",
         total(k - 1) if max_batches is not None and k > 1 else None),
    ]


def _run_evaluate(fn, model, there, loader, ignore_index, max_batches, label, pass_max=True, loader_there=None):
    """``there`` (and ``loader_there``): ``model`` (and ``loader``) where the learner's code runs (``harness.twin``)."""
    model_copy = copy.deepcopy(model)
    kwargs = {"max_batches": max_batches} if pass_max else {}
    shown = "evaluate(model, loader, ignore_index" + (f", max_batches={max_batches})" if pass_max else ")")
    got = call(fn, at(copy.deepcopy)(there), loader if loader_there is None else loader_there, ignore_index,
               what=shown, **kwargs)
    if isinstance(got, torch.Tensor):
        raise Mismatch("evaluate returned a tensor; it should return a Python float",
                       hint="accumulate Python numbers (loss.item()) and return total / count")
    if isinstance(got, bool) or not isinstance(got, (float, int)):
        raise Mismatch(f"evaluate returned {type(got).__name__}; it should return a float",
                       hint="did you forget `return`?" if got is None else None)
    expected = ref.evaluate(model_copy, loader, ignore_index, max_batches=max_batches)
    if not math.isclose(got, expected, rel_tol=1e-5, abs_tol=1e-6):
        cause = None
        for description, value in _eval_candidates(model_copy, loader, ignore_index, max_batches):
            if value is not None and math.isclose(got, value, rel_tol=1e-5, abs_tol=1e-6):
                cause = description
                break
        raise Mismatch("wrong validation loss", [f"expected {expected:.6g}, got {got:.6g}"],
                       cause or "sum the loss over every real target (reduction='sum' with ignore_index), "
                                "count the real targets, and return the sum divided by the count")
    return got


@check
def evaluate(fn):
    return _check_evaluate(fn)


def _check_evaluate(fn):
    seed(0)
    V, ignore = 7, 6
    toy = beside.Toy(V)
    there = twin(toy, V)
    # batches with very different numbers of real targets, so a mean of batch means is visibly wrong
    loader = [_toy_batch(3, 5, V, [5, 5, 4], ignore), _toy_batch(2, 3, V, [1, 1], ignore),
              _toy_batch(4, 6, V, [6, 2, 3, 1], ignore), _toy_batch(1, 2, V, [2], ignore)]
    with case("4 batches of different sizes (a list of (x, y) pairs)"):
        _run_evaluate(fn, toy, there, loader, ignore, None, "", pass_max=False)
    with case("max_batches=2"):
        _run_evaluate(fn, toy, there, loader, ignore, 2, "")
    with case("max_batches=10, more than there are"):
        _run_evaluate(fn, toy, there, loader, ignore, 10, "")
    for other in (0, -100):  # an ignore_index that is not V - 1: the argument must be used, not derived
        with case(f"ignore_index={other} (the last class, {V - 1}, is a real target here)"):
            batches = [_toy_batch(3, 5, V, [5, 5, 4], other), _toy_batch(2, 3, V, [1, 1], other),
                       _toy_batch(4, 6, V, [6, 2, 3, 1], other)]
            for _, yb in batches:
                yb[:, 0] = V - 1
            _run_evaluate(fn, toy, there, batches, other, None, "")
    with case("a small GPT on a DataLoader of names, ignore_index=27"):

        config = ref.GPTConfig(vocab_size=28, max_len=16, d_model=16, n_heads=2, n_layers=1)
        gpt = ref.GPT(config)
        names = ["laika", "zoe", "ana", "maximilian", "bo", "evelyn", "tom"]
        _run_evaluate(fn, gpt, twin(gpt, config), make_loader(names, batch_size=3, shuffle=False), ref.PAD_Y, None,
                      "", loader_there=at(make_loader)(names, batch_size=3, shuffle=False))

    for mode in ("train", "eval"):
        with case(f"the model is in {mode} mode before the call"):
            model = at(beside.Recorder)(at(beside.Toy)(V))
            model.train(mode == "train")
            call(fn, model, loader, ignore, what="evaluate(model, loader, ignore_index)")
            if not model.seen:
                raise Mismatch("evaluate never ran the model", hint="for x, y in loader: logits = model(x) ...")
            if any(s["grad"] for s in model.seen):
                raise Mismatch("evaluate runs the model with gradients enabled",
                               ["autograd records every operation, which costs memory and time for nothing here"],
                               hint="wrap the loop in `with torch.no_grad():` "
                                    "(or decorate evaluate with @torch.no_grad())")
            if any(s["training"] for s in model.seen):
                raise Mismatch("evaluate runs the model in train mode",
                               hint="call model.eval() before the loop, so dropout is switched off")
            if model.training != (mode == "train"):
                if mode == "train":
                    raise Mismatch("evaluate leaves the model in eval mode; it was in train mode before",
                                   hint="remember the mode first (was_training = model.training) and restore it "
                                        "at the end: model.train(was_training)")
                raise Mismatch("evaluate switches the model to train mode; it was in eval mode before",
                               hint="restore the mode it found: was_training = model.training at the start, "
                                    "model.train(was_training) at the end (not always model.train())")
    return "6 loaders, max_batches, ignore_index 6, 0 and -100, no_grad, eval mode, mode restored"

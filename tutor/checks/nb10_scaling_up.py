"""Checks for notebook 10: random text windows, FLOPs per token, and averaging gradients over processes.

``average_gradients`` is run for real: in process groups of 2 and 3 processes talking over Gloo on
this machine. The learner's function usually lives in a notebook cell, which ``spawn`` (the start
method of macOS and Windows) cannot pickle. On Linux (Colab included) the processes are forked, so
they inherit the function as it is; elsewhere they are spawned and get the function's source code,
which they run again with ``torch``, ``dist``, ``nn``, ``F`` and ``math`` defined. Set
``TUTOR_DIST_START=spawn`` (or ``fork``) to choose. Where no process group can start, the check
says so in its result. Each process counts its collective calls (``dist.all_reduce``, ...), so that calls that
do not match between processes (``all_reduce`` on rank 0 only, or once too often on one rank) are named as such,
with what Gloo said in words (its C++ crash report stays out of the notebook: ``tutor.distributed``).
"""



import torch

from tutor import reference as ref
from tutor.checks import beside
from tutor.checks.harness import LearnerError, Mismatch, NotDone, at, call, case, check, salted, seed
from tutor.course import catalog
from tutor.distributed import NoProcessGroup, RanksStopped, gloo_reason, run_in_group, start_method

__all__ = catalog.check_names(__name__)  # this notebook's exercises (tutor.course.catalog)
# What the checks import only when they run: the grader imports it before any learner code (tutor.grading.kernel).
IMPORTED_WHEN_CHECKING = ("tutor.train.long_run",)


# --- get_batch ----------------------------------------------------------------------------------


PAST_THE_END = ("offsets go from 0 to N - block_size - 1: torch.randint(N - block_size, ...) "
                "(the upper bound of randint is excluded)")


def _batch(fn, data, block_size, batch_size, generator, what):
    try:
        got = call(fn, data, block_size, batch_size, generator=generator, what=what)
    except LearnerError as e:  # a window cut short at the end of data: torch.stack or indexing fails
        text = str(e.error)
        if "stack expects each tensor to be equal size" in text or "out of bounds" in text:
            e.hint = "a window ran past the end of data; " + PAST_THE_END
        raise
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise Mismatch(f"get_batch returned {type(got).__name__}; it should return a pair (x, y)",
                       hint="return x, y" if got is not None else "did you forget `return x, y`?")
    x, y = got
    for name, t in (("x", x), ("y", y)):
        if not isinstance(t, torch.Tensor):
            raise Mismatch(f"{name} should be a torch.Tensor, got {type(t).__name__}",
                           hint="build the batch with torch.stack of slices of data")
        if t.dtype != torch.long:
            raise Mismatch(f"{name} has dtype {t.dtype}; it should be torch.long (ids for nn.Embedding)",
                           hint="slice `data` itself, which is already a LongTensor")
        if tuple(t.shape) != (batch_size, block_size):
            hint = None
            if t.dim() == 2 and t.shape[0] == batch_size and t.shape[1] == block_size + 1:
                hint = (f"the windows are {block_size + 1} long: x = data[i:i + block_size] and "
                        "y = data[i + 1:i + 1 + block_size] (Python slices exclude the end)")
            elif t.dim() == 2 and t.shape[0] == batch_size and t.shape[1] == block_size - 1:
                hint = (f"the windows are {block_size - 1} long: the slice end is excluded, so "
                        "x = data[i:i + block_size], y = data[i + 1:i + 1 + block_size]")
            elif t.dim() == 2 and tuple(t.shape) == (block_size, batch_size):
                hint = "the axes are swapped: stack the windows along dim 0 (torch.stack(windows))"
            raise Mismatch(f"{name} has shape {tuple(t.shape)}, expected [batch_size, block_size] = "
                           f"{(batch_size, block_size)}", hint=hint)
        if t.device != data.device:
            raise Mismatch(f"{name} is on {t.device}, but data is on {data.device}",
                           hint="slice `data` itself; don't move the batch")
    return x, y


def _offsets(x, y, data):
    """The offset of every row of x in ``data = arange(N) + base``, checking that rows are windows."""
    base = int(data[0])
    offsets = []
    T = x.shape[1]
    for b in range(x.shape[0]):
        o = int(x[b, 0]) - base
        window = data[o:o + T] if 0 <= o < len(data) else None
        if window is None or len(window) != T or not torch.equal(x[b], window):
            raise Mismatch(f"row {b} of x is not a window of consecutive characters of data",
                           [f"x[{b}] = {x[b].tolist()[:8]}..."],
                           hint="x[b] must be data[i:i + block_size] for one random offset i")
        expect = data[o + 1:o + 1 + T]
        if len(expect) != T:
            raise Mismatch(f"row {b} starts at offset {o}, too close to the end: its target runs past the end of data",
                           hint=PAST_THE_END)
        if not torch.equal(y[b], expect):
            if torch.equal(y[b], x[b]):
                hint = ("y is x itself: the target of each character is the NEXT one, "
                        "y = data[i + 1:i + 1 + block_size]")
            elif o >= 1 and torch.equal(y[b], data[o - 1:o - 1 + T]):
                hint = "y is shifted the wrong way: y = data[i + 1:i + 1 + block_size], one character later"
            else:
                hint = "y[b] must be x[b] shifted by one character: data[i + 1:i + 1 + block_size]"
            raise Mismatch(f"y[{b}] is not x[{b}] shifted by one",
                           [f"x[{b}] = {x[b].tolist()[:6]}...", f"expected y[{b}] = {expect.tolist()[:6]}...",
                            f"got      y[{b}] = {y[b].tolist()[:6]}..."], hint=hint)
        offsets.append(o)
    return offsets


def _generator(number):
    """A generator seeded with ``number``, where the learner's code runs (it draws from it)."""
    return at(torch.Generator)().manual_seed(salted(number))


GLOBAL_RNG = ("with generator=None, leave it None and pass it on: torch.randint(..., generator=generator) then "
              "draws from torch's global generator, which torch.manual_seed (and tutor.seed_everything) seeds, "
              "so a run can be repeated. Don't make a generator of your own: `generator or torch.Generator()` "
              "starts from the same fixed seed at every call")


def _global_rng(fn):
    """With ``generator=None`` the batch follows torch's global generator: the same seed gives the same batch,
    another seed another one, and two calls in a row differ."""
    data = torch.arange(200)
    what = "get_batch(data [200], block_size=8, batch_size=16)"

    def batch(number=None):
        if number is not None:
            seed(number)
        return _batch(fn, data, 8, 16, None, what)[0]

    first, second = batch(5), batch()
    again = batch(5)
    other = batch(6)
    if torch.equal(first, second):
        raise Mismatch("with generator=None, two calls in a row gave the same batch",
                       ["torch.manual_seed(5), then get_batch(...) twice: the same windows both times",
                        "each call seems to make a new generator with a fixed seed, so training would see one batch "
                        "over and over"], GLOBAL_RNG)
    if not torch.equal(first, again):
        raise Mismatch("with generator=None, torch.manual_seed(5) twice gave two different batches",
                       ["the offsets do not come from torch's global generator (random.randint, numpy, or a "
                        "generator kept from an earlier call?)"], GLOBAL_RNG)
    if torch.equal(first, other):
        raise Mismatch("with generator=None, torch.manual_seed(5) and torch.manual_seed(6) gave the same batch",
                       ["the global seed is ignored"], GLOBAL_RNG)


@check
def get_batch(fn):
    with case("data = arange(100), block_size 8, batch_size 4"):
        data = torch.arange(100)
        x, y = _batch(fn, data, 8, 4, _generator(0),
                      "get_batch(data [100], block_size=8, batch_size=4, generator=g)")
        _offsets(x, y, data)
    with case("block_size 1, batch_size 3, data = arange(50) + 7"):
        data = torch.arange(50) + 7
        x, y = _batch(fn, data, 1, 3, _generator(1),
                      "get_batch(data [50], block_size=1, batch_size=3, generator=g)")
        _offsets(x, y, data)
    with case("the same seed twice: data [100], block_size 8, batch_size 16"):
        data = torch.arange(100)
        a = _batch(fn, data, 8, 16, _generator(123), "get_batch(..., generator=seeded g)")
        b = _batch(fn, data, 8, 16, _generator(123), "get_batch(..., generator=seeded g)")
        if not (torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])):
            raise Mismatch("two generators with the same seed gave different batches",
                           hint="draw the offsets with torch.randint(..., generator=generator): "
                                "without it (or with random.randint) the batch ignores the seed")
        c = _batch(fn, data, 8, 16, _generator(124), "get_batch(..., generator=another g)")
        if torch.equal(a[0], c[0]):
            raise Mismatch("two different seeds gave the same batch", hint="the offsets must be random: torch.randint")
        if len(set(x_row[0] for x_row in a[0].tolist())) == 1:
            raise Mismatch("every row of the batch starts at the same offset",
                           hint="draw batch_size offsets: "
                                "torch.randint(N - block_size, (batch_size,), generator=generator)")
    with case("generator=None (the default): torch's global random numbers, seeded with torch.manual_seed"):
        _global_rng(fn)
    with case("offsets cover 0 .. N - block_size - 1 uniformly: data [20], block_size 5, 4000 windows"):
        N, T = 20, 5
        data = torch.arange(N)
        x, y = _batch(fn, data, T, 4000, _generator(7),
                      "get_batch(data [20], block_size=5, batch_size=4000, generator=g)")
        offsets = _offsets(x, y, data)
        counts = torch.bincount(torch.tensor(offsets), minlength=N - T)
        last = N - T - 1
        if counts[last] == 0:
            raise Mismatch(f"the last window (offset N - block_size - 1 = {last}) never appears",
                           [f"offsets seen: {min(offsets)} .. {max(offsets)}"],
                           hint="the upper bound of torch.randint is excluded: torch.randint(N - block_size, ...) "
                                "draws 0 .. N - block_size - 1")
        if counts[0] == 0:
            raise Mismatch("the first window (offset 0) never appears",
                           [f"offsets seen: {min(offsets)} .. {max(offsets)}"],
                           hint="draw offsets from 0: "
                                "torch.randint(N - block_size, (batch_size,), generator=generator)")
        expected = len(offsets) / (N - T)
        worst = int((counts.float() - expected).abs().argmax())
        if abs(counts[worst].item() - expected) > 0.35 * expected:
            raise Mismatch("the offsets are not uniform", [f"offset {worst} drawn {counts[worst].item()} times, "
                                                           f"expected about {expected:.0f}"],
                           hint="draw every offset with the same probability: torch.randint(N - block_size, ...)")
    with case("real text: encoded 'To be, or not to be' repeated, block_size 6, batch_size 5"):
        vocab = sorted(set("To be, or not to be: that is the question."))
        text = "To be, or not to be: that is the question. " * 3
        data = torch.tensor([vocab.index(ch) if ch in vocab else 0 for ch in text])
        x, y = _batch(fn, data, 6, 5, _generator(2), "get_batch(encoded text, 6, 5, generator=g)")
        joined = "".join(map(chr, (data + 65).tolist()))
        for b in range(5):
            row = "".join(map(chr, (x[b] + 65).tolist()))
            target = "".join(map(chr, (y[b] + 65).tolist()))
            i = joined.find(row + target[-1])
            if i < 0:
                raise Mismatch(f"row {b}: x and y are not a window of the text and its shift by one")
    return "windows, shifted targets, seeded (a generator or the global seed), uniform offsets 0 .. N - block_size - 1"


# --- flops_per_token ----------------------------------------------------------------------------


def _flops_mistakes(N, L, d, T):
    """(value, why) of each known mistake; ``flops_cases`` makes every value differ from the others."""
    return [
        (6 * N, "only the 6N term: add the attention over the context, 12 * n_layers * d_model * block_size"),
        (2 * N + 12 * L * d * T, "2N counts the forward pass only; training also runs the backward pass (twice the "
                                 "forward's FLOPs): 6N"),
        (2 * N + 4 * L * d * T, "these are the forward pass's FLOPs only: multiply by 3 for forward and backward"),
        (2 * N, "2N counts the forward pass only, and the attention term is missing: 6N + 12 L d T"),
        (6 * N + 6 * L * d * T, "the attention term is 12 * n_layers * d_model * block_size, not 6 ..."),
        (6 * N + L * d * T, "the attention term needs its factor 12 (2 matrix products, QKᵀ and AV, of 2 FLOPs per "
                            "multiply-add, times 3 for forward and backward): 12 * n_layers * d_model * block_size"),
        (6 * N + 12 * L * d * T * T, "the attention term grows with the context as T, not T²: per token, "
                                     "12 * n_layers * d_model * block_size"),
        (6 * N + 12 * L * d * d, "the attention term uses d_model twice; its last factor is the context length: "
                                 "12 * n_layers * d_model * block_size"),
        ((6 * N + 12 * L * d * T) * T, "this is per sequence of block_size tokens; the exercise asks per token"),
        (6 * N + 12 * L * T, "the attention term is missing d_model: 12 * n_layers * d_model * block_size"),
        (6 * N + 12 * d * T, "the attention term is missing n_layers: 12 * n_layers * d_model * block_size"),
        (6 * N + 12 * L * d, "the attention term is missing block_size (the context each token attends over): "
                             "12 * n_layers * d_model * block_size"),
    ]


def flops_cases():
    """(label, n_params, n_layers, d_model, block_size) of the check: notebook 10's CPU model (counted from the
    preset the notebook trains, as the notebook counts it), GPT-2 large and two small models. In every case the
    four arguments differ (and none is 1), so that each known mistake gives its own number and is named right."""
    from tutor.train.long_run import PRESETS  # here, not at import: the training package is not needed before

    cpu = PRESETS["cpu"]
    with torch.random.fork_rng(devices=[]):  # building the model draws its initial weights: not from the learner's RNG
        n = sum(p.numel() for p in ref.GPT(cpu.model_config()).parameters())
    return [
        (f"notebook 10's CPU model: N={n:,}, {cpu.n_layers} layers, d_model {cpu.d_model}, "
         f"block_size {cpu.block_size}", n, cpu.n_layers, cpu.d_model, cpu.block_size),
        ("GPT-2 large: N=774M, 36 layers, d_model 1280, block_size 1024", 774_000_000, 36, 1280, 1024),
        ("tiny: N=1,000, 3 layers, d_model 8, block_size 5", 1000, 3, 8, 5),
        ("N=10,816, 4 layers, d_model 16, block_size 40", 10_816, 4, 16, 40),
    ]


@check
def flops_per_token(fn):
    cases = flops_cases()
    for label, N, L, d, T in cases:
        with case(label):
            what = f"flops_per_token(n_params={N}, n_layers={L}, d_model={d}, block_size={T})"
            got = call(fn, N, L, d, T, what=what)
            expected = ref.flops_per_token(N, L, d, T)
            if isinstance(got, torch.Tensor):
                raise Mismatch(f"{what} returned a tensor; it should return a Python int", hint="use plain arithmetic")
            if isinstance(got, bool) or not isinstance(got, (int, float)):
                raise Mismatch(f"{what} returned {type(got).__name__}; it should return an int",
                               hint="did you forget `return`?" if got is None else None)
            if got != expected:
                cause = next((why for value, why in _flops_mistakes(N, L, d, T) if got == value), None)
                raise Mismatch("wrong number of FLOPs per token", [f"expected {expected:,}, got {got:,}"],
                               cause or "6 * n_params + 12 * n_layers * d_model * block_size")
            if not isinstance(got, int):
                raise Mismatch(f"{what} returned a float ({got!r}); it should return an int",
                               hint="keep to integers: 6 * n_params + 12 * n_layers * d_model * block_size")
    return "4 model sizes"


# --- average_gradients --------------------------------------------------------------------------


SAME_CALLS = ("every process must call all_reduce, the same number of times, in the same order (one call per "
              "parameter with a gradient, in model.parameters() order): a collective waits for every process of "
              "the group. No `if dist.get_rank() == 0:` around it, and no extra call on one rank")


def _close(a, b):
    return a is not None and b is not None and torch.allclose(a, b, atol=1e-6, rtol=1e-5)


def _diagnose(results, world_size, local, total):
    """Compare what every rank left in .grad with the mean; name the likely mistake."""
    names = list(total)
    mean = {n: total[n] / world_size for n in names}
    right = [all(_close(r["grads"][n], mean[n]) for n in names) for r in results]
    if right[0] and not all(right):
        rank = right.index(False)
        raise Mismatch(f"rank 0 holds the mean, but rank {rank} of {world_size} does not",
                       hint="dist.reduce sends the result to one process only: use dist.all_reduce, "
                            "which leaves the sum on every process")
    for r in results:
        rank = r["rank"]
        grads, params = r["grads"], r["params"]
        if grads["unused"] is not None:
            raise Mismatch("the parameter that had no gradient (.grad was None) got one",
                           hint="skip parameters whose .grad is None: `if p.grad is not None:`")
        wrong = [n for n in names if not _close(grads[n], mean[n])]
        if not wrong:
            continue
        own_model = beside.rank_model(rank)
        weights_changed = any(not torch.equal(params[n], p.detach()) for n, p in own_model.named_parameters())
        def all_wrong(target):
            return all(_close(grads[n], target[n]) for n in names)
        if weights_changed:
            hint = ("the weights changed: average the gradients p.grad, not the parameters p (or p.data); "
                    "the optimizer's step then keeps the weights identical on every process")
        elif all_wrong(total):
            hint = ("the gradients are summed but not divided by the number of processes: "
                    "after all_reduce(SUM), divide by dist.get_world_size()")
        elif all_wrong({n: total[n] / world_size ** 2 for n in names}):
            hint = ("the gradients are divided by the number of processes twice (e.g. once before "
                    "all_reduce and once after): divide once, after the SUM")
        elif all_wrong(local[rank]):
            hint = ("the gradients are still this process's own: all_reduce works in place on the tensor you give it, "
                    "so pass p.grad itself (a copy such as p.grad.clone() is reduced and thrown away), "
                    "and call it on every process")
        elif world_size != 2 and all_wrong({n: total[n] / 2 for n in names}):
            hint = "you divide by 2; divide by the number of processes, dist.get_world_size()"
        elif all_wrong({n: local[rank][n] / world_size for n in names}):
            hint = "the gradients were divided but never summed over the processes: dist.all_reduce(p.grad, op=SUM)"
        elif any(_close(grads[n], mean[n]) for n in names):
            hint = (f"only some parameters were averaged ({', '.join(wrong)} were not): loop over all of "
                    "model.parameters() (is there a `return` inside the loop?)")
        else:
            hint = ("for every parameter with a gradient: dist.all_reduce(p.grad, op=dist.ReduceOp.SUM), "
                    "then p.grad /= world_size")
        n = wrong[0]
        raise Mismatch(f"on rank {rank} of {world_size}, `{n}.grad` is not the mean of the gradients of all processes",
                       [f"expected {mean[n].flatten()[:3].tolist()} ..., got "
                        f"{grads[n].flatten()[:3].tolist() if grads[n] is not None else None} ..."], hint)


def _describe_calls(counts) -> str:
    return ", ".join(f"{n} {name}" for name, n in sorted(counts.items()) if n) or "none"


def _calls_per_rank(results, world_size) -> list:
    """"collective calls: rank 0: 4 all_reduce; rank 1: none" (ranks without a result: "stopped")."""
    parts = []
    for rank in range(world_size):
        r = results[rank] if rank < len(results) else None
        counts = None if r is None else r.get("collectives")
        parts.append(f"rank {rank}: " + ("stopped" if r is None else "?" if counts is None else
                                         _describe_calls(counts) + (" (then it raised)" if r["status"] == "error"
                                                                     else "")))
    return ["collective calls: " + "; ".join(parts)]


GLOO_COMMUNICATION = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "Timed out waiting",
                      "collective mismatch", "doesn't match expected size", "Connection refused")


def _expect_same_calls(results, world_size):
    """The ranks made different collective calls (counted in each process), or one of them failed inside Gloo
    because another had stopped talking to it: name it, with the calls of every rank."""
    counts = [r.get("collectives") for r in results]
    differ = all(c is not None for c in counts) and any(c != counts[0] for c in counts)
    comms = [r for r in results if r["status"] == "error" and any(s in r["error"] for s in GLOO_COMMUNICATION)]
    if not (differ or comms):
        return
    details = _calls_per_rank(results, world_size)
    for r in comms:
        details.append(f"rank {r['rank']} failed in Gloo: {gloo_reason(r['error'])}"
                       + (f" (at {r['where']})" if r.get("where") else ""))
    raise Mismatch("the processes did not make the same collective calls"
                   + (": one waited in all_reduce for a process that never called it" if comms else ""),
                   details, SAME_CALLS)


@check(timeout=240.0)
def average_gradients(fn):
    for world_size in (2, 3):
        with case(f"{world_size} processes (Gloo), a small model whose gradients differ from process to process"):
            try:
                results = at(run_in_group)(at(beside.average_on_rank), world_size, learner_fn=fn)
            except NoProcessGroup as e:
                raise Mismatch("could not start a process group on this machine, so your function was not run",
                               [str(e)], "nothing wrong with your code as far as we know: run this notebook on "
                                         "Linux, macOS or Colab, where Gloo works") from None
            except RanksStopped as e:
                ranks = ", ".join(str(rank) for rank in sorted(e.stopped))
                raise Mismatch(f"the processes' collective calls did not match: Gloo stopped rank {ranks} "
                               f"of {world_size}",
                               [f"rank {rank}: {why}" for rank, why in sorted(e.stopped.items())]
                               + _calls_per_rank(e.results, world_size), SAME_CALLS) from None
            except TimeoutError as e:
                raise Mismatch("the processes did not finish in time: some wait in a collective call that the "
                               "others never make", [str(e)], SAME_CALLS) from None
            if any(r is not None and r["status"] == "not done" for r in results):
                raise NotDone()
            _expect_same_calls(results, world_size)
            errors = [r for r in results if r["status"] == "error"]
            if errors:
                r = errors[0]
                hint = None
                if "AVG" in r["error"] or "ReduceOp" in r["error"] and "gloo" in r["error"].lower():
                    hint = "Gloo (the CPU backend) has no ReduceOp.AVG: use SUM, then divide by the world size"
                elif "NoneType" in r["error"]:
                    hint = "some parameters have no gradient (.grad is None): skip them"
                elif "not been initialized" in r["error"] or "Default process group" in r["error"]:
                    hint = "call average_gradients inside a process group; don't create or destroy one in it"
                raise Mismatch(f"your function raised an exception on rank {r['rank']} of {world_size}",
                               [r["error"]] + ([f"at {r['where']}"] if r.get("where") else []), hint)
            models = [beside.rank_model(rank) for rank in range(world_size)]
            local = [{n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None} for m in models]
            total = {n: sum(loc[n] for loc in local) for n in local[0]}
            _diagnose(results, world_size, local, total)
    method = start_method()
    return f"groups of 2 and 3 processes ({method}), gradients averaged, weights untouched"

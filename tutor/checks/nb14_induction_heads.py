"""Checks for notebook 14: what a model learned (attention_pattern, capture_patterns, induction_scores, ablate_head).

Each is compared with the model answer on the course's GPT (``blocks[i].attn`` is a ``MultiHeadAttention``), and
its classic mistakes are recognised by their output: scores instead of probabilities, the mask left out, the heads
mixed up, the induction offset one off either way, an average over the wrong axis, a hook left on the model, an
ablation of every head or after the output projection, a model changed in place.
"""

import math

import torch

from tutor import reference as ref
from tutor.checks import beside
from tutor.checks.compare import (
    KIND_LABELS,
    KINDS,
    as_kind,
    expect_close,
    expect_kind,
    kind_cases,
    learner_as_kind,
    matches,
    reads_values,
    shape_text,
)
from tutor.checks.harness import (
    LearnerError,
    Mismatch,
    at,
    call,
    case,
    check,
    error_details,
    generator,
    manual_seed,
    twin,
)
from tutor.course import catalog

__all__ = catalog.check_names(__name__)  # this notebook's exercises (tutor.course.catalog)

SMALL = dict(vocab_size=13, max_len=8, d_model=16, n_heads=4, n_layers=3, dropout=0.0)


def _attn(d_model, n_heads, causal=True, bias=False, seed=0):
    with torch.random.fork_rng(devices=[]):
        manual_seed(seed)
        attn = ref.MultiHeadAttention(d_model, n_heads, causal=causal, bias=bias)
        if bias:
            for layer in (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj):
                torch.nn.init.normal_(layer.bias, std=0.5)
        return attn.eval()


def _gpt(config=None, seed=0):
    with torch.random.fork_rng(devices=[]):
        manual_seed(seed)
        model = ref.GPT(ref.GPTConfig(**(config or SMALL))).eval()
        for p in model.parameters():  # larger weights: sharper patterns, so that mistakes show
            p.data.mul_(8.0)
        return model


def _state(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _expect_unchanged(model, before: dict, what: str, hint: str):
    after = model.state_dict()
    changed = [k for k, v in before.items() if k not in after or not torch.equal(after[k].detach().cpu(), v)]
    if changed:
        raise Mismatch(f"{what} changed the model's weights", [f"changed: {changed[:4]}"], hint=hint)


# --- attention_pattern --------------------------------------------------------------------------------------------


def _pattern_mistakes(attn, x):
    B, T, C = x.shape
    H = attn.n_heads
    d = C // H
    mask = ref.causal_mask(T)

    def scores(scale=math.sqrt(d), split=ref.split_heads):
        q, k = split(attn.q_proj(x), H), split(attn.k_proj(x), H)
        return q @ k.transpose(-2, -1) / scale

    def masked(s, m=mask):
        return s.masked_fill(~m, float("-inf")) if attn.causal else s

    def unbiased(s_layer):
        return x @ s_layer.weight.T

    def no_bias_scores():
        q, k = ref.split_heads(unbiased(attn.q_proj), H), ref.split_heads(unbiased(attn.k_proj), H)
        return q @ k.transpose(-2, -1) / math.sqrt(d)

    def mixed(t, H):  # the heads read as [B, H, T, d] straight from [B, T, C]: tokens and heads mixed
        return t.reshape(B, H, T, d)

    with torch.no_grad():
        return [
            ("these are the scores, not probabilities: apply softmax over the keys (the last axis)",
             lambda: masked(scores())),
            ("the causal mask was not applied: row i must give zero to every key after i",
             lambda: torch.softmax(scores(), dim=-1)),
            ("the mask is the wrong way round: a query may attend to itself and to earlier keys only (tril, not triu)",
             lambda: torch.softmax(masked(scores(), ~mask | torch.eye(T, dtype=torch.bool)), dim=-1)),
            ("softmax over the wrong axis: each row (one query, over the keys) must sum to 1, dim=-1",
             lambda: torch.softmax(masked(scores()), dim=-2).nan_to_num(0.0)),
            ("the scores were not divided by √d_head", lambda: torch.softmax(masked(scores(1.0)), dim=-1)),
            ("the scores were divided by √d_model: each head's width is d_head = d_model / n_heads",
             lambda: torch.softmax(masked(scores(math.sqrt(C))), dim=-1)),
            ("the projections' biases were left out: attn.q_proj(x) includes GPT-2's biases, x @ weight.T does not",
             lambda: torch.softmax(masked(no_bias_scores()), dim=-1)),
            ("the heads are mixed up with the positions: [B, T, C] -> view(B, T, H, d_head) -> transpose(1, 2) "
             "(split_heads), not view(B, H, T, d_head)",
             lambda: torch.softmax(masked(scores(split=mixed)), dim=-1)),
        ]


def _check_pattern(fn, attn, x, label):
    with case(label):
        mine = twin(attn, attn.q_proj.in_features, attn.n_heads, causal=attn.causal, bias=attn.q_proj.bias is not None)
        got = call(fn, mine, x, what=f"attention_pattern({label})")
        expected = ref.attention_pattern(attn, x).detach()
        if isinstance(got, torch.Tensor) and got.shape == expected.shape[:1] + expected.shape[2:]:
            raise Mismatch(f"attention_pattern returned {shape_text(got.shape)}: one pattern for all heads",
                           [f"expected {shape_text(expected.shape)} (B, H, T, T)"],
                           hint="keep the head axis: every head has its own pattern; don't average or merge them")
        expect_close(got.detach() if isinstance(got, torch.Tensor) else got, expected, f"the pattern of {label}",
                     names="B H T T", mistakes=_pattern_mistakes(attn, x), atol=1e-5, rtol=1e-4)


@check
def attention_pattern(fn):
    g = generator(0)
    cases = [
        (_attn(16, 4), torch.randn(2, 5, 16, generator=g) * 3, "MultiHeadAttention(16, 4), x [2, 5, 16]"),
        (_attn(12, 2, seed=1), torch.randn(3, 7, 12, generator=g) * 3, "MultiHeadAttention(12, 2), x [3, 7, 12]"),
        (_attn(8, 1, seed=2), torch.randn(1, 4, 8, generator=g) * 3, "one head: MultiHeadAttention(8, 1)"),
        (_attn(16, 4, bias=True, seed=3), torch.randn(2, 6, 16, generator=g) * 3,
         "GPT-2's attention, with biases: MultiHeadAttention(16, 4, bias=True)"),
        (_attn(16, 4, seed=4), torch.randn(2, 1, 16, generator=g), "one position: x [2, 1, 16]"),
    ]
    for attn, x, label in cases:
        _check_pattern(fn, attn, x, label)
    with case("MultiHeadAttention(16, 4, causal=False): no mask",
              hint_on_error="read attn.causal: a non-causal attention (an encoder's) has no mask"):
        attn = _attn(16, 4, causal=False, seed=5)
        x = torch.randn(2, 5, 16, generator=g) * 3
        mine = twin(attn, 16, 4, causal=False)
        got = call(fn, mine, x, what="attention_pattern(MultiHeadAttention(16, 4, causal=False), x)")
        expected = ref.attention_pattern(attn, x).detach()
        if matches(got, ref.attention_pattern(_attn(16, 4, seed=5), x).detach()):
            raise Mismatch("attention_pattern masked a non-causal attention",
                           hint="apply the causal mask only when attn.causal is True")
        expect_close(got, expected, "the pattern of a non-causal attention", names="B H T T")
    attn = _attn(16, 4, seed=6)
    mine = twin(attn, 16, 4)
    x = torch.randn(2, 5, 16, generator=g)
    for kind in KINDS:
        label = f"attention_pattern(attn, x) {KIND_LABELS[kind]}"
        with case(label):
            there, theirs, x_kind = learner_as_kind(mine, kind), as_kind(attn, kind), as_kind(x, kind)
            try:
                got = call(at(beside.like_a_gpu), fn, there, x_kind, what=label)
            except LearnerError as failure:
                if kind == "meta" and reads_values(failure.error):
                    continue  # code that reads a value cannot run on meta: no verdict
                raise
            expect_kind(got, beside.like_a_gpu(ref.attention_pattern, theirs, x_kind), f"the output of {label}",
                        kind, names="B H T T")
    with case("a layer whose forward refuses to run: the pattern comes from q_proj and k_proj"):
        attn = _attn(16, 4, seed=7)
        mine = at(beside.UnrunnableAttention)(16, 4)
        mine.load_state_dict(attn.state_dict())
        mine.eval()
        x = torch.randn(2, 5, 16, generator=g) * 3
        try:
            got = call(fn, mine, x, what="attention_pattern(attn, x) on a layer whose forward raises")
        except LearnerError as e:
            if beside.UnrunnableAttention.MESSAGE in str(e.error):
                raise Mismatch("attention_pattern runs the layer, attn(x), instead of computing the pattern",
                               error_details(e),
                               hint="compute softmax(q kᵀ / √d_head) from attn.q_proj(x) and attn.k_proj(x) "
                                    "yourself: that computation is the exercise") from None
            raise
        expect_close(got, ref.attention_pattern(attn, x).detach(), "the pattern of a layer that is not run",
                     names="B H T T")
    return "{cases} cases: 1, 2 and 4 heads, biases, one position, causal or not, float64 and meta"


# --- capture_patterns ---------------------------------------------------------------------------------------------

CAPTURE_HINT = ("register a forward pre-hook on each model.blocks[i].attn, run the model once, and remove every hook "
                "in a finally: block (or with contextlib.ExitStack), whatever happens")


def _counter():
    return at(beside.PatternCounter)(at(ref.attention_pattern))


def _expect_patterns(got, expected, label):
    L = len(expected)
    if isinstance(got, torch.Tensor) or not isinstance(got, (list, tuple)):
        raise Mismatch(f"capture_patterns should return a list of {L} patterns, one per layer",
                       [f"got {type(got).__name__}" + (f" of shape {shape_text(got.shape)}"
                                                        if isinstance(got, torch.Tensor) else "")],
                       hint="append each layer's pattern to a list in the hook, and return the list")
    got = list(got)
    if len(got) != L:
        H = expected[0].shape[1]
        hint = (f"one pattern per layer: the model has {L} layers (of {H} heads each)"
                + ("; did you loop over the heads?" if len(got) == H else
                   "; did the model run more than once, or a hook stay from an earlier call?" if len(got) > L else ""))
        raise Mismatch(f"capture_patterns returned {len(got)} patterns for a model of {L} layers", hint=hint)
    for layer, (g, e) in enumerate(zip(got, expected)):
        if not matches(g, e, atol=1e-5, rtol=1e-4):
            other = next((j for j, e2 in enumerate(expected) if j != layer and matches(g, e2)), None)
            if other is not None:
                raise Mismatch(f"pattern {layer} is layer {other}'s: the layers are in the wrong order",
                               hint="keep the model's order: the hook of layer 0 runs first")
        hint = ("compute each layer's pattern with pattern_fn(attn, x) on the input x its attention got (a forward "
                "pre-hook's args[0]), not on the block's input or the attention's output")
        if layer > 0 and matches(got[0], expected[0], atol=1e-5, rtol=1e-4):
            hint = (f"layer 0 is right and layer {layer} is not: did a hook change what the model computes? A hook "
                    "that only reads returns None and leaves args[0] as it is")
        expect_close(g, e, f"the pattern of layer {layer} ({label})", names="B H T T", hint=hint)


def _hooks(model, n_layers) -> int:
    """The forward hooks and pre-hooks on the model, its blocks and their attention layers (where the learner runs)."""
    modules = [model] + [m for i in range(n_layers) for m in (model.blocks[i], model.blocks[i].attn)]
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in modules)


LEFT_HOOK = ("keep the handle register_forward_pre_hook returns and call handle.remove() on each, in a finally: "
             "block")


@check
def capture_patterns(fn):
    g = generator(0)
    for label, config, ids in (
        ("a GPT of 3 layers and 4 heads, ids [2, 6]", SMALL, torch.randint(0, 13, (2, 6), generator=g)),
        ("a GPT of 2 layers and 2 heads, ids [1, 8]", {**SMALL, "n_layers": 2, "n_heads": 2},
         torch.randint(0, 13, (1, 8), generator=g)),
    ):
        with case(label):
            model = _gpt(config)
            mine = twin(model, ref.GPTConfig(**config))
            before, logits, expected = _state(model), model(ids).detach(), ref.capture_patterns(model, ids)
            counter, hooks = _counter(), _hooks(mine, config["n_layers"])
            got, graphs = call(at(beside.with_graph), fn, mine, ids, counter,
                               what=f"capture_patterns(model, ids, pattern_fn) on {label}")
            got = list(got) if isinstance(got, list) else got  # a copy: a hook left behind would add to it
            _expect_patterns(got, expected, label)
            if graphs:
                raise Mismatch("the patterns carry their computation graph (requires_grad=True)",
                               hint="run the model under torch.no_grad() (or .detach() each pattern): on GPT-2 the "
                                    "graphs of every layer would hold gigabytes")
            calls = counter.calls
            if calls != len(expected):
                raise Mismatch(f"pattern_fn was called {calls} times for a model of {len(expected)} layers",
                               hint="run the model once: one forward pass calls each layer's hook once" if calls >
                               len(expected) else "call pattern_fn(attn, x) in the hook of every layer")
            call(mine, ids, what="the model, run again after capture_patterns returned")
            if counter.calls != calls:
                raise Mismatch("a hook is still registered after capture_patterns returned: the model ran once more "
                               "and pattern_fn was called again", [f"{counter.calls - calls} more calls"],
                               hint=LEFT_HOOK)
            if _hooks(mine, config["n_layers"]) != hooks:
                raise Mismatch("a hook is still registered on the model after capture_patterns returned (even if it "
                               "does nothing now)", hint=LEFT_HOOK)
            _expect_unchanged(mine, before, "capture_patterns", CAPTURE_HINT)
            expect_close(mine(ids).detach(), logits, "the model's logits after capture_patterns",
                         hint="a hook must only read: return None from it, and don't change args[0] in place")
    with case("a model that raises (ids longer than its max_len): the hooks must still be removed"):
        model = _gpt()
        mine = twin(model, ref.GPTConfig(**SMALL))
        counter, hooks = _counter(), _hooks(mine, SMALL["n_layers"])
        too_long = torch.randint(0, 13, (1, 12), generator=g)
        try:
            call(fn, mine, too_long, counter, what="capture_patterns(model, ids of 12 tokens, pattern_fn)")
        except LearnerError:
            pass  # the model's IndexError goes up to the caller: that is right
        ids = torch.randint(0, 13, (1, 5), generator=g)
        calls = counter.calls
        call(mine, ids, what="the model, run after capture_patterns raised")
        if counter.calls != calls or _hooks(mine, SMALL["n_layers"]) != hooks:
            raise Mismatch("after the model raised inside capture_patterns, its hooks stayed on the model",
                           hint="remove the hooks in a finally: block, so that an error in the model does not leave "
                                "them behind: " + CAPTURE_HINT)
    return "{cases} cases: every layer in order, no hook left, even when the model raises; the model unchanged"


# --- induction_scores ---------------------------------------------------------------------------------------------


def _random_patterns(L, B, H, n, seed):
    g = generator(seed)
    T = 2 * n
    scores = torch.randn(L, B, H, T, T, generator=g) * 2
    scores = scores.masked_fill(~ref.causal_mask(T), float("-inf"))
    return list(torch.softmax(scores, dim=-1).unbind(0))


def _score_mistakes(patterns, n):
    stacked = torch.stack(list(patterns))  # [L, B, H, T, T]
    T = stacked.shape[-1]

    def at_offset(offset, start=n, stop=2 * n, dims=(1, 3)):
        i = torch.arange(start, stop)
        return stacked[:, :, :, i, i - offset].mean(dim=dims)

    return [
        ("the offset is one off: i - n is the earlier occurrence of the same token (a duplicate-token head); the "
         "induction head attends to the token after it, i - n + 1", lambda: at_offset(n)),
        ("the offset is one off: the token after the earlier occurrence is i - n + 1, not i - n + 2",
         lambda: at_offset(n - 2)),
        ("i ran over every position from n - 1: the second half is i = n to 2n - 1 (range(n, 2 * n))",
         lambda: at_offset(n - 1, start=n - 1)),
        ("i ran over the second half but one: the second half is i = n to 2n - 1 (range(n, 2 * n))",
         lambda: at_offset(n - 1, stop=2 * n - 1)),
        ("i started at n + 1: the second half is i = n to 2n - 1 (range(n, 2 * n)); its first token, at n, has its "
         "earlier occurrence at 0 and attends to 1", lambda: at_offset(n - 1, start=n + 1)),
        ("heads and layers are swapped: the result is [L, H], layers down, heads across",
         lambda: at_offset(n - 1).T),
        ("the average is over the heads instead of the batch: average over the batch (and the positions), one "
         "score per head", lambda: stacked[:, :, :, torch.arange(n, T), torch.arange(1, T - n + 1)].mean(dim=(2, 3))),
        ("the scores are summed over the positions instead of averaged",
         lambda: stacked[:, :, :, torch.arange(n, T), torch.arange(1, T - n + 1)].sum(dim=3).mean(dim=1)),
        ("this is the attention to the previous token (i - 1), the previous-token score",
         lambda: ref.previous_token_scores(patterns)),
    ]


@check
def induction_scores(fn):
    for L, B, H, n, seed in ((2, 3, 4, 5, 0), (3, 2, 2, 4, 1), (1, 1, 3, 6, 2)):
        label = f"{L} layers of patterns [{B}, {H}, {2 * n}, {2 * n}], n = {n}"
        with case(label):
            patterns = _random_patterns(L, B, H, n, seed)
            given = [p.clone() for p in patterns]
            got = call(fn, given, n, what=f"induction_scores(patterns, {n})")
            if any(not torch.equal(a, b) for a, b in zip(given, patterns)):
                raise Mismatch("induction_scores changed the patterns it was given",
                               hint="index and average into new tensors; don't write into the patterns")
            if isinstance(got, torch.Tensor) and tuple(got.shape) == (L, H, n):
                raise Mismatch(f"induction_scores returned {shape_text(got.shape)}: one score per position",
                               [f"expected {shape_text((L, H))} (L, H)"],
                               hint="average over the positions i as well as over the batch: mean(dim=(0, 2)) of "
                                    "pattern[:, :, i, i - n + 1]")
            expect_close(got, ref.induction_scores(patterns, n), f"the scores of {label}", names="L H",
                         mistakes=_score_mistakes(patterns, n))
    with case("one layer of patterns of sequences repeated exactly: a perfect induction head scores 1"):
        n, T = 4, 8
        perfect = torch.zeros(1, 2, T, T)
        perfect[0, 0, torch.arange(T), torch.arange(T)] = 1.0
        i = torch.arange(n, T)
        perfect[0, 1, torch.arange(T), torch.arange(T)] = 1.0
        perfect[0, 1, i, i] = 0.0
        perfect[0, 1, i, i - n + 1] = 1.0
        got = call(fn, [perfect], n, what="induction_scores([a perfect induction head], 4)")
        expect_close(got, torch.tensor([[0.0, 1.0]]), "the scores of a head that attends to itself and of a perfect "
                     "induction head", names="L H", mistakes=_score_mistakes([perfect], n))
    kind_cases(fn, lambda kind: ((_as(_random_patterns(2, 2, 2, 3, 3), kind), 3),) * 2,
               ref.induction_scores, "induction_scores(patterns, 3)")
    return "{cases} cases: the offset i - n + 1, the second half, averaged over the batch, [L, H]; float64 and meta"


def _as(patterns, kind):
    return [p.double() if kind == "float64" else p.to("meta") for p in patterns]


# --- ablate_head --------------------------------------------------------------------------------------------------

ABLATE_HINT = ("a forward pre-hook on model.blocks[layer].attn.out_proj that returns its input with head h's slice, "
               "columns h*d_head to (h+1)*d_head, replaced; removed in a finally: block")


def _hooked(model, ids, module, hook, pre=True):
    handle = (module.register_forward_pre_hook if pre else module.register_forward_hook)(hook)
    try:
        with torch.no_grad():
            return model(ids)
    finally:
        handle.remove()


def _ablate_mistakes(model, ids, layer, head, how):
    attn = model.blocks[layer].attn
    H = attn.n_heads
    d = attn.out_proj.in_features // H

    def replace(part=slice(head * d, (head + 1) * d), dims=(0,)):
        def hook(module, args):
            z = args[0].clone()
            z[..., part] = 0.0 if how == "zero" else z[..., part].mean(dim=dims, keepdim=True)
            return (z,)
        return hook

    def after(module, args, out):
        out = out.clone()
        s = slice(head * d, (head + 1) * d)
        out[..., s] = 0.0 if how == "zero" else out[..., s].mean(dim=0, keepdim=True)
        return out

    def layer_out(module, args, out):
        return torch.zeros_like(out) if how == "zero" else out.mean(dim=0, keepdim=True).expand_as(out)

    mistakes = [
        ("every head of the layer was ablated: replace only head h's slice, columns h*d_head to (h+1)*d_head",
         lambda: _hooked(model, ids, attn.out_proj, replace(slice(None)))),
        ("the ablation acts after the output projection: out_proj mixes the heads, so the head's own output is its "
         "slice of out_proj's input (a forward pre-hook on out_proj)",
         lambda: _hooked(model, ids, attn.out_proj, after, pre=False)),
        ("the whole attention layer's output was replaced, not one head's",
         lambda: _hooked(model, ids, attn, layer_out, pre=False)),
        ("the slice is head:head + d_head; head h's columns are h*d_head to (h+1)*d_head",
         lambda: _hooked(model, ids, attn.out_proj, replace(slice(head, head + d)))),
        ("every H-th column was taken (h::H): merge_heads puts each head's d_head numbers side by side, head h in "
         "columns h*d_head to (h+1)*d_head", lambda: _hooked(model, ids, attn.out_proj, replace(slice(head, None, H)))),
        ("another head's slice was ablated: head h is columns h*d_head to (h+1)*d_head",
         lambda: _hooked(model, ids, attn.out_proj, replace(slice(((head + 1) % H) * d, ((head + 1) % H + 1) * d)))),
    ]
    if layer + 1 < len(model.blocks):
        mistakes.append(("the wrong layer: blocks[layer] counts from 0",
                         lambda: ref.ablate_head(model, ids, layer + 1, head, how)))
    if layer > 0:
        mistakes.append(("the wrong layer: blocks[layer] counts from 0",
                         lambda: ref.ablate_head(model, ids, layer - 1, head, how)))
    if how == "mean":
        mistakes += [
            ("the mean is over the positions: average the head's output over the batch (dim 0), per position",
             lambda: _hooked(model, ids, attn.out_proj, replace(dims=(1,)))),
            ("the mean is over the batch and the positions: average over the batch only (dim 0), per position",
             lambda: _hooked(model, ids, attn.out_proj, replace(dims=(0, 1)))),
            ("the mean is over the width of the head: average each number over the batch (dim 0)",
             lambda: _hooked(model, ids, attn.out_proj, replace(dims=(0, 2)))),
            ("this is zero ablation: how='mean' replaces the head's output by its average over the batch",
             lambda: ref.ablate_head(model, ids, layer, head, "zero")),
        ]
    else:
        mistakes.append(("this is mean ablation: how='zero' replaces the head's output by zeros",
                         lambda: ref.ablate_head(model, ids, layer, head, "mean")))
    return mistakes


@check
def ablate_head(fn):
    g = generator(0)
    ids = torch.randint(0, 13, (3, 7), generator=g)
    for layer, head, how in ((0, 1, "zero"), (2, 3, "zero"), (1, 0, "mean"), (0, 2, "mean")):
        label = f"layer {layer}, head {head}, how={how!r}, on a GPT of 3 layers and 4 heads"
        with case(label):
            model = _gpt()
            mine = twin(model, ref.GPTConfig(**SMALL))
            before, clean = _state(model), model(ids).detach()
            got = call(fn, mine, ids, layer, head, how, what=f"ablate_head(model, ids, {layer}, {head}, {how!r})")
            expected = ref.ablate_head(model, ids, layer, head, how)
            if matches(got, clean):
                raise Mismatch("ablate_head returned the model's own logits: nothing was ablated",
                               hint="the hook must return the changed input (return (z,) from a pre-hook) and be "
                                    "registered before the model runs: " + ABLATE_HINT)
            expect_close(got.detach() if isinstance(got, torch.Tensor) else got, expected, f"the logits, {label}",
                         names="B T V", mistakes=_ablate_mistakes(model, ids, layer, head, how), atol=1e-4,
                         rtol=1e-4)
            _expect_unchanged(mine, before, "ablate_head",
                              "don't write zeros into out_proj.weight: replace the head's output through a hook, "
                              "which leaves the model as it was")
            after = call(mine, ids, what="the model, run again after ablate_head returned")
            if not matches(after, clean):
                raise Mismatch("the model's logits changed after ablate_head returned: its hook is still registered",
                               hint="keep the handle and call handle.remove() in a finally: block: " + ABLATE_HINT)
    with case("a model that raises (ids longer than its max_len): the hook must still be removed"):
        model = _gpt()
        mine = twin(model, ref.GPTConfig(**SMALL))
        clean = model(ids).detach()
        try:
            call(fn, mine, torch.randint(0, 13, (1, 12), generator=g), 1, 0, "zero",
                 what="ablate_head(model, ids of 12 tokens, 1, 0, 'zero')")
        except LearnerError:
            pass  # the model's IndexError goes up to the caller: that is right
        if not matches(call(mine, ids, what="the model, run after ablate_head raised"), clean):
            raise Mismatch("after the model raised inside ablate_head, its hook stayed on the model",
                           hint="remove the hook in a finally: block, so that an error in the model does not leave it "
                                "behind: " + ABLATE_HINT)
    return "{cases} cases: one head's slice before out_proj, zero and mean over the batch, no hook left (even when " \
           "the model raises), weights kept"

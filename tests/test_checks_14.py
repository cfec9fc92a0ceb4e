"""Checks of notebook 14: accept the reference and correct variants, report the stub, reject the classic mistakes of
reading attention patterns, scoring induction heads and ablating a head, each with its cause named."""

import contextlib
import math

import pytest
import torch
from checkkit import not_done, passes, rejects, stub

from tutor import checks
from tutor import reference as ref
from tutor.course import catalog

NAMES = [e.name for e in catalog.exercises(14)]
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("name", NAMES)
def test_accepts_reference(name):
    passes(getattr(checks, name), getattr(ref, name))


@pytest.mark.parametrize("name", NAMES)
def test_stub_is_not_done(name):
    not_done(getattr(checks, name), stub)


@pytest.mark.parametrize("name", NAMES)
def test_not_a_function(name):
    result = getattr(checks, name)(None)
    assert result.status == "failed" and "pass your" in result.summary


# --- attention_pattern --------------------------------------------------------------------------------------------


def make_pattern(softmax=True, mask="tril", scale="d_head", split="heads", dim=-1, causal="read", average=False,
                 new_on="input", bias=True):
    def attention_pattern(attn, x):
        B, T, C = x.shape
        H = attn.n_heads
        d = C // H
        if not bias:
            q, k = ref.split_heads(x @ attn.q_proj.weight.T, H), ref.split_heads(x @ attn.k_proj.weight.T, H)
        elif split == "heads":
            q, k = ref.split_heads(attn.q_proj(x), H), ref.split_heads(attn.k_proj(x), H)
        else:
            q, k = attn.q_proj(x).reshape(B, H, T, d), attn.k_proj(x).reshape(B, H, T, d)
        s = q @ k.transpose(-2, -1) / {"d_head": math.sqrt(d), "none": 1.0, "d_model": math.sqrt(C)}[scale]
        apply = attn.causal if causal == "read" else causal
        if apply and mask:
            device = x.device if new_on == "input" else "cpu"
            keep = torch.ones(T, T, dtype=torch.bool, device=device)
            keep = keep.tril() if mask == "tril" else keep.triu()
            s = s.masked_fill(~keep, float("-inf"))
        p = torch.softmax(s, dim=dim).nan_to_num(0.0) if softmax else s
        return p.mean(dim=1) if average else p

    return attention_pattern


def test_pattern_variants_pass():
    passes(checks.attention_pattern, make_pattern())


@pytest.mark.parametrize("kwargs, needles", [
    (dict(softmax=False), ["scores, not probabilities"]),
    (dict(mask=None), ["causal mask was not applied"]),
    (dict(mask="triu"), ["wrong way round"]),
    (dict(dim=-2), ["wrong axis"]),
    (dict(scale="none"), ["not divided by √d_head"]),
    (dict(scale="d_model"), ["√d_model"]),
    (dict(split="mixed"), ["heads are mixed up with the positions"]),
    (dict(average=True), ["one pattern for all heads"]),
    (dict(causal=True), ["masked a non-causal attention"]),
    (dict(new_on="cpu"), ["device"]),
    (dict(bias=False), ["biases were left out"]),
])
def test_pattern_mistakes_are_named(kwargs, needles):
    rejects(checks.attention_pattern, make_pattern(**kwargs), *needles)


# --- capture_patterns ---------------------------------------------------------------------------------------------


def make_capture(remove="finally", where="attn_input", order="layers", grad=False, per_head=False, runs=1,
                 stack=False, change_input=False, keep_last=False):
    def capture_patterns(model, ids, pattern_fn):
        patterns = []

        def pre(attn, args):
            x = args[0]
            patterns.append(pattern_fn(attn, x if where == "attn_input" else x * 2.0).detach())
            if change_input:
                return (x * 0.5,)

        handles = [block.attn.register_forward_pre_hook(pre) for block in model.blocks]

        def run():
            for _ in range(runs):
                model(ids)

        if remove == "finally":
            try:
                with contextlib.nullcontext() if grad else torch.no_grad():
                    run()
            finally:
                for h in handles:
                    h.remove()
        elif remove == "after":  # not when the model raises
            with torch.no_grad():
                run()
            for h in handles:
                h.remove()
        else:
            with torch.no_grad():
                run()
        if keep_last:
            patterns = patterns[-len(model.blocks):]
        if order == "reversed":
            patterns = patterns[::-1]
        if per_head:
            patterns = list(torch.stack(patterns).transpose(0, 2).unbind(0))  # one per head
        return torch.stack(patterns) if stack else patterns

    return capture_patterns


def capture_with_graph(model, ids, pattern_fn):
    patterns = []
    handles = [b.attn.register_forward_pre_hook(lambda a, args: patterns.append(pattern_fn(a, args[0])))
               for b in model.blocks]
    try:
        model(ids)
    finally:
        for h in handles:
            h.remove()
    return patterns


def test_capture_variants_pass():
    passes(checks.capture_patterns, make_capture())


@pytest.mark.parametrize("capture, needles", [
    (make_capture(remove="never"), ["still registered"]),
    (make_capture(remove="after"), ["stayed on the model", "finally"]),
    (make_capture(order="reversed"), ["wrong order"]),
    (make_capture(per_head=True), ["loop over the heads"]),
    (make_capture(runs=2), ["more than once"]),
    (make_capture(runs=2, keep_last=True), ["called 6 times", "run the model once"]),
    (make_capture(stack=True), ["list of 3 patterns"]),
    (make_capture(where="block_input"), ["the input x its attention got"]),
    (make_capture(change_input=True), ["layer 0 is right", "returns none"]),
    (capture_with_graph, ["requires_grad", "no_grad"]),
])
def test_capture_mistakes_are_named(capture, needles):
    rejects(checks.capture_patterns, capture, *needles)


def test_capture_that_changes_the_weights_is_named():
    def capture_patterns(model, ids, pattern_fn):
        out = ref.capture_patterns(model, ids, pattern_fn)
        with torch.no_grad():
            model.blocks[0].attn.q_proj.weight.mul_(1.0 + 1e-3)
        return out

    rejects(checks.capture_patterns, capture_patterns, "changed the model's weights")


# --- induction_scores ---------------------------------------------------------------------------------------------


def make_scores(offset=1, start="n", stop="2n", over=(0, 2), swap=False, sum_positions=False, in_place=False):
    def induction_scores(patterns, n):
        out = []
        for p in patterns:
            T = p.shape[-1]
            first = {"n": n, "n-1": n - 1, "n+1": n + 1}[start]
            i = torch.arange(first, 2 * n if stop == "2n" else 2 * n - 1, device=p.device)
            v = p[:, :, i, i - n + offset]
            if in_place:
                p.zero_()
            out.append(v.sum(dim=2).mean(dim=0) if sum_positions else v.mean(dim=over))
            del T
        s = torch.stack(out)
        return s.T if swap else s

    return induction_scores


def test_scores_variants_pass():
    passes(checks.induction_scores, make_scores())


def test_scores_of_a_stacked_tensor_pass():
    def induction_scores(patterns, n):
        p = torch.stack(list(patterns))  # [L, B, H, T, T]
        i = torch.arange(n, 2 * n, device=p.device)
        return p[..., i, i - n + 1].mean(dim=(1, 3))

    passes(checks.induction_scores, induction_scores)


@pytest.mark.parametrize("kwargs, needles", [
    (dict(offset=0), ["one off", "i - n + 1"]),
    (dict(offset=2), ["one off", "i - n + 2"]),
    (dict(start="n+1"), ["started at n + 1"]),
    (dict(over=(0,)), ["one score per position", "over the positions"]),
    (dict(start="n-1"), ["every position from n - 1"]),
    (dict(stop="2n-1"), ["second half but one"]),
    (dict(swap=True), ["heads and layers are swapped"]),
    (dict(over=(1, 2)), ["over the heads instead of the batch"]),
    (dict(sum_positions=True), ["summed"]),
    (dict(in_place=True), ["changed the patterns"]),
])
def test_scores_mistakes_are_named(kwargs, needles):
    rejects(checks.induction_scores, make_scores(**kwargs), *needles)


def test_previous_token_scores_are_not_induction_scores():
    rejects(checks.induction_scores, lambda patterns, n: ref.previous_token_scores(patterns), "previous-token")


# --- ablate_head --------------------------------------------------------------------------------------------------


def make_ablate(part="head", where="pre", mean_dims=(0,), remove=True, layer_shift=0, in_weights=False, swap_how=False,
                finally_=True):
    def ablate_head(model, ids, layer, head, how="zero"):
        if swap_how:
            how = {"zero": "mean", "mean": "zero"}[how]
        attn = model.blocks[layer + layer_shift].attn
        d = attn.out_proj.in_features // attn.n_heads
        s = {"head": slice(head * d, (head + 1) * d), "all": slice(None), "start": slice(head, head + d),
             "strided": slice(head, None, attn.n_heads)}[part]
        if in_weights:
            with torch.no_grad():
                attn.out_proj.weight[:, s] = 0.0
                return model(ids)

        def change(z):
            z = z.clone()
            z[..., s] = 0.0 if how == "zero" else z[..., s].mean(dim=mean_dims, keepdim=True)
            return z

        if where == "pre":
            handle = attn.out_proj.register_forward_pre_hook(lambda m, args: (change(args[0]),))
        else:
            handle = attn.out_proj.register_forward_hook(lambda m, args, out: change(out))
        if not finally_:  # removed after a run that returned, not after one that raised
            with torch.no_grad():
                out = model(ids)
            handle.remove()
            return out
        try:
            with torch.no_grad():
                return model(ids)
        finally:
            if remove:
                handle.remove()

    return ablate_head


def test_ablate_variants_pass():
    passes(checks.ablate_head, make_ablate())


def test_ablate_through_the_values_passes_for_zero_and_is_named_for_mean():
    def ablate_head(model, ids, layer, head, how="zero"):  # zero values: the head's output is zero too
        attn = model.blocks[layer].attn
        d = attn.out_proj.in_features // attn.n_heads
        s = slice(head * d, (head + 1) * d)

        def hook(m, args, out):
            out = out.clone()
            out[..., s] = 0.0 if how == "zero" else out[..., s].mean(dim=0, keepdim=True)
            return out

        handle = attn.v_proj.register_forward_hook(hook)
        try:
            with torch.no_grad():
                return model(ids)
        finally:
            handle.remove()

    result = checks.ablate_head(ablate_head)
    assert not result.passed and "how='mean'" in str(result), str(result)  # its zero cases passed


@pytest.mark.parametrize("kwargs, needles", [
    (dict(part="all"), ["every head of the layer"]),
    (dict(part="start"), ["head:head + d_head"]),
    (dict(where="post"), ["after the output projection"]),
    (dict(layer_shift=1), ["wrong layer"]),
    (dict(mean_dims=(1,)), ["over the positions"]),
    (dict(mean_dims=(0, 1)), ["batch and the positions"]),
    (dict(remove=False), ["still registered"]),
    (dict(in_weights=True), ["changed the model's weights", "hook"]),
    (dict(swap_how=True), ["mean ablation"]),
    (dict(part="strided"), ["h::H"]),
    (dict(finally_=False), ["stayed on the model", "finally"]),
])
def test_ablate_mistakes_are_named(kwargs, needles):
    rejects(checks.ablate_head, make_ablate(**kwargs), *needles)


def test_ablating_nothing_is_named():
    rejects(checks.ablate_head, lambda model, ids, layer, head, how="zero": model(ids), "nothing was ablated")


def test_a_pattern_read_off_the_layer_s_own_run_is_rejected():
    """A hostile student's: run the layer and keep what reaches attn.dropout (the probabilities)."""
    def attention_pattern(attn, x):
        seen = []
        handle = attn.dropout.register_forward_hook(lambda module, args, out: seen.append(args[0]))
        try:
            attn(x)
        finally:
            handle.remove()
        return seen[0]

    rejects(checks.attention_pattern, attention_pattern, "runs the layer", "q_proj")


def test_a_hook_left_on_the_model_is_seen_even_when_it_goes_quiet():
    """A hostile student's: hooks never removed, but silenced once the call returns, so no extra calls show."""
    def capture_patterns(model, ids, pattern_fn):
        out, live = [], [True]

        def hook(attn, args):
            if live[0]:
                out.append(pattern_fn(attn, args[0]).detach())

        for block in model.blocks:
            block.attn.register_forward_pre_hook(hook)
        try:
            with torch.no_grad():
                model(ids)
        finally:
            live[0] = False
        return out

    rejects(checks.capture_patterns, capture_patterns, "still registered", "handle.remove()")


def test_the_model_answer_s_forward_called_by_hand_on_the_layer_is_rejected_too():
    """A hostile student's: notebook 04's MultiHeadAttention.forward called on the unrunnable layer, with a hook on
    its dropout; the dropout refuses to run as well."""
    def attention_pattern(attn, x):
        got = []
        handle = attn.dropout.register_forward_hook(lambda m, args, out: got.append(args[0]))
        try:
            ref.MultiHeadAttention.forward(attn, x)
        finally:
            handle.remove()
        return got[0]

    rejects(checks.attention_pattern, attention_pattern, "runs the layer")

"""What crosses between the judge and the learner's side (tutor.grading.wire, serve, remote): plain data only, rebuilt
by the judge, whatever the learner's process sends.

The whole check suite also runs through this boundary: ``TUTOR_CHECK_REMOTE=1 python -m pytest tests/test_checks_*``
(.ci/run does), with the same results as in one process.
"""

import json
import math
import socket
import struct
import threading

import pytest
import torch
import torch.nn as nn

from tutor import checks
from tutor.checks import harness
from tutor.course import catalog
from tutor.grading import remote, wire
from tutor.reference.model import GPTConfig


def _round_trip(value):
    encoder = wire.Encoder()
    tree = encoder.value(value)
    tree = json.loads(json.dumps(tree))
    return wire.decode(tree, encoder.blobs)


@pytest.mark.parametrize("value", [
    None, True, 3, -2 ** 70, 1.5, "é→", b"\x00\xff", [1, [2, (3,)]], {(1, 2): 5, "a": {3}}, frozenset({1}),
    slice(1, None, 2), Ellipsis, 2 + 3j, torch.float16, torch.device("cpu"),
    GPTConfig(vocab_size=13, max_len=8, d_model=16, n_heads=2, n_layers=2),
])
def test_plain_values_round_trip(value):
    assert _round_trip(value) == value


def test_non_finite_floats_round_trip_without_non_standard_json():
    encoder = wire.Encoder()
    tree = encoder.value([math.nan, math.inf, -math.inf])
    text = json.dumps(tree, allow_nan=False)
    back = wire.decode(json.loads(text), encoder.blobs)
    assert math.isnan(back[0]) and back[1:] == [math.inf, -math.inf]


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.int64, torch.float16, torch.bfloat16,
                                   torch.float32, torch.float64, torch.complex64])
def test_tensors_round_trip_as_plain_tensors(dtype):
    t = (torch.randn(3, 4) * 3).to(dtype) if dtype != torch.bool else torch.randn(3, 4) > 0
    back = _round_trip(t)
    assert type(back) is torch.Tensor and back.dtype == dtype and torch.equal(back, t)


def test_a_view_keeps_its_layout_a_parameter_its_class_grad_and_flag():
    view = torch.randn(4, 6).T
    back = _round_trip(view)
    assert not back.is_contiguous() and back.stride() == view.stride() and torch.equal(back, view)
    p = nn.Parameter(torch.randn(3))
    p.grad = torch.ones(3)
    back = _round_trip(p)
    assert isinstance(back, nn.Parameter) and back.requires_grad and torch.equal(back.grad, torch.ones(3))
    meta = _round_trip(torch.empty(2, 3, device="meta"))
    assert meta.device.type == "meta" and meta.shape == (2, 3)


def test_a_tensor_subclass_arrives_as_a_plain_tensor_whose_comparisons_are_torch_s():
    class Liar(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func in (torch.equal, torch.allclose, torch.Tensor.equal):
                return True
            return super().__torch_function__(func, types, args, kwargs or {})

    lie = torch.zeros(3).as_subclass(Liar)
    back = _round_trip(lie)
    assert type(back) is torch.Tensor
    assert not torch.equal(back, torch.ones(3)) and not torch.allclose(back, torch.ones(3))


def test_the_judge_refuses_to_send_what_is_not_plain_data():
    with pytest.raises(wire.Refused):
        wire.Encoder().value(nn.Linear(2, 2))
    with pytest.raises(wire.Refused):
        wire.Encoder().value(lambda: 0)


def _tensor_tree(**changes):
    tree = {"$": "tensor", "dtype": "float32", "shape": [2], "b": 0, "rg": False, "param": False}
    tree.update(changes)
    return tree


@pytest.mark.parametrize("tree, blobs", [
    ({"$": "pickle", "v": "cos\nsystem\n"}, []),
    ({"$": "dtype", "v": "object"}, []),
    (_tensor_tree(dtype="qint8"), [b"\x00" * 8]),
    (_tensor_tree(), [b"\x00" * 7]),  # the bytes do not fit the shape
    (_tensor_tree(shape=[-1]), [b""]),
    (_tensor_tree(shape=[1 << 40]), [b""]),
    (_tensor_tree(b=3), [b"\x00" * 8]),
    (_tensor_tree(shape=[2, 2], stride=[0, 0]), [b"\x00" * 16]),  # overlapping values
    (_tensor_tree(shape=[2], stride=[1 << 30]), [b"\x00" * 8]),  # spread over far more memory
    ({"$": "dataclass", "cls": "os._wrap_close", "v": []}, []),
    ({"$": "handle", "id": 1}, []),  # (no handles where none may be)
    ({"$": "device", "v": "tpu"}, []),
    ({"$": "dict", "v": [[[1], 2]]}, []),  # a list as a key
    ({"$": "complex", "v": ["1", 2]}, []),
])
def test_the_judge_refuses_what_breaks_the_rules(tree, blobs):
    with pytest.raises(wire.WireError):
        wire.decode(tree, blobs)


def test_a_value_nested_too_deep_is_refused():
    tree = 0
    for _ in range(wire.MAX_DEPTH + 5):
        tree = [tree]
    with pytest.raises(wire.WireError):
        wire.decode(tree, [])


def test_a_frame_too_large_or_not_json_is_refused():
    mine, theirs = socket.socketpair()
    theirs.sendall((wire.MAX_HEADER + 1).to_bytes(4, "big"))
    with pytest.raises(wire.WireError):
        wire.read_frame(mine)
    theirs.sendall(struct.pack(">I", 5) + b"{oops")
    with pytest.raises(wire.WireError):
        wire.read_frame(mine)
    mine.close()
    theirs.close()


# --------------------------------------------------------------------------------------
# A learner's process that does not play by the rules


def _hostile(replies):
    """A peer whose other end answers each request with the next of ``replies`` (raw bytes)."""
    mine, theirs = socket.socketpair()

    def answer():
        for reply in replies:
            if wire.read_frame(theirs) is None:
                return
            theirs.sendall(reply)
        theirs.close()

    threading.Thread(target=answer, daemon=True).start()
    return remote.Peer(mine, timeout=5)


def _frame(header, blobs=()):
    head = json.dumps({**header, "blobs": [len(b) for b in blobs]}).encode()
    return len(head).to_bytes(4, "big") + head + b"".join(blobs)


@pytest.mark.parametrize("reply", [
    b"\x00\x00\x00\x02{}",  # an answer without a value
    _frame({"ok": {"$": "tensor", "dtype": "float32", "shape": [2], "b": 0}}, [b"\x00" * 3]),
    _frame({"ok": 1, "changed": [[7, 0]]}),  # a change to an argument that was not sent
    _frame({"raise": "not an exception"}),
    b"\x00\x00\x00",  # then the connection closes mid-frame
])
def test_a_broken_answer_stops_the_exercise_with_a_remote_error(reply):
    peer = _hostile([reply])
    with pytest.raises(remote.RemoteError):
        peer.send("root")
    with pytest.raises(remote.RemoteError):  # and the peer is not used again
        peer.send("root")


def test_a_peer_that_never_answers_is_a_timeout():
    mine, theirs = socket.socketpair()
    peer = remote.Peer(mine, timeout=0.5)
    with pytest.raises(harness.CheckTimeout):
        peer.send("root")
    theirs.close()


def test_the_learner_s_exceptions_arrive_as_python_s_own_classes_with_their_names():
    class MyError(ValueError):
        pass

    def raises(kind):
        if kind == "key":
            raise KeyError(26085)
        if kind == "mine":
            raise MyError("mine")
        if kind == "exit":
            raise SystemExit(3)
        raise NotImplementedError()

    with remote.forked(raises) as (there, _):
        with pytest.raises(KeyError) as key:
            there("key")
        assert key.value.args == (26085,) and key.value.__tutor_where__.startswith("line ")
        with pytest.raises(ValueError) as mine:
            there("mine")
        assert type(mine.value).__name__ == "MyError"
        with pytest.raises(Exception) as exit_:
            there("exit")
        assert type(exit_.value).__name__ == "SystemExit" and not isinstance(exit_.value, SystemExit)
        with pytest.raises(NotImplementedError):
            there("stub")


def test_the_judge_s_random_numbers_do_not_depend_on_what_the_learner_s_code_draws():
    def draws(n):
        return torch.rand(n)

    with remote.forked(draws) as (there, _):
        torch.manual_seed(0)
        first = there(3)
        second = there(3)
        after = torch.rand(2)
    torch.manual_seed(0)
    assert torch.equal(first, torch.rand(3))  # the learner's code draws what it would in one process
    assert torch.equal(second, torch.rand(3))  # and goes on from there, as it would
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(2))  # while the judge's own draws are untouched by it


def test_a_call_that_changes_its_argument_is_written_back_and_noted():
    def softmax(x, dim=-1):
        x -= x.max(dim=dim, keepdim=True).values
        return x.exp() / x.exp().sum(dim=dim, keepdim=True)

    with remote.forked(softmax) as (there, peer):
        x = torch.randn(2, 3)
        before = x.clone()
        there(x)
        assert torch.equal(x, before - before.max(dim=-1, keepdim=True).values) and peer.changed


def test_a_right_answer_that_changes_what_it_was_given_fails_when_graded(monkeypatch):
    from tutor import reference as ref

    def sft_example(prompt, response, block_size):
        x, y = ref.sft_example(list(prompt), list(response), block_size)
        prompt.clear()  # a check that computed its expectation from `prompt` afterwards would be fooled
        return x, y

    alone = checks.sft_example(sft_example)  # notebook 13's check looks itself since issue 43
    assert alone.status == "failed" and "changed the prompt it was given" in str(alone), str(alone)
    monkeypatch.setenv("TUTOR_CHECK_REMOTE", "1")
    result = checks.sft_example(sft_example)
    assert result.status == "failed" and "changed" in str(result) and "prompt" in str(result), str(result)


def test_a_change_no_check_looks_for_still_fails_when_graded():
    def grow(ids):
        ids.append(0)  # the caller's list: a body that never looks again would not notice
        return len(ids)

    def body(fn):
        fn([1, 2])

    exercise = catalog.BY_NAME["sft_example"]
    assert harness._run("sft_example", exercise, body, grow, 10.0).passed  # in one process nothing sees it
    with remote.forked(grow, 10.0) as (there, peer):
        result = harness._run("sft_example", exercise, body, there, 10.0, peer)
    assert result.status == "failed" and "changed an input it was given" in str(result), str(result)


def test_isinstance_sees_torch_s_classes_and_type_names_are_the_learner_s():
    class Mine(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(2, 3)

    with remote.forked(Mine) as (there, _):
        module = there()
        assert isinstance(module, nn.Module) and not isinstance(module, nn.Linear)
        assert type(module).__name__ == "Mine" and isinstance(module.layer, nn.Linear)
        assert dict(module.named_parameters())["layer.weight"].shape == (3, 2)
        with pytest.raises(TypeError):
            import copy

            copy.deepcopy(module)

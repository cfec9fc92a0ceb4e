"""Smoke tests of benchmarks/train_shakespeare.py --vs-nanogpt: the course's budgeted run ends its schedule inside
its budget and notes when it first reached a loss; the comparison's lines, with nanoGPT's run replaced by a stand-in
(the real one is run by hand: see docs/benchmarks.md)."""

import sys
import types
from dataclasses import replace

import pytest
import torch
from benchkit import load_benchmark

from tutor import train as tr
from tutor.data.shakespeare import CharVocab, ShakespeareData, split_text
from tutor.train import long_run

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n" * 60


def tiny_data():
    vocab = CharVocab.from_text(TEXT)
    train, val = split_text(vocab.tensor(TEXT), 0.1)
    return ShakespeareData(TEXT, vocab, train, val, "a test text")


@pytest.fixture
def bench():
    threads = torch.get_num_threads()
    yield load_benchmark("train_shakespeare")
    torch.set_num_threads(threads)


def test_a_course_run_notes_when_it_first_reached_the_target_and_ends_inside_its_budget(bench):
    text_data = tiny_data()
    config = replace(long_run.PRESETS["tiny"], vocab_size=text_data.vocab.vocab_size, steps=400)
    batches = bench.validation_windows(text_data, config, 3)
    easy = bench.course_run(config, text_data, 3.0, batches, target=100.0, evaluations=5)
    assert easy["reached"] is not None and 0 < easy["reached"] <= easy["trained"]
    assert easy["trained"] < 3.0 + 1.0 and easy["evals"] > 0  # a second of slack: a shared machine's last step
    never = bench.course_run(config, text_data, 3.0, batches, target=-1.0, evaluations=5)
    assert never["reached"] is None
    # the windows every model is scored on are the ones long_run.train evaluates on along the run
    along = tr.fixed_batches(text_data.val, config.block_size, config.batch_size, 3)
    assert all(torch.equal(a, b) for (x, y), (u, v) in zip(batches, along) for a, b in ((x, u), (y, v)))


def fake_anchor(monkeypatch, val_loss):
    module = types.ModuleType("nanogpt_anchor")
    module.prepare = lambda checkout, text: checkout
    module.check_same_split = lambda work, train, val: None
    anchor = load_benchmark("nanogpt_anchor")  # its own record of a run, for a run that never happened
    run = anchor.NanoGPTRun(iters=50, seconds=4.0, ms_per_iter=70.0, train_seconds=3.5, tokens_per_second=10_000.0,
                            val_loss=val_loss, val_loss_own=val_loss, log="")
    module.nanogpt_run = lambda checkout, seconds, text, batches, work=None: run
    monkeypatch.setitem(sys.modules, "nanogpt_anchor", module)


@pytest.mark.parametrize("nanogpt_loss, verdict", [(100.0, "met"), (0.01, "NOT met")])
def test_versus_nanogpt_prints_the_share_of_nanogpts_time_and_the_goal_line(bench, tmp_path, monkeypatch, capsys,
                                                                           nanogpt_loss, verdict):
    (tmp_path / "train.py").write_text("# a stand-in checkout\n")
    fake_anchor(monkeypatch, nanogpt_loss)
    monkeypatch.setattr(bench.data, "shakespeare_data", lambda path=None: tiny_data())
    tiny = replace(long_run.PRESETS["tiny"], steps=400)
    monkeypatch.setattr(bench, "preset_config", lambda args, text_data, device=None: replace(
        tiny, vocab_size=text_data.vocab.vocab_size))
    assert bench.main(["--vs-nanogpt", str(tmp_path), "--eval-batches", "3", "--fractions", "0.3333", "1"]) == 0
    out = capsys.readouterr().out
    for model in ("notebook 10's GPT", "notebook 09's ModernGPT"):
        for fraction in ("0.333", "1"):
            assert f"course ({model}) at {fraction} of nanoGPT's time" in out
    goal = next(line for line in out.splitlines() if line.startswith("time to nanoGPT's final loss"))
    assert goal.endswith(f"goal <= 0.333: {verdict}")
    if verdict == "met":
        share = float(goal.split("(each pair): ")[1].split(";")[0])
        assert 0 < share <= 1 / 3
    else:
        assert "not reached" in goal
    assert "at equal wall time" in out

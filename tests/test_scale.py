"""python -m tutor.scale and the training engine under it: data parallelism with two Gloo processes,
exact resume in a fresh process, checkpoints that survive a bad write, gradient accumulation.

All runs use the tiny preset on a tiny text, so the whole file takes seconds on 2 cores."""

import multiprocessing
import os
import socket
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
import torch.distributed as dist

from conftest import ROOT
from tutor import data, scale
from tutor import train as tr
from tutor.train import long_run

TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
        "First Citizen:\nYou are all resolved rather to die than to famish?\n") * 40

TINY = ["--preset", "tiny", "--max-steps", "6", "--sample", "0", "--quiet", "--dropout", "0"]


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(TEXT)
    return path


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, world, port, argv, code):
    """What torchrun does for one process: set the environment, run the script."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    code.value = scale.main(argv)


@pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()) or not sys.platform.startswith("linux"),
                    reason="needs Gloo and fork")
def test_two_gloo_processes_equal_one_process_with_the_combined_batch(tmp_path, text_file):
    argv = TINY + ["--data", str(text_file), "--out-dir", str(tmp_path / "ddp")]
    ctx = multiprocessing.get_context("fork")
    port = _free_port()
    codes = [ctx.Value("i", -1) for _ in range(2)]
    procs = [ctx.Process(target=_rank_main, args=(r, 2, port, argv, codes[r])) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert all(p.exitcode == 0 for p in procs) and [c.value for c in codes] == [0, 0]
    saved = tr.load_training_state(tmp_path / "ddp" / "last.pt")
    assert len(saved["streams"]) == 2  # both ranks' data positions are in the checkpoint
    assert not torch.equal(saved["streams"][0]["generator"], saved["streams"][1]["generator"])

    # one process, each step on the two ranks' batches side by side
    text_data = data.shakespeare_data(text_file, verbose=False)
    config = scale.config_from_args(scale.make_parser().parse_args(argv), torch.device("cpu"))
    config = replace(config, vocab_size=text_data.vocab.vocab_size)
    model = tr.make_model(config)
    streams = [tr.RandomWindows(text_data.train, config.block_size, config.batch_size, seed=config.seed, rank=r)
               for r in range(2)]

    class Combined:
        def __next__(self):
            (x0, y0), (x1, y1) = next(streams[0]), next(streams[1])
            return torch.cat([x0, x1]), torch.cat([y0, y1])

    val = tr.fixed_batches(text_data.val, config.block_size, config.batch_size, config.eval_batches)
    tr.fit(model, Combined(), val, config, step_fn=tr.accumulate_step, ignore_index=long_run.IGNORE_NONE,
           progress=False)
    for name, p in model.state_dict().items():
        torch.testing.assert_close(saved["model"][name], p, atol=2e-5, rtol=1e-4, msg=name)


def _run(args, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT), TUTOR_OFFLINE="1")
    out = subprocess.run([sys.executable, "-m", "tutor.scale", *args], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr + out.stdout
    return out


def test_resume_in_a_fresh_process_is_exact(tmp_path, text_file):
    base = ["--preset", "tiny", "--max-steps", "8", "--sample", "0", "--quiet", "--data", str(text_file)]
    # N steps in one go (in this process)
    assert scale.main(base + ["--out-dir", str(tmp_path / "one")]) == 0
    # N/2 steps, save and stop; a fresh process resumes and does the other N/2 (dropout is on: RNG states matter)
    out = _run(base + ["--out-dir", str(tmp_path / "two"), "--stop-after", "4"], tmp_path)
    assert "stopped early" in out.stdout
    half = tr.load_training_state(tmp_path / "two" / "last.pt")
    assert half["step"] == 4
    _run(base + ["--out-dir", str(tmp_path / "two"), "--resume"], tmp_path)
    a = tr.load_training_state(tmp_path / "one" / "last.pt")
    b = tr.load_training_state(tmp_path / "two" / "last.pt")
    assert a["step"] == b["step"] == 8
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name
    assert a["history"]["train_loss"] == b["history"]["train_loss"]
    assert a["history"]["val_loss"] == b["history"]["val_loss"]
    for ga, gb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values()):
        assert torch.equal(ga["exp_avg_sq"], gb["exp_avg_sq"])


def test_a_truncated_or_corrupted_checkpoint_is_a_clear_error_and_the_previous_survives(tmp_path):
    path = tmp_path / "last.pt"
    tr.save_training_state(path, {"step": 1, "w": torch.arange(1000.0)})
    tr.save_training_state(path, {"step": 2, "w": torch.arange(1000.0)})
    previous = tr.previous_checkpoint(path)
    assert tr.load_training_state(previous)["step"] == 1
    good = path.read_bytes()

    path.write_bytes(good[: len(good) // 2])  # truncated
    with pytest.raises(tr.CheckpointError, match="truncated or corrupted") as info:
        tr.load_training_state(path)
    assert str(previous) in str(info.value)
    corrupted = bytearray(good)
    corrupted[-100] ^= 0xFF  # one flipped byte inside the tensor data
    path.write_bytes(bytes(corrupted))
    with pytest.raises(tr.CheckpointError, match="checksum"):
        tr.load_training_state(path)
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(tr.CheckpointError, match="not a checkpoint"):
        tr.load_training_state(path)
    assert tr.load_training_state(previous)["step"] == 1  # untouched all along


def test_a_write_that_fails_half_way_leaves_the_last_checkpoint_intact(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    tr.save_training_state(path, {"step": 1})
    before = path.read_bytes()
    real_fsync = os.fsync

    def crash(fd):
        raise KeyboardInterrupt  # Ctrl-C (or a full disk) in the middle of writing

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(KeyboardInterrupt):
        tr.save_training_state(path, {"step": 2})
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # no temporary file left behind


def test_the_script_reports_a_corrupted_checkpoint_without_a_traceback(tmp_path, text_file, capsys):
    out_dir = tmp_path / "run"
    out_dir.mkdir()
    (out_dir / "last.pt").write_bytes(b"garbage")
    code = scale.main(["--preset", "tiny", "--max-steps", "2", "--quiet", "--data", str(text_file),
                       "--out-dir", str(out_dir), "--resume"])
    assert code == 2
    err = capsys.readouterr().err
    assert "last.pt" in err and "Traceback" not in err


def test_gradient_accumulation_equals_one_big_batch():
    torch.manual_seed(0)
    config = replace(long_run.PRESETS["tiny"], dropout=0.0, vocab_size=11)
    a = tr.make_model(config)
    b = tr.make_model(config)
    x = torch.randint(0, 11, (8, 16))
    y = torch.randint(0, 11, (8, 16))
    opt_a, opt_b = torch.optim.SGD(a.parameters(), lr=0.5), torch.optim.SGD(b.parameters(), lr=0.5)
    la = tr.accumulate_step(a, (x, y), opt_a, -100)
    lb = tr.accumulate_step(b, [(x[:4], y[:4]), (x[4:], y[4:])], opt_b, -100)
    assert abs(la - lb) < 1e-6
    assert not torch.equal(a.head.weight, tr.make_model(config).head.weight)  # the step did something
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, atol=1e-6, rtol=1e-5)


@pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()), reason="needs Gloo")
def test_data_parallel_step_by_hand_equals_one_process_and_names_a_failing_rank():
    from tutor import reference

    config = replace(long_run.PRESETS["tiny"], dropout=0.0, vocab_size=11)
    g = torch.Generator().manual_seed(3)
    x, y = torch.randint(0, 11, (8, 16), generator=g), torch.randint(0, 11, (8, 16), generator=g)
    result = long_run.data_parallel_step(reference.average_gradients, config, x, y, world_size=2)
    rank0, rank1 = result["ranks"]
    assert len(result["losses"]) == 2 and result["losses"][0] != result["losses"][1]  # two halves of the batch
    assert long_run.max_difference(rank0, rank1) < 1e-6
    assert long_run.max_difference(rank0, result["single"]) < 1e-5  # 2 ranks x 4 windows = 1 process x 8 windows
    assert long_run.max_difference(rank0, tr.make_model(config).state_dict()) > 1e-3  # the step did something

    def broken(model):
        raise ValueError("no average here")

    with pytest.raises(RuntimeError, match="rank 0: ValueError: no average here"):
        long_run.data_parallel_step(broken, config, x, y, world_size=2)


def test_random_windows_state_restores_the_stream():
    data_ = torch.arange(500)
    s = tr.RandomWindows(data_, 8, 4, seed=3)
    next(s)
    state = s.state_dict()
    expected = next(s)
    t = tr.RandomWindows(data_, 8, 4, seed=3)
    t.load_state_dict(state)
    got = next(t)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    other_rank = next(tr.RandomWindows(data_, 8, 4, seed=3, rank=1))
    assert not torch.equal(other_rank[0], next(tr.RandomWindows(data_, 8, 4, seed=3))[0])


def test_mfu_and_peak_table():
    peak, note = tr.peak_flops("cpu", override_tflops=2.0)
    assert peak == 2e12 and "--peak-tflops" in note
    assert tr.mfu(1000.0, 6_000_000, 1e12) == pytest.approx(0.006)


def test_model_choice_builds_notebook_09s_modern_gpt_and_refuses_an_unknown_name():
    from tutor import reference

    config = replace(long_run.PRESETS["tiny"], model="modern")
    assert tr.model_class(config) is reference.ModernGPT
    model = tr.make_model(config)  # a ModernConfig made from the preset's sizes
    assert isinstance(model, reference.ModernGPT)
    assert (model.config.d_model, model.config.n_layers, model.config.max_len) == \
        (config.d_model, config.n_layers, config.model_config().max_len)
    ids = torch.randint(0, config.model_config().vocab_size, (2, 8))
    assert model(ids).shape == (2, 8, config.model_config().vocab_size)
    assert tr.model_class(replace(config, model="tutor.reference.model:GPT")) is reference.GPT
    with pytest.raises(ValueError, match="unknown model"):
        tr.model_class(replace(config, model="llama"))


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_the_stop_line_names_the_signal_it_got(signal_name, capsys):
    import signal

    flag = long_run._StopFlag().install()
    try:
        os.kill(os.getpid(), getattr(signal, signal_name))  # the real signal, to this process
        assert flag.set
    finally:
        flag.uninstall()
    err = capsys.readouterr().err.strip()
    if signal_name == "SIGTERM":
        assert err.startswith("SIGTERM (the scheduler, or `kill`, asked the job to stop): finishing this step")
        assert "Ctrl-C" not in err
    else:
        assert err.startswith("Ctrl-C (SIGINT): finishing this step") and "press Ctrl-C again" in err


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_ctrl_c_saves_a_checkpoint_and_exits_cleanly(tmp_path, text_file, signal_name):
    import signal
    import time

    out_dir = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT), TUTOR_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, "-m", "tutor.scale", "--preset", "tiny", "--max-steps", "100000",
                             "--quiet", "--data", str(text_file), "--out-dir", str(out_dir), "--checkpoint-every", "5"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (out_dir / "last.pt").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(getattr(signal, signal_name))  # Ctrl-C, or what a job scheduler sends
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert "stopped early" in stdout and "Traceback" not in stderr
    said = "SIGTERM (the scheduler" if signal_name == "SIGTERM" else "Ctrl-C (SIGINT)"  # the signal it got
    assert said in stderr and ("Ctrl-C" in stderr) == (signal_name == "SIGINT"), stderr
    saved = tr.load_training_state(out_dir / "last.pt")
    assert 5 <= saved["step"] < 100000


def test_help_keeps_the_examples_line_by_line(capsys):
    """The epilog is the module's docstring as written: the multi-node command keeps its `\\` line breaks."""
    with pytest.raises(SystemExit):
        scale.main(["--help"])
    out = capsys.readouterr().out
    assert "torchrun --nnodes=2 --nproc_per_node=8 --node_rank=0 \\\n" in out
    assert "\n             --rdzv_backend=c10d --rdzv_endpoint=node0.example:29500 --rdzv_id=shakespeare \\\n" in out
    assert "\n             -m tutor.scale --preset gpu\n" in out
    assert "\n    python -m tutor.scale --preset cpu --max-steps 50  # a short run\n" in out


def _tiny_text_data():
    from tutor.data.shakespeare import CharVocab, ShakespeareData, split_text

    vocab = CharVocab.from_text(TEXT)
    train, val = split_text(vocab.tensor(TEXT), 0.1)
    return ShakespeareData(TEXT, vocab, train, val, "a test text")


def test_a_time_budget_ends_the_schedule_inside_it_and_evaluations_are_not_counted():
    """Planned for far more steps than fit (a machine much slower than planned): the learning rate still decays to
    its end, and the run ends once the training time, evaluations excluded, is spent."""
    config = replace(long_run.PRESETS["tiny"], steps=10**6, warmup_steps=5, eval_every=3, time_budget=1.0)
    run = long_run.train(config, text_data=_tiny_text_data(), progress=False)
    h = run.history
    trained = h.seconds - h.eval_seconds
    assert 1.0 <= trained < 1.5, trained
    assert h.eval_seconds > 0 and len(h.val_loss) >= 2
    assert not run.stopped_early and 10 < run.step < config.steps
    # the schedule ran its whole course: from 0, to the top, then only down, to (nearly) min_lr at the last step
    top = h.lr.index(max(h.lr))
    assert h.lr[0] == 0 and 0.5 * config.max_lr <= max(h.lr) <= config.max_lr  # a slow first step skips ahead
    assert h.lr[top:] == sorted(h.lr[top:], reverse=True)
    assert h.lr[-1] < config.min_lr + 0.05 * (config.max_lr - config.min_lr)
    assert len(h.lr) == run.step


def test_a_time_budget_is_for_one_process():
    from tutor.distributed import Dist

    config = replace(long_run.PRESETS["tiny"], time_budget=1.0)
    with pytest.raises(ValueError, match="one process"):
        long_run.train(config, text_data=_tiny_text_data(), progress=False, dist_info=Dist(rank=0, world_size=2))


def test_fit_records_the_time_spent_evaluating():
    import time

    def slow_evaluate(model, loader, ignore_index, max_batches=None):
        time.sleep(0.05)
        return 1.0

    config = replace(long_run.PRESETS["tiny"], steps=4, eval_every=1, vocab_size=11)
    model = tr.make_model(config)
    stream = tr.RandomWindows(torch.randint(0, 11, (400,)), 8, 2, seed=0)
    h = tr.fit(model, stream, [], config, step_fn=tr.accumulate_step, eval_fn=slow_evaluate, progress=False,
               ignore_index=long_run.IGNORE_NONE)
    assert len(h.val_loss) == 4
    assert 0.2 <= h.eval_seconds < h.seconds

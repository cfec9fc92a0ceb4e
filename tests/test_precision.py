"""Precision and compilation chosen by the device (issue 44): bfloat16 from compute capability 8.0, float16 with
loss scaling on 7.x (Colab's T4), float32 below; torch.compile where Inductor runs. The capabilities are faked (no GPU
here); the float16 path with its GradScaler trains for real on the CPU, whose autocast takes float16."""

from dataclasses import replace

import pytest
import torch

from tutor import reference as ref
from tutor.train import precision as pr
from tutor.train.config import TrainConfig
from tutor.train.loop import Hooks, fit
from tutor.train.optim import make_optimizer
from tutor.train.presets import GPU_CONFIG, SHAKESPEARE_PRESETS

CARDS = {(9, 0): "NVIDIA H100 80GB HBM3", (8, 0): "NVIDIA A100-SXM4-40GB", (8, 6): "NVIDIA GeForce RTX 3090",
         (7, 5): "Tesla T4", (7, 0): "Tesla V100-SXM2-16GB", (6, 0): "Tesla P100-PCIE-16GB"}


@pytest.fixture
def card(monkeypatch):
    def fake(capability, triton=True):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: CARDS[capability])
        monkeypatch.setattr(pr, "has_triton", lambda: triton)
        return torch.device("cuda")
    return fake


@pytest.mark.parametrize("capability, autocast, scaled, compiles", [
    ((9, 0), torch.bfloat16, False, True),
    ((8, 0), torch.bfloat16, False, True),
    ((8, 6), torch.bfloat16, False, True),
    ((7, 5), torch.float16, True, True),  # Colab's free T4
    ((7, 0), torch.float16, True, True),
    ((6, 0), None, False, False),  # no tensor cores for half, and too old for Triton
])
def test_the_gpu_presets_get_what_the_card_has(card, capability, autocast, scaled, compiles):
    for config in (GPU_CONFIG, SHAKESPEARE_PRESETS["gpu"]):
        chosen = pr.choose(config, card(capability))
        assert (chosen.autocast, chosen.scaled, chosen.compile) == (autocast, scaled, compiles)
        assert CARDS[capability] in chosen.reason and f"{capability[0]}.{capability[1]}" in chosen.reason


def test_the_reason_says_why_a_t4_gets_float16(card):
    chosen = pr.choose(GPU_CONFIG, card((7, 5)))
    assert "no bfloat16 in hardware below 8.0" in chosen.describe()
    assert "float16 autocast with loss scaling" in chosen.describe()


def test_no_triton_no_compile_and_it_says_so(card):
    chosen = pr.choose(GPU_CONFIG, card((8, 0), triton=False))
    assert chosen.autocast == torch.bfloat16 and not chosen.compile and "Triton" in chosen.reason


def test_forcing_float16_stands_in_for_a_t4_on_a_newer_card(card):
    chosen = pr.choose(replace(GPU_CONFIG, half="float16"), card((9, 0)))
    assert (chosen.autocast, chosen.scaled, chosen.compile) == (torch.float16, True, True)
    assert "forced" in chosen.reason


def test_forcing_bfloat16_below_8_is_never_compiled(card):
    chosen = pr.choose(replace(GPU_CONFIG, half="bfloat16"), card((7, 5)))
    assert chosen.autocast == torch.bfloat16 and not chosen.compile and "emulated" in chosen.reason


def test_float32_presets_stay_float32(card):
    chosen = pr.choose(replace(GPU_CONFIG, bf16=False), card((9, 0)))
    assert chosen.autocast is None and not chosen.scaled


def test_cpu_and_mps():
    cpu = pr.choose(TrainConfig(), "cpu")
    assert (cpu.autocast, cpu.scaled, cpu.compile) == (None, False, False)
    assert pr.choose(TrainConfig(bf16=True), "cpu").autocast == torch.bfloat16
    half = pr.choose(TrainConfig(bf16=True, half="float16"), "cpu")
    assert (half.autocast, half.scaled) == (torch.float16, True)
    mps = pr.choose(replace(GPU_CONFIG), torch.device("mps"))
    assert (mps.autocast, mps.compile) == (None, False)


def test_an_unknown_half_type_is_an_error():
    with pytest.raises(ValueError, match="config.half"):
        pr.choose(TrainConfig(bf16=True, half="fp8"), "cpu")


# --- the float16 path, for real on the CPU ---------------------------------------------------------------------------


def _batches(seed=0):
    g = torch.Generator().manual_seed(seed)
    while True:
        ids = (torch.randint(0, 27, (16, 1), generator=g) + torch.arange(13)) % 27 + 1  # counting: learnable
        yield ids[:, :-1], ids[:, 1:]


def _model():
    torch.manual_seed(0)
    return ref.GPT(ref.GPTConfig(vocab_size=28, max_len=12, d_model=32, n_heads=2, n_layers=2))


def test_scaled_gradients_and_a_scaled_clip_give_the_float32_step_exactly():
    """ScaledBackward multiplies every gradient by the factor, fit clips at clip x factor, ScaledOptimizer divides
    back before AdamW: the same parameters as a plain step, clipping included."""
    x, y = next(_batches())
    plain, scaled = _model(), _model()
    config = TrainConfig(max_lr=1e-2)
    ref.train_step(plain, (x, y), make_optimizer(plain, config), 0, clip=0.05)  # 0.05: this step is clipped
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    optimizer = pr.ScaledOptimizer(make_optimizer(scaled, config), scaler)
    ref.train_step(pr.ScaledBackward(scaled, scaler), (x, y), optimizer, 0, clip=0.05 * scaler.get_scale())
    for a, b in zip(plain.parameters(), scaled.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert not torch.equal(next(plain.parameters()), next(_model().parameters()))  # a step was taken


def test_an_overflowing_step_is_skipped_and_the_factor_lowered():
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 40)  # float16 tops out at 65,504
    optimizer = pr.ScaledOptimizer(make_optimizer(model, TrainConfig()), scaler)
    runner = pr.ScaledBackward(pr.Autocast(model, "cpu", torch.float16), scaler)
    ref.train_step(runner, next(_batches()), optimizer, 0, clip=1.0 * scaler.get_scale())
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert scaler.get_scale() == 2.0 ** 39


def test_fit_trains_in_float16_with_loss_scaling_on_a_cpu():
    config = TrainConfig(d_model=32, n_heads=2, n_layers=2, steps=40, max_lr=3e-3, warmup_steps=4, eval_every=20,
                         eval_batches=1, bf16=True, half="float16")
    val = [next(_batches(1)) for _ in range(2)]
    model = _model()
    optimizer = pr.ScaledOptimizer(make_optimizer(model, config), torch.amp.GradScaler("cpu"))
    half = fit(model, _batches(), val, config, ignore_index=0, progress=False, hooks=Hooks(optimizer=optimizer))
    full = fit(_model(), _batches(), val, replace(config, bf16=False), ignore_index=0, progress=False)
    assert half.train_loss[-1] < half.train_loss[0] - 0.3  # it learns
    assert abs(half.val_loss[-1] - full.val_loss[-1]) < 0.05  # as float32 does
    assert optimizer.scaler._get_growth_tracker() > 0  # the scaler stepped (good steps counted since the start)


def test_fit_wraps_the_optimizer_itself_when_float16_is_chosen():
    seen = {}

    def step(model, batch, optimizer, ignore_index, clip=1.0):
        seen["optimizer"], seen["clip"], seen["model"] = optimizer, clip, model
        return ref.train_step(model, batch, optimizer, ignore_index, clip)

    config = TrainConfig(d_model=32, n_heads=2, n_layers=2, steps=2, eval_every=2, eval_batches=1, bf16=True,
                         half="float16", clip=0.5)
    fit(_model(), _batches(), [next(_batches(1))], config, step_fn=step, ignore_index=0, progress=False)
    assert isinstance(seen["optimizer"], pr.ScaledOptimizer)
    assert isinstance(seen["model"], pr.ScaledBackward)
    assert seen["clip"] == 0.5 * 2.0 ** 16  # GradScaler's first factor, 65,536


def test_the_choice_is_printed_once(capsys):
    pr._SAID.clear()
    chosen = pr.choose(TrainConfig(bf16=True, half="float16"), "cpu")
    pr.say_once(chosen)
    pr.say_once(chosen)
    assert capsys.readouterr().out.count("precision: float16 autocast with loss scaling") == 1


def test_a_float16_run_saves_its_scaler_and_resumes_with_it(tmp_path):
    from tutor import data
    from tutor.train import long_run
    from tutor.train.checkpoint import load_training_state

    text = data.shakespeare_data(verbose=False)
    config = replace(long_run.PRESETS["tiny"], bf16=True, half="float16", steps=6, eval_every=3)
    first = long_run.train(config, text_data=text, device="cpu", out_dir=tmp_path, progress=False, stop_after=3)
    saved = load_training_state(tmp_path / "last.pt")
    assert first.stopped_early and saved["step"] == 3
    assert saved["optimizer"]["scaler"]["scale"] > 0  # the factor, with the optimizer's state
    second = long_run.train(config, text_data=text, device="cpu", out_dir=tmp_path, progress=False,
                            resume=tmp_path / "last.pt")
    assert second.step == 6 and all(torch.isfinite(torch.tensor(second.history.train_loss)))

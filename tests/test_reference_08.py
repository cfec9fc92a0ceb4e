"""The reference of notebook 08 against PyTorch's own tools, and the shared training code
(bigram baseline, fused kernels, fit, checkpoints, sampling, attention pictures)."""

import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tutor import data
from tutor import reference as ref
from tutor import train as tr
from tutor.train import loop

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


NAMES = ["laika", "zoe", "ana", "maximilian", "bo", "evelyn", "tom", "emma", "olivia", "liam", "noah", "ava"]


def tiny_config(**kw):
    base = dict(d_model=16, n_heads=2, n_layers=2, batch_size=4, steps=12, max_lr=1e-2, min_lr=1e-3,
                warmup_steps=3, eval_every=5, eval_batches=2)
    base.update(kw)
    return tr.TrainConfig(**base)


# --- lm_loss --------------------------------------------------------------------------------


def test_lm_loss_equals_cross_entropy_loss_module():
    torch.manual_seed(0)
    logits = torch.randn(3, 6, 28)
    y = torch.randint(0, 27, (3, 6))
    y[0, 4:] = 27
    y[2, 1:] = 27
    expected = nn.CrossEntropyLoss(ignore_index=27)(logits.reshape(-1, 28), y.reshape(-1))
    assert torch.allclose(ref.lm_loss(logits, y, 27), expected)
    # the same as averaging -log p(target) over the real targets by hand
    logp = torch.log_softmax(logits, -1).gather(-1, y.clamp(max=27).unsqueeze(-1)).squeeze(-1)
    real = y != 27
    assert torch.allclose(ref.lm_loss(logits, y, 27), -(logp[real]).mean())
    assert ref.lm_loss(logits, y, 27).dim() == 0


def test_lm_loss_of_uniform_logits_is_log_v():
    logits = torch.zeros(2, 5, 28)
    y = torch.randint(0, 27, (2, 5))
    assert math.isclose(ref.lm_loss(logits, y, 27).item(), math.log(28), rel_tol=1e-6)


# --- lr_schedule ---------------------------------------------------------------------------


def test_lr_schedule_matches_pytorch_linear_warmup_then_cosine_annealing():
    max_lr, min_lr, warmup, total = 1e-3, 1e-4, 10, 60
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=max_lr)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=min_lr)
    for k in range(total - warmup + 1):
        assert math.isclose(ref.lr_schedule(warmup + k, max_lr, warmup, total, min_lr),
                            opt.param_groups[0]["lr"], rel_tol=1e-9, abs_tol=1e-12)
        opt.step()
        cosine.step()
    warm = torch.optim.lr_scheduler.LambdaLR(torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=max_lr),
                                             lambda s: s / warmup)
    for s in range(warmup):
        assert math.isclose(ref.lr_schedule(s, max_lr, warmup, total, min_lr), warm.get_last_lr()[0], abs_tol=1e-12)
        warm.optimizer.step()
        warm.step()


def test_lr_schedule_edges():
    assert ref.lr_schedule(0, 1.0, 0, 10) == 1.0  # no warm-up
    assert ref.lr_schedule(0, 1.0, 5, 10) == 0.0
    assert ref.lr_schedule(5, 1.0, 5, 10) == 1.0
    assert ref.lr_schedule(10, 1.0, 5, 10, 0.1) == 0.1
    assert ref.lr_schedule(99, 1.0, 5, 10, 0.1) == 0.1


# --- train_step, evaluate ----------------------------------------------------------------------


def test_train_step_is_the_usual_pytorch_step_with_clip_grad_norm():
    torch.manual_seed(0)
    model = ref.GPT(ref.GPTConfig(d_model=16, n_heads=2, n_layers=1))
    twin = copy.deepcopy(model)
    x, y = data.collate([data.NamesDataset(NAMES)[i] for i in range(5)])
    opt, opt2 = torch.optim.AdamW(model.parameters(), lr=1e-2), torch.optim.AdamW(twin.parameters(), lr=1e-2)
    loss = ref.train_step(model, (x, y), opt, 27, clip=0.5)
    opt2.zero_grad()
    loss2 = F.cross_entropy(twin(x).reshape(-1, 28), y.reshape(-1), ignore_index=27)
    loss2.backward()
    norm = nn.utils.clip_grad_norm_(twin.parameters(), 0.5)
    opt2.step()
    assert isinstance(loss, float) and math.isclose(loss, loss2.item(), rel_tol=1e-6)
    assert norm > 0.5  # clipping mattered
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.allclose(a, b, atol=1e-7)


def test_evaluate_weights_batches_by_their_real_tokens():
    torch.manual_seed(0)
    model = ref.GPT(ref.GPTConfig(d_model=16, n_heads=2, n_layers=1))
    model.train()
    whole = data.make_loader(NAMES, batch_size=len(NAMES), shuffle=False)
    small = data.make_loader(NAMES, batch_size=5, shuffle=False)
    x, y = next(iter(whole))
    with torch.no_grad():
        model.eval()
        expected = ref.lm_loss(model(x), y, 27).item()
        model.train()
    assert math.isclose(ref.evaluate(model, small, 27), expected, rel_tol=1e-5)
    assert model.training
    assert math.isclose(ref.evaluate(model, small, 27, max_batches=1),
                        ref.evaluate(model, data.make_loader(NAMES[:5], batch_size=5, shuffle=False), 27), rel_tol=1e-6)


# --- the bigram baseline -------------------------------------------------------------------------


def test_bigram_model_counts_and_normalises():
    model = tr.BigramModel(["ab", "a"], smoothing=0.0)
    a, b, space = 1, 2, 0
    assert model.counts[space, a] == 2 and model.counts[a, b] == 1 and model.counts[a, space] == 1
    probs = model.log_probs.exp()
    assert torch.allclose(probs[a, b], torch.tensor(0.5)) and torch.allclose(probs[space, a], torch.tensor(1.0))
    smoothed = tr.BigramModel(NAMES).log_probs.exp()
    assert torch.allclose(smoothed.sum(-1), torch.ones(28), atol=1e-5)
    assert (smoothed[:, ref.PAD_Y] == 0).all()


def test_bigram_model_works_with_evaluate_and_generate():
    model = tr.BigramModel(NAMES)
    loader = data.make_loader(NAMES, batch_size=5, shuffle=False)
    loss = ref.evaluate(model, loader, 27)
    # by hand: mean of -log P(next | current) over every transition of every name
    total, n = 0.0, 0
    for name in NAMES:
        ids = ref.encode(" " + name + " ")
        for a, b in zip(ids, ids[1:]):
            total -= model.log_probs[a, b].item()
            n += 1
    assert math.isclose(loss, total / n, rel_tol=1e-5)
    names = tr.sample_names(model, n=5, seed=0)
    assert len(names) == 5 and all(set(name) <= set("abcdefghijklmnopqrstuvwxyz") for name in names)
    assert names == tr.sample_names(model, n=5, seed=0)


# --- evaluation by position ---------------------------------------------------------------------


def test_val_losses_all_equals_evaluate_and_excluding_first_drops_position_0():
    torch.manual_seed(0)
    model = ref.GPT(ref.GPTConfig(d_model=16, n_heads=2, n_layers=1))
    loader = data.make_loader(NAMES, batch_size=5, shuffle=False)
    losses = tr.val_losses(model, loader)
    assert math.isclose(losses["all"], ref.evaluate(model, loader, 27), rel_tol=1e-5)
    sums, counts = tr.position_losses(model, loader)
    assert counts[0] == len(NAMES) and counts.sum() == sum(len(n) + 1 for n in NAMES)
    assert math.isclose(losses["excluding_first"], (sums[1:].sum() / counts[1:].sum()).item(), rel_tol=1e-9)


# --- fused kernels ---------------------------------------------------------------------------------


@pytest.mark.parametrize("with_mask", [False, True])
def test_fused_attention_matches_the_hand_written_one(with_mask):
    torch.manual_seed(0)
    mha = ref.MultiHeadAttention(32, 4)
    fused = copy.deepcopy(mha)
    fused.fused = True
    x = torch.randn(3, 7, 32)
    mask = ref.padding_mask(torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4])) if with_mask else None
    assert torch.allclose(fused(x, mask), mha(x, mask), atol=1e-5)


def test_fused_attention_matches_pytorch_multihead_attention():
    torch.manual_seed(0)
    d, H, T = 32, 4, 6
    mine = ref.MultiHeadAttention(d, H)
    mine.fused = True
    torch_mha = nn.MultiheadAttention(d, H, bias=False, batch_first=True)
    with torch.no_grad():
        torch_mha.in_proj_weight.copy_(torch.cat([mine.q_proj.weight, mine.k_proj.weight, mine.v_proj.weight]))
        torch_mha.out_proj.weight.copy_(mine.out_proj.weight)
    x = torch.randn(2, T, d)
    causal = ~ref.causal_mask(T)  # nn.MultiheadAttention: True = may NOT attend
    expected, _ = torch_mha(x, x, x, attn_mask=causal, need_weights=False)
    assert torch.allclose(mine(x), expected, atol=1e-5)


def test_use_fused_kernels_keeps_outputs_and_switches_back():
    torch.manual_seed(0)
    model = ref.GPT(ref.GPTConfig(d_model=32, n_heads=4, n_layers=2))
    ids = torch.randint(0, 28, (3, 9))
    before = model(ids)
    tr.use_fused_kernels(model)
    assert model.blocks[0].attn.fused and model.ln_f.fused and model.blocks[1].ln2.fused
    assert type(model.blocks[0].attn) is ref.MultiHeadAttention and type(model.ln_f) is ref.LayerNorm
    assert torch.allclose(model(ids), before, atol=1e-5)
    tr.use_fused_kernels(model, False)
    assert not model.blocks[0].attn.fused and not model.ln_f.fused
    assert torch.allclose(model(ids), before, atol=1e-6)


def test_fused_layer_norm_matches_torch():
    ln = ref.LayerNorm(8)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    plain = copy.deepcopy(ln)
    ln.fused = True
    x = torch.randn(2, 3, 8) * 5 + 2
    expected = F.layer_norm(x, (8,), ln.weight, ln.bias, 1e-5)
    assert torch.allclose(ln(x), expected, atol=1e-5)
    assert torch.allclose(ln(x), plain(x), atol=1e-5)
    assert ln(x.to(torch.bfloat16)).dtype == torch.bfloat16


# --- configs, fit, checkpoints -----------------------------------------------------------------------


def test_configs_per_device():
    cpu, gpu = tr.config_for("cpu"), tr.config_for("cuda")
    assert not cpu.bf16 and not cpu.compile
    assert gpu.bf16 and gpu.compile and gpu.d_model > cpu.d_model
    mps = tr.config_for("mps")
    assert not mps.bf16 and not mps.compile
    assert tr.config_for("cpu") is not tr.CPU_CONFIG  # a copy: changing it leaves the preset alone
    config = cpu.model_config()
    assert config.vocab_size == 28 and config.max_len == 16


def test_fit_uses_the_functions_it_is_given_and_learns():
    config = tiny_config(steps=40, eval_every=20)
    model = tr.make_model(config)
    train = data.make_loader(NAMES * 4, batch_size=config.batch_size, seed=0)
    val = data.make_loader(NAMES, batch_size=6, shuffle=False)
    calls = {"step": 0, "eval": 0, "lr": []}

    def step_fn(*args, **kwargs):
        calls["step"] += 1
        return ref.train_step(*args, **kwargs)

    def eval_fn(*args, **kwargs):
        calls["eval"] += 1
        return ref.evaluate(*args, **kwargs)

    def lr_fn(*args):
        calls["lr"].append(args[0])
        return ref.lr_schedule(*args)

    class Plot:
        updates = 0

        def update(self, history):
            Plot.updates += 1

    start = ref.evaluate(model, val, 27)
    history = tr.fit(model, train, val, config, step_fn=step_fn, eval_fn=eval_fn, lr_fn=lr_fn, progress=False,
                     plot=Plot())
    assert calls["step"] == 40 and calls["eval"] == 2 and calls["lr"] == list(range(40)) and Plot.updates == 2
    assert len(history.train_loss) == 40 and history.val_steps == [19, 39]
    assert history.lr[0] == 0.0 and math.isclose(history.lr[config.warmup_steps], config.max_lr)
    assert history.tokens == sum((y != 27).sum().item() for (_, y), _ in zip(
        _cycle(data.make_loader(NAMES * 4, batch_size=config.batch_size, seed=0)), range(40)))
    assert history.val_loss[-1] < start - 0.3
    assert history.tokens_per_second > 0


def _cycle(loader):
    while True:
        yield from loader


def test_fit_is_deterministic():
    runs = []
    for _ in range(2):
        config = tiny_config()
        model = tr.make_model(config)
        history = tr.fit(model, data.make_loader(NAMES, batch_size=4, seed=0),
                         data.make_loader(NAMES, batch_size=6, shuffle=False), config, progress=False)
        runs.append(history.train_loss)
    assert runs[0] == runs[1]


def test_fit_ignores_bf16_and_compile_on_cpu():
    config = tiny_config(steps=3, bf16=True, compile=True)
    model = tr.make_model(config)
    history = tr.fit(model, data.make_loader(NAMES, batch_size=4), data.make_loader(NAMES, batch_size=6), config,
                     progress=False)
    assert len(history.train_loss) == 3


def test_autocast_wrapper_keeps_the_parameters_and_mode():
    model = tr.make_model(tiny_config())
    wrapped = tr.AutocastBF16(model)
    assert list(wrapped.parameters())[0] is list(model.parameters())[0]
    wrapped.eval()
    assert not model.training
    assert wrapped.config is model.config


def test_checkpoint_round_trip(tmp_path):
    config = tiny_config()
    model = tr.make_model(config)
    loader = data.make_loader(NAMES, batch_size=6, shuffle=False)
    history = tr.fit(model, data.make_loader(NAMES, batch_size=4), loader, config, progress=False)
    path = tr.save_checkpoint(tmp_path / "ckpt" / "names.pt", model, config, history)
    loaded, loaded_config = tr.load_checkpoint(path)
    assert loaded_config == config
    assert ref.evaluate(loaded, loader, 27) == ref.evaluate(model, loader, 27)


def test_sample_names_are_seeded_and_leave_the_rng_alone():
    model = tr.make_model(tiny_config())
    torch.manual_seed(5)
    expected = torch.rand(2)
    torch.manual_seed(5)
    a = tr.sample_names(model, n=4, seed=1)
    assert torch.equal(torch.rand(2), expected)
    assert a == tr.sample_names(model, n=4, seed=1) and len(a) == 4
    assert all(" " not in name and "." not in name for name in a)


# --- the attention pictures (tutor.viz.training) ------------------------------------------------------


def test_attention_weights_from_hooks_equal_the_model_attention():
    from tutor.viz.training import attention_weights

    torch.manual_seed(0)
    model = ref.GPT(ref.GPTConfig(d_model=32, n_heads=4, n_layers=2))
    ids = torch.tensor([ref.encode(" laika")])
    weights = attention_weights(model, ids)
    assert len(weights) == 2 and weights[0].shape == (1, 4, 6, 6)
    # block 0 by hand
    block = model.blocks[0]
    x = model.tok_emb(ids) + model.pos_emb(torch.arange(6))
    h = block.ln1(x)
    q, k = ref.split_heads(block.attn.q_proj(h), 4), ref.split_heads(block.attn.k_proj(h), 4)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~ref.causal_mask(6), float("-inf"))
    assert torch.allclose(weights[0], torch.softmax(scores, -1), atol=1e-6)
    assert torch.allclose(weights[1].sum(-1), torch.ones(1, 4, 6))
    assert torch.all(weights[1].triu(1) == 0)
    tr.use_fused_kernels(model)  # works on the fused model too, and leaves no hook behind
    assert torch.allclose(attention_weights(model, ids)[1], weights[1], atol=1e-5)
    assert not model.blocks[0].attn._forward_pre_hooks


def test_viz_figures_draw(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from tutor.viz import training as vt

    config = tiny_config()
    model = tr.make_model(config)
    history = tr.fit(model, data.make_loader(NAMES, batch_size=4), data.make_loader(NAMES, batch_size=6), config,
                     progress=False)
    figs = [vt.lr_curve(ref.lr_schedule, 1e-3, 10, 100, 1e-4), vt.loss_curves(history, {"bigram": 2.5}),
            vt.attention_figure(model, "Laika!", 1), vt.samples_figure(model, 0.8, n=4),
            vt.bigram_counts(tr.BigramModel(NAMES)), vt.loss_by_position(*tr.position_losses(
                model, data.make_loader(NAMES, batch_size=6)))]
    for fig in figs:
        for ax in fig.axes:
            if ax.get_visible() and ax.axison and ax.get_label() != "<colorbar>":
                assert ax.get_title() or fig._suptitle is not None
        matplotlib.pyplot.close(fig)
    for widget in (vt.sampler(model), vt.attention_explorer(model, "zoe")):
        bundle = widget._repr_mimebundle_()
        assert "image/png" in bundle
    vt.LivePlot().update(history)  # outside IPython: does nothing, raises nothing


# --- the presets and the time a run takes ----------------------------------------------------------


def test_expected_seconds_only_for_the_calibrated_cpu_preset():
    cpu = tr.config_for("cpu")
    assert tr.expected_seconds(cpu, "cpu") == pytest.approx(cpu.steps * tr.CPU_SECONDS_PER_STEP)
    assert tr.expected_seconds(cpu, "cpu") <= 120  # the preset is sized for about 1.5 minutes on an idle 2-core CPU
    half = copy.copy(cpu)
    half.steps = cpu.steps // 2
    assert tr.expected_seconds(half, "cpu") == pytest.approx(tr.expected_seconds(cpu, "cpu") / 2, rel=0.01)
    assert tr.expected_seconds(cpu, "cuda") is None
    assert tr.expected_seconds(tr.config_for("cuda"), "cpu") is None
    assert tr.expected_seconds(tiny_config(), "cpu") is None


def test_format_duration():
    assert [tr.format_duration(s) for s in (0, 40.4, 59.6, 95, 600)] == ["0 s", "40 s", "1 min 00 s", "1 min 35 s",
                                                                         "10 min 00 s"]


def test_time_report_on_time_shows_the_expected_total_and_no_warning():
    label, warning = tr.time_report(3000, 50, 50 * 0.036, expected=100.0)  # 108 s: a little slow, fine
    assert label == "expected 1 min 40 s" and warning is None


def test_time_report_on_a_slow_machine_warns_with_the_way_out():
    label, warning = tr.time_report(3000, 50, 50 * 0.1, expected=100.0)  # on course for 300 s
    assert "5 min 00 s" in label and "1 min 40 s" in label
    assert "3.0x slower" in warning and "5 min 00 s" in warning and "1 min 40 s" in warning
    assert "TUTOR_QUICK=1" in warning and "config.steps" in warning and "goes on" in warning


def test_time_report_without_a_calibrated_figure_uses_the_measured_speed():
    label, warning = tr.time_report(1000, 50, 5.0, expected=None)
    assert label == "expected 1 min 40 s" and warning is None


class FakeClock:
    """perf_counter for tutor.train.loop.time: each reading is ``tick`` seconds after the one before. ``fit`` reads the
    clock at the start, at step 15 and step 65 (the timed 50 steps: one tick) and at the end."""

    def __init__(self, tick):
        self.now, self.tick = 0.0, tick

    def perf_counter(self):
        self.now += self.tick
        return self.now


def _fit_with_clock(monkeypatch, capsys, tick, expected, steps=140):
    monkeypatch.setattr(loop, "time", FakeClock(tick))
    monkeypatch.setattr(loop, "expected_seconds", lambda config, device: expected)
    config = tiny_config(steps=steps, eval_every=1000)
    model = tr.make_model(config)
    history = tr.fit(model, data.make_loader(NAMES * 4, batch_size=4), data.make_loader(NAMES, batch_size=6),
                     config, progress=True)
    return history, capsys.readouterr()


def test_fit_says_once_that_a_slow_machine_is_slow_and_trains_every_step(monkeypatch, capsys):
    # 50 steps in 50 s: 140 steps on course for 140 s, against 14 s expected
    history, out = _fit_with_clock(monkeypatch, capsys, tick=50.0, expected=14.0)
    assert len(history.train_loss) == 140  # not silently shortened
    assert out.out.count("slower than an idle 2-core CPU") == 1
    assert "TUTOR_QUICK=1" in out.out
    assert "on course for" in out.err  # the progress bar shows it too


def test_fit_stays_quiet_on_a_machine_as_fast_as_expected(monkeypatch, capsys):
    history, out = _fit_with_clock(monkeypatch, capsys, tick=50.0, expected=140.0)
    assert len(history.train_loss) == 140
    assert "slower" not in out.out + out.err
    assert "expected 2 min 20 s" in out.err


def test_fit_with_too_few_steps_to_measure_says_nothing(monkeypatch, capsys):
    history, out = _fit_with_clock(monkeypatch, capsys, tick=50.0, expected=1.0, steps=60)
    assert len(history.train_loss) == 60 and "slower" not in out.out + out.err


def test_the_padding_picture_shows_a_typical_batch():
    from tutor.viz import training as vt

    loader = data.make_sortish_loader(NAMES * 8, batch_size=8, seed=0)
    (_, typical), share = vt._typical_batch(loader, 5)
    batches = [y for (_, y), _ in zip(data.make_sortish_loader(NAMES * 8, batch_size=8, seed=0), range(5))]
    assert share == pytest.approx(sum(int((y == data.PAD_Y).sum()) for y in batches) / sum(y.numel() for y in batches))
    own = (typical == data.PAD_Y).float().mean().item()
    assert all(abs(own - share) <= abs((y == data.PAD_Y).float().mean().item() - share) for y in batches)


def test_padding_picture_draws():
    import matplotlib

    matplotlib.use("Agg")
    from tutor.viz import training as vt

    fig = vt.padding_picture(data.make_loader(NAMES * 8, batch_size=8),
                             data.make_sortish_loader(NAMES * 8, batch_size=8), rows=8, n_batches=5)
    assert fig._suptitle is not None and len(fig.axes) == 2
    for ax in fig.axes:
        assert "padding" in ax.get_title() and ax.get_xlabel()
    assert fig.axes[0].get_ylabel()
    matplotlib.pyplot.close(fig)


# --- cpu_threads="auto": the fastest thread count, measured while training -----------------------------


def _drive(chooser, steps, seconds_for):
    """Run ``chooser`` over ``steps`` steps where a step with n threads takes ``seconds_for(step, n)``."""
    used = []
    for step in range(steps):
        n = chooser.before_step(step)
        used.append(n)
        chooser.after_step(step, seconds_for(step, n))
    return used


def test_thread_chooser_candidates_follow_the_cores():
    assert tr.ThreadChooser(cores=1).candidates == [1]
    assert tr.ThreadChooser(cores=2).candidates == [1, 2]
    assert tr.ThreadChooser(cores=6).candidates == [1, 2, 4]
    assert tr.ThreadChooser(cores=64).candidates == [1, 2, 4, 8]


def test_thread_chooser_keeps_two_threads_on_an_idle_machine_and_one_under_contention():
    threads = torch.get_num_threads()
    try:
        idle = tr.ThreadChooser(cores=2, rounds=3, every=100)
        used = _drive(idle, 40, lambda step, n: 0.030 / n ** 0.7)  # more threads, faster
        assert used[0] == 2 and set(used[1:7]) == {1, 2}  # step 0 is not timed; steps 1-6 alternate
        assert idle.threads == 2 and used[7:] == [2] * 33
        assert idle.choices[0][0] == 6 and idle.choices[0][2][1] > idle.choices[0][2][2]

        busy = tr.ThreadChooser(cores=2, rounds=3, every=100)
        used = _drive(busy, 40, lambda step, n: 0.030 * (3 if n == 2 else 1))  # a busy core: 2 threads wait
        assert busy.threads == 1 and used[7:] == [1] * 33
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)


def test_thread_chooser_measures_again_when_the_machine_changes():
    threads = torch.get_num_threads()
    try:
        chooser = tr.ThreadChooser(cores=2, rounds=3, every=50)
        # busy until step 50, idle afterwards: the second measurement (steps 51-56) switches back to 2 threads
        used = _drive(chooser, 120, lambda step, n: 0.03 * (3 if (n == 2 and step < 50) else 1) / n ** 0.5)
        assert used[10:50] == [1] * 40 and used[60:100] == [2] * 40
        assert [c[1] for c in chooser.choices] == [1, 2, 2]
    finally:
        torch.set_num_threads(threads)


def test_fit_with_auto_threads_trains_every_step_and_restores_the_thread_count(capsys):
    threads = torch.get_num_threads()
    config = tiny_config(steps=30, cpu_threads="auto")
    history = tr.fit(tr.make_model(config), data.make_loader(NAMES * 4, batch_size=4),
                     data.make_loader(NAMES, batch_size=6), config, progress=True)
    assert len(history.train_loss) == 30
    assert history.cpu_threads in tr.ThreadChooser().candidates
    assert torch.get_num_threads() == threads
    last = capsys.readouterr().err.strip().splitlines()[-1]  # the progress line names the count in use
    n = history.cpu_threads
    assert last.startswith(f"training ({n} thread{'s' if n > 1 else ''}): step 30/30")

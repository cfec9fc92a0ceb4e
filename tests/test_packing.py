"""Packed batches (several names per row, notebook 08) and the Muon + AdamW optimizer of the CPU preset.

Packing must change nothing but the wasted positions: the same names give the same loss as padded, and a model
wrapped in ``PackedNames`` gives the GPT's own logits on an ordinary padded batch. The tests below also show
what goes wrong without the mask or without the positions, so that a broken packer cannot pass."""

import warnings

import pytest
import torch

from tutor import data
from tutor import reference as ref
from tutor import train as tr
from tutor.train.loop import _batches as forever  # fit's endless loop over a loader's passes

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


NAMES = ["laika", "zoe", "ana", "maximilian", "bo", "evelyn", "tom", "emma", "olivia", "liam", "noah", "ava",
         "christopher", "al", "jo", "elizabeth"]


def items(names):
    dataset = data.NamesDataset(names)
    return [dataset[i] for i in range(len(dataset))]


def names_in(X, Y):
    """The names a packed (or padded) batch holds, read back from its rows."""
    found = []
    for x, y in zip(X, Y):
        for start in torch.nonzero(data.name_starts(x) & (y != data.PAD_Y)).flatten().tolist():
            end = start
            while y[end] != data.PAD_X:  # a name's targets end with its ' '
                end += 1
            found.append(ref.decode(y[start:end]))
    return found


def gpt(seed=0, fused=False):
    torch.manual_seed(seed)
    model = ref.GPT(ref.GPTConfig(n_layers=2, d_model=32, n_heads=4))
    return tr.use_fused_kernels(model) if fused else model


# --- pack_names ------------------------------------------------------------------------------------


def test_pack_names_holds_every_name_once_in_fewer_positions():
    X, Y = data.pack_names(items(NAMES))
    assert X.shape == Y.shape and X.shape[1] == data.PACK_WIDTH == 16 and X.dtype == torch.long
    assert sorted(names_in(X, Y)) == sorted(NAMES)
    padded_X, _ = data.collate(items(NAMES))
    assert X.numel() < padded_X.numel()
    assert int((Y != data.PAD_Y).sum()) == sum(len(n) + 1 for n in NAMES)  # every real target, nothing more
    assert set(X[Y == data.PAD_Y].tolist()) == {data.PAD_X}  # padding is ' ' in x, '.' in y


def test_pack_names_uses_few_rows_on_a_real_length_mix():
    import random

    names = random.Random(0).sample(data.load_names(offline=True, verbose=False), 256)  # the names that ship
    X, Y = data.pack_names(items(names))
    needed = sum(len(n) + 1 for n in names) / 16
    assert X.shape[0] <= 1.1 * needed + 1  # best fit, longest first: close to the fewest rows possible
    assert (Y == data.PAD_Y).float().mean() < 0.1 < 0.3 < (data.collate(items(names))[1] == data.PAD_Y).float().mean()


def test_pack_names_rejects_a_name_longer_than_a_row():
    with pytest.raises(ValueError, match="a name of 10 letters needs 11 positions, but packed rows have 8"):
        data.pack_names(items(["maximilian"]), width=8)


def test_make_packed_loader_holds_the_same_names_as_make_loader():
    plain = data.make_loader(NAMES * 3, batch_size=8, seed=3)
    packed = data.make_packed_loader(NAMES * 3, batch_size=8, seed=3)
    assert len(plain) == len(packed)
    for (px, py), (qx, qy) in zip(plain, packed):
        assert sorted(names_in(px, py)) == sorted(names_in(qx, qy))
        assert qx.shape[1] == 16



@pytest.mark.parametrize("make", [data.make_loader, data.make_packed_loader])
def test_background_workers_give_the_same_batches_in_the_same_order(make):
    """notebook 08's GPU preset makes its batches in worker processes: the batches must not change."""
    here = [b for _, b in zip(range(2 * len(NAMES)), forever(make(NAMES * 3, batch_size=8, seed=5)))]
    loader = make(NAMES * 3, batch_size=8, seed=5, num_workers=2)
    assert loader.num_workers == 2
    there = [b for _, b in zip(range(2 * len(NAMES)), forever(loader))]  # two passes: the second reshuffles
    assert len(here) == len(there)
    for (hx, hy), (tx, ty) in zip(here, there):
        assert torch.equal(hx, tx) and torch.equal(hy, ty)


def test_only_the_gpu_preset_uses_loader_workers_and_leaves_a_core_to_training():
    from tutor.train.threads import cpu_cores

    assert tr.CPU_CONFIG.loader_workers == 0 and tr.TrainConfig().loader_workers == 0
    assert 0 <= tr.GPU_CONFIG.loader_workers <= 4 and tr.GPU_CONFIG.loader_workers < cpu_cores()
    assert tr.GPU_CONFIG.loader_workers > 0 or cpu_cores() == 1
    assert tr.config_for("mps").loader_workers == 0  # not measured on a Mac
    assert data.worker_options(0) == {}


# --- where names start: positions and the mask -----------------------------------------------------


def test_name_positions_and_same_name_mask_on_a_hand_made_row():
    x = torch.tensor([ref.encode(" ann bo  ")])
    assert data.name_positions(x).tolist() == [[0, 1, 2, 3, 0, 1, 2, 0, 0]]
    mask = data.same_name_mask(x)[0]
    assert mask.shape == (9, 9)
    assert mask[:4, :4].all() and mask[4:7, 4:7].all()
    assert not mask[4:, :4].any() and not mask[:4, 4:].any()
    assert mask[7, 7] and not mask[7, 8]  # each padding position is a "name" of its own


def test_on_a_padded_batch_positions_count_from_zero_and_the_mask_hides_nothing_real():
    X, Y = data.collate(items(NAMES))
    real = Y != data.PAD_Y
    positions = torch.arange(X.shape[1]).expand_as(X)
    assert torch.equal(data.name_positions(X)[real], positions[real])
    mask = data.same_name_mask(X)
    causal = torch.ones(X.shape[1], X.shape[1], dtype=torch.bool).tril()
    for b in range(X.shape[0]):
        n = int(real[b].sum())
        assert torch.equal(mask[b, :n, :n] & causal[:n, :n], causal[:n, :n])


# --- PackedNames: the same loss, the same logits ---------------------------------------------------


@pytest.mark.parametrize("fused", [False, True])
def test_packed_batch_gives_the_loss_of_the_same_names_padded(fused):
    model = gpt(fused=fused)
    batch = items(NAMES)
    with torch.no_grad():
        padded = ref.lm_loss(model(data.collate(batch)[0]), data.collate(batch)[1], data.PAD_Y)
        X, Y = data.pack_names(batch)
        packed = ref.lm_loss(tr.PackedNames(model)(X), Y, data.PAD_Y)
    assert packed.item() == pytest.approx(padded.item(), abs=1e-5)


def test_the_gradients_match_too():
    batch = items(NAMES)
    model_a, model_b = gpt(), gpt()
    ref.lm_loss(model_a(data.collate(batch)[0]), data.collate(batch)[1], data.PAD_Y).backward()
    X, Y = data.pack_names(batch)
    ref.lm_loss(tr.PackedNames(model_b)(X), Y, data.PAD_Y).backward()
    for (name, a), b in zip(model_a.named_parameters(), model_b.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-6), name


def test_without_the_mask_or_the_positions_the_loss_is_not_the_same():
    """What a packer that forgot either would give: the names leak into each other, or sit at the wrong positions."""
    model = gpt()
    batch = items(NAMES)
    X, Y = data.pack_names(batch)
    with torch.no_grad():
        right = ref.lm_loss(tr.PackedNames(model)(X), Y, data.PAD_Y).item()
        no_mask = ref.lm_loss(model(X, positions=data.name_positions(X)), Y, data.PAD_Y).item()
        no_positions = ref.lm_loss(model(X, mask=data.same_name_mask(X)), Y, data.PAD_Y).item()
    assert abs(no_mask - right) > 1e-4 and abs(no_positions - right) > 1e-4


def test_packed_names_gives_the_gpt_logits_on_a_padded_batch():
    model = gpt()
    X, Y = data.collate(items(NAMES))
    real = Y != data.PAD_Y
    with torch.no_grad():
        assert torch.allclose(tr.PackedNames(model)(X)[real], model(X)[real], atol=1e-5)
        loader = data.make_loader(NAMES, batch_size=5, shuffle=False)
        assert ref.evaluate(tr.PackedNames(model), loader, data.PAD_Y) == pytest.approx(
            ref.evaluate(model, loader, data.PAD_Y), abs=1e-6)


def test_gpt_positions_default_to_arange():
    model = gpt()
    X, _ = data.collate(items(NAMES[:4]))
    with torch.no_grad():
        assert torch.equal(model(X), model(X, positions=torch.arange(X.shape[1])))
        assert not torch.allclose(model(X), model(X, positions=torch.arange(X.shape[1]).flip(0)))


# --- Muon + AdamW ----------------------------------------------------------------------------------


def muon_config(**kw):
    base = dict(d_model=16, n_heads=2, n_layers=2, batch_size=4, steps=12, max_lr=1e-2, min_lr=1e-3, warmup_steps=3,
                eval_every=5, eval_batches=2, optimizer="muon")
    return tr.TrainConfig(**{**base, **kw})


needs_muon = pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="torch.optim.Muon is new in PyTorch 2.9")


@needs_muon
def test_muon_gets_the_block_matrices_and_adamw_the_rest():
    model = tr.make_model(muon_config())
    optimizer = tr.make_optimizer(model, muon_config())
    assert isinstance(optimizer, tr.MuonAdamW)
    muon = {id(p) for g in optimizer.muon.param_groups for p in g["params"]}
    adamw = {id(p) for g in optimizer.adamw.param_groups for p in g["params"]}
    assert not muon & adamw and muon | adamw == {id(p) for p in model.parameters()}
    assert muon == {id(p) for p in tr.block_matrices(model)}
    assert len(muon) == 2 * 6  # q, k, v, out, fc, proj in each of 2 blocks
    assert all(p.dim() == 2 for p in tr.block_matrices(model))
    assert id(model.tok_emb.weight) in adamw and id(model.head.weight) in adamw


@needs_muon
def test_muon_adamw_steps_both_and_takes_the_learning_rate_from_param_groups():
    model = tr.make_model(muon_config())
    optimizer = tr.make_optimizer(model, muon_config())
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    for group in optimizer.param_groups:
        group["lr"] = 0.0
    X, Y = data.collate(items(NAMES[:4]))
    ref.train_step(model, (X, Y), optimizer, data.PAD_Y)
    assert all(torch.equal(before[n], p) for n, p in model.named_parameters())  # lr 0: nothing moves
    for group in optimizer.param_groups:
        group["lr"] = 1e-2
    ref.train_step(model, (X, Y), optimizer, data.PAD_Y)
    moved = {n for n, p in model.named_parameters() if not torch.equal(before[n], p)}
    assert "blocks.0.mlp.fc.weight" in moved and "tok_emb.weight" in moved


@needs_muon
def test_muon_adamw_state_dict_round_trip():
    """A restored optimizer takes exactly the step the original would (momentum and Adam's moments restored);
    a fresh one does not."""
    import copy

    config = muon_config()
    model = tr.make_model(config)
    optimizer = tr.make_optimizer(model, config)
    X, Y = data.collate(items(NAMES[:4]))
    ref.train_step(model, (X, Y), optimizer, data.PAD_Y)
    restored_model, fresh_model = copy.deepcopy(model), copy.deepcopy(model)
    restored = tr.make_optimizer(restored_model, config)
    restored.load_state_dict(copy.deepcopy(optimizer.state_dict()))  # a copy, as torch.save and torch.load make
    fresh = tr.make_optimizer(fresh_model, config)
    for m, opt in ((model, optimizer), (restored_model, restored), (fresh_model, fresh)):
        ref.train_step(m, (X, Y), opt, data.PAD_Y)
    for (name, p), r, f in zip(model.named_parameters(), restored_model.parameters(), fresh_model.parameters()):
        assert torch.equal(p, r), name
    assert any(not torch.equal(p, f) for p, f in zip(model.parameters(), fresh_model.parameters()))


@needs_muon
def test_muon_takes_its_newton_schulz_iterations_from_the_config():
    """``muon_ns_steps`` reaches torch.optim.Muon (5, its default, unless set) and changes the update it makes."""
    X, Y = data.collate(items(NAMES[:4]))
    models = {}
    for steps in (5, 3):
        config = muon_config() if steps == 5 else muon_config(muon_ns_steps=steps)
        model = tr.make_model(config)
        optimizer = tr.make_optimizer(model, config)
        assert [group["ns_steps"] for group in optimizer.muon.param_groups] == [steps]
        ref.train_step(model, (X, Y), optimizer, data.PAD_Y)
        models[steps] = model
    fc = {steps: model.blocks[0].mlp.fc.weight for steps, model in models.items()}
    assert not torch.allclose(fc[5], fc[3])  # same start, same batch: only the iterations differ
    assert torch.equal(models[5].tok_emb.weight, models[3].tok_emb.weight)  # AdamW's share is untouched


def test_fused_attention_false_keeps_the_hand_written_attention_with_the_fused_layer_norm():
    """The candidate's switch: the same model and outputs, only the attention's branch differs."""
    hand = tr.make_model(muon_config(fused_attention=False))
    fused = tr.make_model(muon_config())
    for model, attention in ((hand, False), (fused, True)):
        assert {m.fused for m in model.modules() if isinstance(m, ref.MultiHeadAttention)} == {attention}
        assert {m.fused for m in model.modules() if isinstance(m, ref.LayerNorm)} == {True}
    X, _ = data.pack_names(items(NAMES))
    with torch.no_grad():
        torch.testing.assert_close(tr.PackedNames(hand)(X), tr.PackedNames(fused)(X), atol=1e-5, rtol=1e-5)
    unfused = tr.make_model(muon_config(fused_kernels=False))  # fused_kernels=False: everything hand-written
    assert not any(getattr(m, "fused", False) for m in unfused.modules())


def test_without_torch_optim_muon_it_warns_and_uses_adamw(monkeypatch):
    monkeypatch.delattr(torch.optim, "Muon", raising=False)
    with pytest.warns(UserWarning, match="no torch.optim.Muon"):
        optimizer = tr.make_optimizer(tr.make_model(muon_config()), muon_config())
    assert isinstance(optimizer, torch.optim.AdamW)


def test_an_unknown_optimizer_is_an_error():
    with pytest.raises(ValueError, match="unknown optimizer 'sgd'"):
        tr.make_optimizer(tr.make_model(muon_config()), muon_config(optimizer="sgd"))


# --- fit on packed batches ---------------------------------------------------------------------------


def test_fit_wraps_the_model_for_packed_batches_and_learns():
    config = muon_config(packed=True, steps=40, eval_every=20)
    config.optimizer = "muon" if hasattr(torch.optim, "Muon") else "adamw"
    model = tr.make_model(config)
    seen = []

    def step_fn(model, batch, optimizer, ignore_index, clip=1.0):
        seen.append(type(model).__name__)
        return ref.train_step(model, batch, optimizer, ignore_index, clip)

    names = NAMES * 4
    train_loader = data.make_packed_loader(names, batch_size=16, seed=0)
    val_loader = data.make_loader(names, batch_size=16, shuffle=False)
    before = ref.evaluate(model, val_loader, data.PAD_Y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        history = tr.fit(model, train_loader, val_loader, config, step_fn=step_fn, progress=False)
    assert set(seen) == {"PackedNames"} and len(seen) == 40
    assert history.tokens == 40 * sum(len(n) + 1 for n in names) // 4  # 16 names of 4 x 16 per batch
    assert ref.evaluate(model, val_loader, data.PAD_Y) < before - 0.3


def test_the_cpu_preset_packs_and_uses_muon():
    preset = tr.CPU_CONFIG
    assert preset.packed and preset.optimizer == "muon"
    assert "packed rows" in preset.describe() and "Muon + AdamW" in preset.describe()
    assert not tr.TrainConfig().packed and tr.TrainConfig().optimizer == "adamw"  # notebook 09's runs are unchanged
    assert not tr.GPU_CONFIG.packed and tr.GPU_CONFIG.optimizer == "adamw"


# --- pictures --------------------------------------------------------------------------------------


def test_padding_picture_shows_plain_and_packed_batches():
    import matplotlib

    matplotlib.use("Agg")
    from tutor.viz import training as vt

    fig = vt.padding_picture(data.make_loader(NAMES * 8, batch_size=16),
                             data.make_packed_loader(NAMES * 8, batch_size=16), rows=8, n_batches=4)
    titles = [ax.get_title() for ax in fig.axes]
    assert "plain" in titles[0] and "16 names in 16 rows" in titles[0]
    assert "packed" in titles[1] and "16 names in" in titles[1] and "16 rows" not in titles[1]
    plain_share, packed_share = (float(t.split("\n")[1].split("%")[0]) for t in titles)
    assert packed_share < plain_share
    matplotlib.pyplot.close(fig)


def test_packed_mask_picture_draws_the_mask_of_a_row():
    import matplotlib

    matplotlib.use("Agg")
    from tutor.viz import training as vt

    X, _ = data.pack_names(items(["maximilian", "zoe"]))
    fig = vt.packed_mask_picture(X[0])
    ax = fig.axes[0]
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
    shown = ax.images[0].get_array()
    assert shown[12, 11] and not shown[12, 10]  # 'z' of zoe sees its own ' ', not maximilian's last letter
    matplotlib.pyplot.close(fig)

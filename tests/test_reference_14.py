"""Notebook 14's reference and experiment: the patterns are the ones the model uses (its own output rebuilt from them,
transformers' and TransformerLens' equal), the scores and the ablation do what they say, the notebook's run forms an
induction head, and the numbers its text quotes are the ones its cells print."""

import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import nbformat
import pytest
import torch

from conftest import ROOT
from tutor import huggingface as hf
from tutor import reference as ref
from tutor.train import induction as ind
from tutor.viz import interpretability as vi

pytestmark = pytest.mark.usefixtures("one_thread")


def gpt(n_layers=2, n_heads=4, seed=0, **kw):
    torch.manual_seed(seed)
    return ref.GPT(ref.GPTConfig(vocab_size=13, max_len=12, d_model=16, n_heads=n_heads, n_layers=n_layers,
                                 **kw)).eval()


@pytest.mark.parametrize("fused", [False, True])
def test_the_pattern_rebuilds_the_attention_s_own_output(fused):
    torch.manual_seed(0)
    attn = ref.MultiHeadAttention(16, 4).eval()
    attn.fused = fused  # PyTorch's fused kernel never forms the pattern: the same numbers must come out
    x = torch.randn(2, 7, 16)
    pattern = ref.attention_pattern(attn, x)
    v = ref.split_heads(attn.v_proj(x), 4)
    assert torch.allclose(attn.out_proj(ref.merge_heads(pattern @ v)), attn(x), atol=1e-6)
    assert torch.allclose(pattern.sum(-1), torch.ones(2, 4, 7)) and pattern.triu(1).abs().max() == 0


def test_capture_leaves_no_hook_even_when_the_model_raises():
    model = gpt()
    patterns = ref.capture_patterns(model, torch.randint(0, 13, (2, 5)))
    assert len(patterns) == 2 and patterns[0].shape == (2, 4, 5, 5) and not patterns[0].requires_grad
    with pytest.raises(IndexError):
        ref.capture_patterns(model, torch.randint(0, 13, (1, 20)))  # longer than max_len
    assert all(not block.attn._forward_pre_hooks for block in model.blocks)


def test_scores_of_perfect_heads():
    n, T = 5, 10
    i = torch.arange(T)
    previous = torch.zeros(1, 1, T, T)
    previous[0, 0, i[1:], i[1:] - 1] = 1.0
    previous[0, 0, 0, 0] = 1.0
    induction = torch.zeros(1, 1, T, T)
    induction[0, 0, i, i] = 1.0
    induction[0, 0, i[n:]] = 0.0
    induction[0, 0, i[n:], i[n:] - n + 1] = 1.0
    assert ref.previous_token_scores([previous]).item() == 1.0
    assert ref.induction_scores([induction], n).item() == 1.0 and ref.induction_scores([previous], n).item() == 0.0


def test_zero_ablation_equals_zero_columns_of_out_proj():
    model, ids = gpt(), torch.randint(0, 13, (3, 8))
    got = ref.ablate_head(model, ids, 1, 2, "zero")
    changed = gpt()
    with torch.no_grad():
        changed.blocks[1].attn.out_proj.weight[:, 8:12] = 0.0  # head 2 of 4, d_head 4
        assert torch.allclose(got, changed(ids), atol=1e-6)
    assert torch.equal(model(ids), gpt()(ids))  # the hook is gone, the model unchanged


def test_mean_ablation_uses_the_head_s_batch_mean_per_position():
    model, ids = gpt(), torch.randint(0, 13, (4, 6))
    attn = model.blocks[0].attn
    seen = []
    handle = attn.out_proj.register_forward_pre_hook(lambda m, args: seen.append(args[0].clone()))
    with torch.no_grad():
        model(ids)
    handle.remove()
    z = seen[0]
    z[..., 4:8] = z[..., 4:8].mean(dim=0, keepdim=True)
    x = model.drop(model.tok_emb(ids) + model.pos_emb(torch.arange(6)))
    with torch.no_grad():
        h = x + attn.out_proj(z)
        h = h + model.blocks[0].mlp(model.blocks[0].ln2(h))
        expected = model.head(model.ln_f(model.blocks[1](h)))
    assert torch.allclose(ref.ablate_head(model, ids, 0, 1, "mean"), expected, atol=1e-5)
    with pytest.raises(ValueError):
        ref.ablate_head(model, ids, 0, 1, "half")


def test_patterns_equal_transformers_output_attentions():
    pytest.importorskip("transformers")
    result = hf.patterns_against_transformers(ref.capture_patterns)
    assert result["layers"] == 2 and result["heads"] == 4 and result["largest"] <= 1e-5


def test_patterns_and_scores_equal_transformer_lens():
    pytest.importorskip("transformer_lens", reason="transformer-lens is the [interp] extra (.ci/run installs it)")
    result = hf.against_transformer_lens(ref.capture_patterns, ref.induction_scores)
    assert result is not None, "transformer-lens is installed but has no TransformerBridge"
    assert result["patterns"] <= 1e-5 and result["tutorial"] <= 1e-6 and result["scores"] <= 1e-6
    assert result["tutorial_scores"].shape == result["your_scores"].shape == (2, 4)


def test_transformer_lens_missing_is_one_line(monkeypatch, capsys):
    import builtins

    real = builtins.__import__

    def no_lens(name, *args, **kwargs):
        if name == "transformer_lens":
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_lens)
    assert hf.against_transformer_lens(ref.capture_patterns, ref.induction_scores) is None
    assert "transformer-lens is not installed" in capsys.readouterr().out


def test_training_data_repeat_a_segment_of_random_length():
    config = ind.INDUCTION_CONFIG
    ids = ind.training_batch(config, torch.Generator().manual_seed(0))
    assert ids.shape == (config.batch_size, config.max_len)
    lengths = set()
    for row in ids.tolist():
        found = [(k, s) for k in range(config.n, 3, -1) for s in range(len(row) - 2 * k + 1)
                 if row[s:s + k] == row[s + k:s + 2 * k]]
        assert found, row
        lengths.add(found[0][0])
    assert len(lengths) > 5  # no fixed period a positional head could use


def test_the_notebook_s_run_forms_an_induction_head_and_its_ablation_matters():
    run = ind.train(ref.capture_patterns, ref.induction_scores, progress=False)
    assert abs(run.formed_at - run.loss_dropped_at) <= 100  # the score and the loss move at the same step
    assert run.best_induction[0] < 0.1 and run.best_induction[-1] > 0.7
    assert run.loss_repeated[-1] < 1.0 < 4.0 < run.loss_first[-1]
    ids = ind.eval_tokens(run.config)
    zero = ind.ablation_losses(run.model, ids, run.config.n, ref.ablate_head)
    previous = ref.previous_token_scores(ref.capture_patterns(run.model, ids))
    assert zero.argmax() == previous[0].argmax()  # the worst head to lose is layer 0's previous-token head
    assert zero.max() > run.loss_repeated[-1] + 1.0
    stored = notebook_text()[1]
    assert f"step {run.formed_at}" in stored or abs(run.formed_at - int(re.search(
        r"in the 50 steps up to step (\d+)", stored).group(1))) <= 100


def notebook_text():
    nb = nbformat.read(ROOT / "solutions" / "14_induction_heads.ipynb", as_version=4)
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    outputs = "\n".join(o.get("text", "") or o.get("data", {}).get("text/plain", "")
                        for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    return markdown, outputs


@pytest.mark.parametrize("quoted, printed", [
    ("step 1,350", "up to step 1350"), ("from 3.63 to 1.21", "1250             4.182          3.630"),
    ("goes from 0.13\nto 0.80", "1450             4.226          1.214            0.80"),
    ("(0.57 and 0.65)", "0.5724, 0.6514"), ("from 0.61 to", "0.613 as trained"),
    ("between 0.72 and 1.07", "[0.7183, 1.0690, 0.8836, 0.8834]"), ("undoes the training: 3.14", "3.1425"),
    ("costs 1.62", "1.6159"), ("(2.79 and 1.35)", "[0.6141, 1.3520, 2.7946, 0.6207]"),
    ("between 0.18 and 0.44", "[0.44, 0.32, 0.18, 0.33]"), ("0.65 by the end", "0.08 -> 0.65"),
    ("1/30 = 0.03", "0.0345, 0.0351"),
])
def test_the_numbers_in_the_text_are_the_outputs(quoted, printed):
    markdown, outputs = notebook_text()
    assert quoted in markdown, f"the text no longer says {quoted!r}"
    assert printed in outputs, f"the stored outputs no longer print {printed!r}: re-read the text after a re-run"


def test_every_figure_is_titled_and_labelled():
    torch.manual_seed(0)
    pattern = torch.softmax(torch.randn(40, 40).masked_fill(~ref.causal_mask(40), float("-inf")), -1)
    scores = torch.rand(2, 4)
    run = ind.InductionRun(model=None, config=ind.INDUCTION_CONFIG, steps=[0, 50, 100], loss_first=[4.2] * 3,
                           loss_repeated=[4.2, 3.0, 1.0], induction=[scores * 0.1, scores, scores],
                           previous=[scores * 0.1, scores, scores])
    figures = [vi.pattern_figure(pattern, [str(i) for i in range(40)], "a head", n=20),
               vi.scores_figure(scores, scores, "scores"), vi.formation_figure(run),
               vi.position_loss_figure(torch.rand(39), 20, "losses"), vi.ablation_figure(scores, 0.5, "ablated"),
               vi.composition_figure({"clean": scores, "ablated": scores / 2}, 0, 2),
               vi.gpt2_figure(torch.rand(12, 12), ind.LITERATURE_HEADS, "GPT-2")]
    for fig in figures:
        axes = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
        assert any(ax.get_title() for ax in axes) or fig._suptitle is not None
        for ax in axes:
            if ax.get_title():
                assert ax.get_xlabel() and ax.get_ylabel(), ax.get_title()
    assert run.formed_at == 50
    plt.close("all")

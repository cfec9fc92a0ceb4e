"""Notebook 13's reference: LoRA equal to Hugging Face's PEFT on a GPT-2 loaded with notebook 12's loader, merged
and not; the labels of instruction tuning; the payoff's pieces (instructions, methods, what trains, sampling)."""

import importlib.util
import pathlib
from dataclasses import replace

import pytest
import torch
import torch.nn as nn

from tutor import huggingface as hf
from tutor import reference as ref
from tutor.reference import PAD_Y
from tutor.train import finetune as ft

# the comparison with PEFT needs it and transformers (the `lora` extra); the rest of this file does not
needs_peft = pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("peft", "transformers")),
                                reason="PEFT is an extra: pip install 'transformers-from-scratch-tutor[lora]'")

GPT2 = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "gpt2"


@needs_peft
def test_the_course_lora_gives_peft_s_logits_merged_or_not():
    compared = hf.lora_against_peft()
    assert compared["update"] > 1e-2  # the update shows in the logits
    assert compared["lora"] < 1e-5 and compared["merged"] < 1e-5, compared


@needs_peft
def test_the_comparison_with_peft_can_fail():
    class HalfScale(ref.LoRALinear):  # alpha / (2 r): a wrong scale
        def forward(self, x):
            return self.base(x) + 0.5 * self.scale * (x @ self.A.T @ self.B.T)

    compared = hf.lora_against_peft(lora_class=HalfScale, verbose=False)
    assert compared["lora"] > 1e-3


@needs_peft
def test_peft_and_the_course_train_the_same_numbers_but_c_attn_s_shared_a():
    compared = hf.lora_against_peft(verbose=False)
    # PEFT's one A [r, d] for the fused c_attn is three A's in the course (q, k, v each have their own): 2 x r x d
    # more per layer (2 layers, r = 4, d = 32)
    assert compared["trainable_course"] == compared["trainable_peft"] + 2 * 2 * 4 * 32


# --- the reference on its own ---------------------------------------------------------------------------------------


def test_lora_starts_equal_and_only_the_factors_train():
    base = nn.Linear(6, 5)
    layer = ref.LoRALinear(base, 2, 4)
    x = torch.randn(3, 6)
    assert torch.equal(layer(x), base(x))
    assert [n for n, p in layer.named_parameters() if p.requires_grad] == ["A", "B"]
    layer(x).sum().backward()
    assert layer.A.grad.abs().sum() == 0 and layer.B.grad.abs().sum() > 0  # B = 0: only B moves at the first step
    assert base.weight.grad is None


def test_add_lora_names_a_missing_target():
    model = ref.GPT(ref.GPTConfig())
    with pytest.raises(ValueError, match="qproj"):
        ref.add_lora(model, ["qproj"], 2, 4)


def test_sft_example_refuses_what_does_not_fit():
    with pytest.raises(ValueError, match="do not fit"):
        ref.sft_example([0, 1, 2], [3, 4, 5], 4)
    with pytest.raises(ValueError):
        ref.sft_example([], [3, 4], 4)


# --- the payoff's pieces ------------------------------------------------------------------------------------------


def test_instructions_are_balanced_and_fit_the_block():
    ins = ft.Instructions.of(["ann", "anna", "laika", "sophie", "gabriel", "kimberly", "bo", "christopher"])
    pairs = ins.pairs(600)
    lengths = [len(r) - 1 for _, r in pairs]  # the response ends with ' '
    assert set(lengths) == set(ft.WORDS) and min(lengths.count(n) for n in ft.WORDS) > 60
    for p, r in pairs:
        assert ref.decode(p) == ft.prompt(len(r) - 1) and len(p) + len(r) - 1 <= ft.BLOCK
    x, y = next(ins.batches(8))
    assert x.shape == y.shape == (8, ft.BLOCK)
    x, y = next(ins.batches(8, mask_prompt=False))
    assert (y[:, 0] != PAD_Y).all()  # the prompt's first target is counted


def test_word_positions_restart_at_every_space():
    model = ref.GPT(ref.GPTConfig())
    seen = {}
    model.pos_emb.register_forward_hook(lambda module, args, out: seen.update(positions=args[0]))
    ft.WordPositions(model)(torch.tensor([ref.encode(" five laika")]))
    assert seen["positions"].tolist()[0] == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("method, trainable", [("full fine-tuning", None), ("LoRA r=4", 4 * 2 * 1152),
                                               ("head alone", 64 * 28)])
def test_each_method_trains_what_it_says(method, trainable):
    base = ref.GPT(ref.GPTConfig(n_layers=2))
    model = ft.prepare(base, method)
    expected = sum(p.numel() for p in base.parameters()) if trainable is None else trainable
    assert ft.trainable_parameters(model) == expected
    assert all(p.requires_grad for p in base.parameters())  # the base model itself is left as it was


def test_step_times_takes_the_methods_in_turn_and_leaves_the_base_and_threads_as_they_were():
    torch.manual_seed(0)
    base = ref.GPT(ref.GPTConfig(n_layers=1))
    before = {k: v.clone() for k, v in base.state_dict().items()}
    threads = torch.get_num_threads()
    instructions = ft.Instructions({n: ["a" * n, "b" * n] for n in ft.WORDS})
    order = []
    lora = ft.add_lora

    def recording_add_lora(model, targets, r, alpha):
        order.append(r)
        return lora(model, targets, r, alpha)

    ms = ft.step_times(base, ["full fine-tuning", "LoRA r=1", "LoRA r=4", "head alone"], instructions,
                       config=replace(ft.FINETUNE_CONFIG, batch_size=4),
                       add_lora_fn=recording_add_lora, rounds=2, warmup=1)
    assert list(ms) == ["full fine-tuning", "LoRA r=1", "LoRA r=4", "head alone"] and order == [1, 4]
    assert all(isinstance(v, float) and v > 0 for v in ms.values())
    assert all(torch.equal(before[k], v) for k, v in base.state_dict().items())  # each method trained a copy
    assert torch.get_num_threads() == threads
    lines = ft.step_table(ms).splitlines()
    assert len(lines) == 4 and lines[0].endswith("1.00x full fine-tuning") and "LoRA r=4" in lines[2]


def test_the_table_has_no_time_column():  # runs one after the other are not timed side by side: step_times is
    rows = ft.table([ft.Result("m", 1, 8, 12.5, 0.5, {}, 2.0, 2.5, None, None)]).splitlines()
    assert "time" not in rows[0] and "12.5" not in rows[2] and "50%" in rows[2]


def test_sample_lengths_gives_count_names_of_letters():
    torch.manual_seed(0)
    names = ft.sample_lengths(ref.GPT(ref.GPTConfig(n_layers=1)), 5, 20, seed=0)
    assert len(names) == 20 and all(set(n) <= set("abcdefghijklmnopqrstuvwxyz") for n in names)


def test_gpt2_on_shakespeare_offline_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(ft.gpt2_data, "gpt2_weights", lambda verbose=True, **kw: print("not here") or None)
    assert ft.gpt2_on_shakespeare() is None
    assert capsys.readouterr().out == "not here\n"


@needs_peft
def test_gpt2_on_shakespeare_adapts_a_gpt2_shaped_model():
    if not (GPT2 / "encoder.json").exists():
        pytest.skip("../shared/data/gpt2 is not here")
    tokenizer = ref.BPETokenizer.from_files(GPT2 / "encoder.json", GPT2 / "vocab.bpe", ["<|endoftext|>"])
    torch.manual_seed(0)
    import transformers

    tiny = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=128))
    out = ft.gpt2_on_shakespeare(weights=tiny.state_dict(), tokenizer=tokenizer, n_heads=2, quick=True)
    assert out["trainable"] == 2 * 4 * 8 * (32 + 32) and out["steps"] == 4
    assert 3 < out["before"] < 6 and out["after"] < out["before"]  # random: ln 50257 nats over ~4 bytes a token

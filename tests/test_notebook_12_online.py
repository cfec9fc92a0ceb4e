"""Notebook 12's path with internet, without internet: a small random GPT-2 checkpoint is laid out in a private
huggingface_hub cache exactly as a download leaves it (``models--openai-community--gpt2/snapshots/<commit>`` with
``model.safetensors`` in the hub's layout: no ``transformer.`` prefix, no ``lm_head.weight``, the causal-mask
buffers), and the solution notebook runs with ``HF_HUB_OFFLINE=1``: it finds the file in the cache, loads it with
the learner's loader, loads transformers' own ``GPT2LMHeadModel.from_pretrained`` from the same cache, compares the
logits, generates with and without the KV cache and scores tiny Shakespeare. (The nbval run of solutions/ and the
learner-notebook test cover the offline path.)"""

import json
import re

import nbformat
import pytest
import torch
from nbclient import NotebookClient

from conftest import ROOT, SHARED

transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

COMMIT = "0123456789abcdef0123456789abcdef01234567"
GPT2 = SHARED / "data" / "gpt2"


def fake_hub(root):
    """A GPT-2 with 12 heads, as the notebook expects of the real one, but tiny: d_model 48, 2 layers."""
    config = transformers.GPT2Config(n_embd=48, n_head=12, n_layer=2)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    tensors = {k.removeprefix("transformer."): v.contiguous() for k, v in model.state_dict().items()
               if k != "lm_head.weight"}
    for layer in range(config.n_layer):
        tensors[f"h.{layer}.attn.bias"] = torch.tril(torch.ones(1024, 1024)).view(1, 1, 1024, 1024)
        tensors[f"h.{layer}.attn.masked_bias"] = torch.tensor(-1e4)
    repo = root / "hub" / "models--openai-community--gpt2"
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    safetensors_torch.save_file(tensors, str(snapshot / "model.safetensors"), metadata={"format": "pt"})
    (snapshot / "config.json").write_text(json.dumps({**config.to_dict(), "architectures": ["GPT2LMHeadModel"]}))


def outputs(nb) -> str:
    texts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            texts.append(output.get("text", "") or output.get("data", {}).get("text/plain", ""))
    return "\n".join(texts)


def test_the_notebook_with_gpt2s_weights_in_the_cache(tmp_path, monkeypatch):
    fake_hub(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TUTOR_QUICK", "1")
    monkeypatch.setenv("TUTOR_STRICT", "1")  # every check of the notebook must pass
    if (GPT2 / "encoder.json").exists():
        monkeypatch.setenv("TUTOR_GPT2_ENCODER", str(GPT2 / "encoder.json"))
        monkeypatch.setenv("TUTOR_GPT2_MERGES", str(GPT2 / "vocab.bpe"))
    nb = nbformat.read(ROOT / "solutions" / "12_gpt2.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = outputs(nb)
    assert "model.safetensors" in text and "from the cache" in text
    assert "random model of GPT-2's shape" not in text
    difference = float(re.search(r"differ by at most ([0-9.e+-]+)", text).group(1))
    assert difference < 1e-4
    assert "LOAD REPORT" not in text  # transformers' table about the mask buffers is kept quiet
    assert "the same tokens: True" in text
    if (GPT2 / "encoder.json").exists():
        assert "GPT-2 small, never trained on it" in text
        assert re.search(r"512 of 36,059 tokens \([\d,]+ bytes\)", text)

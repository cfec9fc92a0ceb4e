"""``tutor.reference``: the names every notebook uses stay, and the modules' old paths (``tokens``, ``tokenizer``,
``scaling``) keep working for one release with a ``TutorDeprecationWarning`` naming the new home."""

import importlib
import string
import sys

import pytest

from tutor import reference
from tutor.deprecation import TutorDeprecationWarning
from tutor.reference import bpe, characters, scaling_up

# Every name tutor.reference exported before its modules were renamed.
NAMES = """AttentionHead BPETokenizer GPT GPT2_PATTERN GPTConfig KVCache LayerNorm MLP ModernBlock ModernConfig
ModernGPT MultiHeadAttention PAD_X PAD_Y PositionalEmbedding RMSNorm RotaryAttention SwiGLU TransformerBlock alphabet
apply_rope average_gradients bits_per_byte causal_mask count_pairs decode dot_product_attention encode evaluate
flops_per_token generate generate_cached get_batch itos lm_loss lr_schedule merge_heads merge_pair one_hot
padding_mask scaled_dot_product_attention similarity sinusoidal_encoding softmax split_heads stoi swiglu_hidden
train_bpe train_bpe_naive train_step vocab_size""".split()

MOVED = {"tokens": characters, "tokenizer": bpe, "scaling": scaling_up}


def test_every_name_is_still_there():
    for name in NAMES:
        assert hasattr(reference, name), name
    assert reference.encode is characters.encode and reference.BPETokenizer is bpe.BPETokenizer
    assert reference.get_batch is scaling_up.get_batch


def test_the_alphabet_is_written_once():
    assert characters.alphabet == [" ", *string.ascii_lowercase, "."] and characters.LETTERS == string.ascii_lowercase
    assert characters.vocab_size == 28 and characters.PAD_X == 0 and characters.PAD_Y == 27


@pytest.mark.parametrize("old", MOVED)
def test_an_old_module_path_warns_and_forwards(old, monkeypatch):
    new = MOVED[old]
    monkeypatch.delitem(sys.modules, f"tutor.reference.{old}", raising=False)  # a first import, as in a new kernel
    monkeypatch.delitem(vars(reference), old, raising=False)
    with pytest.warns(TutorDeprecationWarning, match=f"tutor.reference.{old} has moved to {new.__name__}"):
        module = importlib.import_module(f"tutor.reference.{old}")
    public = [name for name in vars(new) if not name.startswith("_")]
    assert public and all(getattr(module, name) is getattr(new, name) for name in public)


@pytest.mark.parametrize("old", MOVED)
def test_an_old_module_name_as_an_attribute(old, monkeypatch):
    monkeypatch.delitem(vars(reference), old, raising=False)
    with pytest.warns(TutorDeprecationWarning, match=f"tutor.reference.{old} has moved to {MOVED[old].__name__}"):
        assert getattr(reference, old) is MOVED[old]

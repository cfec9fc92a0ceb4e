"""``tutor.reference``: the names every notebook uses stay after its modules were renamed (``tokens`` ->
``characters``, ``tokenizer`` -> ``bpe``, ``scaling`` -> ``scaling_up``; notebooks import the names from the
package, never the module files, so the old module paths are gone), and the alphabet is written once."""

import importlib
import string

import pytest

from tutor import reference
from tutor.reference import bpe, characters, scaling_up

# Every name tutor.reference exported before its modules were renamed.
NAMES = """AttentionHead BPETokenizer GPT GPT2_PATTERN GPTConfig KVCache LayerNorm MLP ModernBlock ModernConfig
ModernGPT MultiHeadAttention PAD_X PAD_Y PositionalEmbedding RMSNorm RotaryAttention SwiGLU TransformerBlock alphabet
apply_rope average_gradients bits_per_byte causal_mask count_pairs decode dot_product_attention encode evaluate
flops_per_token generate generate_cached get_batch itos lm_loss lr_schedule merge_heads merge_pair one_hot
padding_mask scaled_dot_product_attention similarity sinusoidal_encoding softmax split_heads stoi swiglu_hidden
train_bpe train_bpe_naive train_step vocab_size""".split()

def test_every_name_is_still_there():
    for name in NAMES:
        assert hasattr(reference, name), name
    assert reference.encode is characters.encode and reference.BPETokenizer is bpe.BPETokenizer
    assert reference.get_batch is scaling_up.get_batch


def test_the_alphabet_is_written_once():
    assert characters.alphabet == [" ", *string.ascii_lowercase, "."] and characters.LETTERS == string.ascii_lowercase
    assert characters.vocab_size == 28 and characters.PAD_X == 0 and characters.PAD_Y == 27


def test_the_old_module_paths_are_gone():
    for old in ("tokens", "tokenizer", "scaling"):
        with pytest.raises(ImportError):
            importlib.import_module(f"tutor.reference.{old}")

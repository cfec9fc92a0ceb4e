"""Model answers for every exercise, one module per concept, in the order of the course.

Every notebook imports what earlier notebooks taught from here, so it can be opened fresh.
"""

from tutor.reference.tokens import (  # noqa: F401
    alphabet, stoi, itos, vocab_size, PAD_X, PAD_Y, encode, decode, one_hot,
)
from tutor.reference.attention import (  # noqa: F401
    similarity, softmax, dot_product_attention, scaled_dot_product_attention, AttentionHead,
    causal_mask, padding_mask, split_heads, merge_heads, MultiHeadAttention,
    KVCache, RotaryAttention,
)
from tutor.reference.positional import sinusoidal_encoding, PositionalEmbedding, apply_rope  # noqa: F401
from tutor.reference.layers import LayerNorm, RMSNorm, MLP, SwiGLU, TransformerBlock, ModernBlock  # noqa: F401
from tutor.reference.model import GPTConfig, GPT, generate  # noqa: F401
from tutor.reference.model import ModernConfig, ModernGPT, generate_cached, swiglu_hidden  # noqa: F401
from tutor.reference.training import lm_loss, lr_schedule, train_step, evaluate  # noqa: F401
from tutor.reference.scaling import get_batch, flops_per_token, average_gradients  # noqa: F401
from tutor.reference.tokenizer import (  # noqa: F401
    count_pairs, merge_pair, train_bpe, train_bpe_naive, BPETokenizer, bits_per_byte, GPT2_PATTERN,
)

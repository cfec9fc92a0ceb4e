"""Model answers for every exercise, one module per concept, in the order of the course.

Every notebook imports what earlier notebooks taught from here, so it can be opened fresh.

| module | notebook | what is in it |
|---|---|---|
| ``characters`` | 01 | the alphabet, ``encode``, ``decode``, ``one_hot`` |
| ``attention`` | 01-04, 09 | from dot-product attention to multi-head attention; rotary attention, ``KVCache`` |
| ``positional`` | 05 | sinusoidal, learned and rotary (RoPE) position encodings |
| ``layers`` | 06, 09 | ``LayerNorm``, ``RMSNorm``, ``MLP``, ``SwiGLU``, the transformer blocks |
| ``model`` | 07, 09 | ``GPT``, ``generate``; ``ModernGPT``, ``generate_cached`` |
| ``training`` | 08 | the loss, the learning-rate schedule, one training step, evaluation |
| ``scaling_up`` | 10 | ``get_batch``, ``flops_per_token``, ``average_gradients`` |
| ``bpe`` | 11 | byte-level byte-pair encoding: ``train_bpe``, ``BPETokenizer``, ``bits_per_byte`` |
| ``gpt2`` | 12 | GPT-2's weights: ``course_names``, ``to_linear``, ``split_qkv``, ``load_gpt2``, ``gpt2_from_hf`` |
| ``lora`` | 13 | ``LoRALinear``, ``add_lora``, ``merge_lora``; ``sft_example``, the labels of instruction tuning |
| ``interpretability`` | 14 | ``attention_pattern``, ``capture_patterns``, ``induction_scores``, ``ablate_head`` |
"""

from tutor.reference.attention import (
    AttentionHead,
    KVCache,
    MultiHeadAttention,
    RotaryAttention,
    causal_mask,
    dot_product_attention,
    merge_heads,
    padding_mask,
    scaled_dot_product_attention,
    similarity,
    softmax,
    split_heads,
)
from tutor.reference.bpe import (
    GPT2_PATTERN,
    BPETokenizer,
    bits_per_byte,
    bytes_to_unicode,
    count_pairs,
    merge_pair,
    read_vocab_files,
    train_bpe,
    train_bpe_naive,
    write_vocab_files,
)
from tutor.reference.characters import (
    PAD_X,
    PAD_Y,
    alphabet,
    decode,
    encode,
    itos,
    one_hot,
    stoi,
    vocab_size,
)
from tutor.reference.gpt2 import (
    config_from_hf,
    course_names,
    gpt2_from_hf,
    hf_name,
    hf_state_dict,
    load_gpt2,
    split_qkv,
    to_linear,
)
from tutor.reference.interpretability import (
    ablate_head,
    ablated,
    attention_pattern,
    capture_patterns,
    induction_scores,
    previous_token_scores,
    repeated_tokens,
)
from tutor.reference.layers import MLP, LayerNorm, ModernBlock, RMSNorm, SwiGLU, TransformerBlock
from tutor.reference.lora import LoRALinear, add_lora, merge_lora, sft_example
from tutor.reference.model import (
    GPT,
    GPT2_SIZES,
    GPTConfig,
    ModernConfig,
    ModernGPT,
    generate,
    generate_cached,
    swiglu_hidden,
)
from tutor.reference.positional import PositionalEmbedding, apply_rope, sinusoidal_encoding
from tutor.reference.scaling_up import average_gradients, flops_per_token, get_batch
from tutor.reference.training import evaluate, lm_loss, lr_schedule, train_step


"""The exercise catalog: one registry of every notebook and exercise in the course.

``tutor.checks.<name>`` grades an exercise and ``tutor.reference.<reference>`` is its model
answer. Tests make sure both exist for every entry and that each solution notebook runs the
checks of its own exercises.

Pure data: nothing here reads a file or imports the rest of ``tutor``. An exercise's points
(its difficulty, read from its solution notebook) are ``tutor.course.points.of(name)``.
"""

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Notebook:
    number: int
    slug: str  # file name without extension, e.g. "01_dot_product_attention"
    title: str
    builds: str  # what the learner builds, for the README table
    minutes: int  # estimated time for a learner
    data: tuple[str, ...] = ()  # the data sets it loads ("names", "shakespeare"): tutor run checks them

    @property
    def filename(self) -> str:
        return f"{self.slug}.ipynb"


@dataclass(frozen=True)
class Exercise:
    name: str  # the check's name: tutor.checks.<name>
    notebook: int
    writes: str  # what the learner writes
    learner_name: str  # the name of the function or class the learner defines
    reference: str  # attribute of tutor.reference holding the model answer


NOTEBOOKS = [
    Notebook(1, "01_dot_product_attention", "Dot-product attention on \"laika\"",
             "one-hot vectors, the similarity matrix, a stable softmax, attention as a weighted average", 60,
             data=("names",)),
    Notebook(2, "02_queries_keys_values", "Queries, keys and values",
             "scaled dot-product attention and a single attention head", 60),
    Notebook(3, "03_masking", "Masking",
             "causal and padding masks, masked attention", 45),
    Notebook(4, "04_multi_head_attention", "Multi-head attention",
             "splitting and merging heads, multi-head attention", 90),  # a learner's walk-through took 75-90
    Notebook(5, "05_positional_encodings", "Positional encodings",
             "sinusoidal and learned position embeddings, rotary embeddings (RoPE)", 60),
    Notebook(6, "06_transformer_block", "The transformer block",
             "LayerNorm, RMSNorm, the MLP, SwiGLU and a pre-norm transformer block", 75),
    Notebook(7, "07_gpt_model", "The GPT model",
             "a GPT with GPT-2 initialisation, and generation with temperature and top-k", 60),
    Notebook(8, "08_training", "Training on a GPU",
             "the loss, a learning-rate schedule, the training loop, evaluation; sampling new names", 90,
             data=("names",)),
    Notebook(9, "09_modern_gpt", "A modern GPT: RoPE, RMSNorm, SwiGLU and the KV cache",
             "rotary attention, a Llama-style block and GPT, a key/value cache and cached sampling", 90,
             data=("names",)),
    Notebook(10, "10_scaling_up", "Scaling up: Shakespeare, mixed precision and many GPUs",
             "random text windows, FLOPs and MFU, exact resume, data parallelism with torch.distributed", 90,
             data=("shakespeare",)),
    Notebook(11, "11_tokenization", "Tokenization: byte-pair encoding",
             "a byte-level BPE trainer and tokenizer that match tiktoken; "
             "characters vs BPE tokens in bits per byte", 90, data=("shakespeare",)),
    Notebook(12, "12_gpt2", "GPT-2 in your own model",
             "a strict loader of OpenAI's GPT-2 weights into your GPT, with logits equal to Hugging Face's; "
             "text from your tokenizer and your KV cache", 90, data=("shakespeare",)),
    Notebook(13, "13_lora", "Adapting a pretrained model: LoRA and instruction tuning",
             "a LoRA layer, put into a model by name and merged back; the labels of instruction tuning; full "
             "fine-tuning, LoRA and the head alone, side by side", 75, data=("names",)),
    Notebook(14, "14_induction_heads", "What your model learned: attention patterns, induction heads, ablation",
             "every layer's attention read with hooks; previous-token and induction scores; an induction head "
             "watched as it forms; one head ablated, cause shown", 75),
]


def _ex(name, notebook, writes, learner_name=None, reference=None):
    return Exercise(name, notebook, writes, learner_name or name, reference or name)


EXERCISES = [
    # 01
    _ex("encode", 1, "encode(name: str) -> list[int]"),
    _ex("decode", 1, "decode(ids: list[int] or 1-D tensor) -> str"),
    _ex("one_hot", 1, "one_hot(ids: LongTensor[..., T], num_classes) -> float32 [..., T, num_classes]"),
    _ex("similarity", 1, "similarity(x: [..., T, C]) -> [..., T, T]"),
    _ex("softmax", 1, "softmax(x, dim=-1), numerically stable, from exp, max and sum"),
    _ex("dot_product_attention", 1, "dot_product_attention(x: [..., T, C]) -> [..., T, C] = softmax(x xᵀ) x"),
    # 02
    _ex("scaled_dot_product_attention", 2,
        "scaled_dot_product_attention(q [..., Tq, d_k], k [..., Tk, d_k], v [..., Tk, d_v], mask=None) "
        "-> [..., Tq, d_v]"),
    _ex("AttentionHead", 2, "AttentionHead(d_model, d_head) with query, key, value; "
        "forward(x [B, T, d_model]) -> [B, T, d_head]"),
    # 03
    _ex("causal_mask", 3, "causal_mask(T, device=None) -> BoolTensor[T, T]"),
    _ex("masked_attention", 3, "scaled_dot_product_attention(q, k, v, mask) with the mask honoured",
        learner_name="scaled_dot_product_attention", reference="scaled_dot_product_attention"),
    _ex("padding_mask", 3, "padding_mask(ids [B, T], pad_id=0) -> BoolTensor[B, 1, T]"),
    # 04
    _ex("split_heads", 4, "split_heads(x [B, T, C], n_heads) -> [B, H, T, C/H]"),
    _ex("merge_heads", 4, "merge_heads(x [B, H, T, d_head]) -> [B, T, H*d_head]"),
    _ex("MultiHeadAttention", 4,
        "MultiHeadAttention(d_model, n_heads, causal=True, dropout=0.0) with q_proj, k_proj, v_proj, out_proj; "
        "forward(x, mask=None)"),
    # 05
    _ex("sinusoidal_encoding", 5, "sinusoidal_encoding(max_len, d_model) -> float32 [max_len, d_model]"),
    _ex("PositionalEmbedding", 5, "PositionalEmbedding(max_len, d_model) with weight; forward(x) -> x + weight[:T]"),
    _ex("apply_rope", 5, "apply_rope(x [..., T, d], positions=None, theta=10000.0) -> same shape"),
    # 06
    _ex("LayerNorm", 6, "LayerNorm(d_model, eps=1e-5) with weight, bias"),
    _ex("RMSNorm", 6, "RMSNorm(d_model, eps=1e-5) with weight"),
    _ex("MLP", 6, "MLP(d_model, d_hidden=None, dropout=0.0) with fc, proj"),
    _ex("SwiGLU", 6, "SwiGLU(d_model, d_hidden) with w1, w2, w3"),
    _ex("TransformerBlock", 6, "TransformerBlock(d_model, n_heads, dropout=0.0) with ln1, attn, ln2, mlp; "
        "forward(x, mask=None)"),
    # 07
    _ex("GPT", 7, "GPT(config: GPTConfig) with tok_emb, pos_emb, blocks, ln_f, head; "
        "forward(ids, mask=None) -> logits"),
    _ex("generate", 7, "generate(model, ids, max_new_tokens, temperature=1.0, top_k=None) -> ids"),
    # 08
    _ex("lm_loss", 8, "lm_loss(logits [B, T, V], targets [B, T], ignore_index) -> 0-d tensor"),
    _ex("lr_schedule", 8, "lr_schedule(step, max_lr, warmup_steps, total_steps, min_lr=0.0) -> float"),
    _ex("train_step", 8, "train_step(model, batch, optimizer, ignore_index, clip=1.0) -> float"),
    _ex("evaluate", 8, "evaluate(model, loader, ignore_index, max_batches=None) -> float"),
    # 09
    _ex("KVCache", 9, "KVCache(n_layers) with update(layer, k, v) -> (k_all, v_all) and length"),
    _ex("RotaryAttention", 9, "RotaryAttention(d_model, n_heads, theta=10000.0) with q_proj, k_proj, v_proj, out_proj; "
        "forward(x, positions=None, cache=None, layer=0), causal, RoPE on q and k"),
    _ex("ModernBlock", 9, "ModernBlock(d_model, n_heads, d_hidden, theta=10000.0) with ln1, attn, ln2, mlp; "
        "forward(x, positions=None, cache=None, layer=0)"),
    _ex("ModernGPT", 9, "ModernGPT(config: ModernConfig) with tok_emb, blocks, ln_f, head; "
        "forward(ids, positions=None, cache=None) -> logits"),
    _ex("generate_cached", 9, "generate_cached(model, ids, max_new_tokens, temperature=1.0, top_k=None) -> ids, "
        "with a KVCache"),
    # 10
    _ex("get_batch", 10, "get_batch(data: LongTensor[N], block_size, batch_size, generator=None) -> (x, y)"),
    _ex("flops_per_token", 10, "flops_per_token(n_params, n_layers, d_model, block_size) -> int"),
    _ex("average_gradients", 10, "average_gradients(model): every .grad becomes its mean over all processes"),
    # 11
    _ex("count_pairs", 11, "count_pairs(ids: list[int], counts=None) -> dict[(int, int), int]"),
    _ex("merge_pair", 11, "merge_pair(ids: list[int], pair: (int, int), new_id: int) -> list[int]"),
    _ex("train_bpe", 11, "train_bpe(text, vocab_size, special_tokens=()) "
        "-> (vocab: dict[int, bytes], merges: list[(bytes, bytes)])"),
    _ex("BPETokenizer", 11, "BPETokenizer(vocab, merges, special_tokens=None) "
        "with encode(text), decode(ids), encode_iterable(lines)"),
    _ex("bits_per_byte", 11, "bits_per_byte(loss, n_tokens, n_bytes) -> float"),
    # 12
    _ex("course_names", 12, "course_names(hf_name: str) -> list[str]: the course's parameters a Hugging Face tensor "
        "fills ([] for the causal-mask buffers; q, k, v for c_attn)"),
    _ex("to_linear", 12, "to_linear(hf_name, tensor) -> tensor in nn.Linear's layout (Conv1D weights transposed)"),
    _ex("split_qkv", 12, "split_qkv(tensor [3d, d] or [3d]) -> (q, k, v)"),
    _ex("load_gpt2", 12, "load_gpt2(state_dict, n_heads) -> GPT: strict (a missing, unexpected or mis-shaped tensor "
        "is a ValueError naming it)"),
    # 13
    _ex("LoRALinear", 13, "LoRALinear(base: nn.Linear, r, alpha): base frozen, A [r, in] random, B [out, r] zero; "
        "forward(x) = base(x) + (alpha / r) * x @ A.T @ B.T"),
    _ex("add_lora", 13, "add_lora(model, targets, r, alpha, lora_class=LoRALinear) -> list[str]: freeze the model, "
        "wrap each nn.Linear whose name ends with a target"),
    _ex("sft_example", 13, "sft_example(prompt, response, block_size) -> (x, y): the prompt's targets and the padding "
        "are PAD_Y"),
    _ex("merge_lora", 13, "merge_lora(layer) -> nn.Linear with weight W + (alpha / r) * B @ A, the same bias"),
    # 14
    _ex("attention_pattern", 14, "attention_pattern(attn, x [B, T, C]) -> [B, H, T, T]: softmax(q kᵀ / √d_head) "
        "with the causal mask, each row summing to 1"),
    _ex("capture_patterns", 14, "capture_patterns(model, ids, pattern_fn) -> list of L patterns [B, H, T, T]: "
        "forward pre-hooks on model.blocks[i].attn, always removed"),
    _ex("induction_scores", 14, "induction_scores(patterns, n) -> [L, H]: pattern[b, h, i, i - n + 1] averaged over b "
        "and i in [n, 2n)"),
    _ex("ablate_head", 14, "ablate_head(model, ids, layer, head, how='zero'|'mean') -> logits: that head's slice of "
        "out_proj's input zeroed or averaged over the batch, by a hook; the model unchanged"),
]

BY_NAME = {e.name: e for e in EXERCISES}

# Definitions elsewhere in the package that do an exercise's work (a figure's helper, a parity test's): hidden with
# the model answer while the exercise is graded (tutor.grading.lock), so that graded code cannot call them instead.
# Found by hostile students (stop 48); tests/test_grade_attacks_14.py holds notebook 14's out.
EQUIVALENTS = {
    "train_step": ("tutor.train.loop.accumulate_step",),
    "evaluate": ("tutor.train.validation.val_losses", "tutor.train.validation.position_losses"),
    "attention_pattern": ("tutor.viz.training._weights_from_input",),
    "capture_patterns": ("tutor.viz.training.attention_weights",),
    "induction_scores": ("tutor.huggingface.tutorial_induction_scores",
                         "tutor.reference.interpretability.previous_token_scores"),
    "ablate_head": ("tutor.reference.interpretability.ablated",),
}


def notebook(number: int) -> Notebook:
    """The notebook numbered ``number``."""
    return next(n for n in NOTEBOOKS if n.number == number)


def resolve(name: str) -> Exercise | None:
    """The exercise ``name`` names: its check's name (``masked_attention``), its gradebook label (``03.2``, or
    ``03.2 scaled_dot_product_attention``), or the name the learner writes when no other exercise is called so
    (``scaled_dot_product_attention`` is notebook 02's exercise; notebook 03's is ``masked_attention`` or 03.2)."""
    name = str(name).strip()
    if name in BY_NAME:
        return BY_NAME[name]
    label = re.fullmatch(r"(\d{1,2})\.(\d{1,2})(?:\s+(\w+))?", name)
    if label:
        found = [e for e in EXERCISES if e.notebook == int(label.group(1))]
        k = int(label.group(2))
        if 1 <= k <= len(found) and label.group(3) in (None, found[k - 1].learner_name, found[k - 1].name):
            return found[k - 1]
        return None
    by_learner = [e for e in EXERCISES if e.learner_name == name]
    return by_learner[0] if len(by_learner) == 1 else None


def check_names(module_name: str) -> list[str]:
    """The ``__all__`` of a notebook's check module, ``tutor.checks.nbNN_<slug>``: its notebook's exercises."""
    number = int(re.search(r"\.nb(\d\d)_", module_name).group(1))
    return [e.name for e in exercises(number)]


def exercises(number: int) -> list[Exercise]:
    """The exercises of notebook ``number``, in the notebook's order."""
    return [e for e in EXERCISES if e.notebook == number]

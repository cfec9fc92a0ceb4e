"""Checks of notebook 07 (the GPT model, generate): they pass the reference, report a stub as
"not done yet", and reject realistic wrong implementations, naming the mistake."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from checkkit import not_done, passes, rejects, stub

from tutor import checks
from tutor import reference as ref
from tutor.reference import LayerNorm, TransformerBlock

# --- a GPT written the way a learner would, and its mistakes ---------------------------------


class LearnerGPT(nn.Module):
    """Correct: what a learner writes after reading the notebook."""

    residual_std_divisor = staticmethod(lambda n_layers: math.sqrt(2 * n_layers))

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.max_len, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList([TransformerBlock(config.d_model, config.n_heads, config.dropout)
                                     for _ in range(config.n_layers)])
        self.ln_f = LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.init_weights()

    def init_weights(self):
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
        for block in self.blocks:
            std = 0.02 / self.residual_std_divisor(self.config.n_layers)
            nn.init.normal_(block.attn.out_proj.weight, mean=0.0, std=std)
            nn.init.normal_(block.mlp.proj.weight, mean=0.0, std=std)

    def embed(self, ids):
        T = ids.shape[1]
        pos = torch.arange(T, device=ids.device)
        return self.drop(self.tok_emb(ids) + self.pos_emb(pos))

    def forward(self, ids, mask=None):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, mask)
        x = self.ln_f(x)
        return self.head(x)


def test_gpt_passes_the_reference_and_a_learner_version():
    passes(checks.GPT, ref.GPT)
    passes(checks.GPT, LearnerGPT)


def test_gpt_stub_is_not_done():
    class Stub(nn.Module):
        def __init__(self, config):
            super().__init__()
            raise NotImplementedError()

    not_done(checks.GPT, Stub)
    not_done(checks.GPT, stub)


def test_gpt_stub_forward_is_not_done():
    class StubForward(LearnerGPT):
        def forward(self, ids, mask=None):
            raise NotImplementedError()

    not_done(checks.GPT, StubForward)


def test_gpt_without_position_embedding():
    class NoPositions(LearnerGPT):
        def forward(self, ids, mask=None):
            x = self.drop(self.tok_emb(ids))
            for block in self.blocks:
                x = block(x, mask)
            return self.head(self.ln_f(x))

    rejects(checks.GPT, NoPositions, "no position embedding")


def test_gpt_without_final_norm():
    class NoFinalNorm(LearnerGPT):
        def forward(self, ids, mask=None):
            x = self.embed(ids)
            for block in self.blocks:
                x = block(x, mask)
            return self.head(x)

    rejects(checks.GPT, NoFinalNorm, "final layernorm is missing")


def test_gpt_position_embedding_not_sliced_to_T():
    class AllPositions(LearnerGPT):
        def forward(self, ids, mask=None):
            positions = torch.arange(self.config.max_len)
            x = self.drop(self.tok_emb(ids) + self.pos_emb(positions))
            for block in self.blocks:
                x = block(x, mask)
            return self.head(self.ln_f(x))

    rejects(checks.GPT, AllPositions, "fails for T = 5", "not sliced", "torch.arange(T")


def test_gpt_position_embedding_looked_up_with_the_ids():
    class PositionsFromIds(LearnerGPT):
        def forward(self, ids, mask=None):
            x = self.drop(self.tok_emb(ids) + self.pos_emb(ids))
            for block in self.blocks:
                x = block(x, mask)
            return self.head(self.ln_f(x))

    rejects(checks.GPT, PositionsFromIds, "indexerror", "pos_emb is looked up with the token ids")


def test_gpt_positions_start_at_one():
    class OneBased(LearnerGPT):
        def forward(self, ids, mask=None):
            positions = torch.arange(1, ids.shape[1] + 1)
            x = self.drop(self.tok_emb(ids) + self.pos_emb(positions))
            for block in self.blocks:
                x = block(x, mask)
            return self.head(self.ln_f(x))

    rejects(checks.GPT, OneBased, "indexerror", "0-based")


def test_gpt_head_tied_to_token_embedding():
    class Tied(LearnerGPT):
        def __init__(self, config):
            super().__init__(config)
            self.head.weight = self.tok_emb.weight

    rejects(checks.GPT, Tied, "shares its weight with tok_emb", "weight tying")


def test_gpt_logits_from_the_token_embedding():
    class TiedInForward(LearnerGPT):
        def forward(self, ids, mask=None):
            x = self.embed(ids)
            for block in self.blocks:
                x = block(x, mask)
            return self.ln_f(x) @ self.tok_emb.weight.T

    rejects(checks.GPT, TiedInForward, "tok_emb.weight", "weight tying")


def test_gpt_head_with_bias():
    class HeadBias(LearnerGPT):
        def __init__(self, config):
            super().__init__(config)
            self.head = nn.Linear(config.d_model, config.vocab_size)

    rejects(checks.GPT, HeadBias, "head.bias", "bias=False")


def test_gpt_mask_not_passed_to_the_blocks():
    class NoMask(LearnerGPT):
        def forward(self, ids, mask=None):
            x = self.embed(ids)
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    rejects(checks.GPT, NoMask, "padding mask", "mask does not reach the blocks")


def test_gpt_mask_only_to_the_first_block():
    class FirstOnly(LearnerGPT):
        def forward(self, ids, mask=None):
            x = self.embed(ids)
            x = self.blocks[0](x, mask)
            for block in self.blocks[1:]:
                x = block(x)
            return self.head(self.ln_f(x))

    rejects(checks.GPT, FirstOnly, "only the first block gets the mask")


def test_gpt_forward_without_a_mask_argument():
    class NoMaskArgument(LearnerGPT):
        def forward(self, ids):
            x = self.embed(ids)
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    rejects(checks.GPT, NoMaskArgument, "does not take a mask", "mask=None")


def test_gpt_returns_probabilities():
    class Probabilities(LearnerGPT):
        def forward(self, ids, mask=None):
            return torch.softmax(super().forward(ids, mask), dim=-1)

    rejects(checks.GPT, Probabilities, "probabilities")


def test_gpt_blocks_in_a_sequential():
    class Sequential(LearnerGPT):
        def __init__(self, config):
            super().__init__(config)
            self.blocks = nn.Sequential(*self.blocks)

    rejects(checks.GPT, Sequential, "nn.ModuleList", "nn.Sequential")


def test_gpt_does_not_store_the_config():
    class NoConfig(LearnerGPT):
        def __init__(self, config):
            super().__init__(config)
            del self.config
            self.max_len = config.max_len

        def forward(self, ids, mask=None):
            x = self.drop(self.tok_emb(ids) + self.pos_emb(torch.arange(ids.shape[1])))
            for block in self.blocks:
                x = block(x, mask)
            return self.head(self.ln_f(x))

    rejects(checks.GPT, NoConfig, "does not store its config", "self.config = config")


def test_gpt_without_embedding_dropout():
    class NoDropout(LearnerGPT):
        def embed(self, ids):
            return self.tok_emb(ids) + self.pos_emb(torch.arange(ids.shape[1]))

    rejects(checks.GPT, NoDropout, "no dropout on the embedding sum")


def test_gpt_dropout_active_in_eval_mode():
    class AlwaysDropout(LearnerGPT):
        def embed(self, ids):
            x = self.tok_emb(ids) + self.pos_emb(torch.arange(ids.shape[1]))
            return F.dropout(x, self.config.dropout)

    rejects(checks.GPT, AlwaysDropout, "eval mode", "training=self.training")


def test_gpt_dropout_with_a_fixed_rate():
    class FixedRate(LearnerGPT):
        def __init__(self, config):
            super().__init__(config)
            self.drop = nn.Dropout(0.1)

    rejects(checks.GPT, FixedRate, "right in eval mode", "nn.Dropout(config.dropout)")


def test_gpt_dropout_on_the_logits():
    class DropLogits(LearnerGPT):
        def forward(self, ids, mask=None):
            x = self.tok_emb(ids) + self.pos_emb(torch.arange(ids.shape[1]))
            for block in self.blocks:
                x = block(x, mask)
            return self.drop(self.head(self.ln_f(x)))

    rejects(checks.GPT, DropLogits, "dropout is applied to the logits")


def test_gpt_without_residual_scaling():
    class NoScaling(LearnerGPT):
        residual_std_divisor = staticmethod(lambda n_layers: 1.0)

    rejects(checks.GPT, NoScaling, "out_proj.weight", "the residual projections are not scaled",
            "after self.apply")  # a learner's: scaled first, then drawn again by apply


def test_gpt_residual_scaling_by_sqrt_n_layers():
    class SqrtN(LearnerGPT):
        residual_std_divisor = staticmethod(lambda n_layers: math.sqrt(n_layers))

    rejects(checks.GPT, SqrtN, "divided by sqrt(n_layers)", "2 * n_layers")


def test_gpt_without_any_init():
    class DefaultInit(LearnerGPT):
        def init_weights(self):
            pass

    rejects(checks.GPT, DefaultInit, "tok_emb.weight", "default init is normal(0, 1)")


def test_gpt_init_with_std_one():
    class StdOne(LearnerGPT):
        def init_weights(self):
            for module in self.modules():
                if isinstance(module, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(module.weight)
                    if getattr(module, "bias", None) is not None:
                        nn.init.zeros_(module.bias)

    rejects(checks.GPT, StdOne, "wrong initial std", "expected std 0.02")


def test_gpt_init_leaves_biases_at_their_default():
    class BiasesLeft(LearnerGPT):
        def init_weights(self):
            for module in self.modules():
                if isinstance(module, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(module.weight, std=0.02)
            for block in self.blocks:
                nn.init.normal_(block.attn.out_proj.weight, std=0.02 / math.sqrt(2 * self.config.n_layers))
                nn.init.normal_(block.mlp.proj.weight, std=0.02 / math.sqrt(2 * self.config.n_layers))

    rejects(checks.GPT, BiasesLeft, "should start at 0", "zero every bias")


def test_gpt_init_uniform():
    class Uniform(LearnerGPT):
        def init_weights(self):
            super().init_weights()
            a = 0.02 * math.sqrt(3)  # a uniform distribution with std 0.02
            nn.init.uniform_(self.tok_emb.weight, -a, a)

    rejects(checks.GPT, Uniform, "uniformly distributed", "normal_")


def test_gpt_init_redraws_layernorm_weights():
    class NormsRedrawn(LearnerGPT):
        def init_weights(self):
            super().init_weights()
            for name, p in self.named_parameters():
                if "ln" in name:
                    nn.init.normal_(p, std=0.02)

    rejects(checks.GPT, NormsRedrawn, "should start at 1")


# --- generate --------------------------------------------------------------------------


def learner_generate(model, ids, max_new_tokens, temperature=1.0, top_k=None):
    """Correct, written differently from the reference (Categorical, try/finally)."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for _ in range(max_new_tokens):
                context = ids[:, -model.config.max_len:]
                logits = model(context)[:, -1, :] / temperature
                if top_k is not None:
                    k = min(top_k, logits.size(-1))
                    v, _ = torch.topk(logits, k)
                    logits[logits < v[:, [-1]]] = -float("inf")
                next_id = torch.distributions.Categorical(logits=logits).sample()
                ids = torch.cat([ids, next_id[:, None]], dim=1)
    finally:
        model.train(was_training)
    return ids


def make_generate(*, crop="last", temperature="logits", top_k="kth", sample="multinomial", restore=True,
                  no_grad=True, eval_mode=True, position=-1, only_new=False):
    """A learner's generate with one thing changed."""

    def generate(model, ids, max_new_tokens, temperature_=1.0, top_k_=None):
        was_training = model.training
        if eval_mode:
            model.eval()
        out = ids
        new = []
        context_manager = torch.no_grad() if no_grad else torch.enable_grad()
        with context_manager:
            for _ in range(max_new_tokens):
                if crop == "last":
                    context = out[:, -model.config.max_len:]
                elif crop == "first":
                    context = out[:, :model.config.max_len]
                else:
                    context = out
                logits = model(context)[:, position, :]
                if temperature == "logits":
                    logits = logits / temperature_
                if top_k_ is not None:
                    if top_k == "kth":
                        kth = torch.topk(logits, min(top_k_, logits.shape[-1])).values[:, -1:]
                        logits = logits.masked_fill(logits < kth, float("-inf"))
                    elif top_k == "le":  # off by one: drops the k-th token too
                        kth = torch.topk(logits, min(top_k_, logits.shape[-1])).values[:, -1:]
                        logits = logits.masked_fill(logits <= kth, float("-inf"))
                    elif top_k == "sorted_k":  # off by one: the (k+1)-th logit as threshold
                        sorted_logits = logits.sort(dim=-1, descending=True).values
                        kth = sorted_logits[:, min(top_k_, logits.shape[-1] - 1)].unsqueeze(-1)
                        logits = logits.masked_fill(logits < kth, float("-inf"))
                    elif top_k == "indices":  # exactly k tokens: ties with the k-th are dropped
                        v, idx = torch.topk(logits, min(top_k_, logits.shape[-1]))
                        logits = torch.full_like(logits, float("-inf")).scatter(-1, idx, v)
                    elif top_k == "unclamped":  # crashes when top_k > V
                        kth = torch.topk(logits, top_k_).values[:, -1:]
                        logits = logits.masked_fill(logits < kth, float("-inf"))
                probs = F.softmax(logits, dim=-1)
                if temperature == "probs":
                    probs = probs / temperature_
                elif temperature == "multiply":
                    probs = F.softmax(logits * temperature_, dim=-1)
                if sample == "argmax":
                    next_id = probs.argmax(dim=-1, keepdim=True)
                else:
                    next_id = torch.multinomial(probs, num_samples=1)
                new.append(next_id)
                out = torch.cat([out, next_id], dim=1)
        if restore:
            model.train(was_training)
        if only_new:
            return torch.cat(new, dim=1) if new else ids[:, :0]
        return out

    def wrapper(model, ids, max_new_tokens, temperature=1.0, top_k=None):
        return generate(model, ids, max_new_tokens, temperature, top_k)

    return wrapper


def test_generate_passes_the_reference_and_learner_versions():
    passes(checks.generate, ref.generate)
    passes(checks.generate, learner_generate)
    passes(checks.generate, make_generate())


def test_generate_stub_is_not_done():
    not_done(checks.generate, stub)


def test_generate_without_crop():
    rejects(checks.generate, make_generate(crop="none"), "context is not cropped", "ids[:, -model.config.max_len:]")


def test_generate_without_crop_on_a_real_gpt():
    """The real GPT raises an IndexError in its position embedding: reported as 'crop the context'."""
    def generate(model, ids, max_new_tokens, temperature=1.0, top_k=None):
        if not isinstance(model, ref.GPT):
            return learner_generate(model, ids, max_new_tokens, temperature, top_k)
        model.eval()
        with torch.no_grad():
            for _ in range(max_new_tokens):
                logits = model(ids)[:, -1, :]
                ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
        model.train()
        return ids

    rejects(checks.generate, generate, "more than max_len tokens", "crop the context")


def test_generate_crops_the_first_tokens():
    rejects(checks.generate, make_generate(crop="first"), "keep the last ones")


def test_generate_temperature_after_the_softmax():
    rejects(checks.generate, make_generate(temperature="probs"), "temperature 0.5", "temperature has no effect")


def test_generate_multiplies_by_the_temperature():
    rejects(checks.generate, make_generate(temperature="multiply"), "multiply the logits by the temperature")


def test_generate_argmax_instead_of_sampling():
    rejects(checks.generate, make_generate(sample="argmax"), "same next token", "argmax", "multinomial")


def test_generate_ignores_top_k():
    def ignores_top_k(model, ids, max_new_tokens, temperature=1.0, top_k=None):
        return learner_generate(model, ids, max_new_tokens, temperature, None)

    rejects(checks.generate, ignores_top_k, "with top_k=1", "is top_k applied")


def test_generate_top_k_keeps_k_minus_one():
    rejects(checks.generate, make_generate(top_k="le"), "top_k=1", "nan", "logits < kth")


def test_generate_top_k_keeps_k_plus_one():
    rejects(checks.generate, make_generate(top_k="sorted_k"), "top_k=1", "you keep 2 tokens", "index k-1")


def with_greedy_shortcut(generate):
    """A learner who special-cases top_k=1 as argmax: the off-by-one shows only for k > 1."""
    def wrapper(model, ids, max_new_tokens, temperature=1.0, top_k=None):
        if top_k == 1:
            was_training = model.training
            model.eval()
            with torch.no_grad():
                for _ in range(max_new_tokens):
                    logits = model(ids[:, -model.config.max_len:])[:, -1, :]
                    ids = torch.cat([ids, logits.argmax(dim=-1, keepdim=True)], dim=1)
            model.train(was_training)
            return ids
        return generate(model, ids, max_new_tokens, temperature, top_k)
    return wrapper


def test_generate_top_k_keeps_k_minus_one_for_k_above_one():
    rejects(checks.generate, with_greedy_shortcut(make_generate(top_k="le")), "top_k=3", "you keep 2 tokens", "<=")


def test_generate_top_k_keeps_k_plus_one_for_k_above_one():
    rejects(checks.generate, with_greedy_shortcut(make_generate(top_k="sorted_k")), "outside the top 3",
            "you keep 4 tokens")


def test_generate_top_k_drops_ties():
    rejects(checks.generate, make_generate(top_k="indices"), "ties", "tied with the k-th largest")


def test_generate_top_k_larger_than_vocabulary_crashes():
    rejects(checks.generate, make_generate(top_k="unclamped"), "at least the vocabulary size", "min(top_k")


def test_generate_does_not_restore_train_mode():
    rejects(checks.generate, make_generate(restore=False), "left the model in eval mode", "model.train(was_training)")


def test_generate_always_returns_in_train_mode():
    def always_train(model, ids, max_new_tokens, temperature=1.0, top_k=None):
        out = learner_generate(model, ids, max_new_tokens, temperature, top_k)
        model.train()
        return out

    rejects(checks.generate, always_train, "left the model in train mode")


def test_generate_without_no_grad():
    rejects(checks.generate, make_generate(no_grad=False), "gradient tracking", "torch.no_grad")


def test_generate_without_eval_mode():
    rejects(checks.generate, make_generate(eval_mode=False), "train mode during generation", "model.eval()")


def test_generate_samples_from_the_first_position():
    rejects(checks.generate, make_generate(position=0), "with top_k=1", "first position", "logits[:, -1, :]")


def test_generate_returns_only_the_new_tokens():
    rejects(checks.generate, make_generate(only_new=True), "wrong shape", "prompt followed by the new tokens")


def test_generate_feeds_only_the_last_token():
    def last_token_only(model, ids, max_new_tokens, temperature=1.0, top_k=None):
        was_training = model.training
        model.eval()
        with torch.no_grad():
            for _ in range(max_new_tokens):
                logits = model(ids[:, -1:])[:, -1, :] / temperature
                if top_k is not None:
                    kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                probs = F.softmax(logits, dim=-1)
                ids = torch.cat([ids, torch.multinomial(probs, 1)], dim=1)
        model.train(was_training)
        return ids

    rejects(checks.generate, last_token_only, "did not see the right context", "feed the whole cropped context")


def test_generate_leaves_rng_of_the_learner_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    checks.generate(ref.generate)
    checks.GPT(ref.GPT)
    assert torch.equal(torch.rand(3), expected)


def test_a_returned_tuple_is_named():
    class ReturnsLossToo(ref.GPT):
        def forward(self, ids, mask=None):
            return super().forward(ids, mask), None

    rejects(checks.GPT, ReturnsLossToo, "got tuple", "not a tuple", "(logits, loss)")

"""Checks for notebook 07: the GPT model and generation."""

import math

import torch
import torch.nn as nn

from tutor import reference as ref
from tutor.checks import beside
from tutor.checks.common import frequencies_close, top_k_probs
from tutor.checks.compare import as_kind, expect_close, kind_cases, learner_as_kind, load_reference_weights
from tutor.checks.harness import LearnerError, Mismatch, at, build, call, case, check, error_details, generator, seed
from tutor.course import catalog

__all__ = catalog.check_names(__name__)  # this notebook's exercises (tutor.course.catalog)

# A small model for comparing outputs (V > max_len, so looking positions up with token ids fails).
SMALL = dict(vocab_size=13, max_len=8, d_model=16, n_heads=2, n_layers=2, dropout=0.0)
# A larger one for the statistics of the initialisation (about 0.3 M parameters).
LARGE = dict(vocab_size=64, max_len=64, d_model=64, n_heads=4, n_layers=6, dropout=0.0)

INIT_HINT = ("initialise GPT-2 style at the end of __init__: self.apply(self._init_weights) with "
             "nn.init.normal_(weight, 0.0, 0.02) for every nn.Linear and nn.Embedding, zero biases, then "
             "re-initialise attn.out_proj.weight and mlp.proj.weight with std 0.02 / sqrt(2 * n_layers)")


# --- GPT ----------------------------------------------------------------------------------


def _module(model, name, kind, what):
    """model.<name> exists and is a ``kind`` (an nn.Module class)."""
    sub = getattr(model, name, None)
    if sub is None:
        raise Mismatch(f"your GPT has no attribute `{name}`", hint=f"create it in __init__: self.{name} = {what}")
    if kind is not None and not isinstance(sub, kind):
        raise Mismatch(f"`{name}` should be an nn.{kind.__name__}, got {type(sub).__name__}",
                       hint=f"self.{name} = {what}")
    return sub


def _is_tied(model) -> bool:
    return bool(at(beside.is_tied)(model))


def _structure(model, config):
    c = config
    stored = getattr(model, "config", None)
    if stored is None:
        raise Mismatch("your GPT does not store its config",
                       hint="add self.config = config in __init__ (generate reads model.config.max_len)")
    if stored is not c and stored != c:
        raise Mismatch("model.config is not the config you were given", [f"expected {c}", f"got      {stored}"],
                       hint="store it unchanged: self.config = config")
    _module(model, "tok_emb", nn.Embedding, "nn.Embedding(config.vocab_size, config.d_model)")
    _module(model, "pos_emb", nn.Embedding, "nn.Embedding(config.max_len, config.d_model)")
    blocks = _module(model, "blocks", None, "nn.ModuleList([TransformerBlock(...) for _ in range(config.n_layers)])")
    if not isinstance(blocks, nn.ModuleList):
        hint = ("nn.Sequential passes one argument from block to block, so the mask cannot reach them: "
                "use nn.ModuleList and loop over it in forward") if isinstance(blocks, nn.Sequential) else None
        raise Mismatch(f"`blocks` should be an nn.ModuleList, got {type(blocks).__name__}",
                       hint=hint or "self.blocks = "
                                    "nn.ModuleList([TransformerBlock(...) for _ in range(config.n_layers)])")
    if len(blocks) != c.n_layers:
        raise Mismatch(f"your GPT has {len(blocks)} blocks, expected config.n_layers = {c.n_layers}",
                       hint="build one TransformerBlock per layer: for _ in range(config.n_layers)")
    _module(model, "ln_f", nn.Module, "LayerNorm(config.d_model)")
    _module(model, "head", nn.Linear, "nn.Linear(config.d_model, config.vocab_size, bias=False)")
    if _is_tied(model):
        raise Mismatch("the head shares its weight with tok_emb (weight tying)",
                       ["in this course the head has its own weight, so the check can load reference weights into it"],
                       hint="remove `self.head.weight = self.tok_emb.weight`; keep "
                            "self.head = nn.Linear(d_model, vocab_size, bias=False) separate")


def _forward(ref_model, ids, mask=None, *, pos=True, final_norm=True, tied=False, mask_blocks="all", softmax=False,
             scale_emb=False, pad_mask=False):
    """The reference forward pass, or one of the classic mistakes."""
    T = ids.shape[-1]
    x = ref_model.tok_emb(ids)
    if scale_emb:
        x = x * math.sqrt(x.shape[-1])
    if pos:
        x = x + ref_model.pos_emb(torch.arange(T))
    if pad_mask:
        mask = ref.padding_mask(ids)
    for i, block in enumerate(ref_model.blocks):
        m = mask if (mask_blocks == "all" or (mask_blocks == "first" and i == 0)) else None
        x = block(x, m)
    if final_norm:
        x = ref_model.ln_f(x)
    logits = x @ ref_model.tok_emb.weight.T if tied else ref_model.head(x)
    return ref.softmax(logits, dim=-1) if softmax else logits


def _gpt_mistakes(ref_model, ids, mask):
    f = lambda **kw: (lambda: _forward(ref_model, ids, mask, **kw))  # noqa: E731
    mistakes = [
        ("there is no position embedding: add pos_emb(torch.arange(T)) to the token embeddings", f(pos=False)),
        ("the final LayerNorm is missing: apply self.ln_f to the output of the last block, before the head",
         f(final_norm=False)),
        ("the logits use tok_emb.weight (weight tying); use self.head, which has its own weight", f(tied=True)),
        ("you return probabilities: forward returns the logits, the softmax comes later (in the loss or in generate)",
         f(softmax=True)),
        ("the token embeddings are multiplied by sqrt(d_model) (as in the original Transformer); "
         "GPT adds them unscaled",
         f(scale_emb=True)),
    ]
    if mask is not None:
        mistakes += [
            ("the mask does not reach the blocks: call block(x, mask) for every block", f(mask_blocks="none")),
            ("only the first block gets the mask: pass it to every block", f(mask_blocks="first")),
        ]
    else:
        mistakes.append(("you build a padding mask from the ids inside forward; use only the `mask` argument "
                         "(None means: causal attention only)", f(pad_mask=True)))
    return mistakes


def _run_gpt(model, ref_model, ids, mask=None, what="the output of forward (the logits)"):
    label = f"model(ids of shape {list(ids.shape)}{', mask' if mask is not None else ''})"
    args = (ids.clone(),) + ((mask,) if mask is not None else ())
    got = call(model, *args, what=label)
    with torch.no_grad():
        expected = ref_model(ids, mask)
    with torch.no_grad():
        expect_close(got, expected, what, atol=1e-5, rtol=1e-4, mistakes=_gpt_mistakes(ref_model, ids, mask),
                     names="B T V")
    return got


def _explain_forward_error(e: LearnerError, model, ids, mask, config, first_case: bool):
    msg = str(e.error)
    details = error_details(e)
    T = ids.shape[-1]
    if isinstance(e.error, IndexError) or "index out of range" in msg:
        hint = ("an embedding lookup is out of range: tok_emb takes the token ids (< vocab_size), pos_emb takes "
                "the positions torch.arange(T), which are 0-based (0 ... T-1 < max_len)")
        if int(ids.max()) >= config.max_len:  # does it work when every token id is a valid position?
            try:
                with torch.no_grad():
                    model(ids.clamp(max=config.max_len - 1), *(() if mask is None else (mask,)))
                hint = ("pos_emb is looked up with the token ids; look it up with the positions: "
                        "self.pos_emb(torch.arange(T, device=ids.device))")
            except Exception:  # noqa: BLE001 - learner code: any error means the other hint
                if "arange(1" in (e.where or "") or "+ 1" in (e.where or ""):
                    hint = "positions are 0-based: torch.arange(T), not 1 ... T"
        return Mismatch("your GPT raised an IndexError in an embedding", details, hint=hint)
    if not first_case and T < config.max_len and ("size of tensor" in msg or "must match" in msg):
        return Mismatch(f"your GPT works for T = max_len = {config.max_len} but fails for T = {T}", details,
                        hint="the position embedding is not sliced to the input's length: use "
                             "self.pos_emb(torch.arange(T, device=ids.device)) with T = ids.shape[1], "
                             "not all max_len rows")
    if "positional argument" in msg and "forward" in msg:
        return Mismatch("your GPT's forward does not take a mask", details,
                        hint="def forward(self, ids, mask=None), and pass mask to every block: x = block(x, mask)")
    return None


def _init_statistics(cls):
    config = ref.GPTConfig(**LARGE)
    with case(f"the initialisation, GPTConfig({', '.join(f'{k}={v}' for k, v in LARGE.items())})"):
        model = build(cls, config, what="GPT(config)")
        _structure(model, config)
        params = dict(model.named_parameters())
        base, scaled = 0.02, 0.02 / math.sqrt(2 * config.n_layers)
        expected = {}
        for name, p in params.items():
            leaf = name.rsplit(".", 1)[-1]
            owner = name.rsplit(".", 1)[0]
            if owner.split(".")[-1].startswith("ln"):  # ln1, ln2, ln_f
                expected[name] = ("ones", None) if leaf == "weight" else ("zeros", None)
            elif leaf == "bias":
                expected[name] = ("zeros", None)
            elif owner.endswith("attn.out_proj") or owner.endswith("mlp.proj"):
                expected[name] = ("normal", scaled)
            else:
                expected[name] = ("normal", base)
        # the embeddings and the head first: their default init is far off and says the most
        order = sorted(expected, key=lambda n: (0 if n.startswith(("tok_emb", "pos_emb", "head")) else 1))
        for name in order:
            kind, std = expected[name]
            _expect_init(name, params[name].detach().float(), kind, std, config.n_layers)
    return model


def _expect_init(name, w, kind, std, n_layers):
    if kind == "ones":
        if not torch.all(w == 1):
            raise Mismatch(f"`{name}` should start at 1 (a LayerNorm weight)", [f"got mean {w.mean():.4g}"],
                           hint="initialise LayerNorm weights to 1 and biases to 0 "
                                "(your init loop may have re-drawn them)")
        return
    if kind == "zeros":
        if not torch.all(w == 0):
            raise Mismatch(f"`{name}` should start at 0 (a bias)", [f"got values with std {w.std():.4g}"],
                           hint="zero every bias: nn.init.zeros_(module.bias) for nn.Linear layers that have one, "
                                "and LayerNorm biases")
        return
    n = w.numel()
    got_std, got_mean = w.std().item(), w.mean().item()
    details = [f"expected std {std:.4g}, got {got_std:.4g} (mean {got_mean:.3g}, {n} values)"]
    if got_std == 0:
        raise Mismatch(f"`{name}` is all {got_mean:.3g}", details, hint="draw it from normal(0, std): nn.init.normal_")
    if abs(got_std / std - 1) > 0.12:
        ratio = got_std / 0.02
        residual = std != 0.02
        hint = None
        if name.startswith("tok_emb") or name.startswith("pos_emb"):
            if abs(got_std - 1) < 0.12:
                hint = "nn.Embedding's default init is normal(0, 1); re-initialise it with std 0.02"
        if hint is None and residual:
            for factor, text in [
                (1.0, "the residual projections are not scaled: their std is 0.02 / sqrt(2 * n_layers) (if you did "
                      "scale them, do it after self.apply(self._init_weights), which draws every weight again)"),
                (1 / math.sqrt(n_layers), "you divided by sqrt(n_layers); there are 2 residual "
                 "additions per block, so divide by sqrt(2 * n_layers)"),
                (1 / (2 * n_layers), "you divided by 2 * n_layers; divide by its square root, sqrt(2 * n_layers)"),
                (1 / n_layers, "you divided by n_layers; divide by sqrt(2 * n_layers)"),
            ]:
                if abs(ratio / factor - 1) < 0.12:
                    hint = text + f" (n_layers = {n_layers}: 0.02 / sqrt({2 * n_layers}) = {std:.4g})"
                    break
        if hint is None and not residual and abs(got_std / (0.02 / math.sqrt(2 * n_layers)) - 1) < 0.12:
            hint = ("only attn.out_proj and mlp.proj get the smaller std 0.02 / sqrt(2 * n_layers); "
                    "everything else uses 0.02")
        if hint is None and abs(got_std - 1) < 0.12:
            hint = "std 1 is far too large: GPT-2 draws weights from normal(0, 0.02)"
        if hint is None and name.endswith("weight") and w.dim() == 2 and not name.startswith(("tok_emb", "pos_emb")):
            fan_in = w.shape[1]
            if abs(got_std / (1 / math.sqrt(3 * fan_in)) - 1) < 0.12:
                hint = "this is nn.Linear's default init: apply the GPT-2 init to every nn.Linear (self.apply(...))"
        raise Mismatch(f"`{name}` has the wrong initial std", details, hint=hint or INIT_HINT)
    if abs(got_mean) > 6 * std / math.sqrt(n) + 1e-4:
        raise Mismatch(f"`{name}` should have mean 0", details, hint="draw it from normal(0, std): mean=0.0")
    kurtosis = (((w - got_mean) / got_std) ** 4).mean().item() - 3
    if kurtosis < -0.6:
        raise Mismatch(f"`{name}` looks uniformly distributed, not normal",
                       details + [f"excess kurtosis {kurtosis:.2f} (normal: 0, uniform: -1.2)"],
                       hint="use nn.init.normal_(weight, mean=0.0, std=...) rather than uniform_")


@check
def GPT(cls):
    return _check_gpt(cls)


def _check_gpt(cls):
    seed(0)
    config = ref.GPTConfig(**SMALL)
    with case("GPT(GPTConfig(vocab_size=13, max_len=8, d_model=16, n_heads=2, n_layers=2))"):
        model = build(cls, config, what="GPT(config)")
        _structure(model, config)
        reference = ref.GPT(config)
        _randomise(reference)
        load_reference_weights(model, reference, "your GPT")
    reference.eval()
    V, M = config.vocab_size, config.max_len
    cases = [
        (f"ids [3, {M}] (T = max_len)", torch.randint(1, V, (3, M)), None),
        ("ids [2, 5] (T < max_len)", torch.randint(1, V, (2, 5)), None),
        ("ids [4, 1] (T = 1)", torch.randint(1, V, (4, 1)), None),
        ("ids [2, 6] containing the ' ' token 0", torch.tensor([[0, 3, 0, 5, 7, 0], [4, 0, 0, 2, 9, 1]]), None),
    ]
    lengths = torch.tensor([M, 5, 3])
    pad = (torch.arange(M) < lengths[:, None]).unsqueeze(1)  # [3, 1, M], keys past each length are padding
    ids_pad = torch.randint(1, V, (3, M)) * pad[:, 0]
    cases.append(("a padding mask [3, 1, 8] (lengths 8, 5, 3)", ids_pad, pad))
    middle = torch.ones(2, 1, 6, dtype=torch.bool)
    middle[0, 0, 2] = middle[1, 0, 1] = middle[1, 0, 4] = False
    cases.append(("a mask [2, 1, 6] hiding keys in the middle", torch.randint(1, V, (2, 6)), middle))
    for i, (label, ids, mask) in enumerate(cases):
        with case(label):
            try:
                _run_gpt(model, reference, ids, mask)
            except LearnerError as e:
                explained = _explain_forward_error(e, model, ids, mask, config, first_case=(i == 0))
                if explained is None:
                    raise
                raise explained from None
            except Mismatch as m:
                # maybe it differs only because of dropout that ignores config.dropout
                if m.hint is None and isinstance(model, nn.Module):
                    model.eval()
                    try:
                        with torch.no_grad():
                            ok = torch.allclose(call(model, ids, *(() if mask is None else (mask,))),
                                                reference(ids, mask), atol=1e-5, rtol=1e-4)
                    except Exception:  # noqa: BLE001 - learner code: any error means not equal
                        ok = False
                    model.train()
                    if ok:
                        m.hint = ("it is right in eval mode but not in train mode although config.dropout = 0: "
                                  "build dropout with nn.Dropout(config.dropout), not a fixed rate")
                raise
    with case("dropout: GPTConfig(dropout=0.5), blocks that add nothing"):
        _check_dropout(cls)
    _init_statistics(cls)
    kind_cases(model, (torch.randint(1, V, (2, 5)),), reference, "model(ids) with ids [2, 5]", module=True)
    return "6 forward cases, dropout, initialisation statistics, untied head, float64 and meta"


def _randomise(model):
    """Give a reference GPT weights of a trained-looking size, so that every part visibly matters."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("emb.weight"):
                p.normal_(0.0, 1.0)
            elif p.dim() == 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[1]))
            elif name.endswith("weight"):  # LayerNorm
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.2)


def _check_dropout(cls):
    config = ref.GPTConfig(**{**SMALL, "dropout": 0.5})
    model = build(cls, config, what="GPT(GPTConfig(..., dropout=0.5))")
    _structure(model, config)
    reference = ref.GPT(config)
    with torch.no_grad():  # make every block the identity: its residual branches write zeros
        for block in reference.blocks:
            for layer in (block.attn.out_proj, block.mlp.proj):
                layer.weight.zero_()
                if layer.bias is not None:
                    layer.bias.zero_()
    load_reference_weights(model, reference, "your GPT")
    ids = torch.randint(0, config.vocab_size, (4, config.max_len))
    model.eval()
    reference.eval()
    with torch.no_grad():
        got_eval = call(model, ids, what="model(ids) in eval mode")
        expected = reference(ids)
    expect_close(got_eval, expected, "the output in eval mode (dropout = 0.5)", atol=1e-5, rtol=1e-4,
                 hint="dropout must switch off in eval mode: "
                      "use nn.Dropout (or F.dropout(x, p, training=self.training))")
    model.train()
    with torch.no_grad():
        got_train = call(model, ids, what="model(ids) in train mode")
    if isinstance(got_train, torch.Tensor) and got_train.shape == expected.shape:
        if torch.allclose(got_train, expected, atol=1e-5, rtol=1e-4):
            raise Mismatch("there is no dropout on the embedding sum",
                           ["with config.dropout = 0.5 and blocks that add nothing, "
                            "train mode gives the same logits as eval mode"],
                           hint="self.drop = nn.Dropout(config.dropout) in __init__, and "
                                "x = self.drop(self.tok_emb(ids) + self.pos_emb(positions)) in forward")
        if (got_train == 0).float().mean() > 0.25:
            raise Mismatch("dropout is applied to the logits", ["about half of the logits are exactly 0 in train mode"],
                           hint="apply dropout once, to the embedding sum: "
                                "self.drop(tok_emb(ids) + pos_emb(positions))")


# --- generate -----------------------------------------------------------------------------


CROP_HINT = ("crop the context before every forward pass: context = ids[:, -model.config.max_len:] "
             "(the position embedding has only max_len rows)")


def _generate(fn, model, ids, n, what=None, **kw):
    args = ", ".join([f"ids [{', '.join(map(str, ids.shape))}]", str(n)] + [f"{k}={v}" for k, v in kw.items()])
    label = what or f"generate(model, {args})"
    before = ids.clone()
    try:
        out = call(fn, model, ids, n, what=label, **kw)
    except LearnerError as e:
        if isinstance(e.error, beside.ContextTooLong) or (
                isinstance(e.error, IndexError) and ids.shape[-1] + n > model.config.max_len):
            raise Mismatch("the context is not cropped: the model received more than max_len tokens",
                           error_details(e)[:1], hint=CROP_HINT) from None
        if "probability tensor contains" in str(e.error) and kw.get("top_k") is not None:
            raise Mismatch(f"with top_k={kw['top_k']} the probabilities are NaN: every logit was set to -inf",
                           error_details(e),
                           hint="keep every logit >= the k-th largest: logits.masked_fill(logits < kth, -inf) "
                                "(with <= even the k-th largest, the maximum when k = 1, is removed)") from None
        if ("selected index k out of range" in str(e.error)
                or ("topk" in str(e.error).lower() and "range" in str(e.error))):
            raise Mismatch("generate fails when top_k is at least the vocabulary size", error_details(e),
                           hint="top_k >= V means: keep every token; use min(top_k, logits.shape[-1]) "
                                "or skip the filter") from None
        raise
    if not torch.equal(ids, before):
        raise Mismatch("generate changed the prompt tensor in place",
                       hint="build the result with torch.cat([ids, next_id], dim=1), a new tensor")
    _expect_ids(out, ids, n, model.config.vocab_size)
    return out


def _expect_ids(out, ids, n, V):
    B, T0 = ids.shape
    if not isinstance(out, torch.Tensor):
        raise Mismatch(f"generate should return a tensor, got {type(out).__name__}",
                       hint="return ids, the prompt with the new tokens appended" if out is None else None)
    if tuple(out.shape) != (B, T0 + n):
        hint = None
        if tuple(out.shape) == (B, n):
            hint = "return the prompt followed by the new tokens, not only the new tokens"
        elif out.dim() == 3:
            hint = "next_id should have shape [B, 1]: torch.multinomial(probs, num_samples=1) on probs [B, V]"
        elif out.dim() == 1 or (out.dim() == 2 and out.shape[0] != B):
            hint = "concatenate along the time axis: torch.cat([ids, next_id], dim=1) with next_id of shape [B, 1]"
        raise Mismatch("generate returned the wrong shape",
                       [f"expected ({B}, {T0} + {n}) = ({B}, {T0 + n}), got {tuple(out.shape)}"],
                       hint=hint)
    if out.dtype != torch.long:
        raise Mismatch(f"generate returned dtype {out.dtype}, expected torch.int64 (token ids)",
                       hint="sample token ids (torch.multinomial returns int64) and keep the prompt's dtype")
    if not torch.equal(out[:, :T0], ids):
        raise Mismatch("the prompt is not kept at the start of the result",
                       hint="append each new token at the end: ids = torch.cat([ids, next_id], dim=1)")
    if out.numel() and (out.min() < 0 or out.max() >= V):
        raise Mismatch(f"generate produced token ids outside 0 ... {V - 1}")


def _table(V, seed):
    g = generator(seed)
    return torch.randn(V, V, generator=g) * 1.5


def _sampling_case(fn, table, prompt, temperature, top_k, N=4000):
    """Sample one token after ``prompt`` in N rows; compare the frequencies with the exact distribution."""
    V = table.shape[0]
    model = at(beside.FakeLM)(table, max_len=8)
    ids = torch.tensor(prompt).repeat(N, 1)
    kw = {"temperature": temperature} if top_k is None else {"temperature": temperature, "top_k": top_k}
    out = _generate(fn, model, ids, 1, what=f"generate(model, ids [{N}, {len(prompt)}], 1, "
                    + ", ".join(f"{k}={v}" for k, v in kw.items()) + ")", **kw)
    freq = torch.bincount(out[:, -1], minlength=V).double() / N
    logits = table[prompt[-1]].double()
    expected = top_k_probs(logits, temperature, top_k)
    if frequencies_close(freq, expected, N):
        return
    top = torch.argsort(expected, descending=True)[:6].tolist()
    details = ["token:    " + " ".join(f"{t:>6d}" for t in top),
               "expected: " + " ".join(f"{expected[t]:6.3f}" for t in top),
               "got:      " + " ".join(f"{freq[t]:6.3f}" for t in top)]
    kept_got, kept_expected = int((freq > 0).sum()), int((expected > 0).sum())
    if top_k is not None and top_k < V:
        if ((expected == 0) & (freq > 0)).any():
            if kept_got == V:
                hint = "top_k is ignored: set the logits below the k-th largest to -inf before the softmax"
            elif kept_got == kept_expected + 1:
                hint = (f"you keep {top_k + 1} tokens for top_k={top_k}: the threshold is the k-th largest logit, "
                        "torch.topk(logits, k).values[:, -1:] (index k-1 when sorted in descending order, not k)")
            else:
                hint = "only the top_k most likely tokens may be sampled: set the other logits to -inf"
            raise Mismatch(f"tokens outside the top {top_k} were sampled", details, hint=hint)
        if kept_got < kept_expected and expected[expected > 0].min() * N > 40:
            if kept_got == top_k and kept_expected > top_k:
                hint = ("a token tied with the k-th largest logit is never sampled: keep every token whose logit is "
                        ">= the k-th largest (logits < kth become -inf), not just the k indices torch.topk returns")
            elif kept_got == kept_expected - 1:
                hint = (f"you keep {kept_got} tokens for top_k={top_k}: keep every token whose logit is >= the k-th "
                        "largest (set logits < kth to -inf; <= drops the k-th token too)")
            else:
                hint = f"the {top_k} most likely tokens should all be sampled, in proportion to their probabilities"
            raise Mismatch(f"only {kept_got} different tokens were sampled, expected {kept_expected}", details,
                           hint=hint)
    if kept_got == 1 and kept_expected > 1:
        raise Mismatch(f"all {N} rows got the same next token", details,
                       hint="you take the most likely token (argmax); sample from the distribution instead: "
                            "torch.multinomial(probs, num_samples=1)")
    first = table[prompt[0]].double()
    candidates = [
        ("the temperature has no effect: divide the logits by the temperature before the softmax "
         "(dividing the probabilities by T changes nothing once they are renormalised)",
         top_k_probs(logits, 1.0, top_k)),
        ("you multiply the logits by the temperature; divide them: softmax(logits / temperature)",
         top_k_probs(logits * temperature * temperature, temperature, top_k)),
        ("you sample from the logits of the first position; the next token comes from the last: logits[:, -1, :]",
         top_k_probs(first, temperature, top_k)),
    ]
    if top_k is not None and 1 < top_k < V:
        z = logits / temperature
        kth = torch.topk(z, top_k).values[-1]
        kept = (z >= kth).double()
        candidates += [
            ("you sample uniformly among the top k tokens; sample with their softmax probabilities", kept / kept.sum()),
        ]
    for text, candidate in candidates:
        if frequencies_close(freq, candidate, N):
            raise Mismatch("the sampled tokens do not follow the expected distribution", details, hint=text)
    raise Mismatch("the sampled tokens do not follow softmax(logits / temperature)", details,
                   hint="sample from probs = softmax(logits[:, -1, :] / temperature, dim=-1), after the top-k filter")


@check
def generate(fn):
    return _check_generate(fn)


def _check_generate(fn):
    V = 8
    table = _table(V, 1)
    with case("shape, dtype and prompt: ids [3, 4], 5 new tokens, top_k=1"):
        model = at(beside.FakeLM)(table, max_len=16)
        ids = torch.tensor([[1, 2, 3, 4], [0, 0, 0, 0], [7, 5, 3, 1]])
        out = _generate(fn, model, ids, 5, top_k=1)
        expected = ref.generate(beside.FakeLM(table, max_len=16), ids, 5, top_k=1)
        _expect_same_ids(out, expected, ids.shape[1], table, 16)
    with case("no new tokens: max_new_tokens=0"):
        out = _generate(fn, at(beside.FakeLM)(table, max_len=16), ids, 0)
    with case("a context longer than max_len: ids [2, 5], 7 new tokens, max_len=6, top_k=1"):
        model, ref_model = at(beside.FakeLM)(table, max_len=6), beside.FakeLM(table, max_len=6)
        ids = torch.tensor([[3, 1, 4, 1, 5], [2, 7, 1, 0, 6]])
        out = _generate(fn, model, ids, 7, top_k=1)
        expected = ref.generate(ref_model, ids, 7, top_k=1)
        _expect_contexts(model.seen, out, ids.shape[1], 7, 6)
        _expect_same_ids(out, expected, ids.shape[1], table, 6)
    with case("train mode before generate"):
        model = at(beside.FakeLM)(table, max_len=8)
        model.train()
        _generate(fn, model, torch.tensor([[1, 2]]), 3, top_k=1)
        _expect_modes(model, was_training=True)
    with case("eval mode before generate"):
        model = at(beside.FakeLM)(table, max_len=8)
        model.eval()
        _generate(fn, model, torch.tensor([[1, 2]]), 3, top_k=1)
        _expect_modes(model, was_training=False)
    prompt = [5, 2, 6]  # the next token depends on the last one, 6 (the first, 5, gives a different one)
    for label, temperature, top_k in [("temperature 1", 1.0, None), ("temperature 0.5", 0.5, None),
                                      ("temperature 2", 2.0, None), ("top_k=3", 1.0, 3),
                                      ("top_k=4, temperature 0.7", 0.7, 4), (f"top_k={V + 3} >= V", 1.0, V + 3)]:
        with case(f"sampling 4000 rows, {label}"):
            _sampling_case(fn, table, prompt, temperature, top_k)
    with case("ties: logits [2, 1, 1, 0, ...], top_k=2 keeps tokens 0, 1 and 2"):
        tied = table.clone()
        tied[6] = torch.tensor([2.0, 1.0, 1.0, 0.0, -1.0, -2.0, -1.5, -0.5])
        _sampling_case(fn, tied, prompt, 1.0, 2)
    with case("a real GPT: ids [2, 12] (longer than max_len=8), 4 new tokens, top_k=1"):
        config = ref.GPTConfig(**SMALL)
        reference = ref.GPT(config)
        gpt = at(ref.GPT)(config)
        gpt.load_state_dict(reference.state_dict())
        ids = torch.randint(0, config.vocab_size, (2, 12))
        out = _generate(fn, gpt, ids, 4, top_k=1)  # an IndexError in pos_emb is reported as "crop the context"
        _expect_same_ids(out, ref.generate(reference, ids, 4, top_k=1), ids.shape[1])
        if not gpt.training:
            raise Mismatch("generate left the GPT in eval mode; it was in train mode before",
                           hint="remember was_training = model.training, and call model.train(was_training) at the end")
    ids = torch.randint(0, config.vocab_size, (2, 3))
    kind_cases(fn, lambda kind: ((learner_as_kind(gpt, kind), as_kind(ids, kind), 3, 1.0, 1),
                                 (as_kind(reference, kind), as_kind(ids, kind), 3, 1.0, 1)),
               ref.generate, "generate(a GPT, ids [2, 3], 3 new tokens, top_k=1)", atol=0, rtol=0)
    return "shape, context crop, train/eval mode, no_grad, 7 sampling distributions, ties, float64 and meta"


def _expect_same_ids(out, expected, T0, table=None, max_len=None):
    """With top_k=1 generation is deterministic: the learner's ids equal the reference's."""
    if torch.equal(out, expected):
        return
    b, t = (out != expected).nonzero()[0].tolist()
    details = [f"first difference at row {b}, position {t} (new token {t - T0 + 1}): expected {int(expected[b, t])}, "
               f"got {int(out[b, t])}",
               f"expected {expected[b].tolist()}", f"got      {out[b].tolist()}"]
    hint = ("take the logits of the last position, logits[:, -1, :], filter to the top k, softmax, "
            "sample, and append the token before predicting the next one")
    if table is not None:
        # what each new token would be if the learner had used the first or the last position of its own context
        best = table.argmax(dim=-1)
        last = torch.stack([best[out[:, i - 1]] for i in range(T0, out.shape[1])], 1)
        first = torch.stack([best[out[:, max(0, i - max_len)]] for i in range(T0, out.shape[1])], 1)
        new = out[:, T0:]
        if torch.equal(new, first):
            hint = ("you sample from the logits of the first position; the next token comes from the last: "
                    "logits[:, -1, :]")
        elif not torch.equal(new, last):
            # the rank of each picked token among the logits of the previous token (0 = the most likely)
            order = table.argsort(dim=-1, descending=True).argsort(dim=-1)
            ranks = torch.stack([order[out[:, i - 1], out[:, i]] for i in range(T0, out.shape[1])], 1)
            if int(ranks.max()) == 1:
                hint = ("you keep 2 tokens for top_k=1: the threshold is the k-th largest logit, "
                        "torch.topk(logits, k).values[:, -1:] (index k-1 when sorted in descending order, not k)")
            else:
                hint = ("with top_k=1 only the most likely token may be picked, but yours picked others: is top_k "
                        "applied? Set every logit below the k-th largest to -inf before the softmax")
    raise Mismatch("with top_k=1 (always the most likely token) the generated tokens differ", details, hint=hint)


def _expect_contexts(seen, out, T0, n, max_len):
    """At step i the model must see the last max_len tokens of the sequence so far, out[:, :T0 + i]."""
    if len(seen) != n:
        raise Mismatch(f"the model was called {len(seen)} times for {n} new tokens",
                       hint="call the model once per new token, on the (cropped) sequence so far")
    for i, s in enumerate(seen):
        sequence = out[:, :T0 + i]
        want, got = sequence[:, -max_len:], s["ids"]
        if isinstance(got, torch.Tensor) and got.shape == want.shape and torch.equal(got, want):
            continue
        shown = got[0].tolist() if isinstance(got, torch.Tensor) and got.dim() == 2 else got
        details = [f"step {i + 1}: the sequence so far is {sequence[0].tolist()}",
                   f"expected the model to see {want[0].tolist()}", f"it saw                   {shown}"]
        hint = CROP_HINT
        if isinstance(got, torch.Tensor) and got.dim() == 2:
            if got.shape == want.shape and torch.equal(got, sequence[:, :max_len]):
                hint = "you keep the first max_len tokens; keep the last ones: ids[:, -model.config.max_len:]"
            elif got.shape[1] < want.shape[1]:
                hint = (f"the model saw {got.shape[1]} token(s) "
                        f"but should see the last min(T, max_len) = {want.shape[1]}: "
                        "feed the whole cropped context, ids[:, -model.config.max_len:]")
        raise Mismatch(f"the model did not see the right context (max_len = {max_len})", details, hint=hint)


def _expect_modes(model, was_training):
    if not model.seen:
        raise Mismatch("generate never called the model", hint="call model(context) once per new token")
    if any(s["training"] for s in model.seen):
        raise Mismatch("the model ran in train mode during generation",
                       hint="call model.eval() before sampling (dropout must be off), then restore the mode you found")
    if any(s["grad"] for s in model.seen):
        raise Mismatch("the model ran with gradient tracking on",
                       hint="decorate generate with @torch.no_grad(), or put the loop in `with torch.no_grad():`")
    if model.training != was_training:
        before, after = ("train", "eval") if was_training else ("eval", "train")
        raise Mismatch(f"generate left the model in {after} mode; it was in {before} mode before",
                       hint="remember was_training = model.training at the start "
                            "and call model.train(was_training) at the end")

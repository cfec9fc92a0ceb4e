"""What the checks of several notebooks share: inputs, known mistakes and statistics.

The rule: an ``nbNN_*`` module imports from ``harness``, ``compare`` and this module, never from another
``nbNN_*`` module. What two notebooks' checks both need lives here, once.
"""

import math

import torch
import torch.nn.functional as F

from tutor import reference as ref

# --- inputs -----------------------------------------------------------------------------------

LAIKA = ref.encode("laika")  # [12, 1, 9, 11, 1]


def laika_one_hot() -> torch.Tensor:
    """'laika' as one-hot vectors, float32 [5, 28] (notebook 01's running example)."""
    return ref.one_hot(torch.tensor(LAIKA), ref.vocab_size)


# --- scaled dot-product attention (notebooks 02 and 03) -------------------------------------


def sdpa_mistakes(q, k, v, mask=None):
    """Outputs of the classic mistakes in scaled dot-product attention."""
    d_k, d_v = q.shape[-1], v.shape[-1]

    def attend(scores, dim=-1):
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return ref.softmax(scores, dim=dim) @ v

    raw = q @ k.transpose(-2, -1)
    mistakes = [
        ("the scores are not scaled: divide q kᵀ by sqrt(d_k)", lambda: attend(raw)),
        ("the scores are divided by d_k; divide by sqrt(d_k)", lambda: attend(raw / d_k)),
        ("the scores are multiplied by sqrt(d_k); divide instead", lambda: attend(raw * math.sqrt(d_k))),
        ("softmax over the wrong axis: normalise over the keys, the last axis (dim=-1)",
         lambda: attend(raw / math.sqrt(d_k), dim=-2)),
    ]
    if q.dim() > 3:
        mistakes.append(("softmax over dim=1: without batch axes dim=1 is the last axis (the keys), but with them it "
                         "is a batch axis; use dim=-1, which means the keys for any number of leading axes",
                         lambda: attend(raw / math.sqrt(d_k), dim=1)))
    if k.shape[-2] != d_k:
        mistakes.append(("the scores are scaled by sqrt(Tk), the number of keys; the scale is sqrt(d_k) = q.shape[-1]",
                         lambda: attend(raw / math.sqrt(k.shape[-2]))))
    if d_v != d_k:
        mistakes.insert(1, ("the scores are scaled by sqrt(d_v), the width of V; the scale is sqrt(d_k), "
                            "the width of Q and K",
                            lambda: attend(raw / math.sqrt(d_v))))
    return mistakes


# --- sampling (notebooks 07 and 09) ----------------------------------------------------------


def top_k_probs(logits, temperature, k):
    """The exact next-token distribution: softmax(logits / temperature), 0 outside the top k (ties kept)."""
    z = logits / temperature
    if k is not None and k < z.shape[-1]:
        kth = torch.topk(z, k).values[-1]
        z = z.masked_fill(z < kth, float("-inf"))
    return torch.softmax(z, dim=-1)


def frequencies_close(freq, p, N):
    """Whether token frequencies ``freq`` measured on ``N`` samples fit the distribution ``p``
    (within five standard errors, and never a token whose probability is 0)."""
    tol = 5 * torch.sqrt(p * (1 - p) / N) + 2e-3
    return bool(torch.all((freq - p).abs() <= tol) and torch.all(freq[p == 0] == 0))


# --- a wrong RMSNorm or SwiGLU: notebook 06 checks the parts against these, notebook 09 a model built on a learner's
# own parts (the causes are worded for each notebook)


def rms_norm_centred(x, weight, eps, unbiased=False):
    """LayerNorm without its bias: the mean subtracted (torch.var's biased or ``unbiased`` variance)."""
    x = x - x.mean(dim=-1, keepdim=True)
    return x / torch.sqrt(x.var(dim=-1, keepdim=True, unbiased=unbiased) + eps) * weight


def rms_norm_without_eps(x, weight, eps):
    """``x / rms(x)`` with no eps under the square root."""
    return x / x.pow(2).mean(dim=-1, keepdim=True).sqrt() * weight


def swiglu_gate_on_w3(mlp, x):
    """SiLU on ``w3(x)`` instead of on ``w1(x)``, the gate: w1 and w3 swapped."""
    return mlp.w2(F.silu(mlp.w3(x)) * mlp.w1(x))

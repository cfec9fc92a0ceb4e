"""The follow-up of the first GPU report (follow-up.md): why did both the course's GPU preset and nanoGPT end far above
1.47 on the H200? The SDPA backends against float64 (and dropout's expectation inside them), then short runs of the
GPU preset with one thing changed each. As run on 2026-11-27 from the repository's root, on a CUDA GPU."""

import math
import sys
import time
from contextlib import nullcontext
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, ".")
from tutor import data
from tutor.train import long_run

DEV = "cuda"
B, H, T, D = 64, 6, 256, 64  # the GPU preset's attention: batch 64, 6 heads, 256 positions, 64 per head
BACKENDS = [None, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION,
            SDPBackend.MATH]


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def reference(q, k, v):
    q, k, v = (t.double() for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(D)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool, device=DEV).triu(1), float("-inf"))
    return scores.softmax(-1) @ v


def attention_backends():
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, device=DEV, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    ref = reference(q, k, v)
    grad_out = torch.randn_like(ref)
    ref_grads = torch.autograd.grad(ref, (q, k, v), grad_out)
    ones = torch.ones(B, H, T, D, device=DEV, dtype=torch.bfloat16)
    for backend in BACKENDS:
        try:
            with sdpa_kernel(backend) if backend else nullcontext():
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                grads = torch.autograd.grad(out, (q, k, v), grad_out.to(out.dtype))
                # with v = 1 every output is 1 without dropout; dropout rescaled by 1/(1-p) keeps the mean at 1
                dropped = F.scaled_dot_product_attention(q.detach(), k.detach(), ones, is_causal=True, dropout_p=0.2)
        except RuntimeError as error:
            print(f"sdpa {backend}: n/a {str(error)[:150]}", flush=True)
            continue
        print(f"sdpa {backend}: out {rel(out, ref):.2e} dq {rel(grads[0], ref_grads[0]):.2e} "
              f"dk {rel(grads[1], ref_grads[1]):.2e} dv {rel(grads[2], ref_grads[2]):.2e}; dropout 0.2 on v=1: "
              f"mean {dropped.float().mean().item():.4f} (want 1), nonzero {(dropped != 0).float().mean().item():.3f}",
              flush=True)


def run(tag, config, text):
    torch.manual_seed(0)
    start = time.perf_counter()
    history = long_run.train(config, text_data=text, device=torch.device(DEV), progress=False).history
    print(f"{tag}: val {[round(x, 3) for x in history.val_loss]} at {[s + 1 for s in history.val_steps]}, "
          f"train {[round(x, 3) for x in history.train_loss[-3:]]}, {time.perf_counter() - start:.0f} s", flush=True)


def main():
    attention_backends()
    text = data.shakespeare_data(verbose=False)
    base = replace(long_run.preset("gpu", torch.device(DEV)), steps=1200, eval_every=400, checkpoint_every=0)
    run("preset, 1200 steps", base, text)
    torch.backends.cuda.enable_cudnn_sdp(False)
    run("no cuDNN SDPA", base, text)
    torch.backends.cuda.enable_cudnn_sdp(True)
    run("dropout 0", replace(base, dropout=0.0), text)
    run("no compile, no bf16", replace(base, compile=False, bf16=False), text)


if __name__ == "__main__":
    main()

"""GPT-2 small (124M) in the course's GPT: peak memory and generation speed, measured side by side in one run.

    python benchmarks/gpt2_memory.py [--threads 0] [--new 64] [--prompt 16] [--device cpu] [--skip-notebook]

Each measurement runs in a fresh Python process, whose peak resident memory (``ru_maxrss``) is what the
operating system counts against a limit such as Binder's 2 GB:

- ``import only``: ``import torch, tutor`` (and ``transformers``), no model;
- ``float32`` and ``bfloat16``: the 124M GPT built in that dtype, one forward pass over the prompt, then cached
  generation (``generate_cached``, notebook 09's ``KVCache``) and generation without a cache (``generate``), in
  tokens per second, greedy (``top_k=1``) so that both write the same tokens;
- ``notebook 12``: the notebook's own path with internet, on random weights written as a hub checkpoint
  (``model.safetensors`` + ``config.json`` in a temporary folder): read the file, load it with ``load_gpt2``,
  free the file's tensors, load transformers' ``GPT2LMHeadModel.from_pretrained`` from the folder, compare the
  logits, free it, generate with the cache, and score one window of 1,024 tokens;
- ``nb 12 offline``: the notebook's path without internet: transformers' random ``GPT2LMHeadModel`` of GPT-2's
  shape stands in for the file (both models are held while their logits are compared), 8 new tokens, 512 scored.

The weights are random: memory and speed do not depend on their values. Nothing is downloaded.
"""

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time

CHILD = r'''
import json, resource, sys, time
args = json.loads(sys.argv[1])
import torch
if args["threads"]:
    torch.set_num_threads(args["threads"])
from tutor import reference as ref
from tutor import huggingface
from tutor import train as tr
from tutor.data import gpt2 as gpt2_data
out = {"threads": torch.get_num_threads()}
if args["what"] == "import":
    import transformers  # noqa: F401
elif args["what"] in ("float32", "bfloat16"):
    dtype = getattr(torch, args["what"])
    torch.set_default_dtype(dtype)
    torch.manual_seed(0)
    model = ref.GPT(ref.GPTConfig.gpt2()).to(args["device"]).eval()
    torch.set_default_dtype(torch.float32)
    out["parameters"] = sum(p.numel() for p in model.parameters())
    out["parameter_MB"] = tr.parameter_bytes(model) / 1e6
    ids = torch.randint(0, 50257, (1, args["prompt"]), device=args["device"])
    with torch.no_grad():
        model(ids)
    sync = torch.cuda.synchronize if args["device"].startswith("cuda") else (lambda: None)
    for name, generate in (("cached", ref.generate_cached), ("uncached", ref.generate)):
        generate(model, ids, 4, top_k=1)  # warm-up
        sync()
        start = time.perf_counter()
        generate(model, ids, args["new"], top_k=1)
        sync()
        out[f"{name}_tokens_per_s"] = args["new"] / (time.perf_counter() - start)
    if args["device"].startswith("cuda"):
        out["cuda_peak_MB"] = torch.cuda.max_memory_allocated() / 1e6
elif args["what"] == "notebook":
    from pathlib import Path
    folder = Path(args["folder"])
    weights = gpt2_data.Weights("local", folder / "model.safetensors", 0, "")
    state_dict = gpt2_data.read_weights(weights)
    model = ref.load_gpt2(state_dict, n_heads=12)
    del state_dict
    from transformers import GPT2LMHeadModel
    hf = GPT2LMHeadModel.from_pretrained(str(folder)).eval()
    ids = torch.randint(0, 50257, (1, 16))
    with torch.no_grad():
        out["max_logit_difference"] = (model(ids) - hf(ids).logits).abs().max().item()
    del hf
    ref.generate_cached(model, ids, 32, top_k=40)
    text_ids = torch.randint(0, 50257, (1025,))
    out["loss_one_window"] = tr.mean_loss(model, text_ids, 1024)[0]
elif args["what"] == "offline":
    # the notebook's path without internet: transformers' random GPT2LMHeadModel stands in for the file
    stand_in = huggingface.random_gpt2(ref.GPTConfig.gpt2())
    state_dict = stand_in.state_dict()
    model = ref.load_gpt2(state_dict, n_heads=12)
    del state_dict
    ids = torch.randint(0, 50257, (1, 16))
    with torch.no_grad():
        out["max_logit_difference"] = (model(ids) - stand_in(ids).logits).abs().max().item()
    del stand_in
    ref.generate_cached(model, ids, 8, top_k=40)
    out["loss_one_window"] = tr.mean_loss(model, torch.randint(0, 50257, (513,)), 1024, max_tokens=512)[0]
out["peak_rss_MB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
'''


def child(what, args, **extra):
    spec = {"what": what, "threads": args.threads, "new": args.new, "prompt": args.prompt, "device": args.device,
            **extra}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def write_checkpoint(folder):
    """A random GPT-2 small saved as the hub holds it: model.safetensors (no prefix, no lm_head) + config.json."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config()).save_pretrained(folder)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0: PyTorch's default)")
    parser.add_argument("--new", type=int, default=64, help="tokens to generate")
    parser.add_argument("--prompt", type=int, default=16, help="prompt tokens")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--skip-notebook", action="store_true", help="skip the notebook's path (writes 500 MB)")
    args = parser.parse_args()
    start = time.perf_counter()
    rows = {"import only": child("import", args)}
    for dtype in ("float32", "bfloat16"):
        rows[dtype] = child(dtype, args)
    if not args.skip_notebook and args.device == "cpu":
        with tempfile.TemporaryDirectory(prefix="gpt2-bench-") as folder:
            write_checkpoint(folder)
            rows["notebook 12"] = child("notebook", args, folder=folder)
        rows["nb 12 offline"] = child("offline", args)
    print(f"GPT-2 small (124M) in the course's GPT on {args.device}, {rows['float32']['threads']} thread(s); "
          f"prompt {args.prompt} tokens, {args.new} new tokens, greedy")
    print(f"{'':14} {'params (MB)':>11} {'peak RSS (MB)':>14} {'cached tok/s':>13} {'uncached tok/s':>15}")
    for name, row in rows.items():
        params = f"{row['parameter_MB']:,.0f}" if "parameter_MB" in row else ""
        cached = f"{row['cached_tokens_per_s']:.1f}" if "cached_tokens_per_s" in row else ""
        uncached = f"{row['uncached_tokens_per_s']:.1f}" if "uncached_tokens_per_s" in row else ""
        print(f"{name:14} {params:>11} {row['peak_rss_MB']:>14,.0f} {cached:>13} {uncached:>15}")
    for name, path in (("notebook 12", "notebook 12's path"), ("nb 12 offline", "its path offline")):
        if name in rows:
            row = rows[name]
            print(f"{path}: logits within {row['max_logit_difference']:.1e} of transformers'; "
                  f"peak {row['peak_rss_MB']:,.0f} MB of Binder's 2,048 MB")
    if args.device.startswith("cuda"):
        for dtype in ("float32", "bfloat16"):
            print(f"{dtype}: {rows[dtype]['cuda_peak_MB']:,.0f} MB of GPU memory at most")
    print(f"({time.perf_counter() - start:.0f} s; this process: "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB)")


if __name__ == "__main__":
    main()

"""Generation with and without the key/value cache (notebook 09), side by side in one run.

    python benchmarks/kv_cache.py [--max-len 256] [--d-model 64] [--layers 4] [--threads 1] [--device cpu]

Prints the time to produce one new token at several context lengths (the best of 9 runs each), and the
end-to-end time of ``generate`` (a pass over the whole context per token) against ``generate_cached``
(one position per token) for ``max_len - 1`` new tokens. The model is untrained: speed does not depend
on the weights.
"""

import argparse
import time

import torch

from tutor import reference as ref


def best_ms(make, device, repeat=9):
    times = []
    for _ in range(repeat):
        run = make()
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return 1000 * min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (0: PyTorch's default)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    config = ref.ModernConfig(max_len=args.max_len, d_model=args.d_model, n_heads=args.heads, n_layers=args.layers)
    model = ref.ModernGPT(config).to(device).eval()
    ids = torch.randint(1, 27, (1, args.max_len), device=device)
    print(f"ModernGPT d_model={args.d_model}, {args.layers} layers, max_len={args.max_len}, batch 1, {device}, "
          f"{torch.get_num_threads()} CPU thread(s)")
    print(f"{'T':>6s} {'no cache (ms)':>14s} {'cache (ms)':>11s} {'speed-up':>9s}")
    lengths, T = [], 8
    while T < args.max_len:
        lengths.append(T)
        T *= 2
    lengths.append(args.max_len - 1)
    with torch.no_grad():
        for T in lengths:
            without = best_ms(lambda: (lambda: model(ids[:, :T + 1])), device)

            def setup():
                cache = ref.KVCache(config.n_layers)
                model(ids[:, :T], cache=cache)
                return lambda: model(ids[:, T:T + 1], cache=cache)

            cached = best_ms(setup, device)
            print(f"{T:6d} {without:14.2f} {cached:11.2f} {without / cached:8.1f}×")
    prompt = torch.zeros(1, 1, dtype=torch.long, device=device)
    n = args.max_len - 1
    seconds = {}
    for name, fn in [("generate", ref.generate), ("generate_cached", ref.generate_cached)]:
        torch.manual_seed(0)
        start = time.perf_counter()
        fn(model, prompt, n)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds[name] = time.perf_counter() - start
        print(f"{name:16s} {n} tokens in {seconds[name]:7.2f} s ({n / seconds[name]:8.0f} tokens/s)")
    print(f"end-to-end speed-up: {seconds['generate'] / seconds['generate_cached']:.1f}×")


if __name__ == "__main__":
    main()

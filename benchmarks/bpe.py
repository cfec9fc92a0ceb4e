"""Byte-pair encoding: the course's pure-Python reference against the Rust libraries, side by side.

    python benchmarks/bpe.py             # training, encoding, naive vs incremental (a few minutes)
    python benchmarks/bpe.py --quick     # the same on a fifth of the text, the naive trainer on less
    python benchmarks/bpe.py --payoff    # + characters vs BPE at the same compute (~180 s per model)
    python benchmarks/bpe.py --sweep     # + the small tuning sweep behind notebook 11's settings

Prints every figure with its ratio and whether the goal is met:
- reference train_bpe within 1.5x of HuggingFace tokenizers' byte-level BPE trainer at vocabulary
  1024 and within 2x at 4096 (HF with one thread: RAYON_NUM_THREADS=1, as the reference has one);
- reference BPETokenizer.encode at least 1/5 of tiktoken's MB/s, with identical ids;
- the incremental trainer at least 15x faster than the naive one at vocabulary 1024;
- (--payoff) characters <= 2.60 bits per byte and BPE <= 2.45 bits per byte at the same FLOPs.
"""

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # before tokenizers is imported
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
_shared = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"  # the seed copy beside the repository
if _shared.exists():
    os.environ.setdefault("TUTOR_SHAKESPEARE", str(_shared))

from tutor.reference.bpe import GPT2_PATTERN, BPETokenizer, train_bpe, train_bpe_naive
from tutor.train import bpe_vs_chars

EOT = "<|endoftext|>"


def goal(ok: bool) -> str:
    return "met" if ok else "NOT met"


def best_of(fn, repeat):
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def hf_train(text, vocab_size):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text], trainer)
    return tok


def training(text, repeat):
    print("1. Training on tiny Shakespeare (reference: pure Python, incremental; HF tokenizers: Rust, 1 thread)")
    print(f"   {'vocab':>6} {'reference s':>12} {'HF s':>8} {'ratio':>7}  goal")
    for vocab_size, limit in [(1024, 1.5), (4096, 2.0)]:
        ours, _ = best_of(lambda: train_bpe(text, vocab_size, [EOT]), repeat)
        theirs, _ = best_of(lambda: hf_train(text, vocab_size), repeat)
        print(f"   {vocab_size:>6} {ours:12.2f} {theirs:8.2f} {ours / theirs:6.2f}x  within {limit}x: "
              f"{goal(ours <= limit * theirs)}")


def encoding(text, repeat):
    import tiktoken

    vocab, merges = train_bpe(text, 1024, [EOT])
    n_bytes = len(text.encode("utf-8"))
    cold_s, ids = best_of(lambda: BPETokenizer(vocab, merges, [EOT]).encode(text), repeat)  # fresh cache each time
    tok = BPETokenizer(vocab, merges, [EOT])
    tok.encode(text)
    warm_s, _ = best_of(lambda: tok.encode(text), repeat)
    enc = tiktoken.Encoding("reference", pat_str=GPT2_PATTERN, mergeable_ranks=tok.mergeable_ranks(),
                            special_tokens=tok.special_ids)
    tik_s, tik_ids = best_of(lambda: enc.encode_ordinary(text), repeat)
    same = ids == tik_ids
    print(f"\n2. Encoding all of tiny Shakespeare ({n_bytes / 1e6:.2f} MB) with the same {len(merges)} merges, "
          f"vocabulary {len(vocab)}")
    print(f"   reference, empty cache   {n_bytes / cold_s / 1e6:6.2f} MB/s  "
          f"({n_bytes / cold_s / (n_bytes / tik_s):.2f} of tiktoken)")
    print(f"   reference, warm cache    {n_bytes / warm_s / 1e6:6.2f} MB/s  "
          f"({n_bytes / warm_s / (n_bytes / tik_s):.2f} of tiktoken)")
    print(f"   tiktoken                 {n_bytes / tik_s / 1e6:6.2f} MB/s")
    print(f"   identical ids: {same} ({len(ids):,} tokens)")
    print("   goal: at least 1/5 of tiktoken's MB/s with identical ids: "
          f"empty cache {goal(same and tik_s / cold_s >= 0.2)}, "
          f"warm cache {goal(same and tik_s / warm_s >= 0.2)}")


def naive_vs_incremental(text):
    print(f"\n3. Naive (recount every pair after each merge) vs incremental trainer, vocabulary 1024, "
          f"{len(text):,} characters")
    start = time.perf_counter()
    naive = train_bpe_naive(text, 1024)
    naive_s = time.perf_counter() - start
    fast_s, fast = best_of(lambda: train_bpe(text, 1024), 1)
    print(f"   naive {naive_s:.2f} s, incremental {fast_s:.2f} s: {naive_s / fast_s:.1f}x faster; same merges: "
          f"{naive == fast}; goal >= 15x: {goal(naive_s >= 15 * fast_s and naive == fast)}")


def sweep(text):
    """Each setting at a quarter of the payoff budget; the best per tokenizer is what the notebook uses."""
    train_text, val_text = bpe_vs_chars.split(text)
    chars = bpe_vs_chars.characters(train_text, val_text)
    bpes = {v: bpe_vs_chars.bpe(train_text, val_text, v) for v in (512, 1024, 2048)}
    print(f"\n5. Tuning sweep, each run {bpe_vs_chars.PAYOFF_FLOPS / 4:.2g} FLOPs (a quarter of the payoff budget)")
    print(f"   {'tokens':<12} {'block':>5} {'batch':>5} {'lr':>7} {'steps':>6} {'s':>6} {'bits/byte':>9}")
    settings = [(chars, 64, 16, 3e-3), (chars, 128, 16, 3e-3), (chars, 64, 16, 1e-2), (chars, 64, 32, 3e-3),
                (bpes[512], 32, 16, 3e-3), (bpes[1024], 32, 16, 3e-3), (bpes[2048], 32, 16, 3e-3),
                (bpes[1024], 64, 16, 3e-3), (bpes[1024], 32, 16, 1e-2)]
    for tok, block, batch, lr in settings:
        config = bpe_vs_chars.PayoffConfig(block_size=block, batch_size=batch, max_lr=lr, min_lr=lr / 10)
        run = bpe_vs_chars.train(tok, config, bpe_vs_chars.PAYOFF_FLOPS / 4, progress=False)
        print(f"   {tok.name:<12} {block:>5} {batch:>5} {lr:>7.0e} {run.steps:>6} {run.seconds:6.0f} {run.final:9.3f}")


def payoff_run(text):
    train_text, val_text = bpe_vs_chars.split(text)
    chars = bpe_vs_chars.characters(train_text, val_text)
    bpe = bpe_vs_chars.bpe(train_text, val_text, bpe_vs_chars.BPE_VOCAB)
    print(f"\n4. Characters vs BPE at the same compute, {bpe_vs_chars.PAYOFF_FLOPS:.2g} training FLOPs each "
          f"(flops_per_token x tokens), validation in bits per byte")
    results = {}
    for tok, config, limit in [(chars, bpe_vs_chars.CHAR_CONFIG, 2.60), (bpe, bpe_vs_chars.BPE_CONFIG, 2.45)]:
        run = bpe_vs_chars.train(tok, config, bpe_vs_chars.PAYOFF_FLOPS, progress=False)
        results[tok.name] = run
        print(f"   {tok.describe()}")
        print(f"      block {config.block_size}, batch {config.batch_size}, lr {config.max_lr:g}: {run.steps} steps "
              f"in {run.seconds:.0f} s, {run.bytes_seen[-1] / 1e6:.2f} MB seen, "
              f"{run.final:.3f} bits per byte; goal <= {limit}: {goal(run.final <= limit)}")
    for name, run in results.items():
        sample = bpe_vs_chars.sample(run, n_bytes=200)
        print(f"\n   sample ({name}):\n" + "\n".join("      " + line for line in sample.splitlines()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="a fifth of the text, the naive trainer on 100k characters")
    parser.add_argument("--payoff", action="store_true", help="also train characters vs BPE (about 6 minutes)")
    parser.add_argument("--sweep", action="store_true", help="also run the tuning sweep (about 7 minutes)")
    parser.add_argument("--skip-tokenizers", action="store_true", help="only the training runs")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    import torch

    text = bpe_vs_chars.load_text(verbose=True)  # says where the text came from
    if args.quick:
        text = text[:len(text) // 5]
    print(f"tiny Shakespeare, {len(text):,} characters; torch {torch.__version__}; {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.1f} (figures from a busy machine are slower, ratios less so)\n")
    if not args.skip_tokenizers:
        training(text, args.repeat)
        encoding(text, args.repeat)
        naive_vs_incremental(text[:100_000] if args.quick else text)
    if args.payoff:
        payoff_run(text)
    if args.sweep:
        sweep(text)


if __name__ == "__main__":
    main()

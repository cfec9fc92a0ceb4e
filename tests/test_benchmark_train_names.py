"""A smoke test of benchmarks/train_names.py: a few steps of each run, and the table, goal line and speed
lines it prints. (The benchmark itself, with the real number of steps, is run by hand: see docs/benchmarks.md.)"""

import torch
from benchkit import load_benchmark


def test_train_names_benchmark_prints_the_preset_next_to_the_old_one(capsys):
    threads = torch.get_num_threads()
    try:
        arguments = ["--steps", "12", "--seeds", "2", "--rounds", "1", "--sortish", "--ablate", "--candidate"]
        assert load_benchmark("train_names").main(arguments) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "preset: d_model=64, 2 layers" in out and "old preset: d_model=64, 4 layers" in out
    header = next(line for line in out.splitlines() if "preset (mean of 2)" in line)
    assert "old preset (seed 0)" in header and "preset, sortish (seed 0)" in header
    assert "candidate (mean of 2)" in header
    candidate = next(line for line in out.splitlines() if line.startswith("candidate: "))
    assert "d_model=96, 2 layers" in candidate
    assert candidate.endswith("hand-written attention, 4 Newton-Schulz iterations")
    seeds = [line.split(":")[0].strip() for line in out.splitlines() if ", seed " in line and " in " in line]
    assert seeds[:4] == ["preset, seed 0", "candidate, seed 0", "preset, seed 1", "candidate, seed 1"]  # in turn
    for ablation in ("preset, padded batches (seed 0)", "preset, AdamW alone (seed 0)", "padded AdamW preset (seed 0)"):
        assert ablation in header
    assert "batch 256 (packed rows)" in out and "Muon + AdamW" in out
    params = next(line for line in out.splitlines() if line.startswith("parameters"))
    assert "104,192" in params and "203,648" in params
    for row in ("training wall time (s)", "tokens per second", "CPU threads", "excluding the 1st letter"):
        assert row in out
    assert "preset against the old preset:" in out
    goal = next(line for line in out.splitlines() if line.startswith("goal (CPU)"))
    assert "<= 1.8 excluding the first letter within 120 s, mean of 2" in goal
    shortened = "NOT met (a --quick or --steps run: shorter than the configuration)"  # 12 steps never meet it
    assert goal.endswith(shortened)
    for who in ("the preset", "the candidate"):
        line = next(line for line in out.splitlines() if line.startswith(f"next goal (CPU), {who}:"))
        assert "<= 1.77 excluding the first letter within 120 s, mean of 2" in line and line.endswith(shortened)
    assert "padded / sortish" in out and "padded / packed" in out and "whole runs: sortish" in out
    assert "F.scaled_dot_product_attention + F.layer_norm" in out


def test_the_old_presets_the_benchmark_compares_against_are_kept_there():
    module = load_benchmark("train_names")
    old = module.OLD_CPU_CONFIG
    assert (old.d_model, old.n_layers, old.n_heads, old.batch_size, old.steps, old.max_lr, old.cpu_threads) == \
        (64, 4, 4, 128, 2200, 8e-3, 1)
    candidate = module.CANDIDATE_CPU_CONFIG
    assert (candidate.d_model, candidate.n_layers, candidate.batch_size, candidate.steps) == (96, 2, 512, 1500)
    assert (candidate.max_lr, candidate.min_lr, candidate.weight_decay) == (2.5e-2, 9e-5, 0.2)
    assert (candidate.muon_ns_steps, candidate.fused_attention) == (4, False)  # the cheaper step
    assert (candidate.packed, candidate.optimizer, candidate.eval_every) == (True, "muon", 250)  # as the preset
    padded = module.PADDED_CPU_CONFIG
    assert (padded.n_layers, padded.batch_size, padded.steps, padded.packed, padded.optimizer) == \
        (2, 128, 5800, False, "adamw")
    from tutor import train

    assert not hasattr(train, "OLD_CPU_CONFIG") and not hasattr(train, "PADDED_CPU_CONFIG")  # not the course's

"""benchmarks/gpu_report.py in its CPU mode (--tiny): every section runs and the report is written, so that the
first run on a GPU meets no Python error in the code the two modes share. Its figures mean nothing here."""

import json
import sys

import pytest
import torch
from benchkit import ROOT, load_benchmark


@pytest.mark.usefixtures("one_thread")
def test_every_section_runs_in_tiny_mode_and_the_report_is_written(tmp_path):
    threads = torch.get_num_threads()
    try:
        code = load_benchmark("gpu_report").main(["--tiny", "--device", "cpu", "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    report = json.loads((tmp_path / "report.json").read_text())
    errors = {name: section["error"] for name, section in report.items()
              if isinstance(section, dict) and "error" in section}
    assert not errors and code == 0, errors
    assert report["shakespeare"]["steps"] == 6 and report["shakespeare"]["reached_at_step"] is not None
    assert report["names"]["steps"] == 10 and report["names"]["val_excluding_first"] > 0
    assert 0 < report["names"]["loader_ms_per_batch"] < report["names"]["ms_per_step_overall"] * 100
    assert report["torchrun"]["backend"] == "Gloo" and any("step 4/4" in line for line in report["torchrun"]["log"])
    assert report["generation"]["modern_speedup"] > 0
    assert report["generation"]["gpt2_static_tokens_equal"] is True  # compiled, fixed-size cache: the same tokens
    assert report["finetune"]["merged_logit_difference"] < 1e-4 and 0 <= report["finetune"]["asked_length"] <= 1
    for stand_in in ("t4", "names_fp16"):  # the T4's path: float16 with loss scaling, forced
        assert report[stand_in]["precision"].startswith("float16 autocast with loss scaling")
    assert report["t4"]["steps"] == 6 and report["t4"]["ms_per_step"] > 0 and report["t4"]["preset_tflop"] > 0
    assert report["names_fp16"]["val_excluding_first"] > 0
    if (ROOT.parent / "shared" / "anchors" / "nanoGPT" / "train.py").exists():
        assert report["nanogpt"]["final_val"] is not None and report["nanogpt"]["iterations"] == 5
        assert report["versus_nanogpt"]["common_loss"] == max(report["shakespeare"]["best_val"],
                                                              report["nanogpt"]["best_val"])
    else:
        assert "quoted" in report["nanogpt"]["quoted"]
    table = (tmp_path / "report.md").read_text()
    assert table.startswith("GPU report: CPU") and "(--tiny: the figures mean nothing)" in table
    assert "| shakespeare | reached_after_s |" in table and "| torchrun | backend | Gloo |" in table
    assert "| shakespeare | best_val |" in table and "val_points" not in table  # the points are in the JSON only
    assert len(report["shakespeare"]["val_points"]) == 3 and report["shakespeare"]["ms_per_step"] > 0


def test_a_failing_section_is_written_and_the_report_goes_on(tmp_path, monkeypatch):
    module = load_benchmark("gpu_report")

    def broken(device, tiny):
        raise RuntimeError("out of memory, say")

    monkeypatch.setattr(module, "SECTIONS", [("device", module.device_section), ("names", broken)])
    assert module.main(["--tiny", "--device", "cpu", "--out", str(tmp_path)]) == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["names"]["error"] == "RuntimeError: out of memory, say" and "matmul_fp32_tflops" in report["device"]
    assert "| names | error | RuntimeError: out of memory, say |" in (tmp_path / "report.md").read_text()


def nanogpt_log():
    """A made-up nanoGPT log (--log_interval=1): evaluations at steps 0, 10 and 20; iteration 0 takes 0.5 s (its
    compile), iteration 10 0.3 s (its evaluation), every other 10 ms."""
    lines, wall = [], 0.0
    for step in range(21):
        if step % 10 == 0:
            wall += 0.2
            lines.append((wall, f"step {step}: train loss 2.0000, val loss {[4.2, 2.1, 1.9][step // 10]:.4f}"))
        if step == 20:
            break
        dt = 500.0 if step == 0 else 300.0 if step == 10 else 10.0
        wall += dt / 1000
        lines.append((wall, f"iter {step}: loss 2.0000, time {dt:.2f}ms, mfu -100.00%"))
    return lines


def test_nanogpts_training_clock_leaves_its_evaluations_out_and_keeps_its_compile():
    points, median = load_benchmark("gpu_report").nanogpt_points(nanogpt_log())
    assert median == pytest.approx(0.010)
    assert [(step, val) for step, val, _, _ in points] == [(0, 4.2), (10, 2.1), (20, 1.9)]
    # step 10: iteration 0 (0.5 s, its compile kept) + 9 of 10 ms; step 20: + iteration 10 at the median + 9 more
    assert [training for *_, training in points] == pytest.approx([0.0, 0.59, 0.69])
    walls = [wall for _, _, wall, _ in points]
    assert walls[1] == pytest.approx(0.2 + 0.5 + 0.09 + 0.2) and walls == sorted(walls)


def test_the_comparison_uses_the_common_loss_when_the_target_was_not_reached():
    module = load_benchmark("gpu_report")
    ours = module.trajectory_figures([(100, 2.0, 10.0, 8.0), (200, 1.6, 20.0, 16.0), (300, 1.8, 30.0, 24.0)], 1.47)
    theirs = module.trajectory_figures([(0, 4.2, 5.0, 0.0), (250, 1.7, 40.0, 30.0), (500, 1.5, 80.0, 60.0)], 1.47)
    assert ours["reached_at_step"] is None and (ours["best_val"], ours["best_at_step"]) == (1.6, 200)
    row = module.versus_nanogpt({"shakespeare": ours, "nanogpt": theirs})
    assert "ratio_wall" not in row and row["common_loss"] == 1.6  # the worse of the two best losses
    assert (row["course_wall_s"], row["nanogpt_wall_s"]) == (20.0, 80.0) and row["ratio_wall_at_common"] == 0.25
    assert row["ratio_training_at_common"] == pytest.approx(16.0 / 60.0)
    ours_reached = module.trajectory_figures([(100, 1.4, 10.0, 8.0)], 1.47)
    theirs_reached = module.trajectory_figures([(250, 1.46, 40.0, 32.0)], 1.47)
    row = module.versus_nanogpt({"shakespeare": ours_reached, "nanogpt": theirs_reached})
    assert row["ratio_wall"] == 0.25 and row["ratio_training"] == 0.25 and row["common_loss"] == 1.46
    assert module.versus_nanogpt({"shakespeare": ours, "nanogpt": {"quoted": "3 minutes"}}) is None


def test_a_subprocess_that_fails_or_hangs_is_an_error_with_its_output():
    module = load_benchmark("gpu_report")
    with pytest.raises(RuntimeError, match=r"failed \(3\):\nsaid this"):
        module.run_streaming([sys.executable, "-c", "print('said this'); raise SystemExit(3)"], cwd=None, timeout=60)
    with pytest.raises(RuntimeError, match="killed after 1 s"):
        module.run_streaming([sys.executable, "-c", "import time; time.sleep(30)"], cwd=None, timeout=1)
    lines = module.run_streaming([sys.executable, "-c", "print('a'); print('b')"], cwd=None, timeout=60)
    assert [line for _, line in lines] == ["a", "b"] and lines[0][0] <= lines[1][0]


def test_the_steady_step_time_leaves_the_compile_before_the_first_evaluation_out():
    module = load_benchmark("gpu_report")
    # (step, val, wall, training): 100 steps with the compile in 9 s, then 100 steps in 2 s, 3 s (a slow stretch), 2 s
    points = [(100, 2.0, 10.0, 9.0), (200, 1.9, 12.5, 11.0), (300, 1.8, 15.5, 14.0), (400, 1.7, 17.5, 16.0)]
    assert module.steady_step_seconds(points) == pytest.approx(0.02)
    assert module.steady_step_seconds(points[:1]) is None

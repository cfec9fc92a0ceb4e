"""benchmarks/gpu_report.py in its CPU mode (--tiny): every section runs and the report is written, so that the
first run on a GPU meets no Python error in the code the two modes share. Its figures mean nothing here."""

import json

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
    assert report["torchrun"]["backend"] == "Gloo" and any("step 4/4" in line for line in report["torchrun"]["log"])
    assert report["generation"]["modern_speedup"] > 0
    if (ROOT.parent / "shared" / "anchors" / "nanoGPT" / "train.py").exists():
        assert report["nanogpt"]["final_val"] is not None
    else:
        assert "quoted" in report["nanogpt"]["quoted"]
    table = (tmp_path / "report.md").read_text()
    assert table.startswith("GPU report: CPU") and "(--tiny: the figures mean nothing)" in table
    assert "| shakespeare | reached_after_s |" in table and "| torchrun | backend | Gloo |" in table


def test_a_failing_section_is_written_and_the_report_goes_on(tmp_path, monkeypatch):
    module = load_benchmark("gpu_report")

    def broken(device, tiny):
        raise RuntimeError("out of memory, say")

    monkeypatch.setattr(module, "SECTIONS", [("device", module.device_section), ("names", broken)])
    assert module.main(["--tiny", "--device", "cpu", "--out", str(tmp_path)]) == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["names"]["error"] == "RuntimeError: out of memory, say" and "matmul_fp32_tflops" in report["device"]
    assert "| names | error | RuntimeError: out of memory, say |" in (tmp_path / "report.md").read_text()

"""MFU divides by a measured peak: a CPU's matrix products timed once and cached, N processes' peak for N."""

import json

import pytest
import torch

from tutor.train import metrics


@pytest.fixture
def fake_matmul(monkeypatch, tmp_path):
    """No timing: each measurement returns the next figure, and the cache lives in tmp_path."""
    monkeypatch.setenv("TUTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(metrics, "_MEASURED", {})
    calls = []

    def measure(device="cpu", dtype=torch.float32, size=metrics.MATMUL_SIZE, seconds=0.25):
        calls.append((str(dtype), size))
        return 50e9 if size == metrics.MATMUL_SIZE else 60e9  # the best of the sizes is the peak

    monkeypatch.setattr(metrics, "measure_matmul_flops", measure)
    return calls


def test_the_cpu_peak_is_measured_once_then_read_from_the_cache(fake_matmul, tmp_path, monkeypatch):
    assert metrics.cpu_peak_flops(torch.float32, 2) == 60e9
    assert len(fake_matmul) == 2
    cached = json.loads((tmp_path / "cpu-peak.json").read_text())
    assert list(cached.values()) == [60e9] and "| float32 | 2" in next(iter(cached))
    monkeypatch.setattr(metrics, "_MEASURED", {})  # a new process: read from the file
    assert metrics.cpu_peak_flops(torch.float32, 2) == 60e9 and len(fake_matmul) == 2
    metrics.cpu_peak_flops(torch.bfloat16, 2)  # another precision: measured
    metrics.cpu_peak_flops(torch.float32, 2, refresh=True)  # measured again when asked
    assert len(fake_matmul) == 6


def test_peak_flops_of_several_processes_and_its_note(fake_matmul):
    one, note = metrics.peak_flops("cpu", dtype=torch.bfloat16)
    four, note4 = metrics.peak_flops("cpu", dtype=torch.bfloat16, processes=4)
    assert four == 4 * one and "measured" in note and "bfloat16" in note and note4.startswith("4 processes x ")
    given, note = metrics.peak_flops("cpu", 2.0, processes=2)
    assert given == 4e12 and "--peak-tflops" in note


def test_the_measurement_is_a_real_matmul_rate():
    flops = metrics.measure_matmul_flops("cpu", torch.float32, size=128, seconds=0.01)
    assert 1e8 < flops < 1e14


def test_cpu_flags_are_a_subset_of_what_matters():
    assert metrics.cpu_flags() <= {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}
    assert metrics.cpu_has_fast_bf16() == bool({"avx512_bf16", "amx_bf16"} & metrics.cpu_flags())

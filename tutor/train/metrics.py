"""How well a run uses the hardware: the peak FLOP/s of a device and the model FLOPs utilisation (MFU).

On a GPU the peak comes from the vendor's table (dense bf16 tensor cores), and a measured matrix product is
printed beside it. On a CPU nothing is assumed: the peak is measured, a few large matrix products timed in
float32 (and in bfloat16 where the CPU has AMX or AVX512-BF16), once per CPU, thread count and PyTorch version,
and cached. ``--peak-tflops`` overrides either.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import torch

from tutor.data.sources import cache_dir
from tutor.files import write_atomically

# Peak dense bf16 tensor-core FLOP/s (no sparsity), from the vendors' data sheets.
PEAK_TFLOPS = {
    "H200": 989.0, "H100": 989.0,  # SXM; the PCIe H100 is 756
    "A100": 312.0, "A10G": 125.0, "A10": 125.0, "L40S": 362.0, "L4": 121.0,
    "RTX 4090": 165.0, "RTX 3090": 71.0, "V100": 125.0, "T4": 65.0,
}
MATMUL_SIZE = 1024  # the side of the square matrices timed on a CPU (large enough to reach the peak, small
# enough to time in a fraction of a second on a laptop core)
_MEASURED: dict[str, float] = {}  # this process's measurements, by key


def cpu_flags() -> set[str]:
    """The CPU's feature flags that matter for matrix products (Linux: from /proc/cpuinfo; elsewhere empty)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            wanted = {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}
            return wanted & set(line.split(":", 1)[1].split())
    return set()


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_has_fast_bf16() -> bool:
    """True where bfloat16 matrix products run in hardware (AMX or AVX512-BF16): there, bf16 autocast speeds a
    CPU run up; elsewhere it is emulated and slower than float32."""
    return bool({"amx_bf16", "avx512_bf16"} & cpu_flags())


def _cache_file() -> Path:
    return cache_dir() / "cpu-peak.json"  # the course's one cache folder


def measure_matmul_flops(device="cpu", dtype=torch.float32, size: int = MATMUL_SIZE, seconds: float = 0.25) -> float:
    """FLOP/s of the fastest of repeated ``size x size`` matrix products in ``dtype`` on ``device``."""
    device = torch.device(device)
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(2):  # warm up: the first products allocate and pick kernels
        a @ b
    sync()
    best, start = float("inf"), time.perf_counter()
    while time.perf_counter() - start < seconds or best == float("inf"):
        t = time.perf_counter()
        for _ in range(4):
            a @ b
        sync()
        best = min(best, (time.perf_counter() - t) / 4)
    return 2 * size**3 / best


def cpu_peak_flops(dtype=torch.float32, threads: int | None = None, *, refresh: bool = False) -> float:
    """This CPU's measured peak FLOP/s for ``dtype`` with ``threads`` threads (default: the current count):
    timed once, then read from the cache (``refresh=True`` measures again)."""
    threads = threads or torch.get_num_threads()
    key = f"{cpu_name()} | torch {torch.__version__.split('+')[0]} | {str(dtype).removeprefix('torch.')} | {threads}"
    if not refresh and key in _MEASURED:
        return _MEASURED[key]
    path = _cache_file()
    cached = {}
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    if not refresh and isinstance(cached.get(key), (int, float)):
        _MEASURED[key] = float(cached[key])
        return _MEASURED[key]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:  # the best of two sizes: a small one stays in the caches, a larger one amortises the call
        flops = max(measure_matmul_flops("cpu", dtype, size=size) for size in (MATMUL_SIZE // 2, MATMUL_SIZE))
    finally:
        torch.set_num_threads(before)
    _MEASURED[key] = flops
    cached[key] = flops
    try:
        write_atomically(path, json.dumps(cached, indent=1).encode())
    except OSError:
        pass  # a read-only cache only means measuring again next time
    return flops


def peak_flops(device, override_tflops=None, *, dtype=torch.float32, processes: int = 1,
               refresh: bool = False) -> tuple[float, str]:
    """``(peak FLOP/s of all processes together, where the figure comes from)`` for ``device``.

    ``dtype`` is the precision the matrix products run in (``torch.bfloat16`` under bf16 autocast); with
    ``processes`` processes (data parallel), the peak is that many times one process's. ``refresh=True`` measures
    a CPU again (a peak measured while other programs kept the cores busy is too low: an MFU above 100% says so).
    """
    many = f"{processes} processes x " if processes > 1 else ""
    if override_tflops:
        return override_tflops * 1e12 * processes, f"{many}{override_tflops:g} TFLOP/s given with --peak-tflops"
    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        # the table's figures are the dense half-precision tensor-core peak (bfloat16 from capability 8.0; float16 on
        # the V100 and T4, which have no bfloat16 in hardware): measure in the half type the run uses
        half = dtype if dtype in (torch.bfloat16, torch.float16) else (
            torch.bfloat16 if torch.cuda.get_device_capability(device) >= (8, 0) else torch.float16)
        kind = "bf16" if half == torch.bfloat16 else "fp16"
        measured = measure_matmul_flops(device, half, size=8192, seconds=0.5)
        beside = f"; a {kind} matmul measured here: {measured / 1e12:.0f} TFLOP/s"
        if "H100" in name and "PCIe" in name:
            return 756e12 * processes, f"{many}{name} (table, half-precision dense: 756 TFLOP/s{beside})"
        for key, tflops in PEAK_TFLOPS.items():
            if key in name:
                return tflops * 1e12 * processes, (f"{many}{name} (table, half-precision dense: {tflops:g} "
                                                   f"TFLOP/s{beside})")
        return measured * processes, (f"{many}{name}: not in the table, the measured {kind} matmul "
                                      f"({measured / 1e12:.0f} TFLOP/s)")
    threads = torch.get_num_threads()
    peak = cpu_peak_flops(dtype, threads, refresh=refresh)
    kind = str(dtype).removeprefix("torch.")
    return peak * processes, (f"{many}CPU, {threads} thread(s), {peak / 1e9:,.0f} GFLOP/s measured "
                              f"({kind} matmul)")


def mfu(tokens_per_second: float, flops_per_token: int, peak: float) -> float:
    """Model FLOPs utilisation: the fraction of the hardware's peak that the model's FLOPs use."""
    return tokens_per_second * flops_per_token / peak


def parameter_bytes(model) -> int:
    """The bytes of ``model``'s parameters (a tied matrix counted once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())

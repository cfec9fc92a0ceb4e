"""How well a run uses the hardware: the peak FLOP/s of a device and the model FLOPs utilisation (MFU)."""

import torch

# Peak dense bf16 tensor-core FLOP/s (no sparsity), from the vendors' data sheets; a CPU's peak
# depends on its cores and vector units, so it is an assumption (override with --peak-tflops).
PEAK_TFLOPS = {
    "H200": 989.0, "H100": 989.0,  # SXM; the PCIe H100 is 756
    "A100": 312.0, "A10G": 125.0, "A10": 125.0, "L40S": 362.0, "L4": 121.0,
    "RTX 4090": 165.0, "RTX 3090": 71.0, "V100": 125.0, "T4": 65.0,
}
CPU_PEAK_TFLOPS_PER_CORE = 0.1  # about 3 GHz x 2 FMA units x 8 float32 lanes x 2: an AVX2 core's float32 peak


def peak_flops(device, override_tflops=None) -> tuple[float, str]:
    """``(peak FLOP/s, where the figure comes from)`` for ``device``."""
    if override_tflops:
        return override_tflops * 1e12, "given with --peak-tflops"
    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        if "H100" in name and "PCIe" in name:
            return 756e12, f"{name} (table, bf16 dense)"
        for key, tflops in PEAK_TFLOPS.items():
            if key in name:
                return tflops * 1e12, f"{name} (table, bf16 dense)"
        return 100e12, f"{name}: not in the table, assuming 100 TFLOP/s (use --peak-tflops)"
    cores = torch.get_num_threads()
    return (CPU_PEAK_TFLOPS_PER_CORE * cores * 1e12,
            f"CPU, {cores} thread(s) x {CPU_PEAK_TFLOPS_PER_CORE * 1000:g} GFLOP/s assumed (float32 AVX2 peak)")


def mfu(tokens_per_second: float, flops_per_token: int, peak: float) -> float:
    """Model FLOPs utilisation: the fraction of the hardware's peak that the model's FLOPs use."""
    return tokens_per_second * flops_per_token / peak

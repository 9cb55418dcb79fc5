"""The published numbers of the GPUs mgg models, written once: the H100 SXM5 and the H200 (both GH100,
sm_90). The tuner's resource model (limits.py: DeviceLimits' defaults), the kernel model
(kernel_model.py), the remote-read choice (remote_reads.py) and bench/ read them from here; on a GPU,
DeviceLimits.of asks the device itself. The emulator's stand-in device (csrc/tests/simt/simt.h) is
this H100 on the C++ side; the kernels' own limits are csrc/core/limits.h's (through mgg._C)."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class GpuSpec:
    name: str
    sms: int
    boost_clock_hz: float
    hbm_bytes_per_s: float  # the datasheet's peak
    nvlink_bytes_per_s: float  # NVLink 4: 900 GB/s both ways per GPU, one direction's
    l2_bytes: int
    smem_per_block: int  # without the opt-in
    smem_per_block_optin: int  # cudaDevAttrMaxSharedMemoryPerBlockOptin
    smem_per_sm: int
    regs_per_sm: int  # 32-bit registers in an SM's register file
    max_threads_per_block: int
    max_warps_per_sm: int
    max_blocks_per_sm: int


# CUDA programming guide (compute capability 9.0) and NVIDIA's H100 datasheet (SXM5)
H100_SXM = GpuSpec(
    name="NVIDIA H100 SXM",
    sms=132,
    boost_clock_hz=1.98e9,
    hbm_bytes_per_s=3.35e12,
    nvlink_bytes_per_s=450e9,
    l2_bytes=50 * 2**20,
    smem_per_block=48 * 1024,
    smem_per_block_optin=227 * 1024,
    smem_per_sm=228 * 1024,
    regs_per_sm=64 * 1024,
    max_threads_per_block=1024,
    max_warps_per_sm=64,
    max_blocks_per_sm=32,
)
# the same die, clocks, L2 and NVLink; HBM3e at 4.8 TB/s (NVIDIA's H200 datasheet)
H200 = replace(H100_SXM, name="NVIDIA H200", hbm_bytes_per_s=4.8e12)

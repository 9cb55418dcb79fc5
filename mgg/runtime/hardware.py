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


# -- published measurements of GH100: the kernel model's band (kernel_model.band) ----------------
# NVIDIA publishes no L2 bandwidth for GH100 and no HBM efficiency for random row gathers; the
# model's optimistic end takes the A100 whitepaper's L2 rate and the sequential copy rate for every
# gather, its pessimistic end the lowest of what others measured, each named here with its source.


@dataclass(frozen=True)
class Measurement:
    """A published figure: its value, what was measured, and where it was published."""

    value: float
    what: str
    source: str


_CHIPS_AND_CHEESE = 'C. Lam, "Nvidia\'s H100: Funny L2, and Tons of Bandwidth", Chips and Cheese, 2023-07-02'
_GPU_BENCHES = "D. Ernst (RRZE), gpu-benches, github.com/RRZE-HPC/gpu-benches"

# L2 -> SM read bandwidth for hits (bytes/s)
A100_L2_BYTES_PER_CLOCK = 5120  # NVIDIA A100 whitepaper (80 slices x 64 B/clk): the model's optimistic end
L2_READ_MEASURED = (
    Measurement(3.8e12, "H100 PCIe, a working set over the whole 50 MB L2 (both partitions)", _CHIPS_AND_CHEESE),
    Measurement(5.5e12, "H100 PCIe, a working set in the near L2 partition", _CHIPS_AND_CHEESE),
    Measurement(
        6.65e12,
        "H100, within a partition (XLA's GEMM cost model constant)",
        "openxla/xla, xla/service/gpu/model/gpu_dot_fusion_cost_model.cc",
    ),
    Measurement(6.85e12, "H100 PCIe, 20-37 MB working sets", f"{_GPU_BENCHES}, gpu-l2-cache/h100_pcie.txt"),
    Measurement(
        7.85e12,
        "H800 PCIe, 4,472 B/clk at 1.755 GHz, 1.1 MB working set (as quoted)",
        "W. Luo et al., Dissecting the NVIDIA Hopper Architecture through Microbenchmarking, arXiv:2501.12084, Table 5",
    ),
    Measurement(9.67e12, "H200, 40 MB working set", f"{_GPU_BENCHES}, gpu-l2-cache/h200.txt"),
)

# HBM efficiency of random gathers: bytes moved per second over the datasheet peak, by granule
GATHER_EFFICIENCY_MEASURED = (
    Measurement(
        0.31,
        "32 B: H100 SXM random 8-byte reads at 256 GB/s of useful data (GUPS), one 32 B sector each "
        "(the sector count is mgg's reading)",
        "NVIDIA Technical Blog, Maximizing Performance with Massively Parallel Hash Maps on GPUs, 2023, Table 1",
    ),
    Measurement(
        0.69,
        "256 B: A100 SXM4-80GB random warp reads at 1.4 TB/s (no GH100 figure is published)",
        "A. Walker, Enabling full-speed random access to the entire memory on the A100 GPU, arXiv:2405.11425",
    ),
    Measurement(0.78, "512 B: A100 SXM4-80GB random warp reads at 1.6 TB/s", "A. Walker, arXiv:2405.11425"),
    Measurement(0.79, ">= 1 KB: H100 SXM gather_along_first_dim at 2,646 GB/s", "pytorch/FBGEMM pull request 3993"),
)
GATHER_GRANULES = (32, 256, 512, 1024)  # the bytes each of GATHER_EFFICIENCY_MEASURED is for

# L2 capacity a gathered row can count on: GH100's L2 is two 25 MB partitions, and a line that SMs
# on both sides read is replicated in both while the data fits one section (Ernst: beyond it "data
# cannot be replicated in both L2 cache sections"), so rows every SM reads may see 25 MB, not 50
L2_NEAR_PARTITION = Measurement(
    25 * 2**20,
    "one of GH100's two L2 partitions: the latency step at 20-26 MB",
    f"{_GPU_BENCHES} (README, gpu-latency/h100_pcie.txt); {_CHIPS_AND_CHEESE}",
)

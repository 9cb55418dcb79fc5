"""MGG's resource model (§6) as mgg's range kernel has it, and the device limits that prune the
config space.

    WPW       = ps · dist · D              work per warp (items of its range, times the columns)
    numWarps  = ceil(items / (ps · dist))  items: the step's edges and rows (csrc/core/schedule.h)
    numBlocks = ceil(numWarps / wpb)

MGG's eq. 1 (shared memory of 2 · wpb partial rows and the neighbor ids) has no counterpart: the
range kernel sums in registers and keeps, per warp, the ends of 32 rows and, for remote rows
fetched into shared memory, two landing chunks of ps rows. What a block really needs comes from
the launcher's own model (mgg._C.launch_shape, csrc/core/launch_shape.h), so pruning uses the
kernel's numbers.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional

from .. import _C
from ..plan import DIST_RANGE, PS_RANGE, WPB_RANGE, Config
from .hardware import H100_SXM


def _powers(lo: int, hi: int) -> tuple:
    return tuple(1 << i for i in range(lo.bit_length() - 1, hi.bit_length()) if lo <= 1 << i <= hi)


PS_STEPS = _powers(*PS_RANGE)  # MGG's search lattice: powers of two within the launcher's ranges
DIST_STEPS = _powers(*DIST_RANGE)
WPB_STEPS = _powers(*WPB_RANGE)
REG_ALLOC_UNIT = 256  # registers are allocated to a warp in units of 256 (sm_50 and later)


@dataclass(frozen=True)
class DeviceLimits:
    name: str = "cpu"
    sm_count: int = 1
    # an H100's per-SM and per-block limits (hardware.py) unless the device says otherwise
    smem_per_block: int = H100_SXM.smem_per_block  # without opt-in
    smem_per_block_optin: int = H100_SXM.smem_per_block_optin
    smem_per_sm: int = H100_SXM.smem_per_sm
    max_threads_per_block: int = H100_SXM.max_threads_per_block
    max_warps_per_sm: int = H100_SXM.max_warps_per_sm
    max_blocks_per_sm: int = H100_SXM.max_blocks_per_sm
    static_smem: int = 1024  # the kernels' own static shared memory (the block-get kernel's table)
    regs_per_sm: int = H100_SXM.regs_per_sm  # 32-bit registers in an SM's register file
    # registers per thread of the aggregation kernel (None: the most its __launch_bounds__ allow,
    # regs_per_sm over the widest block a config asks for; ptxas gives the fused NVSHMEM-get
    # kernels exactly that on sm_90 today: bench/resources.py)
    kernel_regs: Optional[int] = None
    # warps at which an SM's throughput stops growing (None: half its warp slots); the CPU
    # executor walks blocks one after another, so one
    saturating_warps: Optional[int] = None

    @property
    def warps_to_saturate(self) -> int:
        """Warps per SM at which the SM's throughput stops growing (the cost model's W_sat)."""
        return self.saturating_warps or max(1, self.max_warps_per_sm // 2)

    @property
    def regs_per_thread(self) -> int:
        """The aggregation kernel's registers per thread (kernel_regs, or its launch-bounds cap)."""
        return self.kernel_regs or self.regs_per_sm // (WPB_RANGE[1] * _C.limits["warp"])

    def blocks_by_registers(self, wpb: int) -> int:
        """Blocks of wpb warps whose registers fit an SM's register file at once (registers are
        allocated per warp in units of REG_ALLOC_UNIT)."""
        per_warp = -(-self.regs_per_thread * _C.limits["warp"] // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
        return self.regs_per_sm // (per_warp * wpb)

    @staticmethod
    def of(device) -> "DeviceLimits":
        """The limits of `device` (a CPU gets the defaults, an H100's numbers, and one warp
        saturates it: the CPU executor's time is its total work)."""
        import torch

        device = torch.device(device)
        if device.type != "cuda":
            return DeviceLimits(saturating_warps=1)
        p = torch.cuda.get_device_properties(device)
        h = H100_SXM  # for what this torch does not report
        optin = getattr(p, "shared_memory_per_block_optin", h.smem_per_block_optin)
        return DeviceLimits(
            name=p.name,
            sm_count=p.multi_processor_count,
            smem_per_block=getattr(p, "shared_memory_per_block", h.smem_per_block),
            smem_per_block_optin=optin,
            smem_per_sm=getattr(p, "shared_memory_per_multiprocessor", optin),
            max_threads_per_block=getattr(p, "max_threads_per_block", h.max_threads_per_block),
            max_warps_per_sm=getattr(p, "max_threads_per_multi_processor", h.max_warps_per_sm * 32) // 32,
            max_blocks_per_sm=getattr(p, "max_blocks_per_multi_processor", h.max_blocks_per_sm),
            regs_per_sm=getattr(p, "regs_per_multiprocessor", h.regs_per_sm),
        )


def num_warps(config: Config, rows: int, edges: int) -> int:
    """Warps of a step of `rows` rows and `edges` edges (both parts) under config: ceil(items /
    (ps · dist)), items being its edges and rows; with ps = 0 (whole rows), ceil(rows / dist)."""
    if config.ps == 0:
        return -(-rows // config.dist)
    return -(-(rows + edges) // (config.ps * config.dist))


def resources(
    config: Config,
    dim: int,
    rows: int = 0,
    edges: int = 0,
    get: bool = False,
    elem: int = 4,
    limits: DeviceLimits = DeviceLimits(),
) -> dict:
    """The model quantities of a config, and the kernel's real launch shape.

    Args:
        config: (ps, dist, wpb).
        dim: feature width D.
        rows, edges: the step's rows and edges (for the warp counts).
        get: the remote rows arrive in shared memory (NVSHMEM gets or copies: landing buffers).
        elem: bytes of the storage type.
        limits: the device.

    Returns:
        dict with wpw, num_warps, num_blocks, threads, and the launcher's tile, smem_kernel
        (dynamic shared memory per block) for this device.
    """
    ps, dist, wpb = config.as_tuple()
    warps = num_warps(config, rows, edges)
    landing = _C.landing_rows(ps, _C.limits["chunk"])
    shape = _C.launch_shape(dim, wpb, landing, elem, get, limits.smem_per_block_optin - limits.static_smem)
    return dict(
        wpw=(ps or _C.limits["chunk"]) * dist * dim,
        smem_kernel=shape["smem"],
        tile=shape["tile"],
        num_warps=warps,
        num_blocks=-(-warps // wpb),
        threads=shape["threads"],
    )


def feasible(config: Config, dim: int, limits: DeviceLimits, get: bool = False) -> bool:
    """Whether the config launches on the device: its threads fit a block and the kernel finds
    a column tile whose shared memory fits beside its static shared memory."""
    r = resources(config, dim, get=get, limits=limits)
    return r["threads"] <= limits.max_threads_per_block and r["tile"] > 0 and config.wpb <= limits.max_warps_per_sm


def grid(dim: int, limits: DeviceLimits, get: bool = False) -> list[Config]:
    """Every feasible config on MGG's search lattice (powers of two within the ranges)."""
    return [
        c
        for c in (Config(p, d, w) for p, d, w in itertools.product(PS_STEPS, DIST_STEPS, WPB_STEPS))
        if feasible(c, dim, limits, get)
    ]

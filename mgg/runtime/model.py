"""MGG's performance/resource model (§6) and the device limits that prune the config space.

    WPW       = 2 · ps · D · dist          work per warp (elements of one LNP/RNP pair set)
    SMEM      = ps · wpb · 4 + 2 · wpb · D · 4   bytes of shared memory per block (eq. 1)
    numWarps  = ceil(max(#LNP, #RNP) / dist)
    numBlocks = ceil(numWarps / wpb)

mgg's kernel (csrc/kernels/aggregate_kernel.cuh) keeps eq. 1's 2 · wpb partial rows in shared
memory for a column tile of at most 256 columns (the neighbor ids travel by warp shuffle, not
through shared memory), plus, for NVSHMEM gets, a landing buffer of min(ps, 32) rows per warp:

    SMEM_kernel = 2 · wpb · tile · 4 + [get] wpb · min(ps, 32) · tile · elem

It narrows the tile until that fits the device's per-block limit, so pruning uses SMEM_kernel.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..plan import Config

PS_STEPS = (1, 2, 4, 8, 16, 32)
DIST_STEPS = (1, 2, 4, 8, 16)
WPB_STEPS = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class DeviceLimits:
    name: str = "cpu"
    sm_count: int = 1
    smem_per_block: int = 48 * 1024  # without opt-in
    smem_per_block_optin: int = 227 * 1024
    smem_per_sm: int = 228 * 1024
    max_threads_per_block: int = 1024
    max_warps_per_sm: int = 64

    @staticmethod
    def of(device) -> "DeviceLimits":
        import torch

        device = torch.device(device)
        if device.type != "cuda":
            return DeviceLimits()
        p = torch.cuda.get_device_properties(device)
        optin = getattr(p, "shared_memory_per_block_optin", 227 * 1024)
        return DeviceLimits(name=p.name, sm_count=p.multi_processor_count,
                            smem_per_block=getattr(p, "shared_memory_per_block", 48 * 1024),
                            smem_per_block_optin=optin,
                            smem_per_sm=getattr(p, "shared_memory_per_multiprocessor", optin),
                            max_threads_per_block=getattr(p, "max_threads_per_block", 1024),
                            max_warps_per_sm=getattr(p, "max_threads_per_multi_processor", 2048) // 32)


def resources(config: Config, dim: int, num_local_parts: int = 0, num_remote_parts: int = 0,
              get: bool = False, elem: int = 4) -> dict:
    ps, dist, wpb = config.as_tuple()
    ps = ps or 32  # partitioning off: the kernel still stages at most 32 ids at a time
    warps = -(-max(num_local_parts, num_remote_parts) // dist)
    smem = ps * wpb * 4 + 2 * wpb * dim * 4
    tile = min(-(-dim // 32) * 32, 256)
    smem_kernel = 2 * wpb * tile * 4 + (wpb * min(ps, 32) * tile * elem if get else 0)
    return dict(wpw=2 * ps * dim * dist, smem=smem, smem_kernel=smem_kernel, num_warps=warps,
                num_blocks=-(-warps // wpb), threads=wpb * 32)


def feasible(config: Config, dim: int, limits: DeviceLimits, get: bool = False) -> bool:
    """Fits one block (threads; the kernel's shared memory at its widest tile under the opt-in
    limit) and at least one block per SM."""
    r = resources(config, dim, get=get)
    if r["threads"] > limits.max_threads_per_block or r["smem_kernel"] > limits.smem_per_block_optin:
        return False
    return r["smem_kernel"] <= limits.smem_per_sm and config.wpb <= limits.max_warps_per_sm


def grid(dim: int, limits: DeviceLimits) -> list[Config]:
    """Every feasible config on MGG's search lattice (powers of two within its ranges)."""
    return [c for c in (Config(p, d, w) for p, d, w in itertools.product(PS_STEPS, DIST_STEPS, WPB_STEPS))
            if feasible(c, dim, limits)]

"""The order-aware L2 model's input (issue 51): the order in which the range kernel gathers source
rows, and the reuse distances of that trace (kernel_model.ReuseProfile).

The kernel's visiting order. A step's items are, row by row, the row's edges then one end item;
warp w takes items [w W, (w + 1) W), W = ps x dist (ps = 0: warp w takes rows [w dist, (w + 1)
dist)). `resident` warps run at once (whole blocks on every SM: kernel_model.resident_warps x
SMs) and walk their ranges side by side, so the j-th edge of every resident warp is gathered
before the (j + 1)-th of any; the next wave of warps starts when a wave ends. The trace is the
edges' source rows sorted by (wave, place in the warp, warp): the order the memory system sees,
to within one round of rows in flight, which is far below the L2's reach.

`reuse_profile` turns that trace into a ReuseProfile with mgg._C.reuse_distances (a Fenwick tree,
O(E log E)); the model's hit rate then follows for any row size, stream and L2 capacity, so one
profile serves every D, dtype and end of the band."""

from __future__ import annotations

import numpy as np
import torch

from .. import _C
from . import kernel_model as km


def visiting_order(rowptr: np.ndarray, config, resident: int) -> np.ndarray:
    """The edges (CSR positions) in the order the range kernel gathers them.

    Args:
        rowptr: the step's row pointers [rows + 1] (one rank, local edges).
        config: a Config or (ps, dist, wpb).
        resident: warps resident on the whole GPU at once (>= 1).

    Returns:
        int64 [edges]: edge ids in visiting order.
    """
    ps, dist, _ = km._config(config)
    rowptr = np.asarray(rowptr, np.int64)
    rows = rowptr.size - 1
    edges = int(rowptr[-1])
    if edges == 0:
        return np.zeros(0, np.int64)
    row = np.repeat(np.arange(rows, dtype=np.int64), np.diff(rowptr))
    e = np.arange(edges, dtype=np.int64)
    if ps == 0:  # whole rows: warp w takes rows [w dist, (w + 1) dist)
        warp = row // dist
        width = int(np.diff(rowptr[np.minimum(np.arange(0, rows + dist, dist), rows)]).max(initial=1))
        pos = e - rowptr[warp * dist]
    else:
        width = ps * dist
        item = e + row  # every earlier row adds its end item
        warp, pos = np.divmod(item, width)
    resident = max(1, int(resident))
    wave, slot = np.divmod(warp, resident)
    key = (wave * max(width, 1) + pos) * resident + slot
    return np.argsort(key, kind="stable")


def gather_trace(rowptr: np.ndarray, col: np.ndarray, config, resident: int) -> np.ndarray:
    """The source rows the kernel gathers, in its visiting order (visiting_order)."""
    return np.asarray(col, np.int64)[visiting_order(rowptr, config, resident)]


def reuse_profile(rowptr: np.ndarray, col: np.ndarray, num_rows: int, config, resident: int) -> km.ReuseProfile:
    """The ReuseProfile of a step's row gathers in the kernel's visiting order.

    Args:
        rowptr, col: the step's CSR (col: source rows in [0, num_rows)).
        num_rows: rows of the source table.
        config, resident: as visiting_order.

    Returns:
        The ReuseProfile (its hit_rate: the share of gathers that hit in an LRU L2).
    """
    trace = torch.from_numpy(np.ascontiguousarray(gather_trace(rowptr, col, config, resident)))
    distinct, gap = _C.reuse_distances(trace, int(num_rows))
    return km.ReuseProfile.of(distinct.numpy(), gap.numpy())


def wave_rows(rowptr: np.ndarray, col: np.ndarray, config, resident: int) -> float:
    """The mean number of distinct source rows one wave of resident warps gathers (in the plan's
    current order): the working set that must fit in L2 for a row the wave's warps share to be read
    from DRAM once. The warps of a wave run side by side, so within a wave an order can only help by
    making this set smaller."""
    ps, dist, _ = km._config(config)
    rowptr = np.asarray(rowptr, np.int64)
    edges = int(rowptr[-1])
    if edges == 0:
        return 0.0
    row = np.repeat(np.arange(rowptr.size - 1, dtype=np.int64), np.diff(rowptr))
    warp = row // dist if ps == 0 else (np.arange(edges, dtype=np.int64) + row) // (ps * dist)
    wave = warp // max(1, int(resident))
    keys = np.unique(wave * (int(np.asarray(col).max()) + 1) + np.asarray(col, np.int64))
    return float(keys.size / (int(wave[-1]) + 1))


def resident_warps(config, gpu: km.Gpu = km.H200, kernel: km.Kernel = km.RANGE_KERNEL) -> int:
    """Warps of the range kernel resident on the whole GPU at once under `config`."""
    return km.resident_warps(kernel, km._config(config)[2], gpu) * gpu.sms


def plan_profile(plan, config, gpu: km.Gpu = km.H200) -> km.ReuseProfile:
    """The ReuseProfile of a one-rank plan's forward step (a Plan or an OrderedPlan, whose graph
    is the relabelled one) under `config` on `gpu`."""
    g = plan.graph
    return reuse_profile(g.rowptr.numpy(), g.col.numpy(), g.num_nodes, config, resident_warps(config, gpu))

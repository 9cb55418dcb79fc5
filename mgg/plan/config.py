"""The configuration of an aggregation: MGG's neighbor-partition size, interleave distance and
warps per block (§6), within the ranges the kernels take (csrc/core/limits.h, through mgg._C)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import _C
from ..errors import PlanError

PS_RANGE = tuple(_C.limits["ps"])
DIST_RANGE = tuple(_C.limits["dist"])
WPB_RANGE = tuple(_C.limits["wpb"])


@dataclass(frozen=True)
class Config:
    """Neighbor-partition size, interleave distance and warps per block (MGG §6), as the range
    kernel reads them (csrc/core/schedule.h): a warp takes a run of ps * dist items of the step
    (dist neighbor partitions of ps edges; items are edges and row ends), so the warps' work is
    balanced whatever the degrees; ps is also the rows of a warp's landing chunk where remote rows
    are fetched into shared memory; a block holds wpb warps.

    For MGG's ablations: ps=0 turns neighbor partitioning off (a warp takes dist whole rows, whatever
    their degree), and interleave=False makes each warp fetch a chunk of remote rows only when it
    reaches it, so no fetch overlaps local work (MGG Fig. 5's non-interleaved mapping)."""

    ps: int = 16
    dist: int = 32
    wpb: int = 4
    interleave: bool = True

    def __post_init__(self):
        for name, (lo, hi) in (("ps", PS_RANGE), ("dist", DIST_RANGE), ("wpb", WPB_RANGE)):
            v = getattr(self, name)
            ok = isinstance(v, (int, np.integer)) and (lo <= v <= hi or (name == "ps" and v == 0))
            if not ok:
                extra = " or 0 (partitioning off)" if name == "ps" else ""
                raise PlanError(f"{name} must be an integer in [{lo}, {hi}]{extra}, got {v!r}")

    def as_tuple(self) -> tuple:
        """(ps, dist, wpb)."""
        return (self.ps, self.dist, self.wpb)

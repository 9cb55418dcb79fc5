"""The configuration of an aggregation: MGG's neighbor-partition size, interleave distance and
warps per block (§6), within the ranges the kernels take (csrc/core/limits.h, through mgg._C), and
the node order a layer's plan runs its graph in (mgg.partitioning.order)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import _C
from ..errors import PlanError

PS_RANGE = tuple(_C.limits["ps"])
DIST_RANGE = tuple(_C.limits["dist"])
WPB_RANGE = tuple(_C.limits["wpb"])
# the node orders a plan can run its graph in (mgg.partitioning.order computes them); AUTO: the
# runtime measures and keeps one only where it pays (mgg.runtime.ordering)
ORDERS = ("user", "rcm", "degree", "metis", "random")
AUTO = "auto"


def unknown_order(got) -> str:
    """The one-line refusal of an order that is none."""
    return f"order must be one of {ORDERS + (AUTO,)} or a permutation (perm[position] = node id), got {got!r}"


@dataclass(frozen=True)
class Config:
    """Neighbor-partition size, interleave distance and warps per block (MGG §6), as the range
    kernel reads them (csrc/core/schedule.h): a warp takes a run of ps * dist items of the step
    (dist neighbor partitions of ps edges; items are edges and row ends), so the warps' work is
    balanced whatever the degrees; ps is also the rows of a warp's landing chunk where remote rows
    are fetched into shared memory; a block holds wpb warps.

    For MGG's ablations: ps=0 turns neighbor partitioning off (a warp takes dist whole rows, whatever
    their degree), and interleave=False makes each warp fetch a chunk of remote rows only when it
    reaches it, so no fetch overlaps local work (MGG Fig. 5's non-interleaved mapping).

    order: the node order a layer's one-process plan runs its graph in (ORDERS, or AUTO: measured
    at the first forward and kept only where it pays, mgg.runtime.ordering); tensors stay in the
    user's order either way. A plan's order is fixed when it is built: Plan.aggregate ignores it."""

    ps: int = 16
    dist: int = 32
    wpb: int = 4
    interleave: bool = True
    order: str = field(default="user", compare=False)  # a plan's, not the kernels': configs equal without it

    def __post_init__(self):
        for name, (lo, hi) in (("ps", PS_RANGE), ("dist", DIST_RANGE), ("wpb", WPB_RANGE)):
            v = getattr(self, name)
            ok = isinstance(v, (int, np.integer)) and (lo <= v <= hi or (name == "ps" and v == 0))
            if not ok:
                extra = " or 0 (partitioning off)" if name == "ps" else ""
                raise PlanError(f"{name} must be an integer in [{lo}, {hi}]{extra}, got {v!r}")
        if self.order not in ORDERS + (AUTO,):
            raise PlanError(unknown_order(self.order))

    def as_tuple(self) -> tuple:
        """(ps, dist, wpb)."""
        return (self.ps, self.dist, self.wpb)


DEFAULT_CONFIG = Config()  # what a call without a config runs (one object: no check per call)

"""MGG's cost model (§6, eq. 2-3): a latency estimate of every config from the plan's shape and
the device, which seeds the search at its minimum and drops the configs it says cannot win.

Per rank, with L and R the rank's local and remote neighbor partitions at ps:

    WPW          = 2 · ps · D · dist                  work a warp may hold (eq. 1's companion)
    numWarps     = ceil(max(L, R) / dist)             eq. 2
    numBlocks    = ceil(numWarps / wpb)               eq. 3
    blocksPerSM  = numBlocks / numSMs                 eq. 3

A partition holds edges / (L + R) neighbors on average, so a warp's expected work is WPW times
that fill, plus one partial row per partition (the synchronisation cost that small ps pays).
An SM keeps `resident` blocks at once (its warp slots, its register file at the kernel's
registers per thread, its shared memory under the kernel's real launch shape, its block slots);
it runs blocksPerSM / resident waves (at least one), and a wave of `active` warps takes a warp's
work times max(1, active / W_sat), the SM being saturated at W_sat warps (half its warp slots on
a GPU; one on the CPU, whose executor walks blocks in turn, so its estimate is the total work): a
small launch is bound by one warp's latency, a large one by the device's throughput. The step
time is that of the slowest rank
(one GPU per rank) or the sum over ranks (ranks time-sliced on one device).

The estimate is in arbitrary units: only ratios between configs matter. A config whose estimate
exceeds `slack` times the best estimate is dropped (the model is trusted to within that factor),
and so is every ps beyond the first that covers the largest degree of every rank (ps at or above
the largest degree gives whole rows as partitions: the same computation)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from ..plan import Config, RankShard
from .limits import PS_STEPS, DeviceLimits, resources
from .search import MggSearch

SLACK = 4.0  # the model's trusted error: configs estimated slower than SLACK x the best are dropped
PARTIAL_ROWS = 1.0  # rows of D a partition costs beyond its neighbors (its partial sum)


@dataclass(frozen=True)
class RankShape:
    """What eq. 2-3 need of one rank's step: its local and remote neighbor partitions at each ps
    of the lattice (PS_STEPS), its edges and its largest degree."""

    local_parts: tuple
    remote_parts: tuple
    edges: int
    max_degree: int

    @staticmethod
    def of(shard: RankShard) -> "RankShape":
        """The shape of one rank's forward step.

        Args:
            shard: the rank's shard of a plan (Plan.shard).

        Returns:
            Its RankShape.
        """
        local, remote = np.diff(shard.local.rowptr), np.diff(shard.remote.rowptr)

        def parts(deg: np.ndarray, ps: int) -> int:
            return int(((deg + ps - 1) // ps).sum())

        return RankShape(
            tuple(parts(local, p) for p in PS_STEPS),
            tuple(parts(remote, p) for p in PS_STEPS),
            shard.num_local_edges + shard.num_remote_edges,
            max(shard.local.max_degree, shard.remote.max_degree),
        )

    def as_list(self) -> list[int]:
        """The shape as integers (to gather it over a process group)."""
        return [*self.local_parts, *self.remote_parts, self.edges, self.max_degree]

    @staticmethod
    def from_list(values: Sequence[int]) -> "RankShape":
        """The inverse of as_list."""
        n = len(PS_STEPS)
        v = [int(a) for a in values]
        return RankShape(tuple(v[:n]), tuple(v[n : 2 * n]), v[2 * n], v[2 * n + 1])


class LatencyModel:
    """A latency estimate over candidate configs, used to seed and prune MGG's search.

    Args:
        estimate: config -> estimated latency (any unit).
        candidates: the configs the search may measure (feasible on the device).
        slack: configs estimated slower than slack x the best candidate's estimate are dropped.
    """

    def __init__(self, estimate: Callable[[Config], float], candidates: Sequence[Config], slack: float = SLACK):
        self.candidates = list(candidates)
        self.slack = slack
        self._est = {c: float(estimate(c)) for c in self.candidates}
        self.best_estimate = min(self._est.values(), default=math.inf)

    def estimate(self, config: Config) -> float:
        """The estimate of a candidate (inf for a config that is not one)."""
        return self._est.get(config, math.inf)

    def start(self) -> Optional[Config]:
        """The candidate of lowest estimate (ties: the smallest (ps, dist, wpb)), or None."""
        admitted = [c for c in self.candidates if self.admits(c)]
        return min(admitted, key=lambda c: (self._est[c], c.as_tuple()), default=None)

    def admits(self, config: Config) -> bool:
        """Whether the config may win: a candidate whose estimate is within slack of the best."""
        e = self._est.get(config)
        return e is not None and e <= self.slack * self.best_estimate

    def pruned(self) -> list[Config]:
        """The candidates the model drops."""
        return [c for c in self.candidates if not self.admits(c)]

    def search(self, budget: int = 15) -> MggSearch:
        """MGG's search over the admitted candidates, starting at the model's best.

        Args:
            budget: most configs measured.

        Returns:
            The MggSearch.
        """
        start = self.start()
        admitted = {c for c in self.candidates if self.admits(c)}
        return MggSearch(admitted.__contains__, budget, start=start or Config(1, 1, 1), prior=self.estimate)


class CostModel(LatencyModel):
    """MGG's eq. 2-3 for a plan on a device (see the module docstring).

    Args:
        shapes: one RankShape per rank of the plan.
        dim: feature width D.
        candidates: the feasible configs (mgg.runtime.limits.grid).
        limits: the device.
        combine: 'max' (one device per rank: the slowest rank) or 'sum' (ranks time-sliced on one
            device).
        get: remote rows arrive by NVSHMEM get (landing buffers in shared memory).
        elem: bytes of the storage type.
        slack: see LatencyModel.
    """

    def __init__(
        self,
        shapes: Sequence[RankShape],
        dim: int,
        candidates: Sequence[Config],
        limits: DeviceLimits,
        combine: str = "max",
        get: bool = False,
        elem: int = 4,
        slack: float = SLACK,
    ):
        if combine not in ("max", "sum"):
            raise ValueError(f"combine must be 'max' or 'sum', got {combine!r}")
        self.shapes, self.dim, self.limits, self.combine = list(shapes), dim, limits, combine
        self.get, self.elem = get, elem
        self._resident: dict = {}
        whole = [p for p in PS_STEPS if p >= max((s.max_degree for s in self.shapes), default=0)]
        self.redundant_ps = set(whole[1:])  # same partitions as whole[0]: whole rows
        super().__init__(self.step_estimate, candidates, slack)

    def admits(self, config: Config) -> bool:
        return config.ps not in self.redundant_ps and super().admits(config)

    def resident_blocks(self, config: Config) -> int:
        """Blocks an SM holds at once: warp slots, registers (the kernel's per thread), shared
        memory (the launcher's real need) and block slots."""
        key = (config.ps, config.wpb)
        if key not in self._resident:
            lim = self.limits
            r = resources(config, self.dim, get=self.get, elem=self.elem, limits=lim)
            smem = r["smem_kernel"] + lim.static_smem
            self._resident[key] = max(
                1,
                min(
                    lim.max_warps_per_sm // config.wpb,
                    lim.blocks_by_registers(config.wpb),
                    lim.smem_per_sm // max(smem, 1),
                    lim.max_blocks_per_sm,
                ),
            )
        return self._resident[key]

    def quantities(self, config: Config, rank: int = 0) -> dict:
        """Eq. 1-3 of one rank under a config, and its estimate.

        Args:
            config: (ps, dist, wpb).
            rank: which rank's shape.

        Returns:
            dict with wpw, num_warps, num_blocks, blocks_per_sm, resident (blocks per SM at once),
            waves, active (warps per SM in a wave), work (a warp's expected elements), estimate.
        """
        s, lim = self.shapes[rank], self.limits
        i = PS_STEPS.index(config.ps)
        lp, rp = s.local_parts[i], s.remote_parts[i]
        d, w = config.dist, config.wpb
        warps = -(-max(lp, rp) // d)  # eq. 2
        blocks = -(-warps // w)  # eq. 3
        wpw = 2 * config.ps * self.dim * d
        fill = s.edges / (config.ps * (lp + rp)) if lp + rp else 0.0
        work = wpw * fill + 2 * d * self.dim * PARTIAL_ROWS
        resident = self.resident_blocks(config)
        per_sm = blocks / lim.sm_count  # eq. 3
        waves = max(1.0, per_sm / resident)
        active = min(max(per_sm, 1.0), resident) * w
        est = waves * work * max(1.0, active / lim.warps_to_saturate) if warps else 0.0
        return dict(
            wpw=wpw,
            num_warps=warps,
            num_blocks=blocks,
            blocks_per_sm=per_sm,
            resident=resident,
            waves=waves,
            active=active,
            work=work,
            estimate=est,
        )

    def step_estimate(self, config: Config) -> float:
        """The estimated step time of the plan (the slowest rank, or the sum over ranks)."""
        per_rank = [self.quantities(config, r)["estimate"] for r in range(len(self.shapes))]
        return max(per_rank, default=0.0) if self.combine == "max" else sum(per_rank)

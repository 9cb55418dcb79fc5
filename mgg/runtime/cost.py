"""MGG's cost model (§6, eq. 2-3) for mgg's range kernel: a latency estimate of every config from
the plan's shape and the device, which seeds the search at its minimum and drops the configs it
says cannot win. On a GPU the tuner ranks configs by the range kernel's performance model instead
(mgg.runtime.kernel_model, through predicted_us), which reads every warp's range from the row
pointers; eq. 2-3 remain the model of the CPU executor, whose time is its total work.

Per rank, with its step's items (edges and rows, csrc/core/schedule.h):

    WPW          = ps · dist · D                      a warp's work: its range's items, D columns each
    numWarps     = ceil(items / (ps · dist))          eq. 2 (ps = 0: ceil(rows / dist), whole rows)
    numBlocks    = ceil(numWarps / wpb)               eq. 3
    blocksPerSM  = numBlocks / numSMs                 eq. 3

A warp's expected work is WPW plus a fixed start (reading its range, its first rows' ends and its
first column ids: FIXED_ROWS rows of D) and the carry rows of the rows its boundaries cut (two per
warp). An SM keeps `resident` blocks at once (its warp slots, its register file at the kernel's
registers per thread, its shared memory under the kernel's real launch shape, its block slots);
it runs blocksPerSM / resident waves (at least one), and a wave of `active` warps takes a warp's
work times max(1, active / W_sat), the SM being saturated at W_sat warps (half its warp slots on
a GPU; one on the CPU, whose executor walks blocks in turn, so its estimate is the total work): a
small launch is bound by one warp's latency, a large one by the device's throughput. The step
time is that of the slowest rank
(one GPU per rank) or the sum over ranks (ranks time-sliced on one device).

The estimate is in arbitrary units: only ratios between configs matter. A config whose estimate
exceeds `slack` times the best estimate is dropped (the model is trusted to within that factor),
and so is every config whose ranges another candidate already runs: where no remote rows land in
shared memory, ps and dist matter only as their product, so of equal products (and wpb) only the
smallest ps is kept."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from ..plan import Config, RankShard
from .limits import DeviceLimits, num_warps, resources
from .search import MggSearch

SLACK = 4.0  # the model's trusted error: configs estimated slower than SLACK x the best are dropped
FIXED_ROWS = 4.0  # rows of D a warp's start costs (its range, row ends and first column ids: dependent reads)
CARRY_ROWS = 2.0  # carry rows a warp writes and the fixups read again (the rows its boundaries cut)


@dataclass(frozen=True)
class RankShape:
    """What eq. 2-3 need of one rank's step: its rows, its edges (both parts) and its largest degree."""

    rows: int
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
        return RankShape(
            shard.num_rows,
            shard.num_local_edges + shard.num_remote_edges,
            max(shard.local.max_degree, shard.remote.max_degree),
        )

    def as_list(self) -> list[int]:
        """The shape as integers (to gather it over a process group)."""
        return [self.rows, self.edges, self.max_degree]

    @staticmethod
    def from_list(values: Sequence[int]) -> "RankShape":
        """The inverse of as_list."""
        rows, edges, max_degree = (int(a) for a in values)
        return RankShape(rows, edges, max_degree)


def same_launches(candidates: Sequence[Config], get: bool) -> set:
    """The candidates whose launch another candidate already is: where no remote rows land in shared
    memory (get False), ps and dist make the same ranges whenever ps * dist is the same (ps = 0:
    whole rows, dist of them), so of each such class (and wpb, interleave) the one of smallest ps is
    kept and the others are returned. With landing buffers ps is their rows: none is the same."""
    if get:
        return set()
    kept, same = set(), set()
    for c in sorted(candidates, key=lambda c: c.as_tuple()):
        key = (c.ps * c.dist if c.ps else (0, c.dist), c.wpb, c.interleave)
        if key in kept:
            same.add(c)
        else:
            kept.add(key)
    return same


class LatencyModel:
    """A latency estimate over candidate configs, used to seed and prune MGG's search.

    Args:
        estimate: config -> estimated latency (any unit).
        candidates: the configs the search may measure (feasible on the device).
        slack: configs estimated slower than slack x the best candidate's estimate are dropped.
        redundant: candidates not to measure (another candidate is the same launch: same_launches).
    """

    def __init__(
        self,
        estimate: Callable[[Config], float],
        candidates: Sequence[Config],
        slack: float = SLACK,
        redundant: Optional[set] = None,
    ):
        self.candidates = list(candidates)
        self.slack = slack
        self.redundant = set(redundant or ())
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
        """Whether the config may win: a candidate, not the same launch as another, whose estimate
        is within slack of the best."""
        e = self._est.get(config)
        return e is not None and config not in self.redundant and e <= self.slack * self.best_estimate

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
        super().__init__(self.step_estimate, candidates, slack, same_launches(candidates, get))

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
        w = config.wpb
        warps = num_warps(config, s.rows, s.edges)  # eq. 2
        blocks = -(-warps // w)  # eq. 3
        items = (s.rows + s.edges) / warps if warps else 0.0  # a warp's share (ps = 0: whole rows)
        wpw = items * self.dim
        work = wpw + (FIXED_ROWS + CARRY_ROWS) * self.dim
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


def predicted_us(
    shards: Sequence[RankShard], dim: int, elem: int, candidates: Sequence[Config], device_name: str
) -> list[int]:
    """The range kernel's predicted time of each candidate on a GPU (mgg.runtime.kernel_model, its
    H200 calibration and the named GPU's constants: an H200, else an H100), the slowest of this
    process's shards, in whole microseconds (to gather over a process group)."""
    from . import kernel_model as km

    gpu = km.gpu_named(device_name)
    worst = [0.0] * len(candidates)
    for shard in shards:
        remote = shard.remote.rowptr if shard.remote.num_edges else None
        ranked = dict(km.rank_configs(shard.local.rowptr, remote, dim, elem, candidates, km.H200_CALIBRATION, gpu))
        worst = [max(w, ranked[c].seconds) for w, c in zip(worst, candidates, strict=True)]
    return [int(math.ceil(w * 1e6)) for w in worst]

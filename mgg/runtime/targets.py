"""What the tuner tunes: the step that will run, under a candidate config.

- `LocalTarget`: a one-rank Plan (mgg.aggregate).
- `DistTarget`: this rank's step of a DistPlan under torchrun, through its backend (halo or
  nvshmem); every rank runs its own and the tuner takes the slowest.
- `InprocTarget`: all ranks of a P-rank Plan in one process, one after another (P PEs
  time-sliced on one device): via 'peers' each rank reads remote rows from the other ranks'
  slices of x (aggregate_peers, direct loads: what PEs do through nvshmem_ptr), via 'halo' it
  first gathers its halo rows. Its time is the step time of `mgg tune --ranks P` and of the
  bench's scaling suite.

Each names its cache key parts (graph fingerprint and ranges, P, backend, fetch policy), gives
the shards of the ranks it runs (for the cost models), runs a config, and drops a config's
schedules (the partitions' device copies stay: every config shares them)."""

from __future__ import annotations

import hashlib
import os
from typing import Callable

import numpy as np
import torch

from ..plan import Config, Plan
from .config_cache import cache_key
from .cost import RankShape

VIA = ("peers", "halo")


def plan_fingerprint(plan: Plan) -> str:
    """The graph's fingerprint, and for several ranks a digest of the node ranges (another
    partitioning of the same graph is another plan)."""
    if plan.num_ranks == 1:
        return plan.graph.fingerprint()
    ranges = hashlib.sha1(np.ascontiguousarray(plan.bounds, dtype=np.int64).tobytes()).hexdigest()[:12]
    return f"{plan.graph.fingerprint()}/{ranges}"


class _Target:
    ranks = 1
    backend = "local"
    fetch = "none"
    combine = "max"
    get = False  # remote rows land in shared memory (NVSHMEM gets)
    plan: Plan
    distributed = False  # whether the ranks of a process group (`group`, None: the world) tune together
    group = None

    def key(self, dim: int, dtype: torch.dtype, device_name: str) -> str:
        """The cache key of this step at width `dim` in `dtype` on `device_name`."""
        return cache_key(
            plan_fingerprint(self.plan),
            self.ranks,
            device_name,
            dim,
            str(dtype).split(".")[-1],
            self.backend,
            self.fetch,
        )

    def combine_on(self, device: torch.device) -> str:
        """How the ranks' times make the step time on `device`: 'max' (a device each) or 'sum'
        (the ranks take turns on one device)."""
        return self.combine

    def own_shards(self) -> list:
        """The shards (mgg.plan.RankShard) of the ranks this process runs."""
        raise NotImplementedError

    def own_shapes(self) -> list[RankShape]:
        """The shapes of the ranks this process runs."""
        return [RankShape.of(s) for s in self.own_shards()]

    def prepare(self, x: torch.Tensor, config: Config, deterministic: bool = False) -> Callable[[], object]:
        """This process's step under `config` as a callable (device copies made outside it).

        Args:
            x: the step's input.
            config: (ps, dist, wpb).
            deterministic: bit-identical results from run to run.

        Returns:
            A callable that runs the step and returns its result.
        """
        raise NotImplementedError

    def run(self, x: torch.Tensor, config: Config, deterministic: bool = False):
        """This process's step under `config`, once."""
        return self.prepare(x, config, deterministic)()

    def drop(self, config: Config) -> None:
        """Forgets the schedules of `config` of the ranks this process runs."""
        raise NotImplementedError


class LocalTarget(_Target):
    """A one-rank Plan.

    Args:
        plan: the plan (one rank).
    """

    def __init__(self, plan: Plan):
        self.plan = plan

    def own_shards(self) -> list:
        return [self.plan.shard(0)]

    def prepare(self, x: torch.Tensor, config: Config, deterministic: bool = False) -> Callable[[], torch.Tensor]:
        self.plan.rank_plan(0, config).op_args(x.device, transposed=torch.is_grad_enabled() and x.requires_grad)
        return lambda: self.plan.aggregate(x, config, deterministic)

    def drop(self, config: Config) -> None:
        self.plan.drop(0, config)


class DistTarget(_Target):
    """This rank's step of a DistPlan (mgg.distributed): the backend's exchange or barrier and the
    kernel, as training runs it.

    Args:
        dist_plan: a layer's DistPlan.
    """

    distributed = True

    def __init__(self, dist_plan):
        self.dist_plan, self.plan, self.group = dist_plan, dist_plan.plan, dist_plan.group
        self.ranks, self.backend = dist_plan.world, dist_plan.backend
        self.fetch = dist_plan.fetch_policy
        self.get = self.fetch.startswith("get")

    def combine_on(self, device: torch.device) -> str:
        shared = device.type == "cuda" and int(os.environ.get("LOCAL_WORLD_SIZE", 1)) > torch.cuda.device_count()
        return "sum" if shared else "max"  # processes sharing one GPU take turns on it

    def own_shards(self) -> list:
        return [self.plan.shard(self.dist_plan.rank)]

    def prepare(self, x: torch.Tensor, config: Config, deterministic: bool = False) -> Callable[[], torch.Tensor]:
        return lambda: self.dist_plan.aggregate(x, config, deterministic)

    def drop(self, config: Config) -> None:
        self.dist_plan.drop(config)


class InprocTarget(_Target):
    """All ranks of a P-rank Plan in this process, one after another.

    Args:
        plan: the plan (P ranks).
        via: 'peers' (aggregate_peers reading the other ranks' rows in place) or 'halo'.
    """

    combine = "sum"

    def __init__(self, plan: Plan, via: str = "peers"):
        if via not in VIA:
            raise ValueError(f"via must be one of {VIA}, got {via!r}")
        self.plan, self.via, self.ranks = plan, via, plan.num_ranks
        self.backend = f"inproc-{via}"
        self.fetch = "direct" if via == "peers" else "none"
        self._halos: dict = {}

    def own_shards(self) -> list:
        return [self.plan.shard(r) for r in range(self.ranks)]

    def prepare(self, x: torch.Tensor, config: Config, deterministic: bool = False) -> Callable[[], list]:
        """The step as a callable, its device copies made outside it.

        Args:
            x: every node's rows [nodes, D].
            config: (ps, dist, wpb).
            deterministic: bit-identical results from run to run.

        Returns:
            A callable that runs every rank and returns their output rows, in rank order.
        """
        plan, peers = self.plan, self.via == "peers"
        tables = [x[int(plan.bounds[r]) : int(plan.bounds[r + 1])] for r in range(plan.num_ranks)]
        ranks = []
        for r in range(plan.num_ranks):
            rp = plan.rank_plan(r, config)
            rp.op_args(x.device, peers=peers, transposed=False)  # device copies outside the step
            ranks.append((rp, self._halo(r, x.device)))
        if peers:
            return lambda: [
                rp.aggregate_peers(tables[r], tables, r, "direct", deterministic) for r, (rp, _) in enumerate(ranks)
            ]
        return lambda: [
            rp.aggregate(tables[r].contiguous(), x.index_select(0, halo), deterministic)
            for r, (rp, halo) in enumerate(ranks)
        ]

    def _halo(self, rank: int, device: torch.device) -> torch.Tensor:
        """Rank `rank`'s halo node ids on `device` (made once)."""
        key = (rank, str(device))
        if key not in self._halos:
            self._halos[key] = torch.from_numpy(self.plan.shard(rank).halo_nodes).to(device)
        return self._halos[key]

    def drop(self, config: Config) -> None:
        for r in range(self.ranks):
            self.plan.drop(r, config)


def target_of(plan) -> _Target:
    """The target of what a layer aggregates over (mgg.plan.Aggregation): this rank's step of a
    DistPlan, or a one-rank Plan."""
    return DistTarget(plan) if plan.distributed else LocalTarget(plan)

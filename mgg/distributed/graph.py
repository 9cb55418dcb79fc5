"""A graph distributed over the ranks of a torch.distributed group, MGG-style: every rank loads
the same input graph and keeps its range (MGG Algorithm 1) and its plan; aggregation reads
peers' rows through the backend:

- `nvshmem` (MGG's path): embeddings in NVSHMEM symmetric memory, the fused kernel reads peers'
  rows by NVSHMEM get or peer loads (nvshmem.py);
- `halo`: a sparsity-aware all-to-all over torch.distributed (NCCL or gloo) brings each rank
  exactly the peer rows its plan reads, then the same op runs on the halo buffer. The op's own
  autograd gives the gradients of the rank's rows and of the halo rows; the exchange's adjoint
  returns the halo rows' gradients to their owners.
- `allgather` (CAGNET 1D): every rank gathers all rows each layer and aggregates its own rows
  from the whole table (allgather.py); its adjoint reduce-scatters the table's gradient.

The same model code runs on both."""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import torch.distributed as dist

from ..errors import MggError
from ..graph import Graph
from ..ops import check_fetch, run_step
from ..plan import Config, Plan
from . import nvshmem
from .allgather import AllGather
from .halo import HaloExchange

BACKENDS = ("halo", "nvshmem", "allgather")


class DistPlan:
    """One normalised graph over the group: this rank's plan and what its backend needs."""

    def __init__(self, graph: Graph, rank: int, bounds, group=None, backend: str = "halo", fetch: str = "get-warp"):
        self.rank, self.world, self.group = rank, len(bounds) - 1, group
        self.backend, self.fetch = backend, fetch
        # the ranges of the DistGraph, whatever the normalisation
        self.plan = Plan(graph, bounds=bounds, gathered=backend == "allgather")
        self.range_rows = [int(b) for b in np.diff(bounds)]
        if backend == "halo":
            self.exchange = HaloExchange(self.plan.partition(rank), group)
        elif backend == "allgather":
            self.exchange = AllGather(self.range_rows, group)
        else:  # the fused kernel's adjoint reads peers' gradients through the transposed graph's plan
            self.plan_t = self.plan if graph.symmetric else Plan(graph.transpose(), bounds=bounds)

    def aggregate(self, x_own: torch.Tensor, config: Config, deterministic: bool = False) -> torch.Tensor:
        """This rank's output rows, differentiable in x_own (this rank's rows)."""
        p = self.plan.partition(self.rank)
        if x_own.dim() != 2 or x_own.size(0) != p.num_rows:
            raise MggError(f"rank {self.rank}: x has {tuple(x_own.shape)} rows but owns {p.num_rows} nodes "
                           f"[{p.row_begin}, {p.row_end})")
        x_own = x_own.contiguous()
        rp = self.plan.rank_plan(self.rank, config)
        if self.backend == "nvshmem":
            return nvshmem.aggregate(x_own, rp, self.plan_t.rank_plan(self.rank, config), self.range_rows, self.fetch,
                                     deterministic)
        if self.backend == "allgather":
            x_all = self.exchange(x_own)
            return run_step(x_all, x_all.new_empty((0, x_all.size(1))), rp, deterministic)
        return run_step(x_own, self.exchange(x_own), rp, deterministic)


class DistGraph:
    """What a distributed model passes to mgg layers in place of edge_index."""

    def __init__(self, graph: Graph, group=None, backend: str = "halo", fetch: str = "get-warp"):
        if backend not in BACKENDS:
            raise MggError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if not dist.is_initialized():
            raise MggError("mgg.distributed: torch.distributed is not initialised (launch with torchrun)")
        if backend == "nvshmem":
            check_fetch(fetch)
            if fetch == "uva":
                raise MggError("fetch 'uva' reads pinned host tables within one process (python -m bench fetch); "
                               "the nvshmem backend's tables are symmetric device memory")
            nvshmem.init(group)
        self.graph, self.group, self.backend, self.fetch = graph, group, backend, fetch
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        if self.world > graph.num_nodes:
            raise MggError(f"{self.world} ranks exceed the graph's {graph.num_nodes} nodes")
        self.bounds = Plan(graph, self.world).bounds
        self.row_begin, self.row_end = int(self.bounds[self.rank]), int(self.bounds[self.rank + 1])
        self._plans: dict[str, DistPlan] = {}

    def local(self, t: torch.Tensor) -> torch.Tensor:
        """This rank's rows of a per-node tensor."""
        return t[self.row_begin:self.row_end]

    def plan_for(self, tag: str, make: Callable[[Graph], Graph]) -> DistPlan:
        """The DistPlan of make(graph) (a layer's normalisation), built once per tag."""
        if tag not in self._plans:
            self._plans[tag] = DistPlan(make(self.graph), self.rank, self.bounds, self.group, self.backend, self.fetch)
        return self._plans[tag]

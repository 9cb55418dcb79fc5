"""A graph distributed over the ranks of a torch.distributed group, MGG-style: every rank loads
the same input graph and keeps its range (MGG Algorithm 1) and its plan; aggregation reads
peers' rows through the backend:

- `nvshmem` (MGG's path): embeddings in NVSHMEM symmetric memory, the fused kernel reads peers'
  rows by NVSHMEM get or peer loads (nvshmem.py);
- `halo`: a sparsity-aware all-to-all over torch.distributed (NCCL or gloo) brings each rank
  exactly the peer rows its plan reads, then the same kernel runs on the halo buffer.

The same model code runs on both."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

import torch
import torch.distributed as dist

from ..errors import MggError
from ..graph import Graph
from ..ops import _run, check_fetch
from ..plan import Config, Plan
from . import nvshmem
from .halo import HaloExchange

BACKENDS = ("halo", "nvshmem")


class DistPlan:
    """One normalised graph over the group: this rank's forward plan and the transposed plan for
    the backward pass, each with its halo exchange."""

    def __init__(self, graph: Graph, rank: int, bounds, group=None, backend: str = "halo", fetch: str = "get-warp"):
        self.rank, self.world, self.group = rank, len(bounds) - 1, group
        self.backend, self.fetch = backend, fetch
        self.plan = Plan(graph, bounds=bounds)  # the ranges of the DistGraph, whatever the normalisation
        self.plan_t = self.plan.transposed
        self.range_rows = [int(b) for b in np.diff(bounds)]
        if backend == "halo":
            self.exchange = HaloExchange(self.plan.partition(rank), group)
            self.exchange_t = self.exchange if self.plan_t is self.plan else HaloExchange(self.plan_t.partition(rank), group)

    def aggregate(self, x_own: torch.Tensor, config: Config, deterministic: bool = False) -> torch.Tensor:
        p = self.plan.partition(self.rank)
        if x_own.dim() != 2 or x_own.size(0) != p.num_rows:
            raise MggError(f"rank {self.rank}: x has {tuple(x_own.shape)} rows but owns {p.num_rows} nodes "
                           f"[{p.row_begin}, {p.row_end})")
        return _DistAggregate.apply(x_own.contiguous(), self, config, deterministic)

    def _apply(self, x_own: torch.Tensor, transposed: bool, config: Config, deterministic: bool) -> torch.Tensor:
        """One direction of the aggregation on this rank: the forward plan, or the transposed
        plan for the backward pass (which reads peers' gradients of the rows ours feed)."""
        plan = (self.plan_t if transposed else self.plan).rank_plan(self.rank, config)
        if self.backend == "nvshmem":
            return nvshmem.aggregate(x_own, plan, self.range_rows, self.fetch, deterministic)
        exchange = self.exchange_t if transposed else self.exchange
        return _run(x_own, exchange(x_own), plan, deterministic)


class _DistAggregate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_own, dp: DistPlan, config: Config, deterministic: bool):
        ctx.dp, ctx.config, ctx.deterministic = dp, config, deterministic
        return dp._apply(x_own, False, config, deterministic)

    @staticmethod
    def backward(ctx, grad):
        return ctx.dp._apply(grad.contiguous(), True, ctx.config, ctx.deterministic), None, None, None


class DistGraph:
    """What a distributed model passes to mgg layers in place of edge_index."""

    def __init__(self, graph: Graph, group=None, backend: str = "halo", fetch: str = "get-warp"):
        if backend not in BACKENDS:
            raise MggError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if not dist.is_initialized():
            raise MggError("mgg.distributed: torch.distributed is not initialised (launch with torchrun)")
        if backend == "nvshmem":
            check_fetch(fetch)
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
        if tag not in self._plans:
            self._plans[tag] = DistPlan(make(self.graph), self.rank, self.bounds, self.group, self.backend, self.fetch)
        return self._plans[tag]

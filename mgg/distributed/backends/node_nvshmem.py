"""The `node-nvshmem` backend: the node-level halo with MGG's fused kernel inside each machine.

Stage 1 is the node-halo backend's (NetworkExchange): each row a machine reads from other
machines crosses the network once, to its receiver on the machine, over torch.distributed. Each
machine is one NVSHMEM job of its g ranks (nvshmem.init over the machine's group): a rank writes
its table [own rows | node-halo rows] into the machine's symmetric table, and the fused kernel
(the nvshmem backend's, mgg.distributed.nvshmem) reads each source from the table that holds it:
its own rows and the rows it received locally, the other ranks' own and received rows by NVSHMEM
get or peer loads. The machine's plan is NodeRoutes.machine_graph: the graph over the tables' ids.

Backward: the kernel's adjoint over the machine graph's transpose sums, inside the machine, the
gradient of every table row (node-halo rows included), then each node-halo row's sum crosses the
network once to its owner (NetworkExchange's adjoint). GAT reads each halo row once (its dropout
masks are drawn from the graph's ids, which the machine's plan renames); max and min run on the
node-halo backend's two all-to-alls (the fused kernel sums only)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Optional

import numpy as np
import torch
import torch.distributed as dist

from ...plan import Plan
from .. import nvshmem
from ..node_routes import NodeRoutes
from .node_halo import NetworkExchange, NodeHaloExchange
from .nvshmem import Nvshmem

_MACHINE_GROUPS: dict = {}  # (group, g) -> this process's machine group (new_group is collective: once)


def machine_group(group, gpus_per_node: int):
    """This rank's machine as a torch.distributed group (every rank of `group` calls it, machine
    groups made in machine order); None without torch.distributed (one process)."""
    if not dist.is_initialized():
        return None
    key = (id(group), gpus_per_node)
    if key not in _MACHINE_GROUPS:
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        mine = None
        for n in range(world // gpus_per_node):
            ranks = range(n * gpus_per_node, (n + 1) * gpus_per_node)
            made = dist.new_group([dist.get_global_rank(group, r) if group is not None else r for r in ranks])
            if rank // gpus_per_node == n:
                mine = made
        _MACHINE_GROUPS[key] = mine
    return _MACHINE_GROUPS[key]


@dataclass
class MachinePlan:
    """What the nvshmem backend reads of a DistPlan, for one machine's NVSHMEM job: the plan of the
    machine graph over the tables' ranges, this rank's place in the machine, every rank's table rows."""

    plan: Plan
    rank: int  # the rank's PE in the machine
    range_rows: list
    fetch: str
    remote_reads: str
    group: object = None  # the machine's group (remote_reads='auto' measures the machine's ranks together)
    ids: Optional[np.ndarray] = None  # the graph's id of each row of the machine's tables, laid end to end


class NodeNvshmem(Nvshmem):
    """The `node-nvshmem` backend (module docstring)."""

    by_machine = True

    @staticmethod
    def start(group, fetch: str, gpus_per_node: int = 1) -> None:
        """Checks the fetch policy and starts one NVSHMEM job per machine over its group."""
        Nvshmem.check_fetch(fetch)
        nvshmem.init(machine_group(group, gpus_per_node), one_node=True)

    def __init__(self, dist_plan, graph):
        d, g = dist_plan, dist_plan.gpus_per_node
        routes = NodeRoutes(d.plan, g)
        n = d.rank // g
        sizes, ids = routes.machine_table(n)
        vgraph = routes.machine_graph(n)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        self.machine = MachinePlan(
            Plan(vgraph, bounds=bounds), d.rank % g, sizes, d.fetch, d.remote_reads, machine_group(d.group, g), ids
        )
        super().__init__(self.machine, vgraph)  # the nvshmem backend over the machine's plan
        self.routes, self.rank, self.group = routes, d.rank, d.group
        self.network = NetworkExchange(routes, d.rank, d.group)
        self.traffic = self.network.traffic  # bytes sent to other machines and inside this one
        self.rows = d.range_rows[d.rank]
        self._ids: dict = {}

    @cached_property
    def node_halo(self) -> NodeHaloExchange:
        """node-halo's two all-to-alls (max and min run on them), counted in the same traffic."""
        return NodeHaloExchange(self.routes, self.rank, self.group, self.traffic)

    def _table(self, x_own: torch.Tensor) -> torch.Tensor:
        """The rank's table [own rows | node-halo rows], differentiable in x_own (stage 1)."""
        return torch.cat([x_own, self.network(x_own)])

    def aggregate(self, x_own: torch.Tensor, rp, config, deterministic: bool) -> torch.Tensor:
        m = self.machine
        out = super().aggregate(self._table(x_own), m.plan.rank_plan(m.rank, config), config, deterministic)
        return out[: self.rows]

    def aggregate_extreme(self, x_own: torch.Tensor, rp, config, reduce: str) -> torch.Tensor:
        return rp.aggregate_extreme(x_own, self.node_halo(x_own), reduce)

    def attend(
        self, table_own: torch.Tensor, a_dst_own: torch.Tensor, rp, config, args: tuple, row_offset: int
    ) -> torch.Tensor:
        m = self.machine
        mrp, mrpt = m.plan.rank_plan(m.rank, config), self.plan_t.rank_plan(m.rank, config)
        table = self._table(table_own)
        a_dst = torch.cat([a_dst_own, a_dst_own.new_zeros((table.size(0) - self.rows, a_dst_own.size(1)))])
        back = (m.plan.halo_return(m.rank, config), [m.plan.halo_nodes(r).size for r in range(m.plan.num_ranks)])
        ids = (self._source_ids(mrp, table.device), row_offset)
        out = nvshmem.attend(table, a_dst, mrp, mrpt, m.range_rows, m.fetch, *args, "once", back, ids=ids)
        return out[: self.rows]

    def _source_ids(self, mrp, device) -> torch.Tensor:
        """The graph's ids of the rank's [table rows | machine halo rows] (the attention's dropout
        masks are drawn from the graph's ids, so they are one process's)."""
        key = str(device)
        if key not in self._ids:
            self._ids[key] = torch.from_numpy(self.machine.ids[mrp.shard.source_ids()]).to(device)
        return self._ids[key]

    def drop(self, config) -> None:
        """The machine plan's schedules and its transpose's."""
        self.machine.plan.drop(self.machine.rank, config)
        super().drop(config)

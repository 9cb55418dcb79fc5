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

import os
from dataclasses import dataclass
from functools import cached_property
from typing import Optional

import numpy as np
import torch
import torch.distributed as dist

from ...errors import MggError
from ...plan import Plan
from ...runtime.remote_reads import AUTO
from .. import nvshmem
from ..comm import Exchange
from ..nvshmem import symmetric
from ..part_graph import PartGraph, is_part
from .node_halo import NetworkExchange, NodeHaloExchange, routes_of
from .nvshmem import Nvshmem

_MACHINE_GROUPS: dict = {}  # (group, g) -> this process's machine group (new_group is collective: once)


def machine_group(group, gpus_per_node: int):
    """This rank's machine as a torch.distributed group (every rank of `group` calls it; each makes
    only its own machine's, synchronised among that machine's ranks, so a sub-group of the job
    works too); None without torch.distributed (one process)."""
    if not dist.is_initialized():
        return None
    key = (id(group), gpus_per_node)
    if key not in _MACHINE_GROUPS:
        first = dist.get_rank(group) // gpus_per_node * gpus_per_node
        ranks = range(first, first + gpus_per_node)
        members = [dist.get_global_rank(group, r) if group is not None else r for r in ranks]
        _MACHINE_GROUPS[key] = dist.new_group(members, use_local_synchronization=True)
    return _MACHINE_GROUPS[key]


def machine_exchange(group) -> Exchange:
    """The exchange between the ranks of one machine (its group), over which the ranks of a prepared
    dataset build the machine's plans from their own rows."""
    return Exchange(group)


def check_one_host(gpus_per_node: int, environ=os.environ) -> None:
    """A machine's ranks must share a host (its NVSHMEM job has no network transport): under
    torchrun, a host's LOCAL_WORLD_SIZE ranks must be whole machines."""
    local = environ.get("LOCAL_WORLD_SIZE")
    if local is not None and int(local) % gpus_per_node:
        raise MggError(
            f"node-nvshmem: a machine of {gpus_per_node} ranks would span hosts ({local} ranks per host, "
            "LOCAL_WORLD_SIZE): its NVSHMEM job runs on one host; set gpus_per_node to divide it, or use node-halo"
        )


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
        check_one_host(gpus_per_node)
        nvshmem.init(machine_group(group, gpus_per_node), one_node=True)

    def __init__(self, dist_plan, graph):
        d, g = dist_plan, dist_plan.gpus_per_node
        routes = routes_of(d, graph)
        n = d.rank // g
        sizes, ids = routes.machine_table(n)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        group = machine_group(d.group, g)
        if is_part(graph):  # this rank's rows of the machine graphs; the machine's ranks tell each other the rest
            exchange = machine_exchange(group)

            def machine_graph(half: str):
                ptr, col, w = routes.machine_rows(n, d.rank, half)
                return PartGraph(ptr, col, w, bounds, d.rank % g, exchange, f"{graph.tag}|machine {n} {half}")
        else:

            def machine_graph(half: str):
                return routes.machine_graph(n, half)

        vgraph = machine_graph("all")
        self.machine = MachinePlan(Plan(vgraph, bounds=bounds), d.rank % g, sizes, d.fetch, d.remote_reads, group, ids)
        super().__init__(self.machine, vgraph)  # the nvshmem backend over the machine's plan
        # the overlapped step's halves, forward and transposed: edges from rows owned on the machine,
        # and from rows received over the network (none anywhere on the machine: one half)
        self.halves = {}
        for half in ("own", "received"):
            h = machine_graph(half)
            self.halves[half] = (Plan(h, bounds=bounds), Plan(h.transpose(), bounds=bounds))
        self.receives = sum(sizes) > int(d.plan.bounds[(n + 1) * g] - d.plan.bounds[n * g])
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
        mode = m.remote_reads
        if mode == AUTO:  # measured on the whole machine plan at the shape's first step, then kept (the
            # network stays out of the timing: machines may measure a different number of times)
            key = (x_own.size(1), x_own.dtype, config)
            if key not in self.remote_choice:
                with torch.no_grad():
                    table = self._table(x_own.detach())
                rp, rp_t = m.plan.rank_plan(m.rank, config), self.plan_t.rank_plan(m.rank, config)
                self._choose(table, rp, rp_t, config, deterministic)
            mode = self.remote_choice[key][0]
        return _Overlapped.apply(x_own, self, config, deterministic, mode)

    def pull(self, rows_in: torch.Tensor, config, deterministic: bool, mode: str, transposed: bool) -> torch.Tensor:
        """One overlapped step over the machine's symmetric tables. Forward: the received rows
        start over the network, the rank writes its own rows, meets the machine's PEs, and the
        fused kernel sums the edges from rows owned on the machine while the network works; then
        the received rows are written, a second meeting, and the kernel sums the edges from them.
        Transposed (the backward; rows_in: the output rows' gradient): one meeting, the gradients
        of the received rows first, sent home over the network while the kernel sums the own
        rows' gradients. The same sums in the same order every run."""
        m, rt = self.machine, symmetric.runtime()
        plans = {half: pair[1 if transposed else 0].rank_plan(m.rank, config) for half, pair in self.halves.items()}

        def read(half: str, t) -> torch.Tensor:
            rp = plans[half]
            step = rp.aggregate_peers_once if mode == "once" else rp.aggregate_peers
            return step(t.own, t.peers, rt.heap.my_pe(), m.fetch, deterministic)

        t = symmetric.reserve(rt, rows_in.size(1), rows_in.dtype, m.range_rows, m.fetch)
        if not transposed:
            arriving = self.network.start(rows_in)  # the received rows travel ...
            t.own[: self.rows].copy_(rows_in)
            rt.heap.barrier()
            out = read("own", t)  # ... while the kernel sums the machine's own rows
            received = arriving.wait()
            if self.receives:  # alike on every PE of the machine: they meet as often
                t.own[self.rows :].copy_(received)
                rt.heap.barrier()
                out = out + read("received", t)
            return out[: self.rows]
        t.own[: self.rows].copy_(rows_in)  # the transposed steps read output rows only
        rt.heap.barrier()
        returning = self.network.start_adjoint(read("received", t)[self.rows :].contiguous(), self.rows)
        return read("own", t)[: self.rows] + returning.wait()

    def aggregate_extreme(self, x_own: torch.Tensor, rp, config, reduce: str) -> torch.Tensor:
        return rp.aggregate_extreme(x_own, self.node_halo(x_own), reduce)

    def attend(
        self, table_own: torch.Tensor, a_dst_own: torch.Tensor, rp, config, args: tuple, row_offset: int
    ) -> torch.Tensor:
        m = self.machine
        mrp, mrpt = m.plan.rank_plan(m.rank, config), self.plan_t.rank_plan(m.rank, config)
        table = self._table(table_own)
        a_dst = torch.cat([a_dst_own, a_dst_own.new_zeros((table.size(0) - self.rows, a_dst_own.size(1)))])
        back = (m.plan.halo_return(m.rank, config), m.plan.halo_counts())
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
        """The machine plans' schedules and their transposes'."""
        for plan in (self.machine.plan, *(p for pair in self.halves.values() for p in pair)):
            plan.drop(self.machine.rank, config)
        super().drop(config)


class _Overlapped(torch.autograd.Function):
    """node-nvshmem's aggregation, differentiable in x_own: forward and backward are NodeNvshmem.pull
    over the machine plans and over their transposes."""

    @staticmethod
    def forward(ctx, x_own, backend: NodeNvshmem, config, deterministic: bool, mode: str):
        ctx.args = (backend, config, deterministic, mode)
        return backend.pull(x_own, config, deterministic, mode, transposed=False)

    @staticmethod
    def backward(ctx, grad):
        backend, config, deterministic, mode = ctx.args
        return backend.pull(grad.contiguous(), config, deterministic, mode, transposed=True), None, None, None, None

"""The `node-halo` backend: across machines, each remote row crosses the network once per machine
that reads it, then travels inside the machine (node_routes.py). Stage 1 (between machines) and
stage 2 (inside one) are all-to-alls over torch.distributed in which only the pairs of their kind
move rows; the op then runs on the halo table as the `halo` backend's does. Differentiable: the
adjoint returns each halo row's gradient to its provider, which sums the gradients of the rows it
served (node-halo rows included), and then each node-halo row's sum crosses the network once, back
to its owner. The bytes each stage sends to other machines and inside the machine are counted at
the collectives (`traffic`)."""

from __future__ import annotations

import os
from typing import Optional

import torch

from ...errors import MggError
from ..comm import Pending, all_to_all_rows
from ..node_routes import NodeRoutes
from ..part_graph import is_part
from .halo import Halo, _Exchange, add_blocks


def gpus_per_node(given=None) -> int:
    """The ranks per machine: `given`, else torchrun's LOCAL_WORLD_SIZE (1 without it)."""
    g = given if given is not None else int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if not isinstance(g, int) or isinstance(g, bool) or g < 1:
        raise MggError(f"gpus_per_node must be a positive integer, got {g!r}")
    return g


def routes_of(dist_plan, graph) -> NodeRoutes:
    """The node-level routes of a DistPlan (over a rank's rows alone: learnt from the other ranks)."""
    if is_part(graph):
        return NodeRoutes.exchanged(dist_plan.plan, dist_plan.gpus_per_node, dist_plan.rank, graph.exchange)
    return NodeRoutes(dist_plan.plan, dist_plan.gpus_per_node)


class _Stage:
    """What both stages share: the rank's routes, its indices on each device, and the bytes it sent
    to other machines and inside its own (`traffic`, one dict for the rank's stages)."""

    def __init__(self, routes: NodeRoutes, rank: int, group=None, traffic: Optional[dict] = None):
        self.group, self.rank, self.g = group, rank, routes.g
        self.routes = routes.rank(rank)
        self._index = {}  # (device, name) -> the index on that device
        self.traffic = traffic if traffic is not None else {"inter_node": 0, "intra_node": 0}

    def _on(self, name: str, device) -> torch.Tensor:
        key = (str(device), name)
        if key not in self._index:
            self._index[key] = torch.from_numpy(getattr(self.routes, name)).to(device)
        return self._index[key]

    def _move(self, send: torch.Tensor, rows: int, out_counts: list, in_counts: list, async_op: bool = False):
        for peer, n in enumerate(out_counts):
            if peer == self.rank:  # a rank's rows to itself cross no link
                continue
            kind = "intra_node" if peer // self.g == self.rank // self.g else "inter_node"
            self.traffic[kind] += n * send.size(1) * send.element_size()
        return all_to_all_rows(send, rows, out_counts, in_counts, self.group, async_op=async_op)


class NetworkExchange(_Stage):
    """Stage 1 alone: each row a machine reads from other machines crosses the network once, to its
    receiver on the machine (the rank's node-halo rows, B_q in id order). Differentiable: the
    adjoint sends each node-halo row's gradient back to its owner, which sums them receiver by
    receiver in rank order (deterministic). start and start_adjoint leave the rows travelling
    while the caller works (node-nvshmem's kernel)."""

    def start(self, x_own: torch.Tensor) -> Pending:
        """x_own [own rows, D] -> (on wait()) the rank's node-halo rows [|B_q|, D]."""
        r = self.routes
        send = x_own.index_select(0, self._on("send1_index", x_own.device))
        return self._move(send, r.num_node_halo, r.send1_counts, r.recv1_counts, async_op=True)

    def start_adjoint(self, grad_node_halo: torch.Tensor, rows: int) -> "_Returned":
        """The node-halo rows' gradients [|B_q|, D] -> (on wait()) the gradient of the rank's own
        `rows` rows."""
        r = self.routes
        back = self._move(grad_node_halo, int(r.send1_index.size), r.recv1_counts, r.send1_counts, async_op=True)
        return _Returned(back, self._on("send1_index", grad_node_halo.device), r.send1_counts, rows)

    def forward(self, x_own: torch.Tensor) -> torch.Tensor:
        return self.start(x_own).wait()

    def backward(self, grad_node_halo: torch.Tensor, rows: int) -> torch.Tensor:
        return self.start_adjoint(grad_node_halo, rows).wait()

    def __call__(self, x_own: torch.Tensor) -> torch.Tensor:
        return _Exchange.apply(x_own, self)


class _Returned:
    """Gradients on their way back to their owner: wait() sums them into its rows, sender by sender."""

    def __init__(self, pending: Pending, index: torch.Tensor, counts: list, rows: int):
        self.pending, self.index, self.counts, self.rows = pending, index, counts, rows

    def wait(self) -> torch.Tensor:
        back = self.pending.wait()
        grad = back.new_zeros((self.rows, back.size(1)))
        add_blocks(grad, self.index, back, self.counts)
        return grad


class NodeHaloExchange(_Stage):
    """Rank `rank`'s two-stage exchange over a group whose machines hold `routes.g` ranks each:
    stage 1 (NetworkExchange), then stage 2 inside the machine from each provider's table
    [own rows | node-halo rows]."""

    def __init__(self, routes: NodeRoutes, rank: int, group=None, traffic: Optional[dict] = None):
        super().__init__(routes, rank, group, traffic)
        self.network = NetworkExchange(routes, rank, group, self.traffic)
        self.num_halo = int(self.routes.to_halo.size)

    def forward(self, x_own: torch.Tensor) -> torch.Tensor:
        """x_own [own rows, D] -> the rank's halo rows [num_halo, D], in halo order."""
        r, dev = self.routes, x_own.device
        table = torch.cat([x_own, self.network.forward(x_own)])
        received = self._move(
            table.index_select(0, self._on("send2_index", dev)), self.num_halo, r.send2_counts, r.recv2_counts
        )
        return received.index_select(0, self._on("to_halo", dev))

    def backward(self, grad_halo: torch.Tensor, rows: int) -> torch.Tensor:
        """The adjoint: halo gradients to their providers, summed there sender by sender in rank order;
        the node-halo rows' sums to their owners, summed the same way. Deterministic."""
        r, dev = self.routes, grad_halo.device
        received = torch.empty_like(grad_halo)
        received.index_copy_(0, self._on("to_halo", dev), grad_halo)  # back to arrival order
        back2 = self._move(received, int(r.send2_index.size), r.recv2_counts, r.send2_counts)
        table = grad_halo.new_zeros((rows + r.num_node_halo, grad_halo.size(1)))
        add_blocks(table, self._on("send2_index", dev), back2, r.send2_counts)
        return table[:rows] + self.network.backward(table[rows:].contiguous(), rows)

    def __call__(self, x_own: torch.Tensor) -> torch.Tensor:
        return _Exchange.apply(x_own, self)


class NodeHalo(Halo):
    """The `node-halo` backend: the `halo` backend's op and layers over the two-stage exchange."""

    by_machine = True

    def __init__(self, dist_plan, graph):
        self.dist_plan = dist_plan
        routes = routes_of(dist_plan, graph)
        self.exchange = NodeHaloExchange(routes, dist_plan.rank, dist_plan.group)
        self.traffic = self.exchange.traffic  # bytes sent to other machines and inside this one
        self._ids: dict = {}

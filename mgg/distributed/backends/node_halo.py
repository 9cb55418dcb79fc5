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

import torch

from ...errors import MggError
from ..comm import all_to_all_rows
from ..node_routes import NodeRoutes
from .halo import Halo, _Exchange, add_blocks


def gpus_per_node(given=None) -> int:
    """The ranks per machine: `given`, else torchrun's LOCAL_WORLD_SIZE (1 without it)."""
    g = given if given is not None else int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if not isinstance(g, int) or isinstance(g, bool) or g < 1:
        raise MggError(f"gpus_per_node must be a positive integer, got {g!r}")
    return g


class NodeHaloExchange:
    """Rank `rank`'s two-stage exchange over a group whose machines hold `routes.g` ranks each."""

    def __init__(self, routes: NodeRoutes, rank: int, group=None):
        self.group, self.rank, self.g = group, rank, routes.g
        r = routes.rank(rank)
        self.routes = r
        self.num_halo = int(r.to_halo.size)
        self._index = {}  # (device, name) -> the index on that device
        self.traffic = {"inter_node": 0, "intra_node": 0}  # bytes this rank sent, per kind

    def _on(self, name: str, device) -> torch.Tensor:
        key = (str(device), name)
        if key not in self._index:
            self._index[key] = torch.from_numpy(getattr(self.routes, name)).to(device)
        return self._index[key]

    def _count(self, counts: list, width: int, element: int) -> None:
        for peer, n in enumerate(counts):
            kind = "intra_node" if peer // self.g == self.rank // self.g else "inter_node"
            self.traffic[kind] += n * width * element

    def _move(self, send: torch.Tensor, rows: int, out_counts: list, in_counts: list) -> torch.Tensor:
        self._count(out_counts, send.size(1), send.element_size())
        return all_to_all_rows(send, rows, out_counts, in_counts, self.group)

    def forward(self, x_own: torch.Tensor) -> torch.Tensor:
        """x_own [own rows, D] -> the rank's halo rows [num_halo, D], in halo order."""
        r, dev = self.routes, x_own.device
        node_halo = self._move(
            x_own.index_select(0, self._on("send1_index", dev)), r.num_node_halo, r.send1_counts, r.recv1_counts
        )
        table = torch.cat([x_own, node_halo])
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
        back1 = self._move(table[rows:].contiguous(), int(r.send1_index.size), r.recv1_counts, r.send1_counts)
        grad = table[:rows].clone()
        add_blocks(grad, self._on("send1_index", dev), back1, r.send1_counts)
        return grad

    def __call__(self, x_own: torch.Tensor) -> torch.Tensor:
        return _Exchange.apply(x_own, self)


class NodeHalo(Halo):
    """The `node-halo` backend: the `halo` backend's op and layers over the two-stage exchange."""

    def __init__(self, dist_plan, graph):
        self.dist_plan = dist_plan
        routes = NodeRoutes(dist_plan.plan, dist_plan.gpus_per_node)
        self.exchange = NodeHaloExchange(routes, dist_plan.rank, dist_plan.group)
        self._ids: dict = {}

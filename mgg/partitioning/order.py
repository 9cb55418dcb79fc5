"""Node orders: the position each node takes in a one-process plan, so that the rows a stretch of
the kernel gathers lie close together in memory and in time (issue 51). An order is a one-rank
Partition whose perm is the order (perm[position] = the user's node id). `OrderedPlan` runs a
graph in an order while taking and giving tensors in the user's: it relabels the graph once (edges
keep their order within a row, so each row sums the same terms in the same order) and gathers x
into the order and the output back on each call (two passes over [nodes, D], against the
aggregation's one per edge).

The methods (ORDERS, names defined in mgg.plan.config):
- `user`: the user's order (the identity).
- `rcm`: reverse Cuthill-McKee on A + A^T (scipy.sparse.csgraph): a breadth-first order from a
  peripheral node that keeps each node's neighbours at nearby positions (small bandwidth).
- `degree`: by degree, highest first (hub rows, read most often, together at the front).
- `metis`: communities: METIS k-way parts of about METIS_PART_NODES nodes (pymetis), parts in turn,
  each in reverse Cuthill-McKee order.
- `random`: a seeded shuffle (the worst case an order can be; the benchmark's shuffled inputs).
`mgg.runtime.ordering` chooses among them by measurement (Config(order="auto"))."""

from __future__ import annotations

import time
from functools import cached_property
from typing import Optional

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import reverse_cuthill_mckee

from ..errors import MggError
from ..graph import Graph
from ..plan import Config, Plan
from ..plan.config import ORDERS, unknown_order
from .assignment import Partition
from .methods import metis_parts

METIS_PART_NODES = 4096  # nodes per METIS part of the `metis` order (a part's rows: 1 MB at D = 64, fp32)


def _symmetric(graph: Graph) -> sp.csr_matrix:
    """A + A^T as a 0/1 pattern (the structure the orders read; weights do not count)."""
    n = graph.num_nodes
    a = sp.csr_matrix((np.ones(graph.num_edges, np.int8), graph.col.numpy(), graph.rowptr.numpy()), shape=(n, n))
    s = (a + a.T).tocsr()
    s.sort_indices()
    return s


def _rcm(graph: Graph) -> np.ndarray:
    return np.asarray(reverse_cuthill_mckee(_symmetric(graph), symmetric_mode=True), np.int64)


def _degree(graph: Graph) -> np.ndarray:
    deg = graph.degree().numpy().astype(np.int64) + np.bincount(graph.col.numpy(), minlength=graph.num_nodes)
    return np.argsort(-deg, kind="stable").astype(np.int64)


def _metis(graph: Graph, seed: int) -> np.ndarray:
    n = graph.num_nodes
    parts = -(-n // METIS_PART_NODES)
    if parts < 2:
        return _rcm(graph)
    part = metis_parts(graph, parts, seed)
    rcm_position = np.empty(n, np.int64)
    rcm_position[_rcm(graph)] = np.arange(n, dtype=np.int64)
    return np.lexsort((rcm_position, part)).astype(np.int64)  # by part, then in RCM order


def node_order(graph: Graph, method: str = "rcm", seed: int = 0) -> Partition:
    """The order `method` (ORDERS) gives `graph`'s nodes.

    Args:
        graph: the graph in the user's order (its structure counts; weights do not).
        method: one of ORDERS.
        seed: the seed of `metis` and `random` (each is deterministic given it).

    Returns:
        A one-rank Partition: perm[position] = user id, its inverse, relabel(), the method and the
        seconds it took.
    """
    if method not in ORDERS:
        raise MggError(unknown_order(method))
    t0 = time.perf_counter()
    n = graph.num_nodes
    if method == "user":
        perm = np.arange(n, dtype=np.int64)
    elif method == "rcm":
        perm = _rcm(graph)
    elif method == "degree":
        perm = _degree(graph)
    elif method == "metis":
        perm = _metis(graph, seed)
    else:
        perm = np.random.default_rng(seed).permutation(n).astype(np.int64)
    return Partition(method, perm, np.array([0, n], np.int64), time.perf_counter() - t0, seed)


def given_order(perm, num_nodes: int, name: str = "given") -> Partition:
    """The user's own order: perm[position] = node id, a permutation of 0..num_nodes-1 (a tensor,
    array or sequence of integers). MggError, in one line, for anything else."""
    if isinstance(perm, Partition):
        if perm.num_ranks != 1:
            raise MggError(f"an order is a one-rank partition; this one has {perm.num_ranks} ranks")
        perm = perm.perm
    a = perm.detach().cpu().numpy() if isinstance(perm, torch.Tensor) else np.asarray(perm)
    if a.ndim != 1 or not (a.dtype.kind in "iu" or (a.size == 0 and a.dtype.kind == "f")):
        raise MggError(f"an order must be a 1-D integer permutation, got {a.dtype} of shape {tuple(a.shape)}")
    if a.size != num_nodes:
        raise MggError(f"an order must have one entry per node: {a.size} entries for {num_nodes} nodes")
    a = a.astype(np.int64)
    seen = np.zeros(num_nodes, bool)
    inside = (a >= 0) & (a < num_nodes)
    seen[a[inside]] = True
    if not inside.all() or not seen.all():
        bad = int(np.flatnonzero(~inside)[0]) if not inside.all() else None
        why = f"entry {bad} is {int(a[bad])}" if bad is not None else f"node {int(np.flatnonzero(~seen)[0])} is missing"
        raise MggError(f"an order must be a permutation of 0..{num_nodes - 1}: {why}")
    return Partition(name, a, np.array([0, num_nodes], np.int64))


class OrderedPlan(Plan):
    """A one-rank Plan of `graph` run in `order`: plan.graph is the relabelled graph the kernels
    walk, plan.user_graph the graph as given; aggregate, aggregate_extreme and attend take and
    return tensors in the user's node order (differentiable through the two gathers).

    Args:
        graph: the graph in the user's order.
        order: a one-rank Partition (node_order, given_order).
    """

    def __init__(self, graph: Graph, order: Partition):
        if order.num_nodes != graph.num_nodes or order.num_ranks != 1:
            raise MggError(f"an order of {order.num_nodes} nodes does not fit a graph of {graph.num_nodes}")
        super().__init__(order.relabel(graph))
        self.user_graph, self.order = graph, order
        self._index: dict = {}  # device -> (perm, inverse) as tensors there

    def __repr__(self) -> str:
        return f"OrderedPlan({self.order.method}, {self.graph.num_nodes} nodes, {self.graph.num_edges} edges)"

    @cached_property
    def _perm(self) -> torch.Tensor:
        return torch.from_numpy(self.order.perm)

    def _indices(self, device: torch.device) -> tuple:
        if device not in self._index:
            self._index[device] = (
                self._perm.to(device),
                torch.from_numpy(self.order.inverse).to(device),
            )
        return self._index[device]

    def _in(self, t: torch.Tensor) -> torch.Tensor:
        return t.index_select(0, self._indices(t.device)[0])

    def _out(self, t: torch.Tensor) -> torch.Tensor:
        return t.index_select(0, self._indices(t.device)[1])

    def aggregate(self, x: torch.Tensor, config: Optional[Config] = None, deterministic: bool = False) -> torch.Tensor:
        self._check_rows(x, "mgg.aggregate")
        return self._out(super().aggregate(self._in(x), config, deterministic))

    def aggregate_extreme(self, x: torch.Tensor, reduce: str, config: Optional[Config] = None) -> torch.Tensor:
        self._check_rows(x, "mgg.aggregate_extreme")
        return self._out(super().aggregate_extreme(self._in(x), reduce, config))

    def attend(self, h, a_src, a_dst, negative_slope=0.2, dropout=0.0, seed=0, config=None) -> torch.Tensor:
        self._check_attend(h, a_src, a_dst)  # before the gathers, which would hide a wrong row count
        out = super().attend(self._in(h), self._in(a_src), self._in(a_dst), negative_slope, dropout, seed, config)
        return self._out(out)

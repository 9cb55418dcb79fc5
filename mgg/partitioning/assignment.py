"""The node -> rank map, `Partition`: a node permutation plus rank bounds, so the plan machinery
stays as it is (ranks own contiguous ranges of the relabelled graph, mgg.plan). The methods that
compute one are in methods.py, `mgg.partition(...)` in compute.py.

The relabelling is invisible to users of mgg.distributed.DistGraph: it takes and gives tensors
in the user's node order."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..errors import PlanError
from ..graph import Graph
from ..plan.ranges import split_ranges

if TYPE_CHECKING:
    from ..plan import Plan


@dataclass(frozen=True, eq=False)
class Partition:
    """Ranks over a graph: rank r owns the nodes perm[bounds[r]:bounds[r + 1]] (user ids), which
    are rows bounds[r] .. bounds[r + 1] - 1 of the relabelled graph.

    Attributes:
        method: one of mgg.partitioning.METHODS.
        perm: int64 [nodes]: perm[new id] = the user's id of that node.
        bounds: int64 [P + 1]: the ranks' ranges of new ids.
        seconds: the time the partitioning took (when it was computed, for a cached result).
        seed: the method's seed.
        cached: whether this result came from the disk cache.
    """

    method: str
    perm: np.ndarray
    bounds: np.ndarray
    seconds: float = 0.0
    seed: int = 0
    cached: bool = False

    @property
    def num_ranks(self) -> int:
        return self.bounds.size - 1

    @property
    def num_nodes(self) -> int:
        return self.perm.size

    @cached_property
    def inverse(self) -> np.ndarray:
        """int64 [nodes]: inverse[user id] = the node's new id."""
        inv = np.empty_like(self.perm)
        inv[self.perm] = np.arange(self.perm.size, dtype=self.perm.dtype)
        return inv

    @cached_property
    def identity(self) -> bool:
        """Whether the relabelling changes nothing (always for `range`)."""
        return bool(np.array_equal(self.perm, np.arange(self.perm.size)))

    @cached_property
    def owner(self) -> np.ndarray:
        """int64 [nodes]: the rank that owns each node, by user id."""
        own = np.empty(self.num_nodes, np.int64)
        own[self.perm] = np.repeat(np.arange(self.num_ranks, dtype=np.int64), np.diff(self.bounds))
        return own

    def rank_nodes(self, rank: int) -> np.ndarray:
        """The user ids of rank `rank`'s rows, in row order."""
        return self.perm[self.bounds[rank] : self.bounds[rank + 1]]

    def relabel(self, graph: Graph) -> Graph:
        """The graph in the ranks' order: row i of the result is row perm[i] of `graph`, with
        source ids renumbered (edges keep their order within a row; weights travel with them).
        Works for any graph on the same nodes (a normalised or transposed one).

        Args:
            graph: a graph on the partition's nodes, in the user's order.

        Returns:
            The relabelled graph (`graph` itself for an identity permutation).
        """
        if graph.num_nodes != self.num_nodes:
            raise PlanError(f"partition of {self.num_nodes} nodes applied to a graph of {graph.num_nodes}")
        if self.identity:
            return graph
        rp = graph.rowptr.numpy()
        deg = np.diff(rp)[self.perm]
        rowptr = np.zeros(deg.size + 1, np.int64)
        np.cumsum(deg, out=rowptr[1:])
        # edge j of new row i is old edge rp[perm[i]] + (j - rowptr[i])
        take = np.repeat(rp[:-1][self.perm] - rowptr[:-1], deg) + np.arange(int(rowptr[-1]), dtype=np.int64)
        col = self.inverse[graph.col.numpy()[take]]
        w = None if graph.weight is None else torch.from_numpy(graph.weight.numpy()[take])
        return Graph._unchecked(torch.from_numpy(rowptr), torch.from_numpy(col), w)

    def to_user(self, rows: torch.Tensor) -> torch.Tensor:
        """A per-node tensor in the ranks' order (all ranks' rows, rank by rank) back in the
        user's order."""
        out = torch.empty_like(rows)
        out[torch.from_numpy(self.perm).to(rows.device)] = rows
        return out

    def plan(self, graph: Graph, gathered: bool = False) -> Plan:
        """The Plan of `graph` (user order) over these ranks: Plan(relabel(graph), bounds)
        (gathered: for the allgather backend)."""
        from ..plan import Plan

        return Plan(self.relabel(graph), bounds=self.bounds, gathered=gathered)

    def stats(self, graph: Graph) -> tuple[list[dict], dict]:
        """partition_stats of `graph` (user order) under this partition, with the method and its
        time in the total."""
        from ..plan.stats import partition_stats

        ranks, total = partition_stats(self.relabel(graph), self.bounds)
        return ranks, dict(method=self.method, **total, seconds=round(self.seconds, 3), cached=self.cached)


def from_parts(
    method: str, part: np.ndarray, num_ranks: int, weights: np.ndarray, seconds: float, seed: int
) -> Partition:
    """A partition from each node's part: parts in rank order, nodes in their order within a
    part. An empty part takes the lightest node of the part with the most nodes."""
    part = np.asarray(part, np.int64).copy()
    if part.size and (part.min() < 0 or part.max() >= num_ranks):
        raise PlanError(f"{method}: parts outside [0, {num_ranks})")
    counts = np.bincount(part, minlength=num_ranks)
    for empty in np.flatnonzero(counts == 0):
        donor = int(np.argmax(counts))  # has >= 2 nodes, as P <= nodes
        members = np.flatnonzero(part == donor)
        node = members[np.argmin(weights[members])]
        part[node] = empty
        counts[donor] -= 1
        counts[empty] += 1
    perm = np.argsort(part, kind="stable").astype(np.int64)
    bounds = np.zeros(num_ranks + 1, np.int64)
    np.cumsum(counts, out=bounds[1:])
    return Partition(method, perm, bounds, seconds, seed)


def range_partition(
    graph: Graph, num_ranks: int, method: str = "range", seconds: float = 0.0, seed: int = 0
) -> Partition:
    """MGG Algorithm 1 on the graph's own order (the `range` method)."""
    return Partition(
        method, np.arange(graph.num_nodes, dtype=np.int64), split_ranges(graph.rowptr, num_ranks), seconds, seed
    )

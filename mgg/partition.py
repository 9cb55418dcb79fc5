"""Which nodes each rank owns: a node permutation plus rank bounds, so the plan machinery stays
as it is (ranks own contiguous ranges of the relabelled graph, mgg.plan).

Methods:
- `range` (the default and the reference): MGG Algorithm 1 (split_ranges) on the graph's own
  order; the permutation is the identity.
- `random`: a seeded permutation, then Algorithm 1 on the relabelled graph (the seed papers'
  baseline: what a graph without useful order gives).
- `metis`: METIS k-way (pymetis), balanced by edges, minimising remote edges.
- `hypergraph`: Mt-KaHyPar (mtkahypar) on the column-net hypergraph, minimising the
  connectivity-minus-one volume, which is exactly the number of rows the ranks exchange.

A part's nodes keep their relative order; rank r owns part r. Parts the partitioner leaves empty
(it can on tiny graphs) get a node from the largest part. One rank has nothing to partition:
every method gives the identity, no package needed. `metis` and `hypergraph` results are kept
on disk (mgg.partition_cache), so a large graph is partitioned once.

The relabelling is invisible to users of mgg.distributed.DistGraph: it takes and gives tensors
in the user's node order.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property
from typing import Optional, Union

import numpy as np
import torch

from .errors import PlanError
from .graph import Graph
from .plan import Plan, split_ranges

METHODS = ("range", "random", "metis", "hypergraph")
CACHED = ("metis", "hypergraph")  # the methods worth keeping on disk
_RANDOM_STREAM = 0x72616E646F6D  # 'random': the random method's seed sequence is (seed, this)


@dataclass(frozen=True, eq=False)
class Partition:
    """Ranks over a graph: rank r owns the nodes perm[bounds[r]:bounds[r + 1]] (user ids), which
    are rows bounds[r] .. bounds[r + 1] - 1 of the relabelled graph.

    Attributes:
        method: one of METHODS.
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
        return self.perm[self.bounds[rank]:self.bounds[rank + 1]]

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
        return Plan(self.relabel(graph), bounds=self.bounds, gathered=gathered)

    def stats(self, graph: Graph) -> tuple[list[dict], dict]:
        """partition_stats of `graph` (user order) under this partition, with the method and its
        time in the total."""
        from .partition_stats import partition_stats

        ranks, total = partition_stats(self.relabel(graph), self.bounds)
        return ranks, dict(method=self.method, **total, seconds=round(self.seconds, 3), cached=self.cached)


def _from_parts(method: str, part: np.ndarray, num_ranks: int, weights: np.ndarray, seconds: float,
                seed: int) -> Partition:
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


def range_partition(graph: Graph, num_ranks: int, method: str = "range", seconds: float = 0.0,
                    seed: int = 0) -> Partition:
    """MGG Algorithm 1 on the graph's own order (the `range` method)."""
    return Partition(method, np.arange(graph.num_nodes, dtype=np.int64), split_ranges(graph.rowptr, num_ranks),
                     seconds, seed)


def _compute(graph: Graph, num_ranks: int, method: str, seed: int) -> Partition:
    t0 = time.perf_counter()
    if method == "range":
        return range_partition(graph, num_ranks, seconds=time.perf_counter() - t0, seed=seed)
    if method == "random":
        # a stream of its own: default_rng(seed)'s first permutation is the one mgg.synthetic's
        # generators scramble ids with, and applying it would restore their generation order
        perm = np.random.default_rng((seed, _RANDOM_STREAM)).permutation(graph.num_nodes).astype(np.int64)
        rowptr = np.zeros(graph.num_nodes + 1, np.int64)
        np.cumsum(graph.degree().numpy()[perm], out=rowptr[1:])
        return Partition(method, perm, split_ranges(rowptr, num_ranks), time.perf_counter() - t0, seed)
    from . import partitioners

    parts = partitioners.metis_parts if method == "metis" else partitioners.hypergraph_parts
    part = parts(graph, num_ranks, seed)
    return _from_parts(method, part, num_ranks, partitioners.node_weights(graph), time.perf_counter() - t0, seed)


def check(graph: Graph, num_ranks: int, method: str, seed: int) -> None:
    """PlanError unless the arguments of partition() are valid."""
    if method not in METHODS:
        raise PlanError(f"partition method must be one of {METHODS}, got {method!r}")
    if not isinstance(num_ranks, (int, np.integer)) or isinstance(num_ranks, bool) or num_ranks < 1:
        raise PlanError(f"ranks must be a positive integer, got {num_ranks!r}")
    if num_ranks > graph.num_nodes:
        raise PlanError(f"ranks ({num_ranks}) exceed the number of nodes ({graph.num_nodes})")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or not 0 <= seed < 2**31:
        raise PlanError(f"seed must be an integer in [0, 2^31), got {seed!r}")


def partition(graph: Graph, num_ranks: int, method: str = "range", seed: int = 0,
              cache: Union[bool, str, None] = True) -> Partition:
    """Which nodes each of P ranks owns.

    Args:
        graph: the graph, in the user's node order (its structure is what counts; weights are
            ignored).
        num_ranks: P, 1 <= P <= nodes. With P = 1 there is nothing to partition: the identity,
            whatever the method (no package needed).
        method: 'range' (MGG Algorithm 1, identity permutation), 'random', 'metis' (needs
            pymetis) or 'hypergraph' (needs mtkahypar); see the module docstring.
        seed: the seed of 'random', 'metis' and 'hypergraph' (each is deterministic given it).
        cache: 'metis' and 'hypergraph' results are kept on disk, keyed by the graph's content
            hash, P, method and seed: True for the default directory ($MGG_PARTITION_CACHE, else
            ~/.cache/mgg/partitions), a directory, or False for none.

    Returns:
        The Partition: permutation, its inverse, rank bounds, relabel() for the relabelled graph,
        the method and its time.
    """
    check(graph, num_ranks, method, seed)
    if num_ranks == 1:
        return range_partition(graph, 1, method, seed=seed)
    if method not in CACHED or cache is False:
        return _compute(graph, num_ranks, method, seed)
    from .partition_cache import PartitionCache

    store = PartitionCache(None if cache is True or cache is None else cache)
    hit: Optional[Partition] = store.get(graph, num_ranks, method, seed)
    if hit is not None:
        return hit
    result = _compute(graph, num_ranks, method, seed)
    store.put(graph, result)
    return result

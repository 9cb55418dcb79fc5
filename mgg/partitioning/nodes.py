"""Which nodes each rank of a cluster owns, as a cluster has them: the graph is first split between
the machines (`nodes` parts, by a method of mgg.partition: the one that cuts the least inter-node
volume by default), then each machine's part between its `gpus_per_node` ranks by MGG's ranges
(nonzeros balanced). Rank r sits on machine r // gpus_per_node, as torchrun numbers ranks."""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from ..errors import PlanError
from ..graph import Graph
from ..plan.ranges import split_ranges
from .assignment import Partition
from .compute import partition


def best_method() -> str:
    """The installed method that cuts the least inter-node volume: hypergraph (connectivity, the
    volume itself), else METIS (edge cut), else MGG's ranges."""
    for method, package in (("hypergraph", "mtkahypar"), ("metis", "pymetis")):
        try:
            __import__(package)
            return method
        except ImportError:
            continue
    return "range"


def node_partition(
    graph: Graph, nodes: int, gpus_per_node: int, method: Optional[str] = None, seed: int = 0, cache=True
) -> Partition:
    """The ranks' partition of a cluster of `nodes` machines of `gpus_per_node` ranks each.

    Args:
        graph: the graph in the user's node order.
        nodes: machines (N >= 1).
        gpus_per_node: ranks per machine (g >= 1); N * g ranks in all, at most one per node of the graph.
        method: how the graph is split between machines (a method of mgg.partition); None: best_method().
        seed, cache: as mgg.partition.

    Returns:
        A Partition of N * g ranks: machine n's ranks own consecutive ranges of the rows of its part.
    """
    for name, v in (("nodes", nodes), ("gpus_per_node", gpus_per_node)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise PlanError(f"{name} must be a positive integer, got {v!r}")
    t0 = time.perf_counter()
    method = method or best_method()
    outer = partition(graph, nodes, method, seed, cache)
    rowptr = graph.rowptr.numpy()
    degree = np.diff(rowptr)[outer.perm]  # in the machines' order
    bounds = [np.zeros(1, np.int64)]
    for n in range(nodes):
        lo, hi = int(outer.bounds[n]), int(outer.bounds[n + 1])
        if hi - lo < gpus_per_node:
            raise PlanError(
                f"machine {n}'s part has {hi - lo} nodes of the graph, fewer than its {gpus_per_node} ranks"
            )
        part_rowptr = np.zeros(hi - lo + 1, np.int64)
        np.cumsum(degree[lo:hi], out=part_rowptr[1:])
        bounds.append(lo + split_ranges(part_rowptr, gpus_per_node)[1:])
    seconds = outer.seconds + time.perf_counter() - t0
    return Partition(method, outer.perm, np.concatenate(bounds), seconds, seed, outer.cached)

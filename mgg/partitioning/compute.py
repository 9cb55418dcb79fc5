"""`mgg.partition(graph, P, method)`: checks its arguments, reads the disk cache (cache.py) for the
methods worth keeping, or computes (methods.py). One rank has nothing to partition: every method
gives the identity, no package needed."""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from ..errors import PlanError
from ..graph import Graph
from .assignment import Partition, range_partition
from .cache import PartitionCache
from .methods import CACHED, METHODS, compute


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


def partition(
    graph: Graph, num_ranks: int, method: str = "range", seed: int = 0, cache: Union[bool, str, None] = True
) -> Partition:
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
        return compute(graph, num_ranks, method, seed)
    store = PartitionCache(None if cache is True or cache is None else cache)
    hit: Optional[Partition] = store.get(graph, num_ranks, method, seed)
    if hit is not None:
        return hit
    result = compute(graph, num_ranks, method, seed)
    store.put(graph, result)
    return result

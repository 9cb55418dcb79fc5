"""What a partition costs in communication, per rank and in total: the figures the seed papers
report (local and remote edges, the communication volume in rows, the largest volume one rank
sends to one peer, edge and node imbalance).

The volume is counted the way the `halo` backend moves rows: rank r receives each distinct remote
node its rows read once (its halo rows), whatever the number of edges that read it. The total
over ranks is the connectivity-minus-one metric of the column-net hypergraph (a net per node v:
v and the nodes that read v), sum over nodes of the number of ranks other than v's own that read
v, which is what the `hypergraph` method minimises.
"""

from __future__ import annotations

import numpy as np

from ..graph import Graph


def _ratio(a: float, mean: float) -> float:
    """An imbalance: a over the mean (1.0 when there is nothing to balance)."""
    return round(float(a) / mean, 4) if mean else 1.0


def _fraction(part: int, whole: int) -> float:
    return round(float(part) / whole, 4) if whole else 0.0


def volume_matrix(graph: Graph, bounds) -> tuple[np.ndarray, np.ndarray]:
    """(volume, local): volume[q, r] the distinct rows of rank q's range that rank r's rows read (the
    rows q sends r in a halo exchange), local[r] rank r's edges from its own range."""
    bounds = np.asarray(bounds, np.int64)
    p, n = bounds.size - 1, graph.num_nodes
    rp, col = graph.rowptr.numpy(), graph.col.numpy()
    owner = np.repeat(np.arange(p, dtype=np.int64), np.diff(bounds))
    volume = np.zeros((p, p), np.int64)
    marked = np.zeros(n, bool)
    local = np.zeros(p, np.int64)
    for r in range(p):
        lo, hi = int(bounds[r]), int(bounds[r + 1])
        c = col[rp[lo] : rp[hi]]
        is_local = (c >= lo) & (c < hi)
        local[r] = int(is_local.sum())
        marked[c[~is_local]] = True  # distinct remote sources, by marking (O(E + N), no sort)
        halo = np.flatnonzero(marked)
        marked[halo] = False
        volume[:, r] = np.bincount(owner[halo], minlength=p)
    return volume, local


def partition_stats(graph: Graph, bounds) -> tuple[list[dict], dict]:
    """The communication of ranks that own contiguous ranges of a graph.

    Args:
        graph: the graph in the order the ranks own it (for mgg.partition's methods, the
            relabelled graph: Partition.relabel(graph)).
        bounds: int [P + 1]; rank r owns rows [bounds[r], bounds[r + 1]).

    Returns:
        (ranks, total). ranks: one dict per rank with nodes, edges, local_edges, remote_edges,
        remote_fraction, halo_rows (distinct peer rows it reads: the rows it receives),
        allgather_rows (the rows the allgather backend brings it: every other rank's),
        send_rows (rows its peers read from it), max_send_peer (the most rows it sends to one
        peer), edge_imbalance and node_imbalance (its edges and nodes over the mean). total: the
        sums, remote_fraction, halo_rows (= the connectivity-minus-one volume), allgather_rows,
        max_send_peer (the largest volume one rank sends to one peer), max_send_rows and
        max_recv_rows (the busiest sender's and receiver's rows), send_max_over_mean, and the
        largest imbalances.
    """
    bounds = np.asarray(bounds, np.int64)
    p, n, e = bounds.size - 1, graph.num_nodes, graph.num_edges
    rp = graph.rowptr.numpy()
    volume, local = volume_matrix(graph, bounds)
    edges = rp[bounds[1:]] - rp[bounds[:-1]]
    nodes = np.diff(bounds)
    mean_e, mean_n = e / p, n / p
    ranks = [
        dict(
            rank=r,
            nodes=int(nodes[r]),
            edges=int(edges[r]),
            local_edges=int(local[r]),
            remote_edges=int(edges[r] - local[r]),
            remote_fraction=_fraction(edges[r] - local[r], edges[r]),
            halo_rows=int(volume[:, r].sum()),
            allgather_rows=int(n - nodes[r]),
            send_rows=int(volume[r].sum()),
            max_send_peer=int(volume[r].max()),
            edge_imbalance=_ratio(edges[r], mean_e),
            node_imbalance=_ratio(nodes[r], mean_n),
        )
        for r in range(p)
    ]
    remote = int(e - local.sum())
    sends, recvs = volume.sum(1), volume.sum(0)
    total = dict(
        ranks=p,
        nodes=n,
        edges=e,
        local_edges=int(local.sum()),
        remote_edges=remote,
        remote_fraction=_fraction(remote, e),
        halo_rows=int(volume.sum()),
        allgather_rows=int((p - 1) * n),
        max_send_peer=int(volume.max()),
        max_send_rows=int(sends.max()),
        max_recv_rows=int(recvs.max()),
        send_max_over_mean=_ratio(sends.max(), sends.mean()),
        edge_imbalance=_ratio(edges.max(), mean_e),
        node_imbalance=_ratio(nodes.max(), mean_n),
    )
    return ranks, total

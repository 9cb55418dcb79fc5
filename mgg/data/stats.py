"""Degree statistics of a graph (`mgg info`, the synthetic stand-ins' comparison with the data
they stand in for)."""

from __future__ import annotations

import numpy as np

from ..graph import Graph


def gini(x: np.ndarray) -> float:
    """Gini coefficient of a degree sequence: 0 when all are equal, towards 1 when few hold all."""
    x = np.sort(np.asarray(x, np.float64))
    n = x.size
    return float((2 * np.arange(1, n + 1) - n - 1) @ x / (n * x.sum())) if n and x.sum() else 0.0


def degree_stats(g: Graph, exact: bool = True) -> dict:
    """The statistics a stand-in is compared on: average and maximum in-degree, isolated nodes
    (no edge in or out), degree skew (max/mean, share of edges at the top 1% of nodes, Gini of
    in-degrees); with exact=True also self-loops, duplicate edges and symmetry (one sort of the
    edges)."""
    n, e = g.num_nodes, g.num_edges
    indeg = g.degree().numpy()
    outdeg = np.bincount(g.col.numpy(), minlength=n)
    top = np.sort(indeg)[::-1][: max(1, n // 100)]
    out = dict(
        nodes=n,
        edges=e,
        avg_degree=e / n,
        max_degree=int(indeg.max()) if n else 0,
        max_over_avg=(indeg.max() / (e / n)) if e else 0.0,
        isolated=int(((indeg == 0) & (outdeg == 0)).sum()),
        top1pct_share=float(top.sum() / e) if e else 0.0,
        gini=gini(indeg),
    )
    out["isolated_fraction"] = out["isolated"] / n
    if exact:
        rows = g.rows().numpy()
        col = g.col.numpy()
        key = rows * n + col
        key.sort()
        rkey = col * n + rows
        out["self_loops"] = int((rows == col).sum())
        del rows, col
        out["duplicates"] = int(key.size - 1 - np.count_nonzero(np.diff(key))) if key.size else 0
        rkey.sort()
        out["symmetric"] = bool(np.array_equal(key, rkey))
    return out

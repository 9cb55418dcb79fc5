"""What each rank of the grid holds (plexus-3d-parallel.txt, sections 3 and 5.1): shard bounds as
torch's DTensor cuts a dimension (torch.chunk: pieces of ceil(n / parts), the last smaller, empty ones
at the end), the layers' roles (which axis splits the adjacency's rows, its columns and the features),
the double permutation and the adjacency shard of a layer.

A layer has three roles: `a` splits the adjacency's columns and the input features' rows (the sum of
the SpMM runs over it), `b` splits the features' columns, `c` splits the adjacency's rows (the
output's rows). Layer 0 is (x, y, z); each next layer is (c, a, b) of the one before, so that a
layer's output (rows over c, columns over a, copies over b) is the next one's input as it stands.

Double permutation: two seeded permutations P1 and P2 of the nodes; layer l's adjacency is
P1 A P2^T for even l and P2 A P1^T for odd l, so the input features are held in P2's order and the
output of an odd number of layers in P1's (an even number: P2's)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...graph import Graph

ROLES = (("x", "y", "z"), ("z", "x", "y"), ("y", "z", "x"))  # layer l: ROLES[l % 3] = (a, b, c)


def bounds(n: int, parts: int) -> list:
    """The cuts of n items into `parts` shards as torch.chunk / DTensor's Shard make them."""
    size = -(-n // parts) if parts else 0
    return [min(i * size, n) for i in range(parts + 1)]


def span(n: int, parts: int, i: int) -> tuple:
    b = bounds(n, parts)
    return b[i], b[i + 1]


def roles(layer: int) -> tuple:
    return ROLES[layer % 3]


@dataclass(frozen=True)
class Orders:
    """The node orders of the double permutation: positions[k][node] is the node's position in
    order k (k = 1 or 2); identity orders where the permutation is off."""

    first: np.ndarray  # P1: position of each node
    second: np.ndarray  # P2

    @staticmethod
    def make(num_nodes: int, permute: bool, seed: int = 0) -> "Orders":
        if not permute:
            ident = np.arange(num_nodes, dtype=np.int64)
            return Orders(ident, ident)
        rng = np.random.default_rng(seed)
        return Orders(rng.permutation(num_nodes).astype(np.int64), rng.permutation(num_nodes).astype(np.int64))

    def of_input(self, layer: int) -> np.ndarray:
        """Positions of the nodes in the order of layer `layer`'s input rows."""
        return self.second if layer % 2 == 0 else self.first

    def of_output(self, layer: int) -> np.ndarray:
        return self.first if layer % 2 == 0 else self.second

    @staticmethod
    def nodes_at(positions: np.ndarray) -> np.ndarray:
        """The inverse: node at each position."""
        out = np.empty_like(positions)
        out[positions] = np.arange(len(positions), dtype=positions.dtype)
        return out


def edges_in_order(graph: Graph, rows_at: np.ndarray, cols_at: np.ndarray):
    """The graph's edges (dst -> row, src -> column) as positions in the given orders, with weights."""
    dst = graph.rows().numpy()
    src = graph.col.numpy()
    w = graph.weight.numpy() if graph.weight is not None else np.ones(len(src))
    return rows_at[dst], cols_at[src], w


def balance(graph: Graph, row_parts: int, col_parts: int, orders: Orders) -> float:
    """max / mean nonzeros over the row_parts x col_parts shards of layer 0's adjacency
    (P1 A P2^T; the plain adjacency with identity orders)."""
    rows, cols, _ = edges_in_order(graph, orders.first, orders.second)
    n = graph.num_nodes
    ri = np.searchsorted(np.asarray(bounds(n, row_parts)[1:]), rows, side="right")
    ci = np.searchsorted(np.asarray(bounds(n, col_parts)[1:]), cols, side="right")
    counts = np.bincount(ri * col_parts + ci, minlength=row_parts * col_parts)
    mean = counts.mean()
    return float(counts.max() / mean) if mean > 0 else 1.0

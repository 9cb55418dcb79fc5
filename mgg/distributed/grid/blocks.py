"""Where a grid rank's adjacency blocks come from (what GridNet's layers aggregate over):

- `WholeGraph`: the whole graph, which every rank holds, normalised once (GCN: Graph.gcn_norm, SAGE:
  Graph.mean_norm, GIN: unweighted) and cut per layer in the layer's node orders (the double
  permutation, shards.Orders); blocks cut at torch.chunk's bounds, or at given ones.
- `PreparedBlocks`: a prepared dataset (mgg prepare) of which a rank reads only the blocks of its
  place (each a range of its row parts' edge files) and the ids and features of its rows, in the
  prepare's node order (its relabelling takes the permutation's place); blocks cut at the parts'
  bounds (consecutive parts merged). The normalisation needs each block row's degree over all its
  columns, summed over the ranks that hold the row's other blocks (an all-reduce over the layer's
  column axis), and each block column's, asked of a rank that holds that node's row (an exchange):
  the weights the whole graph's normalisation gives.

A block is (dst, src, weight) in ids local to the block's rows and columns, each row's edges in the
row's order (so a shard's plan sums as the whole graph's does)."""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ...errors import MggError
from ...graph import Graph
from ..comm import Exchange
from ..prepared import agree
from .shards import Orders, bounds, edges_in_order, roles


class WholeGraph:
    """The whole graph (module docstring). cuts: node bounds (e.g. a prepared dataset's parts) at
    which every axis cuts its blocks, consecutive pieces merged; None: torch.chunk's."""

    def __init__(self, graph: Graph, orders: Orders, conv: str, dtype: torch.dtype, cuts: Optional[np.ndarray] = None):
        self.num_nodes, self.orders, self.dtype = graph.num_nodes, orders, dtype
        self._cuts = None if cuts is None else np.asarray(cuts, np.int64)
        if conv == "gcn":
            self.adjacency = graph.gcn_norm(dtype=dtype)
        elif conv == "sage":
            self.adjacency = graph.mean_norm(dtype=dtype)
        else:
            self.adjacency = graph.unweighted()  # GIN sums its neighbours' rows
        self._edges: dict = {}

    def cuts(self, parts: int) -> list:
        return part_cuts(self._cuts, parts) if self._cuts is not None else bounds(self.num_nodes, parts)

    def node_ids(self, layer: int, span: tuple, side: str) -> np.ndarray:
        """The node (user id) at each position of `span` of layer's input or output order."""
        at = self.orders.of_input(layer) if side == "input" else self.orders.of_output(layer)
        return Orders.nodes_at(at)[slice(*span)]

    def block(self, layer: int, rows: tuple, cols: tuple) -> tuple:
        key = layer % 2  # the orders alternate by layer
        if key not in self._edges:
            self._edges[key] = edges_in_order(self.adjacency, self.orders.of_output(layer), self.orders.of_input(layer))
        r, c, w = self._edges[key]
        return cut(r, c, w, rows, cols)

    def identity_block(self, layer: int, rows: tuple, cols: tuple) -> tuple:
        ids = np.arange(self.num_nodes)
        r, c = self.orders.of_output(layer)[ids], self.orders.of_input(layer)[ids]
        return cut(r, c, np.ones(ids.size, _numpy(self.dtype)), rows, cols)


def cut(r: np.ndarray, c: np.ndarray, w: np.ndarray, rows: tuple, cols: tuple) -> tuple:
    """The entries of the block rows x cols, in local ids, in their order."""
    keep = (r >= rows[0]) & (r < rows[1]) & (c >= cols[0]) & (c < cols[1])
    return r[keep] - rows[0], c[keep] - cols[0], np.ascontiguousarray(w[keep])


def part_cuts(part_bounds: np.ndarray, pieces: int) -> list:
    """Bounds of `pieces` runs of consecutive parts (pieces must divide the parts)."""
    parts = part_bounds.size - 1
    if parts % pieces:
        raise MggError(f"grid: an axis of {pieces} cannot share {parts} prepared parts (it must divide them)")
    return [int(b) for b in part_bounds[:: parts // pieces]]


def _numpy(dtype: torch.dtype):
    return np.float64 if dtype == torch.float64 else np.float32


class PreparedBlocks:
    """A prepared dataset's blocks, read by this grid rank only (module docstring).

    Args:
        prepared: the opened directory (mgg.data.prepared.Prepared).
        grid: this rank's Grid (its axis groups normalise the blocks).
        conv: gcn, sage or gin.
        dtype: the weights' dtype.
    """

    def __init__(self, prepared, grid, conv: str, dtype: torch.dtype):
        self.prepared, self.grid, self.conv, self.dtype = prepared, grid, conv, dtype
        self.num_nodes = prepared.manifest.num_nodes
        self.exchange = Exchange()

    def cuts(self, parts: int) -> list:
        return part_cuts(self.prepared.bounds, parts)

    def parts(self, span: tuple) -> range:
        """The prepared parts that hold the nodes of `span` (positions in the relabelled order)."""
        b = self.prepared.bounds
        return range(int(np.searchsorted(b, span[0], side="right")) - 1, int(np.searchsorted(b, span[1], side="left")))

    def node_ids(self, layer: int, span: tuple, side: str) -> np.ndarray:
        return self.rows_of("ids", span)

    def rows_of(self, name: str, span: tuple) -> np.ndarray:
        """Rows [span) of a per-node file (ids, y, split), from the parts that hold them."""
        b, out = self.prepared.bounds, []
        for p in self.parts(span):
            lo, hi = max(span[0], int(b[p])), min(span[1], int(b[p + 1]))
            out.append(self.prepared.reads.array(f"parts/{p:05d}/{name}.npy", lo - int(b[p]), hi - int(b[p])))
        return np.concatenate(out) if out else np.zeros(0, np.int64)

    def features(self, span: tuple, c0: int, c1: int) -> np.ndarray:
        """Columns [c0, c1) of the features of the nodes in span."""
        b, out = self.prepared.bounds, []
        for p in self.parts(span):
            lo, hi = max(span[0], int(b[p])), min(span[1], int(b[p + 1]))
            out.append(self.prepared.features_rows(p, lo - int(b[p]), hi - int(b[p]), c0, c1))
        return np.concatenate(out) if out else np.zeros((0, c1 - c0), np.float32)

    def identity_block(self, layer: int, rows: tuple, cols: tuple) -> tuple:
        lo, hi = max(rows[0], cols[0]), min(rows[1], cols[1])
        ids = np.arange(lo, max(lo, hi))
        return ids - rows[0], ids - cols[0], np.ones(ids.size, _numpy(self.dtype))

    def block(self, layer: int, rows: tuple, cols: tuple) -> tuple:
        """The normalised block: read (its row parts' ranges of their edge files), then weighted
        as the whole graph's normalisation weights it (a collective of every grid rank)."""
        dst = src = w = None
        problem = None
        try:
            dst, src, w = self.prepared.block(self.parts(rows), self.parts(cols))
        except MggError as e:
            problem = str(e)
        agree(problem)  # every rank read its block, or every rank stops (none waits in a collective)
        keep = (dst >= rows[0]) & (dst < rows[1]) & (src >= cols[0]) & (src < cols[1])
        if not keep.all():  # (spans on part boundaries keep every edge read: no copies)
            dst, src, w = dst[keep], src[keep], None if w is None else w[keep]
        del keep
        dt = _numpy(self.dtype)
        w = np.ones(dst.size, dt) if w is None else w.astype(dt, copy=False)
        a, _, c = roles(layer)
        if self.conv == "gin":
            return dst - rows[0], src - cols[0], np.ones(dst.size, dt)
        if self.conv == "gcn":
            dst, src, w = _self_loops(dst, src, w, rows, cols)
        deg = np.zeros(rows[1] - rows[0], dt)
        np.add.at(deg, dst - rows[0], w) if self.conv == "gcn" else np.add.at(deg, dst - rows[0], 1)
        deg = sum_over_axis(self.grid, deg, a)  # the row's other blocks: over a
        if self.conv == "sage":
            deg = np.maximum(deg, 1).astype(dt)
            return dst - rows[0], src - cols[0], w / deg[dst - rows[0]]
        dis = _inverse_sqrt(deg)
        dis_src = self._column_values(layer, dis, rows, cols)
        return dst - rows[0], src - cols[0], dis[dst - rows[0]] * w * dis_src[src - cols[0]]

    def _column_values(self, layer: int, row_values: np.ndarray, rows: tuple, cols: tuple) -> np.ndarray:
        """row_values (held for the rows of this rank's block) at each node of `cols`, asked of the
        rank at coordinate 0 of the other axes whose block rows hold it (an exchange of all ranks)."""
        a, b, c = roles(layer)
        g = self.grid
        cuts = np.asarray(self.cuts(g.extent(c)), np.int64)
        ids = np.arange(cols[0], cols[1])
        piece = np.searchsorted(cuts, ids, side="right") - 1

        def owner(i: int) -> int:
            coord = {a: 0, b: 0, c: i}
            return g.shape.rank(coord["x"], coord["y"], coord["z"])

        world = g.shape.size
        ask = [ids[:0]] * world
        for i in np.unique(piece):
            ask[owner(int(i))] = ids[piece == i]
        asked = self.exchange(ask)
        serve = g.coord[a] == 0 and g.coord[b] == 0
        answers = self.exchange([row_values[q - rows[0]] if serve else row_values[:0] for q in asked])
        out = np.empty(ids.size, row_values.dtype)
        for i in np.unique(piece):
            out[piece == i] = answers[owner(int(i))]
        return out


def sum_over_axis(grid, values: np.ndarray, axis: str) -> np.ndarray:
    """values summed over the grid's `axis` (set-up, not a training step's: not counted in moved)."""
    if grid.extent(axis) == 1:
        return values
    t = grid.on_comm(torch.from_numpy(np.ascontiguousarray(values)))
    torch.distributed.all_reduce(t, group=grid.group[axis])
    return t.cpu().numpy()


def _self_loops(dst, src, w, rows: tuple, cols: tuple) -> tuple:
    """Graph.add_self_loops(existing='keep') on a block: a node of both its rows and columns keeps
    the weight of its last loop (else 1), its other loops dropped; the loops after every other edge,
    so each is the last of its row once Graph.from_edges sorts the rows (stably)."""
    loop = dst == src
    lo, hi = max(rows[0], cols[0]), min(rows[1], cols[1])
    nodes = np.arange(lo, max(lo, hi))
    loop_w = np.ones(nodes.size, w.dtype)
    loop_w[dst[loop] - lo] = w[loop]  # numpy assigns in order: the last loop of a node wins
    dst = np.concatenate([dst[~loop], nodes])
    src = np.concatenate([src[~loop], nodes])
    w = np.concatenate([w[~loop], loop_w])
    return dst, src, w


def _inverse_sqrt(deg: np.ndarray) -> np.ndarray:
    t = torch.from_numpy(deg).pow(-0.5)
    t[torch.isinf(t)] = 0
    return t.numpy()

"""A rank's rows of a graph it does not hold whole (a prepared dataset's part, mgg.data.prepared):
`PartGraph` is the CSR of rows [row_begin, row_end) of a graph of num_nodes nodes, sources as
global ids, over a group whose ranks hold the other ranges (`bounds`, the only partition book). It
answers what a layer's normalisation and a backend ask of an mgg.Graph, for its rows: the
transformations that stay inside a row (self-loops, the mean, dropping weights) alone, and those that
need another rank's rows (a source's degree for GCN's weights, the transpose, whether the graph is
symmetric) through an Exchange with the other ranks, which every rank calls at the same point. The
results are the rows the same transformation of the whole graph has, bit for bit."""

from __future__ import annotations

import hashlib
from typing import Optional

import numpy as np
import scipy.sparse as sp
import torch

from ..errors import GraphError, PlanError
from ..graph import SELF_LOOPS, Graph


class PartGraph:
    """Rows [bounds[rank], bounds[rank + 1]) of a graph (module docstring).

    Args:
        rowptr: int64 [rows + 1], col: int64 [edges] (global ids), weight: [edges] or None.
        bounds: int64 [world + 1], the ranges of the group's ranks.
        rank: this rank's place in `exchange`'s group.
        exchange: the all-to-all the transformations use (mgg.distributed.comm.Exchange).
        tag: names the graph and the transformations made of it, alike on every rank (its fingerprint).
    """

    def __init__(self, rowptr, col, weight, bounds, rank: int, exchange, tag: str):
        self.rowptr = torch.as_tensor(rowptr, dtype=torch.int64)
        self.col = torch.as_tensor(col, dtype=torch.int64)
        self.weight = None if weight is None else torch.as_tensor(weight)
        self.bounds = np.asarray(bounds, np.int64)
        self.rank, self.exchange, self.tag = rank, exchange, tag
        self._symmetric: Optional[bool] = None
        if self.rowptr.numel() != self.num_rows + 1:
            raise GraphError(f"rank {rank}: {self.rowptr.numel() - 1} rows, but its range has {self.num_rows}")

    # ---- facts -------------------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return int(self.bounds[-1])

    @property
    def row_begin(self) -> int:
        return int(self.bounds[self.rank])

    @property
    def row_end(self) -> int:
        return int(self.bounds[self.rank + 1])

    @property
    def num_rows(self) -> int:
        return self.row_end - self.row_begin

    @property
    def num_edges(self) -> int:
        """The edges of this rank's rows."""
        return self.col.numel()

    def degree(self) -> torch.Tensor:
        """In-degree of this rank's rows."""
        return self.rowptr[1:] - self.rowptr[:-1]

    def rows(self) -> torch.Tensor:
        """Destination (a global id) of every edge of this rank's rows."""
        return torch.repeat_interleave(torch.arange(self.row_begin, self.row_end), self.degree())

    def row_slice(self, lo: int, hi: int) -> tuple:
        """The CSR of rows [lo, hi): this rank's range only."""
        if (lo, hi) != (self.row_begin, self.row_end):
            raise PlanError(
                f"rank {self.rank} holds rows [{self.row_begin}, {self.row_end}) of the graph, not [{lo}, {hi}) "
                "(a prepared dataset's rank reads its own part)"
            )
        return self.rowptr.numpy(), self.col.numpy(), None if self.weight is None else self.weight.numpy()

    def fingerprint(self) -> str:
        return hashlib.sha1(self.tag.encode()).hexdigest()[:16]

    def __repr__(self) -> str:
        return (
            f"PartGraph(rows=[{self.row_begin}, {self.row_end}) of {self.num_nodes}, edges={self.num_edges}, "
            f"weighted={self.weight is not None})"
        )

    def _like(self, rowptr, col, weight, what: str) -> "PartGraph":
        return PartGraph(rowptr, col, weight, self.bounds, self.rank, self.exchange, f"{self.tag}|{what}")

    # ---- within a row ------------------------------------------------------------------------------
    def unweighted(self) -> "PartGraph":
        return self if self.weight is None else self._like(self.rowptr, self.col, None, "unweighted")

    def add_self_loops(self, fill_value: float = 1.0, existing: str = "keep") -> "PartGraph":
        """Graph.add_self_loops of this rank's rows (a row's loop is in the row)."""
        if existing not in SELF_LOOPS:
            raise GraphError(f"existing must be one of {SELF_LOOPS}, got {existing!r}")
        lo, n = self.row_begin, self.num_rows
        rows, col = self.rows().numpy() - lo, self.col.numpy()
        dt = self.weight.dtype if self.weight is not None else torch.float32
        w = self.weight.numpy() if self.weight is not None else np.ones(self.num_edges, np.float32)
        loop = rows + lo == col
        loop_w = np.full(n, fill_value, w.dtype if self.weight is not None else np.float32)
        if existing == "keep":
            loop_w[rows[loop]] = w[loop]
        elif existing == "add":
            np.add.at(loop_w, rows[loop], w[loop])
        keep = ~loop
        keep_w = self.weight is not None or fill_value != 1.0 or (existing == "add" and bool(loop.any()))
        new_rows = np.concatenate([rows[keep], np.arange(n)])
        new_col = np.concatenate([col[keep], np.arange(lo, lo + n)])
        order = np.argsort(new_rows, kind="stable")  # as Graph.from_edges: a row's edges in their order
        weight = torch.from_numpy(np.concatenate([w[keep], loop_w])[order]).to(dt) if keep_w else None
        rowptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(new_rows, minlength=n), out=rowptr[1:])
        return self._like(rowptr, new_col[order], weight, f"loops({fill_value},{existing})")

    def mean_norm(self, dtype: Optional[torch.dtype] = None) -> "PartGraph":
        dt = _norm_dtype(self, dtype)
        deg = self.degree().clamp(min=1).to(dt)
        w = self.weight.to(dt) if self.weight is not None else torch.ones(self.num_edges, dtype=dt)
        local = self.rows() - self.row_begin
        return self._like(self.rowptr, self.col, w / deg[local], f"mean({dt})")

    # ---- across ranks --------------------------------------------------------------------------------
    def gcn_norm(
        self,
        add_self_loops: bool = True,
        improved: bool = False,
        dtype: Optional[torch.dtype] = None,
        existing: str = "keep",
    ) -> "PartGraph":
        """Graph.gcn_norm of this rank's rows: the degree of a source another rank holds is asked of
        that rank (a collective)."""
        dt = _norm_dtype(self, dtype)
        g = self.add_self_loops(2.0 if improved else 1.0, existing) if add_self_loops else self
        w = g.weight.to(dt) if g.weight is not None else torch.ones(g.num_edges, dtype=dt)
        local = g.rows() - g.row_begin
        deg = torch.zeros(g.num_rows, dtype=dt).index_add_(0, local, w)
        dis = deg.pow(-0.5)
        dis[torch.isinf(dis)] = 0
        dis_src = torch.from_numpy(g.values_at(dis.numpy(), g.col.numpy()))
        return g._like(g.rowptr, g.col, dis[local] * w * dis_src, f"gcn({add_self_loops},{improved},{dt},{existing})")

    def values_at(self, own: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """own[v] for every global id in ids, where rank r holds own for its rows (a collective: the
        ids another rank holds are asked of it, each once)."""
        lo, hi = self.row_begin, self.row_end
        out = np.empty(ids.size, own.dtype)
        mine = (ids >= lo) & (ids < hi)
        out[mine] = own[ids[mine] - lo]
        away = np.unique(ids[~mine])
        owner = np.searchsorted(self.bounds, away, side="right") - 1
        cuts = np.searchsorted(owner, np.arange(self.bounds.size))
        asked = self.exchange([away[cuts[p] : cuts[p + 1]] for p in range(self.bounds.size - 1)])
        answers = self.exchange([own[a - lo] for a in asked])
        values = np.concatenate(answers) if answers else np.zeros(0, own.dtype)
        out[~mine] = values[np.searchsorted(away, ids[~mine])]
        return out

    def transpose(self) -> "PartGraph":
        """This rank's rows of the transposed graph, as Graph.transpose orders them (a row's edges by
        source, duplicates in their order): every edge goes to the rank that holds its source."""
        col, dst = self.col.numpy(), self.rows().numpy()
        owner = np.searchsorted(self.bounds, col, side="right") - 1
        order = np.argsort(owner, kind="stable")
        cuts = np.searchsorted(owner[order], np.arange(self.bounds.size))
        world = self.bounds.size - 1
        pieces = lambda a: [a[order[cuts[p] : cuts[p + 1]]] for p in range(world)]  # noqa: E731
        new_rows = np.concatenate(self.exchange(pieces(col))) - self.row_begin
        new_col = np.concatenate(self.exchange(pieces(dst)))
        # by row, then source; a repeated edge keeps its place: the pieces arrive in rank order, each in
        # its sender's edge order, and the sort is stable (the rank holding a source sent all its edges)
        final = np.lexsort((new_col, new_rows))
        weight = None
        if self.weight is not None:
            weight = torch.from_numpy(np.concatenate(self.exchange(pieces(self.weight.numpy())))[final])
        rowptr = np.zeros(self.num_rows + 1, np.int64)
        np.cumsum(np.bincount(new_rows, minlength=self.num_rows), out=rowptr[1:])
        return self._like(rowptr, new_col[final], weight, "T")

    @property
    def symmetric(self) -> bool:
        """Whether every edge u -> v has a reverse v -> u of the same weight (a collective, the first
        time; functools.cached_property is not used: before Python 3.12 it locks across instances)."""
        if self._symmetric is None:
            self._symmetric = self._is_symmetric()
        return self._symmetric

    def _is_symmetric(self) -> bool:
        t = self.transpose()

        def matrix(g: PartGraph):
            w = g.weight.numpy() if g.weight is not None else np.ones(g.num_edges, np.float32)
            m = sp.csr_matrix((w, g.col.numpy(), g.rowptr.numpy()), shape=(g.num_rows, g.num_nodes), copy=True)
            m.sum_duplicates()  # in place: on a copy, never on the graph's own arrays
            return m

        return self.exchange.all_true((matrix(self) != matrix(t)).nnz == 0)


def tell_readers(plan, rank: int, exchange) -> None:
    """Tells a plan of rank `rank`'s rows alone (Plan.told) what its peers read of its rows and every
    rank's halo size, from the peers themselves (the halo_return of the once mode needs them)."""
    halo = plan.halo_nodes(rank)
    world = plan.num_ranks
    owner = np.searchsorted(plan.bounds, halo, side="right") - 1
    cuts = np.searchsorted(owner, np.arange(world + 1))
    asked = exchange([halo[cuts[p] : cuts[p + 1]] for p in range(world)])
    first = exchange([np.array([cuts[p]], np.int64) for p in range(world)])
    sizes = exchange([np.array([halo.size], np.int64) for _ in range(world)])
    lo = int(plan.bounds[rank])
    readers = [(p, asked[p] - lo, int(first[p][0]) + np.arange(asked[p].size)) for p in range(world) if p != rank]
    plan.told(rank, readers, [int(s[0]) for s in sizes])


def _norm_dtype(g, dtype: Optional[torch.dtype]) -> torch.dtype:
    if dtype is None:
        return g.weight.dtype if g.weight is not None else torch.float32
    if dtype not in (torch.float32, torch.float64):
        raise GraphError(f"normalised weights are float32 or float64, got {dtype}")
    return dtype


def is_part(graph) -> bool:
    """Whether a graph is a rank's rows only (a PartGraph), not a whole mgg.Graph."""
    return isinstance(graph, PartGraph)


__all__ = ["PartGraph", "is_part", "Graph"]

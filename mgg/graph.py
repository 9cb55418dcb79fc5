"""The CSR graph type of mgg: 64-bit offsets, rows are destination nodes.

Row v lists the sources u of the edges u -> v, so aggregation over row v gathers the messages
that arrive at v (PyG's default flow, source_to_target).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Optional

import numpy as np
import scipy.sparse as sp
import torch

from .errors import GraphError


@dataclass(frozen=True)
class Graph:
    """A directed graph in CSR over destination rows. Constructing one validates it (once);
    graphs derived by mgg's own transformations are valid by construction and skip the check."""
    rowptr: torch.Tensor  # int64 [num_nodes + 1]
    col: torch.Tensor  # int64 [num_edges], source node of each edge
    weight: Optional[torch.Tensor] = None  # float32 [num_edges]

    def __post_init__(self):
        self.validate()

    @classmethod
    def _unchecked(cls, rowptr: torch.Tensor, col: torch.Tensor, weight: Optional[torch.Tensor] = None) -> "Graph":
        """A graph that is valid by construction (mgg's own transformations): no second check."""
        g = object.__new__(cls)
        object.__setattr__(g, "rowptr", rowptr)
        object.__setattr__(g, "col", col)
        object.__setattr__(g, "weight", weight)
        return g

    # ---- construction -------------------------------------------------------------------
    @staticmethod
    def from_csr(rowptr, col, weight=None, what: str = "graph") -> "Graph":
        rowptr = torch.as_tensor(np.asarray(rowptr), dtype=torch.int64)
        col = torch.as_tensor(np.asarray(col), dtype=torch.int64)
        if weight is not None:
            weight = torch.as_tensor(np.asarray(weight), dtype=torch.float32)
        try:
            return Graph(rowptr.contiguous(), col.contiguous(), None if weight is None else weight.contiguous())
        except GraphError as e:
            raise GraphError(f"{what}: {e}") from None

    @staticmethod
    def from_edges(src, dst, num_nodes: Optional[int] = None, weight=None, what: str = "graph") -> "Graph":
        """Edges src[i] -> dst[i]; duplicates are kept (they add up, as in PyG)."""
        src = np.asarray(src, dtype=np.int64).ravel()
        dst = np.asarray(dst, dtype=np.int64).ravel()
        if src.shape != dst.shape:
            raise GraphError(f"{what}: {src.size} sources but {dst.size} destinations")
        if src.size and min(src.min(), dst.min()) < 0:
            i = int(np.flatnonzero((src < 0) | (dst < 0))[0])
            raise GraphError(f"{what}: edge {i} ({src[i]} -> {dst[i]}) has a negative node id")
        inferred = int(max(src.max(), dst.max())) + 1 if src.size else 0
        n = inferred if num_nodes is None else int(num_nodes)
        if n <= 0:
            raise GraphError(f"{what}: empty graph (no nodes)")
        if inferred > n:
            i = int(np.flatnonzero((src >= n) | (dst >= n))[0])
            raise GraphError(f"{what}: edge {i} ({src[i]} -> {dst[i]}) has a node id >= num_nodes {n}")
        order = np.argsort(dst, kind="stable")
        counts = np.bincount(dst, minlength=n)
        rowptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=rowptr[1:])
        w = None if weight is None else np.asarray(weight, dtype=np.float32).ravel()
        if w is not None and w.size != src.size:
            raise GraphError(f"{what}: {w.size} edge weights for {src.size} edges")
        if w is not None and not np.isfinite(w).all():
            raise GraphError(f"{what}: edge weights have non-finite entries")
        return Graph._unchecked(torch.from_numpy(rowptr), torch.from_numpy(np.ascontiguousarray(src[order])),
                                None if w is None else torch.from_numpy(np.ascontiguousarray(w[order])))

    @staticmethod
    def from_edge_index(edge_index, num_nodes: Optional[int] = None, edge_weight=None) -> "Graph":
        """A PyG edge_index [2, E] (row 0: source, row 1: target)."""
        ei = torch.as_tensor(edge_index)
        if ei.dim() != 2 or ei.size(0) != 2:
            raise GraphError(f"edge_index: expected shape [2, num_edges], got {list(ei.shape)}")
        ei = ei.detach().cpu().numpy()
        w = None if edge_weight is None else torch.as_tensor(edge_weight).detach().cpu().numpy()
        return Graph.from_edges(ei[0], ei[1], num_nodes, w, what="edge_index")

    @staticmethod
    def from_scipy(mat, what: str = "sparse matrix") -> "Graph":
        """Entry (i, j) of the matrix is the edge j -> i: row i aggregates column j."""
        m = sp.csr_matrix(mat)
        if m.shape[0] != m.shape[1]:
            raise GraphError(f"{what}: adjacency must be square, got shape {m.shape}")
        m.sort_indices()
        w = m.data.astype(np.float32)
        weight = None if np.all(w == 1.0) else w
        return Graph.from_csr(m.indptr.astype(np.int64), m.indices.astype(np.int64), weight, what)

    # ---- facts ----------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return self.rowptr.numel() - 1

    @property
    def num_edges(self) -> int:
        return self.col.numel()

    def degree(self) -> torch.Tensor:
        """In-degree of every node (edges per row)."""
        return self.rowptr[1:] - self.rowptr[:-1]

    @cached_property
    def symmetric(self) -> bool:
        """Whether every edge u -> v has a reverse v -> u of the same weight (computed once)."""
        return self.is_symmetric()

    def validate(self) -> None:
        rp, col = self.rowptr, self.col
        if rp.dtype != torch.int64 or col.dtype != torch.int64:
            raise GraphError(f"rowptr and col must be int64, got {rp.dtype} and {col.dtype}")
        if rp.dim() != 1 or rp.numel() < 2:
            raise GraphError("empty graph (no nodes): rowptr needs at least 2 entries")
        if int(rp[0]) != 0:
            raise GraphError(f"rowptr[0] must be 0, got {int(rp[0])}")
        if int(rp[-1]) != col.numel():
            raise GraphError(f"rowptr[-1] = {int(rp[-1])} but there are {col.numel()} column indices")
        bad = torch.nonzero(rp[1:] < rp[:-1])
        if bad.numel():
            i = int(bad[0])
            raise GraphError(f"rowptr is not monotonic: rowptr[{i + 1}] = {int(rp[i + 1])} < "
                             f"rowptr[{i}] = {int(rp[i])}")
        if col.numel():
            lo, hi = int(col.min()), int(col.max())
            if lo < 0 or hi >= self.num_nodes:
                i = int(torch.nonzero((col < 0) | (col >= self.num_nodes))[0])
                raise GraphError(f"col[{i}] = {int(col[i])} is outside [0, {self.num_nodes})")
        if self.weight is not None:
            if self.weight.shape != col.shape:
                raise GraphError(f"weight has shape {list(self.weight.shape)}, expected [{col.numel()}]")
            if not torch.isfinite(self.weight).all():
                raise GraphError("weight has non-finite entries")

    def rows(self) -> torch.Tensor:
        """Destination node of every edge."""
        return torch.repeat_interleave(torch.arange(self.num_nodes), self.degree())

    def edge_index(self) -> torch.Tensor:
        return torch.stack([self.col, self.rows()])

    def to_scipy(self) -> sp.csr_matrix:
        w = self.weight.numpy() if self.weight is not None else np.ones(self.num_edges, dtype=np.float32)
        n = self.num_nodes
        return sp.csr_matrix((w, self.col.numpy(), self.rowptr.numpy()), shape=(n, n))

    def to_torch_sparse(self, dtype=torch.float32) -> torch.Tensor:
        """The aggregation matrix as a torch sparse CSR tensor (the cuSPARSE oracle)."""
        w = self.weight if self.weight is not None else torch.ones(self.num_edges)
        n = self.num_nodes
        return torch.sparse_csr_tensor(self.rowptr, self.col, w.to(dtype), (n, n), check_invariants=False)

    @cached_property
    def _fingerprint(self) -> str:
        h = hashlib.sha1()
        h.update(np.int64(self.num_nodes).tobytes())
        h.update(self.rowptr.numpy().tobytes())
        h.update(self.col.numpy().tobytes())
        if self.weight is not None:
            h.update(self.weight.numpy().tobytes())
        return h.hexdigest()[:16]

    def fingerprint(self) -> str:
        """A stable hash of the structure and weights (for caches keyed by graph; computed once)."""
        return self._fingerprint

    # ---- transformations -------------------------------------------------------------------
    def transpose(self) -> "Graph":
        """The graph with every edge reversed (the backward pass aggregates over it)."""
        t = self.to_scipy().T.tocsr()
        t.sort_indices()
        w = None if self.weight is None else torch.from_numpy(np.ascontiguousarray(t.data, dtype=np.float32))
        return Graph._unchecked(torch.from_numpy(t.indptr.astype(np.int64)),
                                torch.from_numpy(t.indices.astype(np.int64)), w)

    def is_symmetric(self) -> bool:
        a = self.to_scipy()
        return (a != a.T).nnz == 0

    def add_self_loops(self, fill_value: float = 1.0) -> "Graph":
        """One self-loop per node, as PyG's add_remaining_self_loops: a node that already has
        self-loops keeps one with the weight of its last; the others get fill_value."""
        rows, col = self.rows().numpy(), self.col.numpy()
        w = self.weight.numpy() if self.weight is not None else np.ones(self.num_edges, np.float32)
        loop = rows == col
        loop_w = np.full(self.num_nodes, fill_value, np.float32)
        loop_w[rows[loop]] = w[loop]  # numpy assigns in order: the last loop of a node wins
        nodes = np.arange(self.num_nodes)
        keep = ~loop
        keep_w = self.weight is not None or fill_value != 1.0
        return Graph.from_edges(np.concatenate([col[keep], nodes]), np.concatenate([rows[keep], nodes]),
                                self.num_nodes, np.concatenate([w[keep], loop_w]) if keep_w else None,
                                what="graph with self-loops")

    def gcn_norm(self, add_self_loops: bool = True, improved: bool = False) -> "Graph":
        """Kipf & Welling's D^-1/2 (A + I) D^-1/2 with the degree taken at the destination, as
        in PyG's gcn_norm."""
        g = self.add_self_loops(2.0 if improved else 1.0) if add_self_loops else self
        w = g.weight if g.weight is not None else torch.ones(g.num_edges)
        deg = torch.zeros(g.num_nodes).index_add_(0, g.rows(), w)
        dis = deg.pow(-0.5)
        dis[torch.isinf(dis)] = 0
        return Graph._unchecked(g.rowptr, g.col, (dis[g.rows()] * w * dis[g.col]).float())

    def mean_norm(self) -> "Graph":
        """Weights 1/in-degree: aggregation becomes the mean over neighbors."""
        deg = self.degree().clamp(min=1).float()
        w = self.weight if self.weight is not None else torch.ones(self.num_edges)
        return Graph._unchecked(self.rowptr, self.col, (w / deg[self.rows()]).float())

    def __repr__(self) -> str:
        return f"Graph(nodes={self.num_nodes}, edges={self.num_edges}, weighted={self.weight is not None})"


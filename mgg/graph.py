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

MAX_NODES = 2**31 - 1  # the plan's per-rank node ids and offsets are int32
SPARSE_IDS_PER_EDGE, SPARSE_IDS_SLACK = 16, 1_000_000  # inferred nodes <= 16 * edges + 1,000,000
BYTES_PER_NODE = 24  # building a CSR: the row pointers (int64) and the counting sort's per-row arrays


def node_count_problem(n: int, num_edges: Optional[int] = None) -> Optional[str]:
    """Why a node count is refused, or None: more nodes than a plan can index (MAX_NODES), or,
    when the count is inferred from the largest id (num_edges given), far more than the edges
    explain (ids so sparse that the graph would be mostly empty rows: more than 16 per edge +
    1,000,000), which is what a file of unnumbered ids (hashes, user ids) gives."""
    fix = "relabel the ids to 0..N-1 (--relabel, or relabel=True, numbers the distinct ids in sorted order)"
    if n > MAX_NODES:
        return f"{n:,} nodes, more than the {MAX_NODES:,} a plan can index (its node ids are int32); {fix}"
    if num_edges is not None and n > SPARSE_IDS_PER_EDGE * num_edges + SPARSE_IDS_SLACK:
        return (
            f"node id {n - 1:,} would make {n:,} nodes for {num_edges:,} edges (more than "
            f"{SPARSE_IDS_PER_EDGE} per edge + {SPARSE_IDS_SLACK:,}: sparse ids); {fix}"
        )
    free = available_memory()
    if free is not None and n * BYTES_PER_NODE > free:
        return (
            f"{n:,} nodes need {n * BYTES_PER_NODE / 2**30:.1f} GiB for the graph's per-node arrays, more "
            f"than the {free / 2**30:.1f} GiB of memory available"
            + (" (is the declared size right?)" if num_edges is None else f"; {fix}")
        )
    return None


_CGROUP_MEMORY = (  # (limit, use): cgroup v2, then v1 (a container's memory)
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
)


def available_memory() -> Optional[int]:
    """Bytes of memory this process may still take: the kernel's MemAvailable, or less where a
    cgroup (a container) limits it; None where neither says (not Linux)."""
    free = []
    try:
        with open("/proc/meminfo") as f:
            free += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    for limit, use in _CGROUP_MEMORY:
        try:
            with open(limit) as f, open(use) as g:
                free.append(int(f.read()) - int(g.read()))  # v2's unlimited "max" is a ValueError
        except (OSError, ValueError):
            pass
    return min(free) if free else None


def _ids(a, name: str, what: str) -> np.ndarray:
    """A flat integer array (int32 stays int32); float arrays of whole numbers are converted."""
    a = np.asarray(a).ravel()
    if a.dtype.kind in "iu":
        return a
    if a.size == 0 or (a.dtype.kind == "f" and np.array_equal(a, np.floor(a))):
        return a.astype(np.int64)
    raise GraphError(f"{what}: node ids ({name}) must be integers, got dtype {a.dtype}")


def _real_weights(weight, what: str) -> None:
    """Complex weights are refused: converting them would drop the imaginary part in silence."""
    if weight is not None and (
        weight.is_complex() if isinstance(weight, torch.Tensor) else np.iscomplexobj(np.asarray(weight))
    ):
        raise GraphError(f"{what}: complex edge weights are not supported (a weight is one real number)")


def _edge_with(src, dst, node) -> str:
    i = int(np.flatnonzero((src == node) | (dst == node))[0])
    return f"edge {i} ({src[i]} -> {dst[i]})"


def _nondecreasing(a: np.ndarray, chunk: int = 1 << 22) -> bool:
    """Whether a is sorted; chunk by chunk, so unsorted input is told at once."""
    for i in range(0, a.size - 1, chunk):
        part = a[i : i + chunk + 1]
        if not bool((part[1:] >= part[:-1]).all()):
            return False
    return True


def _coo_to_csr(row, col, n: int, w):
    """Stable counting sort of the entries (row[i], col[i]) by row: (rowptr, col, weight) with
    int64 indices. Input already sorted by row needs none. Otherwise scipy's coo_tocsr (one
    pass, O(E + n)) on 32-bit indices while they fit; for large unweighted input in two passes,
    by the top 8 bits of the row first and then by row, which keeps the scattered writes within
    cache-sized windows (about twice as fast at 1e8 edges). About 20 bytes per edge besides the
    inputs and the result."""
    e = row.size
    if e == 0 or _nondecreasing(row):
        rowptr = np.searchsorted(row, np.arange(n + 1), side="left").astype(np.int64)
        return rowptr, col.astype(np.int64, copy=False), w
    try:
        from scipy.sparse._sparsetools import coo_tocsr
    except ImportError:  # pragma: no cover - a scipy without the private module
        order = np.argsort(row, kind="stable")
        rowptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(row, minlength=n), out=rowptr[1:])
        return rowptr, col[order].astype(np.int64), None if w is None else w[order]
    idx = np.int32 if max(n, e) < 2**31 else np.int64
    ai, aj = row.astype(idx, copy=False), col.astype(idx, copy=False)
    shift = max(0, (n - 1).bit_length() - 8)
    if w is None and shift >= 8 and e >= 1 << 22:
        nb = ((n - 1) >> shift) + 1
        top = np.right_shift(ai, shift, dtype=idx)
        bp, aj1, ai1 = np.empty(nb + 1, idx), np.empty(e, idx), np.empty(e, idx)
        coo_tocsr(nb, n, e, top, aj, ai, bp, aj1, ai1)  # by bucket, the row carried as the value
        del ai, aj
        ones = np.ones(e, np.int8)  # values and their output in one buffer: every value is 1
        rowptr = np.empty(n + 1, idx)
        coo_tocsr(n, n, e, ai1, aj1, ones, rowptr, top, ones)  # by row, within buckets; into top
        del ai1, aj1, ones
        return rowptr.astype(np.int64), top.astype(np.int64), None
    ax = np.ones(e, np.int8) if w is None else w
    bp, bj, bx = np.empty(n + 1, idx), np.empty(e, idx), np.empty(e, ax.dtype)
    coo_tocsr(n, n, e, ai, aj, ax, bp, bj, bx)
    del ai, aj, ax
    return bp.astype(np.int64), bj.astype(np.int64), None if w is None else bx


def weight_dtype(weight) -> torch.dtype:
    """The precision edge weights are kept in: float64 for a torch float64 tensor (a float64
    model's edge_weight, whose sums must not lose precision to the weights), float32 for anything
    else (files, numpy, lists, float32 and half tensors). The CUDA kernels read weights as fp32."""
    return torch.float64 if isinstance(weight, torch.Tensor) and weight.dtype == torch.float64 else torch.float32


_NUMPY = {torch.float32: np.float32, torch.float64: np.float64}
SELF_LOOPS = ("keep", "add", "replace")  # Graph.add_self_loops: what becomes of existing loops


@dataclass(frozen=True)
class Graph:
    """A directed graph in CSR over destination rows. Constructing one validates it (once);
    graphs derived by mgg's own transformations are valid by construction and skip the check."""

    rowptr: torch.Tensor  # int64 [num_nodes + 1]
    col: torch.Tensor  # int64 [num_edges], source node of each edge
    weight: Optional[torch.Tensor] = None  # float32 (or float64: weight_dtype) [num_edges]

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
        rowptr, col = np.asarray(rowptr), np.asarray(col)
        for name, a in (("rowptr", rowptr), ("col", col)):
            if a.size and a.dtype.kind not in "iu":
                raise GraphError(f"{what}: {name} must be integers, got dtype {a.dtype}")
        rowptr = torch.as_tensor(rowptr, dtype=torch.int64)
        col = torch.as_tensor(col, dtype=torch.int64)
        _real_weights(weight, what)
        if weight is not None:
            weight = torch.as_tensor(np.asarray(weight), dtype=weight_dtype(weight))
        try:
            return Graph(rowptr.contiguous(), col.contiguous(), None if weight is None else weight.contiguous())
        except GraphError as e:
            raise GraphError(f"{what}: {e}") from None

    @staticmethod
    def from_edges(src, dst, num_nodes: Optional[int] = None, weight=None, what: str = "graph") -> "Graph":
        """Edges src[i] -> dst[i]; duplicates are kept (they add up, as in PyG), and within a row
        the edges keep their input order. Node ids past what a plan can index (MAX_NODES), or, with
        num_nodes inferred, far past the edge count (sparse ids, see node_count_problem), are
        refused before anything of the graph's size is allocated."""
        src, dst = _ids(src, "sources", what), _ids(dst, "destinations", what)
        if src.shape != dst.shape:
            raise GraphError(f"{what}: {src.size} sources but {dst.size} destinations")
        if src.size and min(src.min(), dst.min()) < 0:
            i = int(np.flatnonzero((src < 0) | (dst < 0))[0])
            raise GraphError(f"{what}: edge {i} ({src[i]} -> {dst[i]}) has a negative node id")
        top = int(max(src.max(), dst.max())) if src.size else -1
        if num_nodes is None:
            why = node_count_problem(top + 1, src.size) if top >= 0 else None
            if why:
                raise GraphError(f"{what}: {_edge_with(src, dst, top)}: {why}")
            n = top + 1
        else:
            n = int(num_nodes)
            why = node_count_problem(n)
            if why:
                raise GraphError(f"{what}: num_nodes: {why}")
        if n <= 0:
            raise GraphError(f"{what}: empty graph (no nodes)")
        if top >= n:
            i = int(np.flatnonzero((src >= n) | (dst >= n))[0])
            raise GraphError(f"{what}: edge {i} ({src[i]} -> {dst[i]}) has a node id >= num_nodes {n}")
        _real_weights(weight, what)
        wdt = weight_dtype(weight)
        w = None if weight is None else np.asarray(weight, dtype=_NUMPY[wdt]).ravel()
        if w is not None and w.size != src.size:
            raise GraphError(f"{what}: {w.size} edge weights for {src.size} edges")
        if w is not None and not np.isfinite(w).all():
            raise GraphError(f"{what}: edge weights have non-finite entries")
        rowptr, col, w = _coo_to_csr(dst, src, n, w)  # valid by construction: no second check
        return Graph._unchecked(
            torch.from_numpy(np.ascontiguousarray(rowptr, np.int64)),
            torch.from_numpy(np.ascontiguousarray(col, np.int64)),
            None if w is None else torch.from_numpy(np.ascontiguousarray(w, _NUMPY[wdt])),
        )

    @staticmethod
    def from_edge_index(edge_index, num_nodes: Optional[int] = None, edge_weight=None) -> "Graph":
        """A PyG edge_index [2, E] (row 0: source, row 1: target)."""
        ei = torch.as_tensor(edge_index)
        if ei.dim() != 2 or ei.size(0) != 2:
            raise GraphError(f"edge_index: expected shape [2, num_edges], got {list(ei.shape)}")
        ei = ei.detach().cpu().numpy()
        w = None if edge_weight is None else torch.as_tensor(edge_weight).detach().cpu()
        return Graph.from_edges(ei[0], ei[1], num_nodes, w, what="edge_index")

    @staticmethod
    def from_scipy(mat, what: str = "sparse matrix") -> "Graph":
        """Entry (i, j) of the matrix is the edge j -> i: row i aggregates column j. A CSR
        matrix's rows are taken as stored (duplicate entries stay separate edges)."""
        m = sp.csr_matrix(mat)
        if m.shape[0] != m.shape[1]:
            raise GraphError(f"{what}: adjacency must be square, got shape {m.shape}")
        _real_weights(m.data, what)
        w = m.data.astype(np.float32)  # rows as stored: a row's neighbours keep their order
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
            raise GraphError(
                f"rowptr is not monotonic: rowptr[{i + 1}] = {int(rp[i + 1])} < rowptr[{i}] = {int(rp[i])}"
            )
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

    def row_slice(self, lo: int, hi: int) -> tuple:
        """The CSR of rows [lo, hi) as numpy arrays: (rowptr from 0, col (global ids), weight or None)."""
        rp = self.rowptr.numpy()
        e0, e1 = int(rp[lo]), int(rp[hi])
        w = None if self.weight is None else self.weight.numpy()[e0:e1]
        return rp[lo : hi + 1] - e0, self.col.numpy()[e0:e1], w

    def unweighted(self) -> "Graph":
        """The same edges without weights."""
        return self if self.weight is None else Graph._unchecked(self.rowptr, self.col)

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
        w = None if self.weight is None else torch.from_numpy(np.ascontiguousarray(t.data, dtype=t.data.dtype))
        return Graph._unchecked(
            torch.from_numpy(t.indptr.astype(np.int64)), torch.from_numpy(t.indices.astype(np.int64)), w
        )

    def is_symmetric(self) -> bool:
        a = self.to_scipy()
        return (a != a.T).nnz == 0

    def add_self_loops(self, fill_value: float = 1.0, existing: str = "keep") -> "Graph":
        """A self-loop of weight fill_value per node. What becomes of the loops the graph has:
        'keep' (PyG's add_remaining_self_loops, what GCNConv does to an edge_index): a node that
        has some keeps one, with the weight of its last, and gets no new one; 'add' (PyG's
        add_self_loops on a torch sparse adjacency, which GCNConv coalesces): their weights are
        added to the new one's, so a mean counts one loop per node as PyG's does; 'replace'
        (torch_sparse's fill_diag, for a SparseTensor): they are dropped."""
        if existing not in SELF_LOOPS:
            raise GraphError(f"existing must be one of {SELF_LOOPS}, got {existing!r}")
        rows, col = self.rows().numpy(), self.col.numpy()
        wdt = self.weight.dtype if self.weight is not None else torch.float32
        w = self.weight.numpy() if self.weight is not None else np.ones(self.num_edges, np.float32)
        loop = rows == col
        loop_w = np.full(self.num_nodes, fill_value, _NUMPY[wdt])
        if existing == "keep":
            loop_w[rows[loop]] = w[loop]  # numpy assigns in order: the last loop of a node wins
        elif existing == "add":  # summed into the new loop, as the coalesced adjacency has them
            np.add.at(loop_w, rows[loop], w[loop])
        nodes = np.arange(self.num_nodes)
        keep = ~loop
        keep_w = self.weight is not None or fill_value != 1.0 or (existing == "add" and bool(loop.any()))
        w = torch.from_numpy(np.concatenate([w[keep], loop_w])) if keep_w else None
        return Graph.from_edges(
            np.concatenate([col[keep], nodes]),
            np.concatenate([rows[keep], nodes]),
            self.num_nodes,
            w,
            what="graph with self-loops",
        )

    def _norm_dtype(self, dtype: Optional[torch.dtype]) -> torch.dtype:
        if dtype is None:
            return self.weight.dtype if self.weight is not None else torch.float32
        if dtype not in (torch.float32, torch.float64):
            raise GraphError(f"normalised weights are float32 or float64, got {dtype}")
        return dtype

    def gcn_norm(
        self,
        add_self_loops: bool = True,
        improved: bool = False,
        dtype: Optional[torch.dtype] = None,
        existing: str = "keep",
    ) -> "Graph":
        """Kipf & Welling's D^-1/2 (A + I) D^-1/2 with the degree taken at the destination, as
        in PyG's gcn_norm, computed in `dtype` (default: the weights' precision; a float64 model
        asks for float64, as PyG computes it in x's dtype); `existing` as in add_self_loops."""
        dt = self._norm_dtype(dtype)
        g = self.add_self_loops(2.0 if improved else 1.0, existing) if add_self_loops else self
        w = g.weight.to(dt) if g.weight is not None else torch.ones(g.num_edges, dtype=dt)
        deg = torch.zeros(g.num_nodes, dtype=dt).index_add_(0, g.rows(), w)
        dis = deg.pow(-0.5)
        dis[torch.isinf(dis)] = 0
        return Graph._unchecked(g.rowptr, g.col, dis[g.rows()] * w * dis[g.col])

    def mean_norm(self, dtype: Optional[torch.dtype] = None) -> "Graph":
        """Weights 1/in-degree: aggregation becomes the mean over neighbors (in `dtype`, as
        gcn_norm)."""
        dt = self._norm_dtype(dtype)
        deg = self.degree().clamp(min=1).to(dt)
        w = self.weight.to(dt) if self.weight is not None else torch.ones(self.num_edges, dtype=dt)
        return Graph._unchecked(self.rowptr, self.col, w / deg[self.rows()])

    def __repr__(self) -> str:
        return f"Graph(nodes={self.num_nodes}, edges={self.num_edges}, weighted={self.weight is not None})"

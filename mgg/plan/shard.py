"""A rank's share of a graph (MGG §4.2): its rows split into a local CSR (neighbors the rank owns,
ids rebased to its range) and a remote CSR (neighbors on peers, with MGG's address translation:
the owner rank and the offset inside the owner's range, and the slot in the rank's halo list),
plus the CSR of the transposed step the backward runs. `GatheredShard`: a rank reading every
source from one gathered table (the allgather backend, CAGNET's 1D algorithm)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Optional

import numpy as np
import scipy.sparse as sp
import torch

from ..errors import PlanError
from ..graph import Graph


@dataclass(frozen=True)
class Csr:
    """A CSR over output rows: row r aggregates edges [rowptr[r], rowptr[r+1]) from rows `col`
    of a source table, scaled by `weight` (None: 1)."""

    rowptr: np.ndarray  # int64 [rows + 1]
    col: np.ndarray  # int32 [edges]
    weight: Optional[np.ndarray]  # float32 [edges]

    @property
    def num_rows(self) -> int:
        return self.rowptr.size - 1

    @property
    def num_edges(self) -> int:
        return self.col.size

    @cached_property
    def max_degree(self) -> int:
        return int(np.diff(self.rowptr).max(initial=0))


def _rowptr(counts: np.ndarray) -> np.ndarray:
    ptr = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr


def _transpose(csr: Csr, num_sources: int) -> Csr:
    """The transpose of a CSR whose sources are rows [0, num_sources) of a table: rows become
    sources and sources rows. Edges of a transposed row are in the order of their original rows
    (scipy's CSR -> CSC conversion is a stable counting sort, which keeps duplicates apart)."""
    order = np.arange(csr.num_edges, dtype=np.int64)
    m = sp.csr_matrix((order, csr.col, csr.rowptr), shape=(csr.num_rows, num_sources)).tocsc()
    w = None if csr.weight is None else csr.weight[m.data]
    return Csr(m.indptr.astype(np.int64), m.indices.astype(np.int32), w)


def _distinct(ids: np.ndarray, n: int) -> np.ndarray:
    """The distinct values of ids (in [0, n)) in increasing order: by marking (O(len + n), no sort)
    where ids are many for n, else by sorting (no array of length n: a rank of a large graph)."""
    if ids.size * 8 < n:
        return np.unique(ids)
    marked = np.zeros(n, dtype=bool)
    marked[ids] = True
    return np.flatnonzero(marked)


def _halo_slots(rcol: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """A rank's halo (its distinct remote sources, increasing) and each remote edge's slot in it."""
    halo = _distinct(rcol, n)
    return halo, np.searchsorted(halo, rcol).astype(np.int32)


def _owner(bounds: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The rank whose range holds each id (int32)."""
    return (np.searchsorted(bounds, ids, side="right") - 1).astype(np.int32)


def _stack(a: Csr, b: Csr) -> Csr:
    """The rows of a, then the rows of b."""
    rowptr = np.concatenate([a.rowptr, a.rowptr[-1] + b.rowptr[1:]])
    if a.weight is None and b.weight is None:
        w = None
    else:
        w = np.concatenate([x.weight if x.weight is not None else np.ones(x.num_edges, np.float32) for x in (a, b)])
    return Csr(rowptr, np.concatenate([a.col, b.col]), w)


class RankShard:
    """One rank's share of the graph: rows [row_begin, row_end) split into local and remote
    parts, with MGG's address translation, and the transposed step the backward runs. It reads
    the graph's rows of its range only (graph.row_slice), so a rank that holds only its rows (a
    prepared dataset's, mgg.distributed) builds the same shard as one holding the whole graph."""

    def __init__(self, graph: Graph, bounds: np.ndarray, rank: int):
        lo, hi = int(bounds[rank]), int(bounds[rank + 1])
        if hi - lo >= 2**31:
            raise PlanError(f"rank {rank} owns {hi - lo} nodes; rebased ids are 32-bit (use more ranks)")
        self.rank, self.bounds = rank, np.asarray(bounds, np.int64)
        n = graph.num_nodes
        rp, col, w = graph.row_slice(lo, hi)
        rows = np.repeat(np.arange(hi - lo), np.diff(rp))
        is_local = (col >= lo) & (col < hi)
        rcol = col[~is_local]
        halo, slot = _halo_slots(rcol, n)
        owner = _owner(self.bounds, rcol)
        halo_owner = _owner(self.bounds, halo)
        sub = lambda mask: None if w is None else np.ascontiguousarray(w[mask])  # noqa: E731
        self.local = Csr(
            _rowptr(np.bincount(rows[is_local], minlength=hi - lo)),
            (col[is_local] - lo).astype(np.int32),
            sub(is_local),
        )
        self.remote = Csr(_rowptr(np.bincount(rows[~is_local], minlength=hi - lo)), slot, sub(~is_local))
        self.remote_pe = owner
        self.remote_offset = (rcol - self.bounds[owner]).astype(np.int32)
        self.halo_nodes = halo.astype(np.int64)
        self.halo_pe = halo_owner
        self.halo_offset = (halo - self.bounds[halo_owner]).astype(np.int32)
        self._devices: dict = {}

    # ---- facts -----------------------------------------------------------------------------
    @property
    def num_ranks(self) -> int:
        return self.bounds.size - 1

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
    def num_halo(self) -> int:
        return self.halo_nodes.size

    @property
    def num_local_edges(self) -> int:
        return self.local.num_edges

    @property
    def num_remote_edges(self) -> int:
        return self.remote.num_edges

    @cached_property
    def transposed(self) -> Csr:
        """The backward's step: rows [0, rows) are the rank's rows, rows [rows, rows + halo) its
        halo rows; row s sums over the edges that read source s, from the rank's rows (the
        gradient of the output). With no remote part and a symmetric local part, it is the
        local part itself (no copy)."""
        local_t = _transpose(self.local, self.num_rows)
        if self.num_halo == 0:
            return self.local if _same_matrix(local_t, self.local) else local_t
        return _stack(local_t, _transpose(self.remote, self.num_halo))

    def device_arrays(self, device: torch.device) -> dict:
        """This partition's arrays as tensors on `device`, made once per device and shared by
        every config. The transposed step is included once it has been built."""
        key = str(device)
        have = self._devices.get(key)
        need_t = "transposed" in self.__dict__
        if have is None or (need_t and "t_rowptr" not in have):
            t = lambda a: None if a is None else torch.from_numpy(a).to(device)  # noqa: E731
            have = dict(have or {})
            if "local_rowptr" not in have:
                for name, csr in (("local", self.local), ("remote", self.remote)):
                    have[f"{name}_rowptr"], have[f"{name}_col"], have[f"{name}_weight"] = (
                        t(csr.rowptr),
                        t(csr.col),
                        t(csr.weight),
                    )
                for name in ("remote_pe", "remote_offset", "halo_pe", "halo_offset"):
                    have[name] = t(getattr(self, name))
            if need_t:
                tr = self.transposed
                if tr is self.local:
                    have["t_rowptr"], have["t_col"], have["t_weight"] = (
                        have["local_rowptr"],
                        have["local_col"],
                        have["local_weight"],
                    )
                else:
                    have["t_rowptr"], have["t_col"], have["t_weight"] = t(tr.rowptr), t(tr.col), t(tr.weight)
            self._devices[key] = have
        return have

    def source_ids(self) -> np.ndarray:
        """Global ids of the rows a step of this shard reads: its own rows, then its halo rows."""
        return np.concatenate([np.arange(self.row_begin, self.row_end, dtype=np.int64), self.halo_nodes])

    def halo_owner(self) -> torch.Tensor:
        """Owner rank of each halo node."""
        return torch.from_numpy(self.halo_pe.astype(np.int64))


class GatheredShard(RankShard):
    """A rank's rows reading every source from one gathered table of all N nodes (CAGNET's 1D
    algorithm: the allgather backend gathers every rank's rows each layer), or of the nodes
    [window[0], window[1]) (CAGNET's 1.5D: a column's chunk of blocks). The local part holds all
    of the rows' edges with source ids in the table; there is no remote part; the transposed step
    has a row per table row (the gradient of the gathered table)."""

    def __init__(self, graph: Graph, bounds: np.ndarray, rank: int, window: Optional[tuple] = None):
        lo, hi = int(bounds[rank]), int(bounds[rank + 1])
        first, end = (0, graph.num_nodes) if window is None else window
        if end - first >= 2**31:
            raise PlanError(f"the gathered table has {end - first} rows; source ids are 32-bit")
        self.rank, self.bounds = rank, np.asarray(bounds, np.int64)
        rp, col, w = graph.row_slice(lo, hi)
        if col.size and (col.min() < first or col.max() >= end):
            raise PlanError(f"rank {rank}: a source lies outside the gathered table's nodes [{first}, {end})")
        w = None if w is None else np.ascontiguousarray(w)
        self.local = Csr(np.ascontiguousarray(rp), (col - first).astype(np.int32), w)
        self.remote = Csr(np.zeros(hi - lo + 1, np.int64), np.zeros(0, np.int32), None)
        self.remote_pe = self.remote_offset = self.halo_pe = self.halo_offset = np.zeros(0, np.int32)
        self.halo_nodes = np.zeros(0, np.int64)
        self.num_sources = end - first
        self._devices: dict = {}

    @cached_property
    def transposed(self) -> Csr:
        """The backward's step: a row per node of the gathered table, from this rank's rows."""
        return _transpose(self.local, self.num_sources)


def _same_matrix(a: Csr, b: Csr) -> bool:
    """a and b are the same square matrix (duplicate entries summed): then aggregating over
    either gives the same result, up to the order of the floating-point sums."""
    if a.rowptr.size != b.rowptr.size:
        return False
    n = a.num_rows

    def matrix(c: Csr):
        w = c.weight if c.weight is not None else np.ones(c.num_edges, np.float32)
        return sp.csr_matrix((w, c.col, c.rowptr), shape=(n, n))

    return (matrix(a) != matrix(b)).nnz == 0

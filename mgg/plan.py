"""The MGG plan, built on the host as plain tensors (MGG §4, §5.1).

- split_ranges: MGG Algorithm 1, the range-constrained binary search that cuts the row pointer
  into P contiguous node ranges of about nnz/P edges each.
- RankPartition: one rank's rows split into a local CSR (neighbors the rank owns, ids rebased to
  the rank's range) and a remote CSR (neighbors on peers, with MGG's address translation: the
  owner rank and the offset inside the owner's range, plus the slot in the rank's halo list).
- neighbor_partitions: each row's neighbors cut into chunks of ps (LNPs / RNPs).
- block_schedule: rows packed in order into thread blocks of at most 2*wpb rows and wpb*dist
  local and remote partitions; warp w of a block takes local and remote partitions
  [w*dist, (w+1)*dist) of its block as pairs (MGG's interleaved mapping), and the block writes
  each of its rows once. A row with more partitions is cut across blocks and summed by a fixup.
  (Layout: csrc/kernels/aggregate_core.h.)
- RankPlan: a partition plus a schedule, the tensors that the mgg ops walk.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Optional

import numpy as np
import torch

from .errors import PlanError
from .graph import Graph

PS_RANGE = (1, 32)
DIST_RANGE = (1, 16)
WPB_RANGE = (1, 16)


@dataclass(frozen=True)
class Config:
    """Neighbor-partition size, interleave distance and warps per block (MGG §6).

    For MGG's ablations: ps=0 turns neighbor partitioning off (one partition per row, whatever
    its degree), and interleave=False makes each warp aggregate all its local partitions before
    it fetches any remote one, so no fetch overlaps local work (MGG Fig. 5's non-interleaved
    mapping)."""
    ps: int = 16
    dist: int = 1
    wpb: int = 4
    interleave: bool = True

    def __post_init__(self):
        for name, (lo, hi) in (("ps", PS_RANGE), ("dist", DIST_RANGE), ("wpb", WPB_RANGE)):
            v = getattr(self, name)
            ok = isinstance(v, (int, np.integer)) and (lo <= v <= hi or (name == "ps" and v == 0))
            if not ok:
                extra = " or 0 (partitioning off)" if name == "ps" else ""
                raise PlanError(f"{name} must be an integer in [{lo}, {hi}]{extra}, got {v!r}")

    def as_tuple(self):
        return (self.ps, self.dist, self.wpb)


def split_ranges(rowptr, num_ranks: int) -> np.ndarray:
    """MGG Algorithm 1: node boundaries b[0]=0 <= b[1] <= ... <= b[P]=N such that rank r owns rows
    [b[r], b[r+1]) with about nnz/P edges. Each boundary is found by binary search on rowptr,
    constrained to lie at or after the previous one; it is the row boundary nearest to the
    edge target r*ceil(nnz/P), so each rank is within one row's degree of the target."""
    rowptr = np.asarray(rowptr, dtype=np.int64)
    n = rowptr.size - 1
    if not isinstance(num_ranks, (int, np.integer)) or num_ranks < 1:
        raise PlanError(f"ranks must be a positive integer, got {num_ranks!r}")
    if num_ranks > n:
        raise PlanError(f"ranks ({num_ranks}) exceed the number of nodes ({n})")
    nnz = int(rowptr[-1])
    per = -(-nnz // num_ranks)  # ePerGPU = ceil(nnz / P)
    bounds = np.zeros(num_ranks + 1, dtype=np.int64)
    bounds[-1] = n
    last = 0
    for r in range(1, num_ranks):
        target = min(r * per, nnz)
        # binary search on rowptr[last:]: the first boundary with at least `target` edges before it
        i = last + int(np.searchsorted(rowptr[last:], target, side="left"))
        if i > last and target - rowptr[i - 1] < rowptr[i] - target:
            i -= 1  # the boundary just before is nearer the target
        # every rank keeps at least one node, so ranges stay non-empty
        i = min(max(i, last + 1), n - (num_ranks - r))
        bounds[r] = i
        last = i
    return bounds


def _csr_from_rows(counts: np.ndarray) -> np.ndarray:
    ptr = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr


@dataclass(frozen=True)
class RankPartition:
    """One rank's share of the graph: rows [row_begin, row_end) split into local and remote."""
    rank: int
    bounds: np.ndarray  # [P + 1] node boundaries of all ranks
    local_rowptr: torch.Tensor  # int64 [rows + 1]
    local_col: torch.Tensor  # int32, offset inside this rank's range
    local_weight: Optional[torch.Tensor]
    remote_rowptr: torch.Tensor  # int64 [rows + 1]
    remote_col: torch.Tensor  # int32, slot in halo_nodes
    remote_pe: torch.Tensor  # int32, owner rank of each remote edge
    remote_offset: torch.Tensor  # int32, offset of the neighbor inside its owner's range
    remote_weight: Optional[torch.Tensor]
    halo_nodes: torch.Tensor  # int64, sorted global ids of this rank's remote neighbors

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
    def num_local_edges(self) -> int:
        return self.local_col.numel()

    @property
    def num_remote_edges(self) -> int:
        return self.remote_col.numel()

    def halo_owner(self) -> torch.Tensor:
        """Owner rank of each halo node."""
        return torch.from_numpy(np.searchsorted(self.bounds, self.halo_nodes.numpy(), side="right") - 1)


def partition_rank(graph: Graph, bounds: np.ndarray, rank: int) -> RankPartition:
    lo, hi = int(bounds[rank]), int(bounds[rank + 1])
    if hi - lo >= 2**31:
        raise PlanError(f"rank {rank} owns {hi - lo} nodes; rebased ids are 32-bit (use more ranks)")
    rp = graph.rowptr.numpy()
    e0, e1 = int(rp[lo]), int(rp[hi])
    col = graph.col.numpy()[e0:e1]
    w = None if graph.weight is None else graph.weight.numpy()[e0:e1]
    rows = np.repeat(np.arange(hi - lo), np.diff(rp[lo:hi + 1]))
    is_local = (col >= lo) & (col < hi)
    local_counts = np.bincount(rows[is_local], minlength=hi - lo)
    remote_counts = np.bincount(rows[~is_local], minlength=hi - lo)
    rcol = col[~is_local]
    halo, slot = np.unique(rcol, return_inverse=True)
    owner = np.searchsorted(bounds, rcol, side="right") - 1
    t = torch.from_numpy
    return RankPartition(
        rank=rank, bounds=np.asarray(bounds, np.int64),
        local_rowptr=t(_csr_from_rows(local_counts)),
        local_col=t((col[is_local] - lo).astype(np.int32)),
        local_weight=None if w is None else t(np.ascontiguousarray(w[is_local])),
        remote_rowptr=t(_csr_from_rows(remote_counts)),
        remote_col=t(slot.astype(np.int32).ravel()),
        remote_pe=t(owner.astype(np.int32)),
        remote_offset=t((rcol - bounds[owner]).astype(np.int32)),
        remote_weight=None if w is None else t(np.ascontiguousarray(w[~is_local])),
        halo_nodes=t(halo.astype(np.int64)),
    )


def neighbor_partitions(rowptr: torch.Tensor, ps: int):
    """Cuts every row of a CSR into chunks of at most ps neighbors. Returns (part_ptr int64
    [n+1], part_row int32 [n]): partition k covers edges [part_ptr[k], part_ptr[k+1]) of row
    part_row[k]. Partitions are in row order and cover the edges exactly once."""
    rp = rowptr.numpy()
    deg = np.diff(rp)
    if ps == 0:  # partitioning off: each non-empty row is one partition
        ps = max(int(deg.max(initial=0)), 1)
    nparts = -(-deg // ps)
    part_row = np.repeat(np.arange(deg.size, dtype=np.int64), nparts)
    first = np.repeat(_csr_from_rows(nparts)[:-1], nparts)
    begin = rp[part_row] + (np.arange(part_row.size) - first) * ps
    part_ptr = np.append(begin, rp[-1]).astype(np.int64)
    return torch.from_numpy(part_ptr), torch.from_numpy(part_row.astype(np.int32))


BLOCK_FIELDS = ("row_begin", "row_end", "local_begin", "local_end", "remote_begin", "remote_end", "scratch")
FIXUP_FIELDS = ("row", "slot_begin", "slot_end")


def block_row_cap(wpb: int) -> int:
    """Rows of one block: the 2 * wpb partial sums of MGG eq. 1."""
    return 2 * wpb


def block_schedule(local_part_row: torch.Tensor, remote_part_row: torch.Tensor, num_rows: int, dist: int, wpb: int):
    """The block schedule of a plan: (blocks int64 [B, 7], fixups int64 [H, 3]), fields as in
    BLOCK_FIELDS and FIXUP_FIELDS. Built by the extension's mgg::block_schedule op."""
    from . import _C  # noqa: F401  (registers the op)

    counts = [torch.bincount(r.long(), minlength=num_rows) if r.numel() else torch.zeros(num_rows, dtype=torch.int64)
              for r in (local_part_row, remote_part_row)]
    return torch.ops.mgg.block_schedule(counts[0], counts[1], wpb * dist, block_row_cap(wpb))


@dataclass(frozen=True)
class RankPlan:
    """What the aggregation kernel walks for one rank under one Config."""
    partition: RankPartition
    config: Config
    local_part_ptr: torch.Tensor
    local_part_row: torch.Tensor
    remote_part_ptr: torch.Tensor
    remote_part_row: torch.Tensor
    blocks: torch.Tensor
    fixups: torch.Tensor
    device: torch.device = field(default=torch.device("cpu"))
    _dev: dict = field(default_factory=dict, compare=False, repr=False)

    @staticmethod
    def build(partition: RankPartition, config: Config) -> "RankPlan":
        lp, lr = neighbor_partitions(partition.local_rowptr, config.ps)
        rp, rr = neighbor_partitions(partition.remote_rowptr, config.ps)
        blocks, fixups = block_schedule(lr, rr, partition.num_rows, config.dist, config.wpb)
        return RankPlan(partition, config, lp, lr, rp, rr, blocks, fixups)

    @property
    def num_rows(self) -> int:
        return self.partition.num_rows

    @property
    def num_blocks(self) -> int:
        return self.blocks.size(0)

    @property
    def num_warps(self) -> int:
        return self.num_blocks * self.config.wpb

    def to(self, device) -> "RankPlan":
        device = torch.device(device)
        if device == self.device:
            return self
        key = str(device)
        if key not in self._dev:
            p = self.partition
            mv = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731
            part = replace(p, **{k: mv(getattr(p, k)) for k in (
                "local_rowptr", "local_col", "local_weight", "remote_rowptr", "remote_col", "remote_pe",
                "remote_offset", "remote_weight", "halo_nodes")})
            self._dev[key] = RankPlan(part, self.config, *(mv(t) for t in (
                self.local_part_ptr, self.local_part_row, self.remote_part_ptr, self.remote_part_row,
                self.blocks, self.fixups)), device=device)
        return self._dev[key]

    def _schedule_args(self):
        c = self.config
        return (self.blocks, self.fixups, self.num_rows, c.dist, c.wpb, c.interleave)

    def op_args(self):
        """The plan in the order of torch.ops.mgg.aggregate's schema (after x, x_remote;
        before deterministic): remote edges index the halo buffer."""
        p = self.partition
        return (self.local_part_ptr, self.local_part_row, p.local_col, p.local_weight,
                self.remote_part_ptr, self.remote_part_row, p.remote_col, p.remote_weight, *self._schedule_args())

    def peer_op_args(self):
        """The plan in the order of torch.ops.mgg.aggregate_peers's schema (after x, peers, my_pe;
        before fetch, deterministic): remote edges name their owner PE and the offset there."""
        p = self.partition
        return (self.local_part_ptr, self.local_part_row, p.local_col, p.local_weight, self.remote_part_ptr,
                self.remote_part_row, p.remote_offset, p.remote_pe, p.remote_weight, *self._schedule_args())


class Plan:
    """The plans of all ranks of one graph, for any Config (built on demand and cached), and
    the plan of the transposed graph for the backward pass."""

    def __init__(self, graph: Graph, num_ranks: int = 1, bounds: Optional[np.ndarray] = None):
        self.graph = graph
        self.bounds = split_ranges(graph.rowptr, num_ranks) if bounds is None else np.asarray(bounds, np.int64)
        if self.bounds[0] != 0 or self.bounds[-1] != graph.num_nodes or np.any(np.diff(self.bounds) < 0):
            raise PlanError(f"bounds must rise from 0 to {graph.num_nodes}, got {self.bounds.tolist()}")
        self._partitions: dict[int, RankPartition] = {}
        self._plans: dict[tuple, RankPlan] = {}

    @property
    def num_ranks(self) -> int:
        return self.bounds.size - 1

    def partition(self, rank: int) -> RankPartition:
        if not 0 <= rank < self.num_ranks:
            raise PlanError(f"rank {rank} outside [0, {self.num_ranks})")
        if rank not in self._partitions:
            self._partitions[rank] = partition_rank(self.graph, self.bounds, rank)
        return self._partitions[rank]

    def rank_plan(self, rank: int = 0, config: Config = Config()) -> RankPlan:
        key = (rank, config)
        if key not in self._plans:
            self._plans[key] = RankPlan.build(self.partition(rank), config)
        return self._plans[key]

    @cached_property
    def transposed(self) -> "Plan":
        """The plan of the reversed graph over the same ranges: the backward pass aggregates
        gradients over it. For a symmetric graph it is this plan."""
        if self.graph.is_symmetric():
            return self
        return Plan(self.graph.transpose(), bounds=self.bounds)

    def stats(self) -> list[dict]:
        """Per rank: nodes, edges, local and remote edges, remote fraction, edge imbalance."""
        rows = []
        mean = self.graph.num_edges / self.num_ranks
        for r in range(self.num_ranks):
            p = self.partition(r)
            e = p.num_local_edges + p.num_remote_edges
            rows.append(dict(rank=r, nodes=p.num_rows, edges=e, local_edges=p.num_local_edges,
                             remote_edges=p.num_remote_edges, halo_nodes=p.halo_nodes.numel(),
                             remote_fraction=round(p.num_remote_edges / e, 4) if e else 0.0,
                             imbalance=round(e / mean, 4) if mean else 1.0))
        return rows

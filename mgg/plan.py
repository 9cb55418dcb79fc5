"""The MGG plan, built on the host (MGG §4, §5.1), and the arguments the mgg ops receive.

- the ranks' ranges: MGG Algorithm 1 (`split_ranges`, mgg.partitioning.ranges) by default, or
  the bounds of a Partition (mgg.partitioning).
- `RankShard`: one rank's share of the plan ("partition" means the node -> rank map,
  mgg.Partition, and MGG's neighbor partitions only): its rows split into a local CSR
  (neighbors the rank owns, ids rebased to its range) and a remote CSR (neighbors on peers,
  with MGG's address translation: the owner rank and the offset inside the owner's range, and
  the slot in the rank's halo list), plus the
  CSR of the transposed step that the backward pass runs (rows: the rank's rows, then its halo
  rows; sources: the rank's rows). Built once per rank; its device copies are made once per
  device and shared by every config.
- `Schedule`: the warp-range schedule of one step under one `Config` (csrc/core/schedule.h): the
  only per-config state, O(warps): where each warp's nnz-balanced range starts, and the fixups of
  the rows its boundaries cut.
- `RankPlan`: a shard under a config; `op_args` gives the `plan` and `params` lists of
  `torch.ops.mgg.aggregate` / `aggregate_peers` (fields: `mgg._C.STEP_FIELDS`, `STEP_PARAMS`).
- `Plan`: every rank of one graph; shards built once (`shard(rank)`), rank plans on demand in
  a bounded cache (the tuner tries many configs; old schedules are evicted, shards stay). With
  `gathered=True` each rank reads every source from one gathered table (`GatheredShard`:
  the allgather backend, CAGNET's 1D algorithm).

Limits and layouts (config ranges, fields) come from the extension, which defines them once.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from typing import Optional, Protocol

import numpy as np
import scipy.sparse as sp
import torch

from . import _C
from .errors import MggError, PlanError
from .graph import Graph
from .partitioning.ranges import split_ranges
from .partitioning.stats import partition_stats
from .steps import attention_table, run_attend, run_extreme, run_step

PS_RANGE = tuple(_C.limits["ps"])
DIST_RANGE = tuple(_C.limits["dist"])
WPB_RANGE = tuple(_C.limits["wpb"])
STEP_FIELDS = tuple(_C.STEP_FIELDS)
STEP_PARAMS = tuple(_C.STEP_PARAMS)
RANGE_FIELDS = tuple(_C.RANGE_FIELDS)
FIXUP_FIELDS = tuple(_C.FIXUP_FIELDS)
_F = {name: i for i, name in enumerate(STEP_FIELDS)}
_P = {name: i for i, name in enumerate(STEP_PARAMS)}


@dataclass(frozen=True)
class Config:
    """Neighbor-partition size, interleave distance and warps per block (MGG §6), as the range
    kernel reads them (csrc/core/schedule.h): a warp takes a run of ps * dist items of the step
    (dist neighbor partitions of ps edges; items are edges and row ends), so the warps' work is
    balanced whatever the degrees; ps is also the rows of a warp's landing chunk where remote rows
    are fetched into shared memory; a block holds wpb warps.

    For MGG's ablations: ps=0 turns neighbor partitioning off (a warp takes dist whole rows, whatever
    their degree), and interleave=False makes each warp fetch a chunk of remote rows only when it
    reaches it, so no fetch overlaps local work (MGG Fig. 5's non-interleaved mapping)."""

    ps: int = 16
    dist: int = 32
    wpb: int = 4
    interleave: bool = True

    def __post_init__(self):
        for name, (lo, hi) in (("ps", PS_RANGE), ("dist", DIST_RANGE), ("wpb", WPB_RANGE)):
            v = getattr(self, name)
            ok = isinstance(v, (int, np.integer)) and (lo <= v <= hi or (name == "ps" and v == 0))
            if not ok:
                extra = " or 0 (partitioning off)" if name == "ps" else ""
                raise PlanError(f"{name} must be an integer in [{lo}, {hi}]{extra}, got {v!r}")

    def as_tuple(self) -> tuple:
        """(ps, dist, wpb)."""
        return (self.ps, self.dist, self.wpb)


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
    """The distinct values of ids (in [0, n)) in increasing order, found by marking (O(len + n),
    no sort): a rank's halo, its distinct remote sources."""
    marked = np.zeros(n, dtype=bool)
    marked[ids] = True
    return np.flatnonzero(marked)


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
    parts, with MGG's address translation, and the transposed step the backward runs."""

    def __init__(self, graph: Graph, bounds: np.ndarray, rank: int, owner_of: Optional[np.ndarray] = None):
        lo, hi = int(bounds[rank]), int(bounds[rank + 1])
        if hi - lo >= 2**31:
            raise PlanError(f"rank {rank} owns {hi - lo} nodes; rebased ids are 32-bit (use more ranks)")
        self.rank, self.bounds = rank, np.asarray(bounds, np.int64)
        n = graph.num_nodes
        if owner_of is None:  # owner rank of every node (Plan shares one among its ranks)
            owner_of = np.repeat(np.arange(self.bounds.size - 1, dtype=np.int32), np.diff(self.bounds))
        rp = graph.rowptr.numpy()
        e0, e1 = int(rp[lo]), int(rp[hi])
        col = graph.col.numpy()[e0:e1]
        w = None if graph.weight is None else graph.weight.numpy()[e0:e1]
        rows = np.repeat(np.arange(hi - lo), np.diff(rp[lo : hi + 1]))
        is_local = (col >= lo) & (col < hi)
        rcol = col[~is_local]
        halo = _distinct(rcol, n)
        slot_of = np.empty(n, dtype=np.int32)
        slot_of[halo] = np.arange(halo.size, dtype=np.int32)
        owner = owner_of[rcol]
        halo_owner = owner_of[halo]
        sub = lambda mask: None if w is None else np.ascontiguousarray(w[mask])  # noqa: E731
        self.local = Csr(
            _rowptr(np.bincount(rows[is_local], minlength=hi - lo)),
            (col[is_local] - lo).astype(np.int32),
            sub(is_local),
        )
        self.remote = Csr(_rowptr(np.bincount(rows[~is_local], minlength=hi - lo)), slot_of[rcol], sub(~is_local))
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
    algorithm: the allgather backend gathers every rank's rows each layer). The local part holds
    all of the rows' edges with global source ids; there is no remote part; the transposed step
    has a row per node (the gradient of the whole gathered table)."""

    def __init__(self, graph: Graph, bounds: np.ndarray, rank: int):
        lo, hi = int(bounds[rank]), int(bounds[rank + 1])
        if graph.num_nodes >= 2**31:
            raise PlanError(f"the gathered table has {graph.num_nodes} rows; source ids are 32-bit")
        self.rank, self.bounds = rank, np.asarray(bounds, np.int64)
        rp = graph.rowptr.numpy()
        e0, e1 = int(rp[lo]), int(rp[hi])
        w = None if graph.weight is None else np.ascontiguousarray(graph.weight.numpy()[e0:e1])
        self.local = Csr(rp[lo : hi + 1] - e0, graph.col.numpy()[e0:e1].astype(np.int32), w)
        self.remote = Csr(np.zeros(hi - lo + 1, np.int64), np.zeros(0, np.int32), None)
        self.remote_pe = self.remote_offset = self.halo_pe = self.halo_offset = np.zeros(0, np.int32)
        self.halo_nodes = np.zeros(0, np.int64)
        self.num_sources = graph.num_nodes
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


def schedule_step(
    local_rowptr: torch.Tensor, remote_rowptr: Optional[torch.Tensor], config: Config
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """The warp-range schedule of a step from its row pointers (CPU int64; remote None: no remote
    part) under `config`: ranges, fixups and the step's STEP_PARAMS."""
    ranges, fixups = torch.ops.mgg.range_schedule(local_rowptr, remote_rowptr, config.ps, config.dist)
    slots = int(fixups[-1, 2]) if fixups.size(0) else 0
    remote_edges = 0 if remote_rowptr is None else int(remote_rowptr[-1])
    params = [
        config.ps,
        config.dist,
        config.wpb,
        int(config.interleave),
        slots,
        _C.landing_rows(config.ps, remote_edges),
    ]
    return ranges, fixups, params


class Schedule:
    """The warp-range schedule of one step (a CSR pair) under one config (csrc/core/schedule.h):
    ranges [warps + 1, 5] (RANGE_FIELDS: where each warp starts, its carry slots) and fixups
    [split rows, 3] (FIXUP_FIELDS), built by the extension's mgg::range_schedule."""

    def __init__(self, local: Csr, remote: Optional[Csr], config: Config):
        self.ranges, self.fixups, self._params = schedule_step(
            torch.from_numpy(local.rowptr), None if remote is None else torch.from_numpy(remote.rowptr), config
        )
        self.num_slots = self._params[STEP_PARAMS.index("num_slots")]
        self.config = config
        self._devices: dict = {}

    @property
    def num_warps(self) -> int:
        return self.ranges.size(0) - 1

    def params(self) -> list[int]:
        return list(self._params)

    def on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        key = str(device)
        if key not in self._devices:
            self._devices[key] = (self.ranges.to(device), self.fixups.to(device))
        return self._devices[key]


# The lists of a step the op does not run (the transposed step of a forward-only plan).
ABSENT_STEP = [None] * len(STEP_FIELDS)
ABSENT_PARAMS = [0, 1, 1, 1, 0, 1]


class PartStep:
    """A forward step over CSRs of a rank's own choosing, beside its RankPlan's step: the once
    mode's halo gather and the two halves of its overlapped step (RankPlan.halo_gather,
    local_part, remote_part; mgg.steps.run_peers_once). Forward only: no transposed step.

    Args:
        local, remote: the step's local and remote CSRs (remote None: no remote part).
        config: the schedule's config.
        remote_pe: the owner PE of each remote edge (the step is then aggregate_peers', its
            remote columns offsets in the owners' tables), else None (aggregate's: halo slots).
    """

    def __init__(self, local: Csr, remote: Optional[Csr], config: Config, remote_pe: Optional[np.ndarray] = None):
        self.local, self.remote, self.remote_pe = local, remote, remote_pe
        self.num_rows = local.num_rows
        self.schedule = Schedule(local, remote if remote is not None and remote.num_edges else None, config)
        self._args: dict = {}

    @torch.compiler.disable  # host-side planning: under torch.compile it runs eagerly, untraced
    def op_args(self, device) -> tuple[list, list]:
        """The `plan` and `params` lists of the op on `device`."""
        device = torch.device(device)
        key = str(device)
        if key not in self._args:
            t = lambda a: None if a is None else torch.from_numpy(a).to(device)  # noqa: E731
            ranges, fixups = self.schedule.on(device)
            step = dict.fromkeys(STEP_FIELDS)
            step.update(
                local_rowptr=t(self.local.rowptr),
                local_col=t(self.local.col),
                local_weight=t(self.local.weight),
                ranges=ranges,
                fixups=fixups,
            )
            r = self.remote
            if r is not None and r.num_edges:
                step.update(remote_rowptr=t(r.rowptr), remote_col=t(r.col), remote_weight=t(r.weight))
                step.update(remote_pe=t(self.remote_pe))
            self._args[key] = ([step[f] for f in STEP_FIELDS] + ABSENT_STEP, self.schedule.params() + ABSENT_PARAMS)
        return self._args[key]


def _no_edges(rows: int) -> Csr:
    return Csr(np.zeros(rows + 1, np.int64), np.zeros(0, np.int32), None)


class RankPlan:
    """A rank's shard under one config: what the mgg ops walk."""

    @property
    def partition(self) -> "RankShard":
        """Deprecated: RankPlan.shard ('partition' names the node -> rank map, mgg.Partition)."""
        warnings.warn("RankPlan.partition is now RankPlan.shard", DeprecationWarning, stacklevel=2)
        return self.shard

    def __init__(self, shard: RankShard, config: Config):
        self.shard, self.config = shard, config
        self.schedule = Schedule(shard.local, shard.remote if shard.remote.num_edges else None, config)
        self._args: dict = {}

    @cached_property
    def schedule_t(self) -> Schedule:
        return Schedule(self.shard.transposed, None, self.config)

    @cached_property
    def halo_gather(self) -> PartStep:
        """The step that reads each of the rank's halo rows once from its owner (the `once`
        remote mode, issue 34): an aggregate_peers step whose row h has one remote edge, to row
        halo_offset[h] of PE halo_pe[h]'s table, so its output is the halo table [halo, D] in
        halo order. Landing chunks of the most rows (PS_RANGE's top), and each warp takes 32 of
        them (1,024 items: 512 rows), so the schedule costs a few bytes per row."""
        h, s = self.shard.num_halo, self.shard
        remote = Csr(np.arange(h + 1, dtype=np.int64), s.halo_offset.astype(np.int32), None)
        config = Config(PS_RANGE[1], 32, self.config.wpb)
        return PartStep(_no_edges(h), remote, config, s.halo_pe.astype(np.int32))

    @cached_property
    def local_part(self) -> PartStep:
        """The rank's step without its remote edges (what runs while the halo gather is in flight)."""
        return PartStep(self.shard.local, None, self.config)

    @cached_property
    def remote_part(self) -> PartStep:
        """The rank's step of its remote edges alone, reading the halo table (aggregate's form)."""
        return PartStep(_no_edges(self.num_rows), self.shard.remote, self.config)

    @property
    def num_rows(self) -> int:
        return self.shard.num_rows

    @property
    def num_warps(self) -> int:
        return self.schedule.num_warps

    @property
    def ranges(self) -> torch.Tensor:
        return self.schedule.ranges

    @property
    def fixups(self) -> torch.Tensor:
        return self.schedule.fixups

    @torch.compiler.disable  # host-side planning (the transposed step built on first use): untraced
    def op_args(self, device, peers: bool = False, transposed: bool = True) -> tuple[list, list]:
        """The `plan` and `params` lists of the mgg ops on `device`.

        Args:
            device: where the op runs.
            peers: for aggregate_peers (remote sources named by owner PE and offset) rather than
                aggregate (remote sources are rows of one halo table).
            transposed: include the transposed step, which the backward pass needs.

        Returns:
            (plan, params): the forward step's tensors then the transposed step's (None where
            absent), and their integer parameters.
        """
        device = torch.device(device)
        key = (str(device), peers, transposed)
        hit = self._args.get(key)
        if hit is not None:
            return hit
        p = self.shard
        if transposed:
            p.transposed  # noqa: B018  (built before the device copy is taken)
        a = p.device_arrays(device)
        ranges, fixups = self.schedule.on(device)
        remote = p.remote.num_edges > 0
        step = {
            "local_rowptr": a["local_rowptr"],
            "local_col": a["local_col"],
            "local_weight": a["local_weight"],
            "remote_rowptr": a["remote_rowptr"] if remote else None,
            "remote_col": (a["remote_offset"] if peers else a["remote_col"]) if remote else None,
            "remote_weight": a["remote_weight"] if remote else None,
            "remote_pe": a["remote_pe"] if remote and peers else None,
            "halo_pe": a["halo_pe"],
            "halo_offset": a["halo_offset"],
            "ranges": ranges,
            "fixups": fixups,
        }
        plan = [step[f] for f in STEP_FIELDS]
        params = self.schedule.params()
        if transposed:
            tr, tf = self.schedule_t.on(device)
            tstep = dict.fromkeys(STEP_FIELDS)
            tstep.update(
                local_rowptr=a["t_rowptr"], local_col=a["t_col"], local_weight=a["t_weight"], ranges=tr, fixups=tf
            )
            plan += [tstep[f] for f in STEP_FIELDS]
            params += self.schedule_t.params()
        else:
            plan += ABSENT_STEP
            params += ABSENT_PARAMS
        self._args[key] = (plan, params)
        return plan, params


class Plan:
    """The plans of all ranks of one graph, for any Config: shards are built once, rank
    plans on demand and kept in a bounded cache."""

    max_cached_plans = 8

    def __init__(self, graph: Graph, num_ranks: int = 1, bounds: Optional[np.ndarray] = None, gathered: bool = False):
        self.graph, self.gathered = graph, gathered
        self.bounds = split_ranges(graph.rowptr, num_ranks) if bounds is None else np.asarray(bounds, np.int64)
        if self.bounds[0] != 0 or self.bounds[-1] != graph.num_nodes or np.any(np.diff(self.bounds) < 0):
            raise PlanError(f"bounds must rise from 0 to {graph.num_nodes}, got {self.bounds.tolist()}")
        self._shards: dict[int, RankShard] = {}
        self._halo_nodes: dict[int, np.ndarray] = {}
        self._returns: dict = {}  # (rank, config) -> halo_return's step
        self._plans: OrderedDict = OrderedDict()
        self._owner_of: Optional[np.ndarray] = None

    @property
    def num_ranks(self) -> int:
        return self.bounds.size - 1

    def shard(self, rank: int) -> RankShard:
        """Rank `rank`'s share of the plan (built on first use)."""
        if not 0 <= rank < self.num_ranks:
            raise PlanError(f"rank {rank} outside [0, {self.num_ranks})")
        if rank not in self._shards and self.gathered:
            self._shards[rank] = GatheredShard(self.graph, self.bounds, rank)
        if rank not in self._shards:
            if self._owner_of is None:
                self._owner_of = np.repeat(np.arange(self.num_ranks, dtype=np.int32), np.diff(self.bounds))
            self._shards[rank] = RankShard(self.graph, self.bounds, rank, self._owner_of)
        return self._shards[rank]

    def partition(self, rank: int) -> RankShard:
        """Deprecated: Plan.shard ('partition' names the node -> rank map, mgg.Partition)."""
        warnings.warn("Plan.partition(rank) is now Plan.shard(rank)", DeprecationWarning, stacklevel=2)
        return self.shard(rank)

    @torch.compiler.disable  # host-side planning (shard, schedule): under torch.compile it runs eagerly
    def rank_plan(self, rank: int = 0, config: Config = Config()) -> RankPlan:
        """Rank `rank`'s plan under `config`; the least recently used plans beyond
        `max_cached_plans` are dropped (their shards stay)."""
        key = (rank, config)
        rp = self._plans.get(key)
        if rp is None:
            rp = self._plans[key] = RankPlan(self.shard(rank), config)
            while len(self._plans) > self.max_cached_plans:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return rp

    def drop(self, rank: int, config: Config) -> None:
        """Forgets rank `rank`'s plan under `config` (its schedule; the shard stays)."""
        self._plans.pop((rank, config), None)

    def halo_nodes(self, rank: int) -> np.ndarray:
        """The global ids of rank `rank`'s halo rows, in halo order (sorted): its shard's, found
        by marking without building the shard (every rank's are needed by halo_return)."""
        if rank in self._shards:
            return self._shards[rank].halo_nodes
        if rank not in self._halo_nodes:
            lo, hi = int(self.bounds[rank]), int(self.bounds[rank + 1])
            rp = self.graph.rowptr.numpy()
            col = self.graph.col.numpy()[int(rp[lo]) : int(rp[hi])]
            self._halo_nodes[rank] = _distinct(col[(col < lo) | (col >= hi)], self.graph.num_nodes).astype(np.int64)
        return self._halo_nodes[rank]

    def halo_return(self, rank: int, config: Config) -> PartStep:
        """The step that brings rank `rank` what its peers computed for its rows in their halo
        slots (the once mode's adjoint of the halo gather): row i sums, over every peer p that
        reads the rank's row i, row slot_p(i) of p's outbox (aggregate_peers, PE p), peers in
        rank order, so the sums are deterministic. The outboxes hold each peer's halo rows in
        its halo order (sizes: halo_nodes of every rank)."""
        key = (rank, config)
        if key not in self._returns:
            lo, hi = int(self.bounds[rank]), int(self.bounds[rank + 1])
            rows, pes, slots = [], [], []
            for p in range(self.num_ranks):
                if p == rank:
                    continue
                h = self.halo_nodes(p)
                mine = np.flatnonzero((h >= lo) & (h < hi))
                rows.append(h[mine] - lo)
                slots.append(mine)
                pes.append(np.full(mine.size, p, np.int32))
            row = np.concatenate(rows) if rows else np.zeros(0, np.int64)
            order = np.argsort(row, kind="stable")  # by row, then by peer
            slot = (np.concatenate(slots) if slots else np.zeros(0, np.int64))[order]
            pe = (np.concatenate(pes) if pes else np.zeros(0, np.int32))[order]
            remote = Csr(_rowptr(np.bincount(row, minlength=hi - lo)), slot.astype(np.int32), None)
            self._returns[key] = PartStep(_no_edges(hi - lo), remote, config, pe)
        return self._returns[key]

    def stats(self) -> list[dict]:
        """Per rank: nodes, edges, local and remote edges, remote fraction, halo rows received
        (what the halo and nvshmem backends move), rows sent (in total and to the one peer that
        gets the most), allgather rows (what the allgather backend moves: every other rank's
        rows), edge and node imbalance (mgg.partitioning.stats; its second result has the totals)."""
        return partition_stats(self.graph, self.bounds)[0]

    # ---- the aggregation protocol (Aggregation): what a layer calls, on one rank
    distributed = False

    def aggregate(self, x: torch.Tensor, config: Optional[Config] = None, deterministic: bool = False) -> torch.Tensor:
        """out[v] = sum over edges u->v of w(u,v) * x[u] on this one-rank plan, differentiable in x
        (mgg.aggregate)."""
        self._check_rows(x, "mgg.aggregate")
        x = x.contiguous()
        return run_step(x, x.new_empty((0, x.size(1))), self.rank_plan(0, config or Config()), deterministic)

    def aggregate_extreme(self, x: torch.Tensor, reduce: str, config: Optional[Config] = None) -> torch.Tensor:
        """out[v] = the elementwise max (reduce='max') or min ('min') of x[u] over the edges u->v of
        this one-rank plan of an unweighted graph, 0 for a node without in-edges, differentiable in
        x (the gradient goes to the winning row; ties: the lowest row; csrc/core/extreme.h)."""
        self._check_rows(x, "mgg.aggregate_extreme")
        x = x.contiguous()
        return run_extreme(x, x.new_empty((0, x.size(1))), self.rank_plan(0, config or Config()), reduce)

    def _check_rows(self, x, op: str) -> None:
        if self.num_ranks != 1:
            raise MggError(f"{op} runs one rank; this plan has {self.num_ranks} (use mgg.distributed)")
        if not isinstance(x, torch.Tensor) or x.dim() != 2:
            raise MggError(f"x must be a 2-D tensor [nodes, dim], got {getattr(x, 'shape', type(x).__name__)}")
        if x.size(0) != self.graph.num_nodes:
            raise MggError(f"x has {x.size(0)} rows but the graph has {self.graph.num_nodes} nodes")

    def attend(
        self,
        h: torch.Tensor,
        a_src: torch.Tensor,
        a_dst: torch.Tensor,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        seed: int = 0,
        config: Optional[Config] = None,
    ) -> torch.Tensor:
        """GAT's attention on this one-rank plan of an unweighted graph (mgg.ops.attend): [nodes, H, C]."""
        if self.num_ranks != 1:
            raise MggError(f"mgg.attend runs one rank; this plan has {self.num_ranks} (use mgg.distributed)")
        for name, t, dims in (("h", h, 3), ("a_src", a_src, 2), ("a_dst", a_dst, 2)):
            if not isinstance(t, torch.Tensor) or t.dim() != dims:
                raise MggError(f"{name} must be a {dims}-D tensor, got {getattr(t, 'shape', type(t).__name__)}")
        n, heads = self.graph.num_nodes, h.size(1)
        if h.size(0) != n or a_src.shape != (n, heads) or a_dst.shape != (n, heads):
            raise MggError(
                f"h must be [{n}, H, C] and a_src, a_dst [{n}, H] for a graph of {n} nodes; got "
                f"{tuple(h.shape)}, {tuple(a_src.shape)}, {tuple(a_dst.shape)}"
            )
        table = attention_table(h, a_src)
        out = run_attend(
            table,
            table.new_empty((0, table.size(1))),
            a_dst.contiguous(),
            self.rank_plan(0, config or Config()),
            heads,
            negative_slope,
            dropout,
            seed,
        )
        return out.view(n, heads, -1)


def __getattr__(name: str):
    """RankPartition and GatheredPartition: deprecated names of RankShard and GatheredShard."""
    new = {"RankPartition": "RankShard", "GatheredPartition": "GatheredShard"}.get(name)
    if new is None:
        raise AttributeError(f"module 'mgg.plan' has no attribute {name!r}")
    warnings.warn(f"mgg.plan.{name} is now mgg.plan.{new}", DeprecationWarning, stacklevel=2)
    return globals()[new]


class Aggregation(Protocol):
    """What a layer aggregates over, whatever runs it: a one-rank Plan, or this rank's DistPlan
    (mgg.distributed, whose backend moves the peers' rows). Layers and the tuner call these and
    never ask which it is."""

    distributed: bool  # whether the rows are spread over the ranks of a process group

    def aggregate(self, x: torch.Tensor, config: Optional[Config] = None, deterministic: bool = False) -> torch.Tensor:
        """The output rows this process owns; x: the input rows it owns [rows, D]."""

    def aggregate_extreme(self, x: torch.Tensor, reduce: str, config: Optional[Config] = None) -> torch.Tensor:
        """The same rows of the max or min aggregation (reduce 'max' or 'min') over an unweighted
        graph."""

    def attend(
        self,
        h: torch.Tensor,
        a_src: torch.Tensor,
        a_dst: torch.Tensor,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        seed: int = 0,
        config: Optional[Config] = None,
    ) -> torch.Tensor:
        """GAT's attention for the rows this process owns: h [rows, H, C], a_src and a_dst [rows, H]
        -> [rows, H, C]."""

"""`Plan`: the plans of every rank of one graph, for any Config (shards built once, rank plans on
demand in a bounded cache); the ranks' ranges are MGG Algorithm 1's (ranges.split_ranges) or a
partition's bounds. With `gathered=True` each rank reads every source from one gathered table
(GatheredShard: the allgather backend, CAGNET's 1D algorithm); with gathered=(first, end), from a
table of the nodes [first, end) (CAGNET's 1.5D: a column's chunk of blocks). `Aggregation`: the protocol a
one-rank Plan and a rank's DistPlan (mgg.distributed) both speak, which the layers call."""

from __future__ import annotations

from collections import OrderedDict
from typing import Optional, Protocol

import numpy as np
import torch

from .. import ops
from ..errors import MggError, PlanError
from ..graph import Graph
from .config import DEFAULT_CONFIG, Config
from .ranges import split_ranges
from .rank_plan import PartStep, RankPlan, _no_edges
from .shard import Csr, GatheredShard, RankShard, _distinct, _rowptr
from .stats import partition_stats


class Plan:
    """The plans of all ranks of one graph, for any Config: shards are built once, rank
    plans on demand and kept in a bounded cache."""

    max_cached_plans = 8
    max_cached_calls = 32  # kinds of aggregate call (config, grad, device, dtype, shape) kept as lookups

    def __init__(self, graph: Graph, num_ranks: int = 1, bounds: Optional[np.ndarray] = None, gathered=False):
        self.graph, self.gathered = graph, gathered
        self.bounds = split_ranges(graph.rowptr, num_ranks) if bounds is None else np.asarray(bounds, np.int64)
        if self.bounds[0] != 0 or self.bounds[-1] != graph.num_nodes or np.any(np.diff(self.bounds) < 0):
            raise PlanError(f"bounds must rise from 0 to {graph.num_nodes}, got {self.bounds.tolist()}")
        self._shards: dict[int, RankShard] = {}
        self._halo_nodes: dict[int, np.ndarray] = {}
        self._returns: dict = {}  # (rank, config) -> halo_return's step
        self._plans: OrderedDict = OrderedDict()
        self._readers: dict = {}  # rank -> [(peer, rows it reads, their slots in its halo)]: told() or found
        self._halo_counts: Optional[list] = None
        self._no_halos: dict = {}  # (device, dtype, width) -> an empty halo table
        self._calls: dict = {}  # aggregate's (config, grad, device, dtype, shape) -> its op arguments

    @property
    def num_ranks(self) -> int:
        return self.bounds.size - 1

    def shard(self, rank: int) -> RankShard:
        """Rank `rank`'s share of the plan (built on first use)."""
        if not 0 <= rank < self.num_ranks:
            raise PlanError(f"rank {rank} outside [0, {self.num_ranks})")
        if rank not in self._shards and self.gathered:
            window = self.gathered if isinstance(self.gathered, tuple) else None
            self._shards[rank] = GatheredShard(self.graph, self.bounds, rank, window)
        if rank not in self._shards:
            self._shards[rank] = RankShard(self.graph, self.bounds, rank)
        return self._shards[rank]

    def rank_plan(self, rank: int = 0, config: Config = Config()) -> RankPlan:
        """Rank `rank`'s plan under `config`; the least recently used plans beyond
        `max_cached_plans` are dropped (their shards stay)."""
        if not torch.compiler.is_compiling():  # eager: a plan made before is a lookup, not a compiler boundary
            rp = self._plans.get((rank, config))
            if rp is not None:
                self._plans.move_to_end((rank, config))
                return rp
        return self._rank_plan(rank, config)

    @torch.compiler.disable  # host-side planning (shard, schedule): under torch.compile it runs eagerly
    def _rank_plan(self, rank: int, config: Config) -> RankPlan:
        key = (rank, config)
        rp = self._plans.get(key)
        if rp is None:
            rp = self._plans[key] = RankPlan(self.shard(rank), config)
            while len(self._plans) > self.max_cached_plans:
                self._plans.popitem(last=False)
                self._calls.clear()
        else:
            self._plans.move_to_end(key)
        return rp

    def drop(self, rank: int, config: Config) -> None:
        """Forgets rank `rank`'s plan under `config` (its schedule; the shard stays)."""
        self._plans.pop((rank, config), None)
        self._calls.clear()  # their op arguments hold the schedule

    def halo_nodes(self, rank: int) -> np.ndarray:
        """The global ids of rank `rank`'s halo rows, in halo order (sorted): its shard's, found
        by marking without building the shard (every rank's are needed by halo_return)."""
        if rank in self._shards:
            return self._shards[rank].halo_nodes
        if rank not in self._halo_nodes:
            lo, hi = int(self.bounds[rank]), int(self.bounds[rank + 1])
            _, col, _ = self.graph.row_slice(lo, hi)
            self._halo_nodes[rank] = _distinct(col[(col < lo) | (col >= hi)], self.graph.num_nodes).astype(np.int64)
        return self._halo_nodes[rank]

    def told(self, rank: int, readers: list, halo_counts: list) -> None:
        """What rank `rank` learnt from its peers (a plan of its rows alone, mgg.distributed): for each
        peer, the rows of its range the peer reads and their slots in the peer's halo (readers), and
        every rank's halo size."""
        self._readers[rank] = readers
        self._halo_counts = list(halo_counts)

    def readers(self, rank: int) -> list:
        """For each peer p of rank `rank` (rank order): (p, the rank's rows p reads as offsets into its
        range, their slots in p's halo)."""
        if rank not in self._readers:
            lo, hi = int(self.bounds[rank]), int(self.bounds[rank + 1])
            found = []
            for p in range(self.num_ranks):
                if p != rank:
                    h = self.halo_nodes(p)
                    mine = np.flatnonzero((h >= lo) & (h < hi))
                    found.append((p, h[mine] - lo, mine))
            self._readers[rank] = found
        return self._readers[rank]

    def halo_counts(self) -> list:
        """Every rank's halo size (the outboxes of halo_return)."""
        if self._halo_counts is None:
            self._halo_counts = [int(self.halo_nodes(r).size) for r in range(self.num_ranks)]
        return self._halo_counts

    def halo_return(self, rank: int, config: Config) -> PartStep:
        """The step that brings rank `rank` what its peers computed for its rows in their halo
        slots (the once mode's adjoint of the halo gather): row i sums, over every peer p that
        reads the rank's row i, row slot_p(i) of p's outbox (aggregate_peers, PE p), peers in
        rank order, so the sums are deterministic. The outboxes hold each peer's halo rows in
        its halo order (sizes: halo_counts)."""
        key = (rank, config)
        if key not in self._returns:
            lo, hi = int(self.bounds[rank]), int(self.bounds[rank + 1])
            rows, pes, slots = [], [], []
            for p, mine, slot in self.readers(rank):
                rows.append(mine)
                slots.append(slot)
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
        rows), edge and node imbalance (mgg.plan.stats; its second result has the totals)."""
        return partition_stats(self.graph, self.bounds)[0]

    # ---- the aggregation protocol (Aggregation): what a layer calls, on one rank
    distributed = False

    def aggregate(self, x: torch.Tensor, config: Optional[Config] = None, deterministic: bool = False) -> torch.Tensor:
        """out[v] = sum over edges u->v of w(u,v) * x[u] on this one-rank plan, differentiable in x
        (mgg.aggregate)."""
        if not isinstance(x, torch.Tensor):
            self._check_rows(x, "mgg.aggregate")  # raises: not a tensor
        grad = x.requires_grad and torch.is_grad_enabled()
        key = None if torch.compiler.is_compiling() else (config, grad, x.device, x.dtype, x.shape)
        args = self._calls.get(key)
        if args is None:  # the first call of its kind: checked, then its op arguments kept
            self._check_rows(x, "mgg.aggregate")
            plan, params = self.rank_plan(0, config or DEFAULT_CONFIG).op_args(x.device, transposed=grad)
            args = (self._no_halo(x), plan, params)
            if key is not None:
                if len(self._calls) >= self.max_cached_calls:
                    self._calls.clear()
                self._calls[key] = args
        return ops.aggregate(x.contiguous(), *args, deterministic)

    def aggregate_extreme(self, x: torch.Tensor, reduce: str, config: Optional[Config] = None) -> torch.Tensor:
        """out[v] = the elementwise max (reduce='max') or min ('min') of x[u] over the edges u->v of
        this one-rank plan of an unweighted graph, 0 for a node without in-edges, differentiable in
        x (the gradient goes to the winning row; ties: the lowest row; csrc/core/extreme.h)."""
        self._check_rows(x, "mgg.aggregate_extreme")
        x = x.contiguous()
        return self.rank_plan(0, config or DEFAULT_CONFIG).aggregate_extreme(x, self._no_halo(x), reduce)

    def _no_halo(self, x: torch.Tensor) -> torch.Tensor:
        """The halo table of a one-rank plan: no rows, x's width, dtype and device; one kept per
        kind (a tensor made per call costs the call more than its aggregation on a small graph)."""
        if torch.compiler.is_compiling():
            return x.new_empty((0, x.size(1)))
        key = (x.device, x.dtype, x.size(1))
        t = self._no_halos.get(key)
        if t is None:
            t = self._no_halos[key] = x.new_empty((0, x.size(1)))
        return t

    def _check_rows(self, x, op: str) -> None:
        if self.num_ranks != 1:
            raise MggError(f"{op} runs one rank; this plan has {self.num_ranks} (use mgg.distributed)")
        if not isinstance(x, torch.Tensor) or x.dim() != 2:
            raise MggError(f"x must be a 2-D tensor [nodes, dim], got {getattr(x, 'shape', type(x).__name__)}")
        if x.size(0) != self.graph.num_nodes:
            raise MggError(f"x has {x.size(0)} rows but the graph has {self.graph.num_nodes} nodes")

    def _check_attend(self, h, a_src, a_dst) -> None:
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
        """GAT's attention on this one-rank plan of an unweighted graph (mgg.attend): [nodes, H, C]."""
        self._check_attend(h, a_src, a_dst)
        n, heads = self.graph.num_nodes, h.size(1)
        table = ops.attention_table(h, a_src)
        out = self.rank_plan(0, config or Config()).attend(
            table, table.new_empty((0, table.size(1))), a_dst.contiguous(), heads, negative_slope, dropout, seed
        )
        return out.view(n, heads, -1)


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

"""One rank's plan under one config (`RankPlan`): its shard's arrays and its schedule as the ops
receive them (op_args), and the rank's step through the ops: aggregate (remote rows from a halo
table), aggregate_extreme (max/min), aggregate_peers (remote rows read from each PE's own table,
once per edge), aggregate_peers_once (each remote row read once), attend (GAT's attention).
`PartStep`: a forward step over CSRs of a rank's own choosing (the once mode's parts)."""

from __future__ import annotations

from functools import cached_property
from typing import Optional

import numpy as np
import torch

from .. import ops
from ..errors import MggError
from .config import PS_RANGE, Config
from .schedule import ABSENT_PARAMS, ABSENT_STEP, STEP_FIELDS, Schedule
from .shard import Csr, RankShard

REMOTE_READS = ("per-edge", "once")  # how often a remote row is read per aggregation (aggregate_peers_once)


def check_remote_reads(mode: str) -> None:
    """Raises MggError unless `mode` names a remote-read mode."""
    if mode not in REMOTE_READS:
        raise MggError(f"remote_reads must be one of {REMOTE_READS}, got {mode!r}")


def _needs_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


_SIDE_STREAMS: dict = {}


def _side_stream(device: torch.device):
    """One side stream per device, for the halo gathers that overlap local work."""
    key = str(device)
    if key not in _SIDE_STREAMS:
        _SIDE_STREAMS[key] = torch.cuda.Stream(device)
    return _SIDE_STREAMS[key]


class PartStep:
    """A forward step over CSRs of a rank's own choosing, beside its RankPlan's step: the once
    mode's halo gather and the two halves of its overlapped step (RankPlan.halo_gather,
    local_part, remote_part; RankPlan.aggregate_peers_once). Forward only: no transposed step.

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
        if not torch.compiler.is_compiling():  # eager: lists made before are a lookup, not a compiler boundary
            hit = self._args.get((str(device), peers, transposed))
            if hit is not None:
                return hit
        return self._op_args(device, peers, transposed)

    @torch.compiler.disable  # host-side planning (the transposed step built on first use): untraced
    def _op_args(self, device, peers: bool, transposed: bool) -> tuple[list, list]:
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

    # ---- the rank's step through the ops (mgg.ops): what Plan, the backends and the tuner run ----
    def aggregate(self, x: torch.Tensor, x_remote: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """The rank's aggregation with remote rows from one table (a halo buffer), differentiable in x
        and x_remote.

        Args:
            x: the rank's own rows [rows, D].
            x_remote: the rank's halo rows [halo, D] in halo order (empty for one rank).
            deterministic: accepted for the callers that pass it: every aggregation is bit-identical
                from run to run.

        Returns:
            [rows, D], the rank's output rows.
        """
        plan, params = self.op_args(x.device, transposed=_needs_grad(x, x_remote))
        return ops.aggregate(x, x_remote, plan, params, deterministic)

    def aggregate_extreme(self, x: torch.Tensor, x_remote: torch.Tensor, reduce: str) -> torch.Tensor:
        """The rank's max or min aggregation with remote rows from one table, differentiable in x and
        x_remote: per output element the largest (smallest) value of its in-neighbors' rows, 0 for a
        row without in-edges; the gradient goes to the source row that gave the value (ties and NaN:
        the lowest row of [x | x_remote], csrc/core/extreme.h). The plan must be unweighted.

        Args:
            x, x_remote: as aggregate.
            reduce: 'max' or 'min'.

        Returns:
            [rows, D], the rank's output rows.
        """
        ops.check_extreme(reduce)
        plan, params = self.op_args(x.device, transposed=False)  # the backward needs no transposed step
        out, _ = ops.aggregate_extreme(x, x_remote, plan, params, reduce)
        return out

    def aggregate_peers(
        self, x: torch.Tensor, peers: list, my_pe: int, fetch: str = "direct", deterministic: bool = False
    ) -> torch.Tensor:
        """The rank's aggregation reading remote rows from each PE's own table, peers[pe], once per
        edge (MGG's per-edge fetch).

        Args:
            x: the rank's own rows [rows, D] (usually peers[my_pe]).
            peers: every PE's table, as this device addresses it.
            my_pe: this rank.
            fetch: how remote rows are read (mgg.ops.FETCH).
            deterministic: as aggregate.

        Returns:
            [rows, D], the rank's output rows.
        """
        code = ops.fetch_code(fetch)
        plan, params = self.op_args(x.device, peers=True, transposed=_needs_grad(x, *peers))
        return ops.aggregate_peers(x, peers, my_pe, plan, params, code, deterministic)

    def gather_halo(
        self, x: torch.Tensor, peers: list, my_pe: int, fetch: str = "direct", deterministic: bool = False
    ) -> torch.Tensor:
        """The rank's halo rows [halo, D] in halo order, each read once from its owner's table
        (aggregate_peers over halo_gather: one exact copy per row; empty without a halo).

        Args:
            x, peers, my_pe, fetch, deterministic: as aggregate_peers.
        """
        if not self.shard.num_halo:
            return x.new_empty((0, x.size(1)))
        plan, params = self.halo_gather.op_args(x.device)
        return ops.aggregate_peers(x, peers, my_pe, plan, params, ops.fetch_code(fetch), deterministic)

    def aggregate_peers_once(
        self, x: torch.Tensor, peers: list, my_pe: int, fetch: str = "direct", deterministic: bool = False
    ) -> torch.Tensor:
        """aggregate_peers with each remote row read once (issue 34): gather_halo brings the rank's
        halo rows from their owners' tables (each once, by `fetch`) into a halo table, which the
        step then reads as the halo backend reads its buffer.

        Overlapped (fp32 and float64 storage, not deterministic): the gather runs on a side stream
        while the rank's local edges are aggregated on the current one (local_part); the remote
        edges are then aggregated from the halo table (remote_part) and added. On the CPU the same
        three steps run in turn. Deterministic mode, and half-precision storage (where adding two
        rounded halves would round twice), gather first and then run the rank's whole step in one
        kernel: the sums of MGG's step in its order, bit-identical to the per-edge mode's. Forward
        only (the nvshmem backend composes the adjoint over the transposed graph's plan).

        Args:
            x, peers, my_pe, fetch, deterministic: as aggregate_peers.

        Returns:
            [rows, D], the rank's output rows.
        """
        ops.fetch_code(fetch)
        if _needs_grad(x, *peers):
            raise MggError(
                "aggregate_peers_once is forward only; differentiate through the nvshmem backend or aggregate_peers"
            )
        dev = x.device

        def gather() -> torch.Tensor:
            return self.gather_halo(x, peers, my_pe, fetch, deterministic)

        if deterministic or not self.shard.num_halo or x.dtype not in (torch.float32, torch.float64):
            return ops.aggregate(x, gather(), *self.op_args(dev, transposed=False), deterministic)
        none = x.new_empty((0, x.size(1)))
        if dev.type == "cuda":
            main, side = torch.cuda.current_stream(dev), _side_stream(dev)
            side.wait_stream(main)  # x and the peers' tables are written before the gather reads them
            with torch.cuda.stream(side):
                halo = gather()
            out = ops.aggregate(x, none, *self.local_part.op_args(dev), False)  # meanwhile, here
            main.wait_stream(side)
            halo.record_stream(main)
        else:
            halo = gather()
            out = ops.aggregate(x, none, *self.local_part.op_args(dev), False)
        return out.add_(ops.aggregate(x, halo, *self.remote_part.op_args(dev), False))

    def attend(
        self,
        table: torch.Tensor,
        table_remote: torch.Tensor,
        a_dst: torch.Tensor,
        heads: int,
        negative_slope: float,
        dropout: float,
        seed: int,
        ids: Optional[torch.Tensor] = None,
        row_offset: int = 0,
    ) -> torch.Tensor:
        """The rank's attention with remote rows from one table (a halo buffer), differentiable in
        table, table_remote and a_dst.

        Args:
            table: the rank's source rows [rows, H * (C + 1)] (mgg.ops.attention_table).
            table_remote: its halo rows, likewise (empty for one rank).
            a_dst: the rank's destination terms [rows, H].
            heads, negative_slope, dropout, seed: as GATConv's (seed draws the dropout mask).
            ids: global node ids of [table | table_remote]'s rows (default: their positions).
            row_offset: the global id of the rank's first row.

        Returns:
            [rows, H * C].
        """
        plan, params = self.op_args(table.device, transposed=_needs_grad(table, table_remote, a_dst))
        out, _ = ops.attend(
            table, table_remote, a_dst, plan, params, heads, negative_slope, dropout, seed, ids, row_offset
        )
        return out

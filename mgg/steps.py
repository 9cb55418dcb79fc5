"""One rank's step through the mgg ops: `run_step` (remote rows from one table, a halo buffer),
`run_extreme` (max/min, remote rows likewise), `run_peers` (remote rows read from each PE's own
table, once per edge), `run_peers_once` (each remote row read once) and `run_attend` (GAT's
attention), on a RankPlan (mgg.plan, which imports this module: `plan` is not annotated). The
backends, Plan.aggregate/attend and mgg.ops all call these."""

from __future__ import annotations

from typing import Optional

import torch

from . import _C  # loading the extension registers the ops
from .errors import MggError

FETCH = {name: i for i, name in enumerate(_C.FETCH)}


def check_fetch(fetch: str) -> None:
    """Raises MggError unless `fetch` names a fetch policy of aggregate_peers."""
    if fetch not in FETCH:
        raise MggError(f"fetch must be one of {tuple(FETCH)}, got {fetch!r}")


def _needs_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def run_step(x: torch.Tensor, x_remote: torch.Tensor, plan, deterministic: bool = False) -> torch.Tensor:
    """One rank's aggregation with remote rows from one table (a halo buffer), differentiable in x
    and x_remote.

    Args:
        x: the rank's own rows [rows, D].
        x_remote: the rank's halo rows [halo, D] in halo order (empty for one rank).
        plan: the rank's plan under a config.
        deterministic: bit-identical results from run to run.

    Returns:
        [rows, D], the rank's output rows.
    """
    args = plan.op_args(x.device, transposed=_needs_grad(x, x_remote))
    return torch.ops.mgg.aggregate(x, x_remote, *args, deterministic)


EXTREMES = ("max", "min")  # the reductions of aggregate_extreme (csrc/core/extreme.h)


def check_extreme(reduce: str) -> None:
    """Raises MggError unless `reduce` names a reduction of aggregate_extreme."""
    if reduce not in EXTREMES:
        raise MggError(f"reduce must be one of {EXTREMES}, got {reduce!r}")


def run_extreme(x: torch.Tensor, x_remote: torch.Tensor, plan, reduce: str) -> torch.Tensor:
    """One rank's max or min aggregation (torch.ops.mgg.aggregate_extreme) with remote rows from
    one table, differentiable in x and x_remote: per output element the largest (smallest) value
    of its in-neighbors' rows, 0 for a row without in-edges; the gradient goes to the source row
    that gave the value (ties and NaN: the lowest row of [x | x_remote], csrc/core/extreme.h).

    Args:
        x: the rank's own rows [rows, D].
        x_remote: the rank's halo rows [halo, D] in halo order (empty for one rank).
        plan: the rank's plan of an unweighted graph, under a config.
        reduce: 'max' or 'min'.

    Returns:
        [rows, D], the rank's output rows.
    """
    check_extreme(reduce)
    args = plan.op_args(x.device, transposed=False)  # the backward needs no transposed step
    out, _ = torch.ops.mgg.aggregate_extreme(x, x_remote, *args, reduce)
    return out


def run_peers(
    x: torch.Tensor, peers: list, my_pe: int, plan, fetch: str = "direct", deterministic: bool = False
) -> torch.Tensor:
    """One rank's aggregation reading remote rows from each PE's own table, peers[pe].

    Args:
        x: the rank's own rows [rows, D] (usually peers[my_pe]).
        peers: every PE's table, as this device addresses it.
        my_pe: this rank.
        plan: the rank's plan under a config.
        fetch: how remote rows are read (mgg._C.FETCH).
        deterministic: bit-identical results from run to run.

    Returns:
        [rows, D], the rank's output rows.
    """
    check_fetch(fetch)
    args = plan.op_args(x.device, peers=True, transposed=_needs_grad(x, *peers))
    return torch.ops.mgg.aggregate_peers(x, peers, my_pe, *args, FETCH[fetch], deterministic)


REMOTE_READS = ("per-edge", "once")  # how often a remote row is read per aggregation (run_peers_once)


def check_remote_reads(mode: str) -> None:
    """Raises MggError unless `mode` names a remote-read mode."""
    if mode not in REMOTE_READS:
        raise MggError(f"remote_reads must be one of {REMOTE_READS}, got {mode!r}")


def gather_halo(
    x: torch.Tensor, peers: list, my_pe: int, plan, fetch: str = "direct", deterministic: bool = False
) -> torch.Tensor:
    """The rank's halo rows [halo, D] in halo order, each read once from its owner's table
    (aggregate_peers over plan.halo_gather: one exact copy per row; empty without a halo).

    Args:
        x, peers, my_pe, plan, fetch, deterministic: as run_peers.
    """
    if not plan.shard.num_halo:
        return x.new_empty((0, x.size(1)))
    return torch.ops.mgg.aggregate_peers(
        x, peers, my_pe, *plan.halo_gather.op_args(x.device), FETCH[fetch], deterministic
    )


def run_peers_once(
    x: torch.Tensor, peers: list, my_pe: int, plan, fetch: str = "direct", deterministic: bool = False
) -> torch.Tensor:
    """run_peers with each remote row read once (issue 34): aggregate_peers over the plan's
    halo_gather brings the rank's halo rows from their owners' tables (each once, by `fetch`)
    into a halo table, which aggregate then reads as the halo backend reads its buffer. MGG's
    per-edge fetch (run_peers) reads a remote row once per edge that names it.

    Overlapped (fp32 and float64 storage, not deterministic): the gather runs on a side stream
    while the rank's local edges are aggregated on the current one (plan.local_part); the
    remote edges are then aggregated from the halo table (plan.remote_part) and added. On the
    CPU the same three steps run in turn. Deterministic mode, and half-precision storage (where
    adding two rounded halves would round twice), gather first and then run the rank's whole
    step in one kernel: the sums of MGG's step in its order, so deterministic results are
    bit-identical to the per-edge mode's. Forward only (the nvshmem backend composes the adjoint
    over the transposed graph's plan).

    Args:
        x, peers, my_pe, plan, fetch, deterministic: as run_peers.

    Returns:
        [rows, D], the rank's output rows.
    """
    check_fetch(fetch)
    if _needs_grad(x, *peers):
        raise MggError("run_peers_once is forward only; differentiate through the nvshmem backend or run_peers")
    dev = x.device

    def gather() -> torch.Tensor:
        return gather_halo(x, peers, my_pe, plan, fetch, deterministic)

    if deterministic or not plan.shard.num_halo or x.dtype not in (torch.float32, torch.float64):
        return torch.ops.mgg.aggregate(x, gather(), *plan.op_args(dev, transposed=False), deterministic)
    none = x.new_empty((0, x.size(1)))
    if dev.type == "cuda":
        main, side = torch.cuda.current_stream(dev), _side_stream(dev)
        side.wait_stream(main)  # x and the peers' tables are written before the gather reads them
        with torch.cuda.stream(side):
            halo = gather()
        out = torch.ops.mgg.aggregate(x, none, *plan.local_part.op_args(dev), False)  # meanwhile, here
        main.wait_stream(side)
        halo.record_stream(main)
    else:
        halo = gather()
        out = torch.ops.mgg.aggregate(x, none, *plan.local_part.op_args(dev), False)
    return out.add_(torch.ops.mgg.aggregate(x, halo, *plan.remote_part.op_args(dev), False))


_SIDE_STREAMS: dict = {}


def _side_stream(device: torch.device):
    """One side stream per device, for the halo gathers that overlap local work."""
    key = str(device)
    if key not in _SIDE_STREAMS:
        _SIDE_STREAMS[key] = torch.cuda.Stream(device)
    return _SIDE_STREAMS[key]


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def attention_table(h: torch.Tensor, a_src: torch.Tensor) -> torch.Tensor:
    """The source table of the attention ops: per node and head, the head's C features then its
    source term, so one fetch brings both.

    Args:
        h: [nodes, H, C] features per head.
        a_src: [nodes, H] source terms.

    Returns:
        [nodes, H * (C + 1)], differentiable in h and a_src.
    """
    return torch.cat([h, a_src.unsqueeze(-1)], -1).reshape(h.size(0), -1)


def run_attend(
    table: torch.Tensor,
    table_remote: torch.Tensor,
    a_dst: torch.Tensor,
    plan,
    heads: int,
    negative_slope: float,
    dropout: float,
    seed: int,
    ids: Optional[torch.Tensor] = None,
    row_offset: int = 0,
) -> torch.Tensor:
    """One rank's attention with remote rows from one table (a halo buffer), differentiable in
    table, table_remote and a_dst.

    Args:
        table: the rank's source rows [rows, H * (C + 1)] (attention_table).
        table_remote: its halo rows, likewise (empty for one rank).
        a_dst: the rank's destination terms [rows, H].
        plan: the rank's plan of an unweighted graph.
        heads, negative_slope, dropout, seed: as GATConv's (seed draws the dropout mask).
        ids: global node ids of [table | table_remote]'s rows (default: their positions).
        row_offset: the global id of the rank's first row.

    Returns:
        [rows, H * C].
    """
    args = plan.op_args(table.device, transposed=_needs_grad(table, table_remote, a_dst))
    out, _ = torch.ops.mgg.attend(
        table, table_remote, a_dst, *args, heads, negative_slope, dropout, seed, ids, row_offset
    )
    return out

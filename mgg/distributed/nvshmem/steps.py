"""The nvshmem backend's differentiable steps: a layer's aggregation (and GAT's attention) over
the symmetric tables, each rank publishing its rows, meeting the others at the barrier, then
one fused kernel reading its own rows and its peers' (mgg.ops.aggregate_peers); the backward is
the same pull over the transposed graph's plan."""

from __future__ import annotations

from typing import Optional

import torch

from ... import ops
from ...errors import MggError
from ...plan import RankPlan, check_remote_reads
from . import symmetric


def _pull(
    x_own: torch.Tensor,
    plan: RankPlan,
    range_rows: list[int],
    fetch: str,
    deterministic: bool,
    remote_reads: str = "per-edge",
) -> torch.Tensor:
    """One aggregation over the symmetric tables: write this rank's rows into the next table,
    barrier, then the kernel reads its own rows and peers' rows from their tables, once per
    edge (MGG's fused kernel, RankPlan.aggregate_peers) or each remote row once
    (RankPlan.aggregate_peers_once)."""
    rt = symmetric.runtime()
    t = symmetric.publish(rt, x_own, range_rows, fetch)  # every PE's rows of this layer are written before any PE reads
    read = plan.aggregate_peers_once if remote_reads == "once" else plan.aggregate_peers
    return read(t.own, t.peers, rt.heap.my_pe(), fetch, deterministic)


class _Aggregate(torch.autograd.Function):
    """The fused kernel reads peers' rows itself, so the communication is inside the kernel and so
    is its adjoint: the backward is the same pull over the transposed graph's plan, reading
    peers' gradient rows (MGG's design applied to the backward pass), in the same remote mode."""

    @staticmethod
    def forward(ctx, x_own, plan, plan_t, range_rows, fetch, deterministic, remote_reads):
        ctx.args = (plan_t, range_rows, fetch, deterministic, remote_reads)
        return _pull(x_own, plan, range_rows, fetch, deterministic, remote_reads)

    @staticmethod
    def backward(ctx, grad):
        return _pull(grad.contiguous(), *ctx.args), None, None, None, None, None, None


def aggregate(
    x_own: torch.Tensor,
    plan: RankPlan,
    plan_t: RankPlan,
    range_rows: list[int],
    fetch: str,
    deterministic: bool,
    remote_reads: str = "per-edge",
) -> torch.Tensor:
    """One rank's aggregation of one layer over the symmetric tables, differentiable in x_own.

    Args:
        x_own: this rank's rows [rows, D].
        plan: this rank's plan of the graph; plan_t: of the transposed graph (the backward's).
        range_rows: every rank's row count.
        fetch: how peers' rows are read (mgg._C.FETCH).
        deterministic: bit-identical results from run to run.
        remote_reads: 'per-edge' (MGG: a remote row is read once per edge that names it) or
            'once' (each of the rank's halo rows read once, then aggregated from a local table;
            the same sums in the same order).

    Returns:
        [rows, D], this rank's output rows.
    """
    check_remote_reads(remote_reads)
    return _Aggregate.apply(x_own, plan, plan_t, range_rows, fetch, deterministic, remote_reads)


class _Attend(torch.autograd.Function):
    """GAT's attention over the symmetric tables. Forward: publish this rank's source rows (per
    head its features and source term), barrier, attend reading peers' rows in place. Backward:
    publish the source rows again (a later layer may have reused the forward's table) and this
    rank's output-row terms (attention_terms: the gradient, a_dst and the softmax statistics),
    barrier once, then two kernels that read peers' tables: d a_dst over this rank's in-edges,
    and the source rows' gradients over the transposed graph's in-edges, whose terms live on the
    destinations' owners. The dropout masks are a function of (seed, global edge, head), so the
    backward's equal the forward's on every rank (the layer gives every rank one seed)."""

    @staticmethod
    def forward(ctx, table_own, a_dst_own, plan, plan_t, range_rows, fetch, heads, slope, dropout, seed, once, ids):
        rt = symmetric.runtime()
        t = symmetric.publish(rt, table_own, range_rows, fetch)
        offsets = symmetric.offsets(range_rows)
        me = rt.heap.my_pe()
        ctx.once = once
        if once is not None:  # each halo row's source terms once, then the attention over [own | halo] rows
            halo = plan.gather_halo(t.own, t.peers, me, fetch)
            ctx.ids = ids if ids is not None else (_source_ids(plan, t.own.device), offsets[me])
            args, params = plan.op_args(t.own.device, transposed=False)
            out, stats = ops.attend(t.own, halo, a_dst_own, args, params, heads, slope, dropout, seed, *ctx.ids)
            ctx.halo = halo
        else:
            args, params = plan.op_args(table_own.device, peers=True, transposed=False)
            out, stats = ops.attend_peers(
                t.peers, me, a_dst_own, args, params, heads, slope, dropout, seed, offsets, ops.fetch_code(fetch)
            )
        ctx.save_for_backward(table_own, a_dst_own, out, stats)
        ctx.args = (plan, plan_t, range_rows, fetch, heads, slope, dropout, seed)
        return out

    @staticmethod
    def backward(ctx, grad):
        if ctx.once is not None:
            return (*_attend_once_backward(ctx, grad.contiguous()), *([None] * 10))
        table_own, a_dst_own, out, stats = ctx.saved_tensors
        plan, plan_t, range_rows, fetch, heads, slope, dropout, seed = ctx.args
        rt = symmetric.runtime()
        me, offsets = rt.heap.my_pe(), symmetric.offsets(range_rows)
        terms = ops.attention_terms(grad.contiguous(), out, a_dst_own, stats, heads)
        x = symmetric.publish(rt, table_own, range_rows, fetch, barrier=False)
        tt = rt.next_table(terms.size(1), terms.dtype, range_rows)
        tt.own.copy_(terms)
        rt.heap.barrier()  # every PE's source rows and terms are written before any PE reads
        args, params = plan.op_args(table_own.device, peers=True, transposed=False)
        d_dst = ops.attend_peers_dst(
            x.peers, me, tt.own, args, params, heads, slope, dropout, seed, offsets, ops.fetch_code(fetch)
        )
        args_t, params_t = plan_t.op_args(table_own.device, peers=True, transposed=False)
        d_table = ops.attend_peers_src(
            x.own, tt.peers, me, args_t, params_t, heads, slope, dropout, seed, offsets, ops.fetch_code(fetch)
        )
        return d_table, d_dst, *([None] * 10)


def _source_ids(plan: RankPlan, device) -> torch.Tensor:
    """Global ids of [own rows | halo rows] (the dropout mask is a function of them, so the once
    mode's masks are the per-edge path's)."""
    return torch.from_numpy(plan.shard.source_ids()).to(device)


def _attend_once_backward(ctx, grad: torch.Tensor) -> tuple:
    """The once mode's attention backward, each row still moved once: attend_backward over
    [own | halo] rows (the forward's gathered halo table) gives this rank's d a_dst, its own rows'
    gradient from its own edges, and its halo rows' gradient; each rank writes the latter to a
    symmetric outbox (rows in its halo order), meets the others, and adds what every peer wrote
    for its rows (Plan.halo_return through aggregate_peers: each such row read once)."""
    table_own, a_dst_own, out, stats = ctx.saved_tensors
    plan, _, _, fetch, heads, slope, dropout, seed = ctx.args
    back, halo_counts = ctx.once
    rt = symmetric.runtime()
    me, dev = rt.heap.my_pe(), table_own.device
    args, params = plan.op_args(dev, transposed=True)
    d_own, d_halo, d_dst = ops.attend_backward(
        grad,
        table_own,
        ctx.halo,
        a_dst_own,
        out,
        stats,
        args,
        params,
        heads,
        slope,
        dropout,
        seed,
        *ctx.ids,
    )
    box = rt.next_table(d_halo.size(1), d_halo.dtype, halo_counts)
    box.own.copy_(d_halo)
    rt.heap.barrier()  # every PE's outbox is written before any PE reads
    if back.remote is not None and back.remote.num_edges:
        returned = ops.aggregate_peers(box.own, box.peers, me, *back.op_args(dev), ops.fetch_code(fetch), False)
        d_own = d_own + returned
    return d_own, d_dst


def attend(
    table_own: torch.Tensor,
    a_dst_own: torch.Tensor,
    plan: RankPlan,
    plan_t: RankPlan,
    range_rows: list[int],
    fetch: str,
    heads: int,
    negative_slope: float,
    dropout: float,
    seed: int,
    remote_reads: str = "per-edge",
    halo_return: Optional[tuple] = None,
    ids: Optional[tuple] = None,
) -> torch.Tensor:
    """One rank's GAT attention over the symmetric tables, differentiable in table_own and
    a_dst_own. remote_reads='once' reads each halo row once: the forward gathers the halo rows
    of the source table, the backward returns their gradients through outboxes
    (_attend_once_backward; halo_return: (Plan.halo_return's step of this rank, every rank's
    halo row count)); 'per-edge' reads peers' rows, and in the backward their terms, per edge.

    Args:
        table_own: this rank's source rows [rows, H * (C + 1)] (mgg.ops.attention_table).
        a_dst_own: this rank's destination terms [rows, H].
        plan, plan_t: this rank's plans of the graph and of its transpose (the backward's).
        range_rows: every rank's row count.
        fetch: how peers' rows are read (mgg._C.FETCH).
        heads, negative_slope, dropout, seed: as GATConv's; every rank passes the same seed.
        ids: in the once mode, (the graph's ids of [own rows | halo rows] on the table's device,
            the id of the rank's first row), which the dropout masks are drawn from; default:
            the plan's own ids (a plan whose ids are the graph's).

    Returns:
        [rows, H * C].
    """
    check_remote_reads(remote_reads)
    if remote_reads == "once" and halo_return is None:
        raise MggError(
            "nvshmem.attend: remote_reads='once' needs halo_return (Plan.halo_return, every rank's halo rows)"
        )
    once = halo_return if remote_reads == "once" else None
    return _Attend.apply(
        table_own, a_dst_own, plan, plan_t, range_rows, fetch, heads, negative_slope, dropout, seed, once, ids
    )

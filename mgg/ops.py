"""The one door to mgg's compiled ops (schemas: csrc/ops/schema.cpp): a typed wrapper per op, taking
tensors and plain arguments, never a plan object, with its fake implementation (torch.compile)
beside it. Nothing else in mgg calls torch.ops.mgg. The ops' autograd is registered in C++
(csrc/ops/autograd.cpp): aggregate and aggregate_peers differentiate with respect to x and
x_remote (each peer table that requires grad) through the plan's transposed step, attend through
attend_backward; the distributed backends add the adjoint of their exchange (mgg.distributed).

A step reaches the ops as two lists: `plan`, the tensors of the forward step and of its transposed
step (fields mgg._C.STEP_FIELDS, None where absent), and `params`, their integers
(mgg._C.STEP_PARAMS, twice): what mgg.plan's RankPlan.op_args packs."""

from __future__ import annotations

from typing import Optional

import torch

from . import _C  # loading the extension registers the ops
from .errors import MggError

FETCH = {name: i for i, name in enumerate(_C.FETCH)}  # aggregate_peers' fetch policies, as the op numbers them
EXTREMES = ("max", "min")  # aggregate_extreme's reductions (csrc/core/extreme.h)


def fetch_code(fetch: str) -> int:
    """The op's number of a fetch policy; MggError for a name that is none (mgg._C.FETCH)."""
    if fetch not in FETCH:
        raise MggError(f"fetch must be one of {tuple(FETCH)}, got {fetch!r}")
    return FETCH[fetch]


def check_extreme(reduce: str) -> None:
    """Raises MggError unless `reduce` names a reduction of aggregate_extreme."""
    if reduce not in EXTREMES:
        raise MggError(f"reduce must be one of {EXTREMES}, got {reduce!r}")


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the ops accumulate (and keep statistics) in for a storage dtype."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _rows(plan: list) -> int:
    return plan[0].size(0) - 1  # the forward step's local_rowptr has rows + 1 entries


# ---- aggregation ----------------------------------------------------------------------------------


def aggregate(
    x: torch.Tensor, x_remote: torch.Tensor, plan: list, params: list, deterministic: bool = False
) -> torch.Tensor:
    """out[r] = sum over the step's edges into r of w * source row: local sources are rows of x,
    remote ones rows of x_remote (a halo table). [rows, D] in x's dtype. Every run is bit-identical
    (`deterministic` is accepted for the callers that pass it)."""
    return torch.ops.mgg.aggregate(x, x_remote, plan, params, deterministic)


@torch.library.register_fake("mgg::aggregate")
def _aggregate_fake(x, x_remote, plan, params, deterministic):
    torch._check(x.dim() == 2, lambda: "mgg.aggregate: x must be 2-D")
    return x.new_empty((_rows(plan), x.size(1)))


def aggregate_peers(
    x: torch.Tensor, peers: list, my_pe: int, plan: list, params: list, fetch: int, deterministic: bool = False
) -> torch.Tensor:
    """aggregate with remote rows read from each PE's own table (peers[pe], row remote_col) by the
    fetch policy `fetch` (fetch_code)."""
    return torch.ops.mgg.aggregate_peers(x, peers, my_pe, plan, params, fetch, deterministic)


@torch.library.register_fake("mgg::aggregate_peers")
def _aggregate_peers_fake(x, peers, my_pe, plan, params, fetch, deterministic):
    torch._check(x.dim() == 2, lambda: "mgg.aggregate_peers: x must be 2-D")
    return x.new_empty((_rows(plan), x.size(1)))


def aggregate_extreme(
    x: torch.Tensor, x_remote: torch.Tensor, plan: list, params: list, reduce: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The elementwise max or min (reduce) over each row's sources, 0 for a row without in-edges,
    and per element the row of [x | x_remote] it came from (-1 for none); the plan unweighted."""
    return torch.ops.mgg.aggregate_extreme(x, x_remote, plan, params, reduce)


@torch.library.register_fake("mgg::aggregate_extreme")
def _aggregate_extreme_fake(x, x_remote, plan, params, reduce):
    torch._check(x.dim() == 2, lambda: "mgg.aggregate_extreme: x must be 2-D")
    shape = (_rows(plan), x.size(1))
    return x.new_empty(shape), x.new_empty(shape, dtype=torch.long)


def range_schedule(
    local_rowptr: torch.Tensor, remote_rowptr: Optional[torch.Tensor], ps: int, dist: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The warp-range schedule of a step from its row pointers (CPU int64): (ranges, fixups),
    csrc/core/schedule.h."""
    return torch.ops.mgg.range_schedule(local_rowptr, remote_rowptr, ps, dist)


# ---- GAT's attention (csrc/core/attention.h) ------------------------------------------------------


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


def attend(
    x: torch.Tensor,
    x_remote: torch.Tensor,
    a_dst: torch.Tensor,
    plan: list,
    params: list,
    heads: int,
    negative_slope: float,
    dropout: float,
    seed: int,
    ids: Optional[torch.Tensor] = None,
    row_offset: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAT's attention over a step: x and x_remote hold per head its features then its source term,
    a_dst the output rows' destination terms. (out [rows, H * C], per-row softmax statistics)."""
    return torch.ops.mgg.attend(x, x_remote, a_dst, plan, params, heads, negative_slope, dropout, seed, ids, row_offset)


@torch.library.register_fake("mgg::attend")
def _attend_fake(x, x_remote, a_dst, plan, params, heads, negative_slope, dropout, seed, ids, row_offset):
    rows, channels = _rows(plan), x.size(1) // heads - 1
    return x.new_empty((rows, heads * channels)), x.new_empty((rows, 2 * heads), dtype=acc_dtype(x.dtype))


def attend_backward(
    grad, x, x_remote, a_dst, out, stats, plan, params, heads, negative_slope, dropout, seed, ids, row_offset
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """attend's adjoint: the gradients of x, x_remote and a_dst (attend's autograd calls it)."""
    return torch.ops.mgg.attend_backward(
        grad, x, x_remote, a_dst, out, stats, plan, params, heads, negative_slope, dropout, seed, ids, row_offset
    )


@torch.library.register_fake("mgg::attend_backward")
def _attend_backward_fake(
    grad, x, x_remote, a_dst, out, stats, plan, params, heads, negative_slope, dropout, seed, ids, row_offset
):
    return torch.empty_like(x), torch.empty_like(x_remote), torch.empty_like(a_dst)


def attend_peers(
    peers: list, my_pe: int, a_dst, plan, params, heads, negative_slope, dropout, seed, offsets: list, fetch: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """attend with sources named by owner PE (peers[pe]); offsets[pe] is PE pe's first global id."""
    return torch.ops.mgg.attend_peers(
        peers, my_pe, a_dst, plan, params, heads, negative_slope, dropout, seed, offsets, fetch
    )


@torch.library.register_fake("mgg::attend_peers")
def _attend_peers_fake(peers, my_pe, a_dst, plan, params, heads, negative_slope, dropout, seed, offsets, fetch):
    x = peers[my_pe]
    rows, channels = _rows(plan), x.size(1) // heads - 1
    return x.new_empty((rows, heads * channels)), x.new_empty((rows, 2 * heads), dtype=acc_dtype(x.dtype))


def attention_terms(grad, out, a_dst, stats, heads: int) -> torch.Tensor:
    """The output rows' terms of attend_peers' backward (published to the peers)."""
    return torch.ops.mgg.attention_terms(grad, out, a_dst, stats, heads)


@torch.library.register_fake("mgg::attention_terms")
def _attention_terms_fake(grad, out, a_dst, stats, heads):
    channels = out.size(1) // heads
    return out.new_empty((out.size(0), heads * (channels + 4)), dtype=acc_dtype(out.dtype))


def attention_keep(dst: torch.Tensor, src: torch.Tensor, heads: int, seed: int, p: float) -> torch.Tensor:
    """The dropout factors the attention ops draw for edges (global ids dst, src) and heads."""
    return torch.ops.mgg.attention_keep(dst, src, heads, seed, p)


@torch.library.register_fake("mgg::attention_keep")
def _attention_keep_fake(dst, src, heads, seed, p):
    return dst.new_empty((dst.size(0), heads), dtype=torch.float32)


def node_keep(nodes: torch.Tensor, col0: int, col1: int, seed: int, step: int, layer: int, p: float) -> torch.Tensor:
    """Node-feature dropout's keep mask [len(nodes), col1 - col0] (bool) for rows of global node ids
    `nodes`: the same draw whichever rank, grid or device holds a node (csrc/core/dropout.h)."""
    return torch.ops.mgg.node_keep(nodes, col0, col1, seed, step, layer, p)


@torch.library.register_fake("mgg::node_keep")
def _node_keep_fake(nodes, col0, col1, seed, step, layer, p):
    return nodes.new_empty((nodes.size(0), col1 - col0), dtype=torch.bool)


def attend_peers_dst(
    peers: list, my_pe: int, terms, plan, params, heads, negative_slope, dropout, seed, offsets: list, fetch: int
) -> torch.Tensor:
    """attend_peers' backward, pass A: d a_dst of the output rows."""
    return torch.ops.mgg.attend_peers_dst(
        peers, my_pe, terms, plan, params, heads, negative_slope, dropout, seed, offsets, fetch
    )


@torch.library.register_fake("mgg::attend_peers_dst")
def _attend_peers_dst_fake(peers, my_pe, terms, plan, params, heads, negative_slope, dropout, seed, offsets, fetch):
    return peers[my_pe].new_empty((terms.size(0), heads))


def attend_peers_src(
    x, terms: list, my_pe: int, plan, params, heads, negative_slope, dropout, seed, offsets: list, fetch: int
) -> torch.Tensor:
    """attend_peers' backward, pass B (over the transposed graph's step): the source rows' gradients."""
    return torch.ops.mgg.attend_peers_src(
        x, terms, my_pe, plan, params, heads, negative_slope, dropout, seed, offsets, fetch
    )


@torch.library.register_fake("mgg::attend_peers_src")
def _attend_peers_src_fake(x, terms, my_pe, plan, params, heads, negative_slope, dropout, seed, offsets, fetch):
    return torch.empty_like(x)

"""The calls users make (as torch.nn.functional and PyG name them): the aggregation of a graph or
plan (`aggregate`, `make_plan`), with learned edge weights (`aggregate_edges`), and GAT's attention
(`attend`). They plan on the host (mgg.plan) and run the ops through mgg.ops."""

from __future__ import annotations

from typing import Optional, Union

import torch

from . import ops
from .errors import MggError
from .graph import Graph
from .ops import EXTREMES
from .plan import Config, Plan
from .runtime.ordering import plan_in_order

REDUCTIONS = ("sum", "mean") + EXTREMES


def make_plan(graph: Graph, reduce: str = "sum", num_ranks: int = 1, order="user", x=None) -> Plan:
    """The plan of `graph` for a reduction.

    Args:
        graph: the graph.
        reduce: 'sum' uses the graph's edge weights (if any; e.g. from Graph.gcn_norm), 'mean'
            divides by the in-degree; 'max' and 'min' plan the graph without its weights.
        num_ranks: ranks of the plan.
        order: the node order a one-rank plan runs the graph in: 'user', a name of
            mgg.plan.ORDERS ('rcm', 'degree', 'metis', 'random'), a permutation (perm[position] =
            node id), or 'auto' (measured with x: mgg.runtime.ordering). Tensors stay in the
            user's order.
        x: the features, for order='auto'.

    Returns:
        The Plan (an OrderedPlan for an order other than the user's).
    """
    if reduce not in REDUCTIONS:
        raise MggError(f"reduce must be one of {REDUCTIONS}, got {reduce!r}")
    if reduce in EXTREMES:
        graph = Graph._unchecked(graph.rowptr, graph.col) if graph.weight is not None else graph
    elif reduce == "mean":
        graph = graph.mean_norm()
    if num_ranks == 1:
        return plan_in_order(graph, order, x)
    if not (isinstance(order, str) and order == "user"):
        raise MggError(f"an order applies to one-rank plans; this plan has {num_ranks} ranks (see mgg.partition)")
    return Plan(graph, num_ranks)


def aggregate(
    x: torch.Tensor,
    plan: Union[Plan, Graph],
    config: Optional[Config] = None,
    reduce: str = "sum",
    deterministic: bool = False,
) -> torch.Tensor:
    """out[v] = sum over edges u->v of w(u,v) * x[u] (or, reduce 'max'/'min', the elementwise max
    or min of x[u], 0 for a node without in-edges), on one rank, differentiable in x.

    Args:
        x: node features [nodes, D]: float32, float64 (CPU), float16 or bfloat16 storage;
            accumulation is float32 or wider.
        plan: a Plan of one rank (see make_plan) or a Graph (planned here, with `reduce`).
        config: (ps, dist, wpb); default Config(). Its order applies where a Graph is planned here.
        reduce: 'sum' or 'mean' (with a Graph; a Plan's weights fix them), 'max' or 'min' (a Plan
            of an unweighted graph; the gradient goes to the winning row, ties to the lowest row:
            csrc/core/extreme.h).
        deterministic: bit-identical results from run to run (max and min always are).

    Returns:
        [nodes, D].
    """
    if isinstance(plan, Graph):
        plan = make_plan(plan, reduce, order=(config or Config()).order, x=x)
    elif reduce not in ("sum",) + EXTREMES:
        raise MggError(
            f"reduce {reduce!r} applies when a Graph is passed; with a Plan (whose weights fix sum or mean) "
            f"reduce must be one of {('sum',) + EXTREMES}"
        )
    if reduce in EXTREMES:
        return plan.aggregate_extreme(x, reduce, config)
    return plan.aggregate(x, config, deterministic)


class _EdgeWeighted(torch.autograd.Function):
    """out = aggregate over a plan of the edges (src, dst, w), differentiable in x and in w."""

    @staticmethod
    def forward(ctx, x, w, src, dst, num_nodes, config, deterministic):
        graph = Graph.from_edges(src.cpu().numpy(), dst.cpu().numpy(), num_nodes, w.detach().cpu())
        with torch.enable_grad():
            leaf = x.detach().requires_grad_(ctx.needs_input_grad[0])
            out = aggregate(leaf, Plan(graph), config, deterministic=deterministic)
        ctx.save_for_backward(x, src, dst)
        ctx.leaf, ctx.out = leaf, out
        return out.detach()

    @staticmethod
    def backward(ctx, grad):
        x, src, dst = ctx.saved_tensors
        gx = gw = None
        if ctx.needs_input_grad[0]:
            (gx,) = torch.autograd.grad(ctx.out, ctx.leaf, grad)  # the op's backward: the transposed plan
        if ctx.needs_input_grad[1]:
            gw = (grad[dst] * x[src]).sum(-1)  # d w_e = <grad_out[dst_e], x[src_e]>
        return gx, gw, None, None, None, None, None


def aggregate_edges(
    x: torch.Tensor,
    src: torch.Tensor,
    dst: torch.Tensor,
    weight: torch.Tensor,
    num_nodes: Optional[int] = None,
    config: Optional[Config] = None,
    deterministic: bool = False,
) -> torch.Tensor:
    """out[v] = sum over edges e = (src[e] -> v) of weight[e] * x[src[e]], through the op, and
    differentiable in x and in weight (learned edge weights: d weight[e] = <grad_out[dst[e]],
    x[src[e]]>, computed with torch ops on x's device). The plan is built on each call (the
    weights are part of it).

    Args:
        x: node features [nodes, D].
        src, dst: [E] edge ends (int64).
        weight: [E] edge weights (float64 kept for a float64 x).
        num_nodes: default x.size(0).
        config, deterministic: as aggregate.

    Returns:
        [nodes, D].
    """
    n = x.size(0) if num_nodes is None else num_nodes
    return _EdgeWeighted.apply(
        x, weight.to(x.dtype if x.dtype == torch.float64 else torch.float32), src, dst, n, config, deterministic
    )


# ---- GAT's attention (csrc/core/attention.h) ----------------------------------------------------


def attention_graph(graph: Graph, add_self_loops: bool = True) -> Graph:
    """The graph GAT attends over: unweighted (attention makes the weights) and, with
    add_self_loops, with its self-loops replaced by one per node (as PyG's GATConv)."""
    g = graph.unweighted()
    return g.add_self_loops() if add_self_loops else g


def attend(
    h: torch.Tensor,
    a_src: torch.Tensor,
    a_dst: torch.Tensor,
    plan: Union[Plan, Graph],
    negative_slope: float = 0.2,
    dropout: float = 0.0,
    seed: int = 0,
    config: Optional[Config] = None,
) -> torch.Tensor:
    """GAT's attention on one rank: out_i = sum_j softmax_j(leaky_relu(a_src_j + a_dst_i)) h_j per
    head, over the in-edges of i, differentiable in h, a_src and a_dst.

    Args:
        h: [nodes, H, C] features per head: float32, float64 (CPU), float16 or bfloat16.
        a_src, a_dst: [nodes, H] source and destination terms.
        plan: a Plan of one rank of an unweighted graph, or a Graph (used as it is: see
            attention_graph for GAT's self-loops).
        negative_slope: of the leaky ReLU.
        dropout: probability of zeroing a coefficient (scaled by 1 / (1 - dropout)).
        seed: the dropout draw (a function of seed, edge and head).
        config: the plan's config; only warps_per_block matters to attention.

    Returns:
        [nodes, H, C].
    """
    if isinstance(plan, Graph):
        plan = Plan(attention_graph(plan, add_self_loops=False))
    return plan.attend(h, a_src, a_dst, negative_slope, dropout, seed, config)


MASK_CHUNK = 1 << 22  # the elements of node dropout's keep mask made at once


def _drop_rows(out: torch.Tensor, t: torch.Tensor, ids: torch.Tensor, p: float, draw: tuple) -> torch.Tensor:
    """out = t's kept elements scaled, the rest zeroed (out may be t itself), the mask made a block of
    rows at a time (never whole, never kept): draw = (col0, seed, step, layer) of mgg.ops.node_keep."""
    rows, cols = t.shape
    col0, seed, step, layer = draw
    block, zero = max(1, MASK_CHUNK // max(cols, 1)), t.new_zeros(())
    for r0 in range(0, max(rows, 1), block):  # one block at least: node_keep checks its arguments
        keep = ops.node_keep(ids[r0 : r0 + block], col0, col0 + cols, seed, step, layer, p)
        if out is t:
            t[r0 : r0 + block].masked_fill_(keep.logical_not_(), 0)
        else:
            torch.where(keep, t[r0 : r0 + block], zero, out=out[r0 : r0 + block])
    return out.div_(1 - p)


class _NodeDropout(torch.autograd.Function):
    """x's kept elements scaled, the rest zeroed; the adjoint the same of the gradient. It keeps the
    node ids, not the mask: each direction draws the mask again a block at a time (_drop_rows), and
    neither makes a copy of it in x's dtype (a product by a bool tensor does, on the CPU): one new
    table each way, or none (in_place, grad_owned)."""

    @staticmethod
    def forward(ctx, x, ids, p, draw, in_place, grad_owned):
        ctx.save_for_backward(ids)
        ctx.p, ctx.draw, ctx.grad_owned = p, draw, grad_owned
        if in_place:
            ctx.mark_dirty(x)
            return _drop_rows(x, x, ids, p, draw)
        return _drop_rows(torch.empty_like(x), x, ids, p, draw)

    @staticmethod
    def backward(ctx, g):
        (ids,) = ctx.saved_tensors
        out = g if ctx.grad_owned else torch.empty_like(g)
        return _drop_rows(out, g, ids, ctx.p, ctx.draw), None, None, None, None, None


def node_dropout(
    x: torch.Tensor,
    ids: torch.Tensor,
    p: float,
    seed: int,
    step: int,
    layer: int,
    col0: int = 0,
    in_place: bool = False,
    grad_owned: bool = False,
):
    """Dropout of a layer's input drawn by node: element (row, column) of x [rows, cols] is dropped
    unless a hash of (seed, step, layer, the row's global node id ids[row], col0 + column) keeps it
    (mgg.ops.node_keep), the kept ones scaled by 1 / (1 - p) as F.dropout scales them. Whichever rank,
    grid or device holds a node draws the same (mgg.nn.dropout, Plexus's grid). in_place: x itself
    dropped (a table nothing else reads: no copy of it). grad_owned: the gradient reaching the
    adjoint is a new table nothing else reads (the caller knows the result's users' adjoints),
    dropped in place."""
    if p <= 0:
        return x
    if x.dim() != 2 or ids.shape != (x.size(0),):
        raise MggError(
            f"node_dropout: x must be [rows, cols] and ids its rows' node ids [rows], got {list(x.shape)} and "
            f"{list(ids.shape)}"
        )
    return _NodeDropout.apply(x, ids, p, (col0, seed, step, layer), in_place, grad_owned)

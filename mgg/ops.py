"""torch.ops.mgg.aggregate from Python: the fake implementation (torch.compile), autograd
through the transposed plan, and `aggregate`, the call users make."""
from __future__ import annotations

from typing import Optional, Union

import torch

from . import _C  # noqa: F401  (loading the extension registers the op)
from .errors import MggError
from .graph import Graph
from .plan import Config, Plan, RankPlan

REDUCTIONS = ("sum", "mean")


@torch.library.register_fake("mgg::aggregate")
def _aggregate_fake(x, x_remote, local_part_ptr, local_part_row, local_col, local_weight, remote_part_ptr,
                    remote_part_row, remote_col, remote_weight, blocks, fixups, num_rows, dist, warps_per_block,
                    interleave, deterministic):
    torch._check(x.dim() == 2, lambda: "mgg.aggregate: x must be 2-D")
    return x.new_empty((num_rows, x.size(1)))


@torch.library.register_fake("mgg::aggregate_peers")
def _aggregate_peers_fake(x, peers, my_pe, local_part_ptr, local_part_row, local_col, local_weight, remote_part_ptr,
                          remote_part_row, remote_offset, remote_pe, remote_weight, blocks, fixups, num_rows, dist,
                          warps_per_block, interleave, fetch, deterministic):
    torch._check(x.dim() == 2, lambda: "mgg.aggregate_peers: x must be 2-D")
    return x.new_empty((num_rows, x.size(1)))


FETCH = {"direct": 0, "get-thread": 1, "get-warp": 2, "get-block": 3}


def check_fetch(fetch: str) -> None:
    if fetch not in FETCH:
        raise MggError(f"fetch must be one of {tuple(FETCH)}, got {fetch!r}")


def _run(x: torch.Tensor, x_remote: torch.Tensor, plan: RankPlan, deterministic: bool) -> torch.Tensor:
    return torch.ops.mgg.aggregate(x, x_remote, *plan.to(x.device).op_args(), deterministic)


def _run_peers(x: torch.Tensor, peers: list, my_pe: int, plan: RankPlan, fetch: str,
               deterministic: bool) -> torch.Tensor:
    """One rank's aggregation reading remote rows from each PE's table, peers[pe]."""
    check_fetch(fetch)
    return torch.ops.mgg.aggregate_peers(x, peers, my_pe, *plan.to(x.device).peer_op_args(), FETCH[fetch],
                                         deterministic)


class _Aggregate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, plan: RankPlan, plan_t: RankPlan, deterministic: bool):
        ctx.plan_t, ctx.deterministic = plan_t, deterministic
        return _run(x, x.new_empty((0, x.size(1))), plan, deterministic)

    @staticmethod
    def backward(ctx, grad):
        g = grad.contiguous()
        return _run(g, g.new_empty((0, g.size(1))), ctx.plan_t, ctx.deterministic), None, None, None


def make_plan(graph: Graph, reduce: str = "sum", num_ranks: int = 1) -> Plan:
    """The plan of `graph` for a reduction: 'sum' uses the graph's edge weights (if any; e.g.
    from Graph.gcn_norm), 'mean' divides by the in-degree."""
    if reduce not in REDUCTIONS:
        raise MggError(f"reduce must be one of {REDUCTIONS}, got {reduce!r}")
    return Plan(graph.mean_norm() if reduce == "mean" else graph, num_ranks)


def aggregate(x: torch.Tensor, plan: Union[Plan, Graph], config: Optional[Config] = None,
              reduce: str = "sum", deterministic: bool = False) -> torch.Tensor:
    """out[v] = sum over edges u->v of w(u,v) * x[u], on one rank, differentiable in x.

    `plan` is a Plan of one rank (see make_plan) or a Graph (planned here, with `reduce`).
    Storage may be float32, float64 (CPU), float16 or bfloat16; accumulation is float32 or wider."""
    if isinstance(plan, Graph):
        plan = make_plan(plan, reduce)
    elif reduce != "sum":
        raise MggError("reduce applies when a Graph is passed; a Plan already fixes the weights")
    if plan.num_ranks != 1:
        raise MggError(f"mgg.aggregate runs one rank; this plan has {plan.num_ranks} (use mgg.distributed)")
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise MggError(f"x must be a 2-D tensor [nodes, dim], got {getattr(x, 'shape', type(x).__name__)}")
    if x.size(0) != plan.graph.num_nodes:
        raise MggError(f"x has {x.size(0)} rows but the graph has {plan.graph.num_nodes} nodes")
    config = config or Config()
    fwd = plan.rank_plan(0, config)
    bwd = plan.transposed.rank_plan(0, config)
    return _Aggregate.apply(x.contiguous(), fwd, bwd, deterministic)

"""torch.ops.mgg.aggregate and aggregate_peers from Python: fake implementations (torch.compile)
and `aggregate`, the call users make. The ops' autograd is registered on the ops in C++
(csrc/ops/autograd.cpp): they differentiate with respect to x and x_remote (aggregate_peers: x
and each peer table that requires grad) through the plan's transposed step, with no
communication; the distributed backends add the adjoint of their exchange (mgg.distributed)."""
from __future__ import annotations

from typing import Optional, Union

import torch

from . import _C  # noqa: F401  (loading the extension registers the ops)
from .errors import MggError
from .graph import Graph
from .plan import Config, Plan, RankPlan

REDUCTIONS = ("sum", "mean")
FETCH = {name: i for i, name in enumerate(_C.FETCH)}


@torch.library.register_fake("mgg::aggregate")
def _aggregate_fake(x, x_remote, plan, params, deterministic):
    torch._check(x.dim() == 2, lambda: "mgg.aggregate: x must be 2-D")
    return x.new_empty((plan[0].size(0) - 1, x.size(1)))


@torch.library.register_fake("mgg::aggregate_peers")
def _aggregate_peers_fake(x, peers, my_pe, plan, params, fetch, deterministic):
    torch._check(x.dim() == 2, lambda: "mgg.aggregate_peers: x must be 2-D")
    return x.new_empty((plan[0].size(0) - 1, x.size(1)))


def check_fetch(fetch: str) -> None:
    """Raises MggError unless `fetch` names a fetch policy of aggregate_peers."""
    if fetch not in FETCH:
        raise MggError(f"fetch must be one of {tuple(FETCH)}, got {fetch!r}")


def _needs_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def run_step(x: torch.Tensor, x_remote: torch.Tensor, plan: RankPlan, deterministic: bool = False) -> torch.Tensor:
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


def run_peers(x: torch.Tensor, peers: list, my_pe: int, plan: RankPlan, fetch: str = "direct",
              deterministic: bool = False) -> torch.Tensor:
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


def make_plan(graph: Graph, reduce: str = "sum", num_ranks: int = 1) -> Plan:
    """The plan of `graph` for a reduction.

    Args:
        graph: the graph.
        reduce: 'sum' uses the graph's edge weights (if any; e.g. from Graph.gcn_norm), 'mean'
            divides by the in-degree.
        num_ranks: ranks of the plan.

    Returns:
        The Plan.
    """
    if reduce not in REDUCTIONS:
        raise MggError(f"reduce must be one of {REDUCTIONS}, got {reduce!r}")
    return Plan(graph.mean_norm() if reduce == "mean" else graph, num_ranks)


def aggregate(x: torch.Tensor, plan: Union[Plan, Graph], config: Optional[Config] = None,
              reduce: str = "sum", deterministic: bool = False) -> torch.Tensor:
    """out[v] = sum over edges u->v of w(u,v) * x[u], on one rank, differentiable in x.

    Args:
        x: node features [nodes, D]: float32, float64 (CPU), float16 or bfloat16 storage;
            accumulation is float32 or wider.
        plan: a Plan of one rank (see make_plan) or a Graph (planned here, with `reduce`).
        config: (ps, dist, wpb); default Config().
        reduce: with a Graph: 'sum' or 'mean'.
        deterministic: bit-identical results from run to run.

    Returns:
        [nodes, D].
    """
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
    x = x.contiguous()
    return run_step(x, x.new_empty((0, x.size(1))), plan.rank_plan(0, config or Config()), deterministic)

"""Config(order="auto"): whether a one-process plan runs its graph in another node order, decided
by measurement on the step that will run (issue 51). Reordering pays only where the kernel waits on
memory for rows it gathers: the feature table must be larger than the device's last cache, and the
order must make the aggregation faster by more than the timing noise and win back what it cost
(computing the order, relabelling the graph) within PAYBACK_AGGREGATIONS aggregations.

    choose(graph, x, config) -> (plan, decision)

decision says what was measured and why the order is on or off (the plan keeps it as
`plan.order_decision`). plan_in_order is the one place a plan is built in an order: by name, by
the user's permutation, or by this choice."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from ..errors import MggError
from ..graph import Graph
from ..partitioning.order import OrderedPlan, given_order, node_order
from ..plan import Config, Plan
from ..plan.config import AUTO, ORDERS
from .timing import measure

CANDIDATES = ("rcm",)  # the order the benchmark found best on the CPU (bench/results/order-*.md)
MARGIN = 0.03  # an order must be this much faster per aggregation (the CPU timings' noise)
PAYBACK_AGGREGATIONS = 400  # 200 epochs (Kipf & Welling's protocol) of a forward and a backward
REPS = 3


@dataclass
class Decision:
    """What order="auto" measured and decided: on (the order kept) or off, and why."""

    order: str  # the order kept ("user": none)
    why: str
    user_ms: Optional[float] = None
    measured_ms: dict = field(default_factory=dict)  # order -> ms per aggregation
    order_s: dict = field(default_factory=dict)  # order -> seconds to compute it and plan the graph

    def line(self) -> str:
        return f"order {self.order}: {self.why}"


def cache_bytes(device: torch.device) -> int:
    """The device's last-level cache: the GPU's L2, or the CPU's largest cache (Linux sysfs; 32 MB
    where it cannot be read)."""
    if device.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20))
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip().upper()
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            sizes.append(int(text.rstrip("KMG")) * mult)
        except ValueError:
            continue
    return max(sizes, default=32 << 20)


def choose(graph: Graph, x: torch.Tensor, config: Config, payback: int = PAYBACK_AGGREGATIONS) -> tuple:
    """The plan `graph` runs in for features like `x` under `config` (order="auto").

    Args:
        graph: the graph as the layer plans it, in the user's order.
        x: the features of the first forward ([nodes, D], on the device that will run).
        config: the kernels' config (its order is ignored here).
        payback: the aggregations the order has to pay back its cost within.

    Returns:
        (Plan or OrderedPlan, Decision).
    """
    plan = Plan(graph)
    table = x.size(0) * x[:1].numel() * x.element_size()
    limit = cache_bytes(x.device)
    if table <= limit:
        return plan, Decision("user", f"off: x ({table / 2**20:.1f} MB) fits the {limit / 2**20:.0f} MB cache")
    kernel = Config(config.ps, config.dist, config.wpb, config.interleave)
    with torch.no_grad():
        user = measure(lambda: plan.aggregate(x, kernel), x.device, warmup=1, reps=REPS).median_ms
        decision = Decision("user", "", user_ms=user)
        best = None
        for name in CANDIDATES:
            t0 = time.perf_counter()
            candidate = OrderedPlan(graph, node_order(graph, name))
            decision.order_s[name] = time.perf_counter() - t0
            ms = measure(lambda c=candidate: c.aggregate(x, kernel), x.device, warmup=1, reps=REPS).median_ms
            decision.measured_ms[name] = ms
            if best is None or ms < decision.measured_ms[best[0]]:
                best = (name, candidate)
    name, candidate = best
    decision.why = verdict(name, user, decision.measured_ms[name], decision.order_s[name], payback)
    if not decision.why.startswith("on"):
        return plan, decision
    decision.order = name
    return candidate, decision


def verdict(order: str, user_ms: float, order_ms: float, cost_s: float, payback: int = PAYBACK_AGGREGATIONS) -> str:
    """Whether an order pays, as a phrase that starts with "on" or "off": it must be more than
    MARGIN faster per aggregation than the user's order and win back its one-off cost (computing
    the order, planning the relabelled graph) within `payback` aggregations."""
    saved = (user_ms - order_ms) * 1e-3
    if order_ms > (1 - MARGIN) * user_ms:
        return (
            f"off: {order} {order_ms:.2f} ms against {user_ms:.2f} ms in the user's order (under {MARGIN:.0%} faster)"
        )
    if saved * payback < cost_s:
        return (
            f"off: {order} saves {saved * 1e3:.2f} ms an aggregation, {saved * payback:.2f} s over {payback}, "
            f"less than its {cost_s:.2f} s"
        )
    return (
        f"on: {order} {order_ms:.2f} ms against {user_ms:.2f} ms ({user_ms / order_ms:.2f}x); its {cost_s:.2f} s "
        f"paid back in {cost_s / saved:.0f} aggregations"
    )


def plan_in_order(graph: Graph, order="user", x: Optional[torch.Tensor] = None, config: Optional[Config] = None):
    """The one-rank plan of `graph` in `order`: "user" (a Plan), a name of ORDERS or a permutation
    (perm[position] = node id: an OrderedPlan), or AUTO (choose(), which needs x: the features the
    plan will aggregate)."""
    if isinstance(order, str) and order == "user":
        return Plan(graph)
    if isinstance(order, str) and order == AUTO:
        if x is None:
            raise MggError("order='auto' measures the aggregation it will run: it needs the features (x)")
        plan, decision = choose(graph, x.reshape(x.size(0), -1), config or Config())
        plan.order_decision = decision
        return plan
    if isinstance(order, str):
        if order not in ORDERS:
            raise MggError(f"order must be one of {ORDERS + (AUTO,)} or a permutation, got {order!r}")
        return OrderedPlan(graph, node_order(graph, order))
    return OrderedPlan(graph, given_order(order, graph.num_nodes))

"""Config(order="auto"): whether a one-process plan runs its graph in another node order, decided
by measurement on the step that will run (issue 51). Reordering pays only where the kernel waits on
memory for rows it gathers: the feature table must be larger than the cache an order must beat
(cache_bytes), and the order must make the aggregation faster by more than the timing noise and win
back what it cost (computing the order, relabelling the graph) within PAYBACK_AGGREGATIONS
aggregations.

    choose(graph, x, config) -> (plan, decision)

decision says what was measured and why the order is on or off (the plan keeps it as
`plan.order_decision`). plan_in_order is the one place a plan is built in an order: by name, by
the user's permutation, or by this choice."""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

import torch

from ..errors import MggError
from ..graph import Graph
from ..partitioning.order import OrderedPlan, given_order, node_order
from ..plan import Config, Plan
from ..plan.config import AUTO, ORDERS, unknown_order
from .timing import measure

CANDIDATES = ("rcm", "metis")  # the orders auto measures (bench/results/order-*.md: the best on the CPU)
# METIS's communities cost minutes beyond this (k-way into parts of METIS_PART_NODES: rmat-products'
# 124M edges had not finished in 20 minutes on a 2-core machine), and auto skips them there
METIS_MAX_EDGES = 50_000_000
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
    failed: dict = field(default_factory=dict)  # order -> why it could not be computed

    def line(self) -> str:
        return f"order {self.order}: {self.why}"


def cache_bytes(device: torch.device) -> int:
    """The cache an order must beat: the GPU's L2 (its last level); on the CPU a core's own L2
    (Linux sysfs; 1 MB where it cannot be read). On the CPU the shared L3 is not the line to draw:
    bench/results/order-20261202-032442.md measured RCM 1.58x faster on rmat-reddit at D = 16, whose
    x (15 MB) fits this machine's 32 MB L3."""
    if device.type == "cuda":
        return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20))
    sizes = []
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level, kind = int((d / "level").read_text()), (d / "type").read_text().strip()
            text = (d / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        if level != 2 or kind == "Instruction":
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            sizes.append(int(text.rstrip("KMG")) * mult)
        except ValueError:
            continue
    return max(sizes, default=1 << 20)


def fits_cache(table_bytes: int, device: torch.device) -> str:
    """Why no order is tried ("off: x ... fits the ... cache") where the feature table fits the
    cache an order must beat (cache_bytes), else ""."""
    limit = cache_bytes(device)
    if table_bytes <= limit:
        return f"off: x ({size_text(table_bytes)}) fits the {size_text(limit)} cache"
    return ""


def size_text(nbytes: int) -> str:
    """Bytes in the unit that shows them: KB below 1 MB (a core's 512 KB L2 is not "0 MB"), else MB."""
    if nbytes < 1 << 20:
        return f"{nbytes / 2**10:.0f} KB" if nbytes >= 10 << 10 else f"{nbytes / 2**10:.1f} KB"
    return f"{nbytes / 2**20:.0f} MB" if nbytes >= 10 << 20 else f"{nbytes / 2**20:.1f} MB"


def candidates(graph: Graph) -> list:
    """The orders auto measures on `graph`: CANDIDATES, METIS only where its package is installed
    and the graph has at most METIS_MAX_EDGES edges."""
    out = []
    for name in CANDIDATES:
        if name == "metis":
            if graph.num_edges > METIS_MAX_EDGES or importlib.util.find_spec("pymetis") is None:
                continue
        out.append(name)
    return out


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
    fits = fits_cache(x.size(0) * x[:1].numel() * x.element_size(), x.device)
    if fits:
        return plan, Decision("user", fits)
    kernel = replace(config, order="user")
    with torch.no_grad():
        user = measure(lambda: plan.aggregate(x, kernel), x.device, warmup=1, reps=REPS).median_ms
        decision = Decision("user", "", user_ms=user)
        best = None
        for name in candidates(graph):
            t0 = time.perf_counter()
            try:
                candidate = OrderedPlan(graph, node_order(graph, name))
            except MggError as e:  # an order that cannot be computed here (METIS refusing the graph, say)
                decision.failed[name] = str(e)
                continue
            decision.order_s[name] = time.perf_counter() - t0
            ms = measure(lambda c=candidate: c.aggregate(x, kernel), x.device, warmup=1, reps=REPS).median_ms
            decision.measured_ms[name] = ms
            if best is None or ms < decision.measured_ms[best[0]]:
                best = (name, candidate)
    if best is None:
        decision.why = (
            "off: no order could be computed (" + "; ".join(f"{k}: {v}" for k, v in decision.failed.items()) + ")"
        )
        return plan, decision
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
    if order_ms > (1 - MARGIN) * user_ms or order_ms <= 0:
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
            raise MggError(unknown_order(order))
        return OrderedPlan(graph, node_order(graph, order))
    return OrderedPlan(graph, given_order(order, graph.num_nodes))

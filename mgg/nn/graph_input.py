"""Turns what a PyG layer receives as its graph (edge_index [+ edge_weight], a torch sparse
tensor, an mgg Graph or Plan, a DistGraph) into an mgg plan, and remembers it per input, so a
full-graph model plans its graph once and not once per epoch; and runs a plan."""

from __future__ import annotations

import weakref
from typing import Callable, Optional

import torch

from ..errors import MggError
from ..graph import Graph
from ..plan import Config, Plan
from ..runtime.ordering import plan_in_order

_CACHE: dict = {}
_MAX = 32


def _key_part(t: Optional[torch.Tensor]):
    return None if t is None else (id(t), t._version, tuple(t.shape))


def is_sparse_tensor(obj) -> bool:
    """Whether obj is a torch_sparse.SparseTensor (without importing torch_sparse)."""
    return type(obj).__module__.startswith("torch_sparse")


def is_adjacency(edge_index) -> bool:
    """Whether edge_index is a sparse adjacency adj_t[target, source] (torch sparse or torch_sparse)."""
    return is_sparse_tensor(edge_index) or (isinstance(edge_index, torch.Tensor) and edge_index.layout != torch.strided)


def refuse_reversed_adjacency(edge_index, flow: str) -> None:
    """PyG's flow='target_to_source' reverses an edge_index; a sparse adjacency has one direction."""
    if flow == "target_to_source" and is_adjacency(edge_index):
        raise MggError(
            "flow='target_to_source' does not apply to a sparse adjacency (PyG refuses it too); pass "
            "edge_index [2, E] or the transposed adjacency"
        )


def to_graph(edge_index, num_nodes: int, edge_weight=None) -> Graph:
    """The mgg Graph of a layer's graph input.

    Args:
        edge_index: a [2, E] tensor (row 0 sources, row 1 targets) or PyG EdgeIndex, a torch
            sparse or torch_sparse SparseTensor adjacency (adj[target, source], PyG's convention),
            or an mgg Graph.
        num_nodes: the node count (rows of x).
        edge_weight: optional [E] weights of a [2, E] edge_index.

    Returns:
        The Graph (validated once).
    """
    if isinstance(edge_index, Graph):
        return edge_index
    if is_sparse_tensor(edge_index):  # adj_t[target, source]
        rowptr, col, w = edge_index.csr()
        rows, cols = edge_index.sparse_sizes()
        if rows != cols:
            raise MggError(f"SparseTensor: adjacency must be square, got {rows} x {cols}")
        return Graph.from_csr(rowptr.cpu(), col.cpu(), None if w is None else w.detach().cpu(), "SparseTensor")
    if isinstance(edge_index, torch.Tensor) and hasattr(edge_index, "as_tensor"):  # PyG EdgeIndex: [2, E]
        edge_index = edge_index.as_tensor()
    if isinstance(edge_index, torch.Tensor) and edge_index.layout == torch.sparse_csr:
        w = edge_index.values()
        w = None if bool((w == 1).all()) else w
        return Graph.from_csr(
            edge_index.crow_indices().cpu(),
            edge_index.col_indices().cpu(),
            None if w is None else w.detach().cpu(),
            "sparse adjacency",
        )
    if isinstance(edge_index, torch.Tensor) and edge_index.is_sparse:
        a = edge_index.coalesce()
        idx = a.indices().cpu()
        return Graph.from_edges(
            idx[1].numpy(), idx[0].numpy(), num_nodes, a.values().detach().cpu(), "sparse adjacency"
        )
    if isinstance(edge_index, torch.Tensor):
        return Graph.from_edge_index(edge_index.cpu(), num_nodes, None if edge_weight is None else edge_weight.cpu())
    raise MggError(
        f"edge_index must be a tensor [2, E] (or PyG EdgeIndex), a torch sparse or torch_sparse "
        f"SparseTensor adjacency adj_t[target, source], an mgg Graph, Plan or DistGraph; "
        f"got {type(edge_index).__name__}"
    )


def is_distributed(edge_index) -> bool:
    """Whether a layer's graph input plans itself over ranks (mgg.distributed.DistGraph)."""
    return getattr(edge_index, "plan_for", None) is not None


class NoNodes:
    """The plan of a graph without nodes: aggregating over it gives an empty output, as PyG's
    layers give for an empty input (x of 0 rows), where an mgg Graph has at least one node."""

    num_rows = 0


def plan_rows(plan) -> int:
    """The rows a plan's op reads and writes in this process: a one-rank Plan's nodes, a
    DistPlan's range (this rank's)."""
    return plan.num_rows if isinstance(plan, NoNodes) or getattr(plan, "distributed", False) else plan.graph.num_nodes


@torch.compiler.disable  # the graph's plan is built on the host, eagerly, outside a compiled region
def cached_plan(
    edge_index,
    num_nodes: int,
    edge_weight,
    tag: str,
    make: Callable[[Graph, torch.dtype], Graph],
    flow: str = "source_to_target",
    dtype: torch.dtype = torch.float32,
    order: str = "user",
    probe: Optional[torch.Tensor] = None,
):
    """The plan of make(graph, weight dtype) for this input, built once per (input tensors, tag,
    flow, weight dtype, order).

    Args:
        edge_index: the layer's graph input (see to_graph), or an mgg Plan (used as given) or
            DistGraph (its DistPlan for the tag).
        num_nodes: rows of x.
        edge_weight: optional edge weights of a [2, E] edge_index.
        tag: names the normalisation `make` applies.
        make: (Graph, dtype) -> Graph, the layer's normalisation, with its weights in dtype.
        flow: PyG's message direction; 'target_to_source' reverses every edge.
        dtype: the features' dtype; float64 features get float64 weights (as PyG normalises in
            x's dtype), any other float32 (what the kernels read).
        order: the node order of a one-process plan (Config.order: mgg.runtime.ordering); over a
            DistGraph only "user" and "auto" (which keeps the partition's order) apply.
        probe: the features the layer aggregates (order "auto" measures with them).

    Returns:
        A Plan (one process) or a DistPlan (mgg.distributed).
    """
    if isinstance(edge_index, Plan):
        return edge_index
    wdt = torch.float64 if dtype == torch.float64 else torch.float32
    reverse = flow == "target_to_source"
    refuse_reversed_adjacency(edge_index, flow)
    prepare = lambda g: make(g.transpose() if reverse else g, wdt)  # noqa: E731
    if is_distributed(edge_index):
        if order not in ("user", "auto"):
            raise MggError(f"order {order!r} applies to one-process plans; a DistGraph's partition orders its nodes")
        return edge_index.plan_for(f"{tag}:{flow}:{wdt}", prepare)
    if edge_weight is not None and edge_weight.requires_grad and torch.is_grad_enabled():
        raise MggError(
            "an edge_weight that requires grad goes through mgg.functional.aggregate_edges (GCNConv does this), "
            "not a cached plan"
        )
    if num_nodes == 0:  # an empty input gives an empty output, unless an edge names a node x lacks
        if isinstance(edge_index, torch.Tensor) and not is_adjacency(edge_index) and edge_index.numel():
            raise MggError(f"edge_index has {edge_index.size(-1)} edges but x has no rows (no nodes)")
        return NoNodes()
    key = (
        _key_part(edge_index) if isinstance(edge_index, torch.Tensor) else id(edge_index),
        _key_part(edge_weight),
        num_nodes,
        tag,
        flow,
        wdt,
        order,
    )
    hit = _CACHE.get(key)
    if hit is not None:
        refs, plan = hit
        if all(r() is o for r, o in zip(refs, (edge_index, edge_weight), strict=True) if o is not None):
            return plan
    plan = plan_in_order(prepare(to_graph(edge_index, num_nodes, edge_weight)), order, probe)
    if len(_CACHE) >= _MAX:
        _CACHE.pop(next(iter(_CACHE)))
    refs = tuple(weakref.ref(o) if o is not None else None for o in (edge_index, edge_weight))
    _CACHE[key] = (refs, plan)
    return plan


def run_plan(
    x: torch.Tensor, plan, config: Config, deterministic: bool, tuner=None, reduce: str = "sum"
) -> torch.Tensor:
    """Aggregates x over a layer's plan (a one-rank Plan, or a DistPlan: this rank's rows)
    through the layer's online tuner if it has one (over a DistPlan every rank of the group
    tunes together), else with `config`. Both speak mgg.plan.Aggregation. reduce 'sum' is the
    plan's weighted sum; 'max' or 'min' (mgg.ops.EXTREMES) run the max/min op with `config`
    (the tuner tunes the sum's kernels)."""
    if isinstance(plan, NoNodes):
        return x * 0  # 0 rows: nothing to gather, and no kernel to launch
    if reduce != "sum":
        return plan.aggregate_extreme(x, reduce, config)
    if tuner is not None:
        return tuner.aggregate(x, plan, deterministic)
    return plan.aggregate(x, config, deterministic)


def order_decisions() -> list[str]:
    """What order="auto" decided for each remembered plan (mgg.runtime.ordering.Decision.line)."""
    return [plan.order_decision.line() for _, plan in _CACHE.values() if getattr(plan, "order_decision", None)]


def clear() -> None:
    """Forgets every remembered plan (the next forward of each graph plans it anew): after editing
    a graph tensor in a way its version counter does not see (`t.data[...] = ...`, or the numpy
    array behind `torch.from_numpy`). `mgg.nn.clear_plans`."""
    _CACHE.clear()


@torch.compiler.disable
def bipartite_plan(
    edge_index,
    n_src: int,
    n_dst: int,
    tag: str,
    make: Callable[[Graph, torch.dtype], Graph],
    flow: str,
    dtype: torch.dtype,
    what: str,
):
    """The plan of a bipartite graph (sources 0..n_src-1, destinations 0..n_dst-1), as the
    square graph of max(n_src, n_dst) nodes that holds its edges: rows are destinations and
    columns sources, so the layer pads x_src with zero rows to plan_rows(plan), aggregates through
    the ordinary op (CPU executor or CUDA kernels, the same square plan) and keeps the first
    n_dst rows. Padding rows have no edges: they are never read and aggregate to nothing. A
    bipartite DistGraph holds that square graph itself (mgg.distributed.graph): each rank pads
    its own sources to its range and keeps its own destinations, the first rows of the range.

    Args:
        edge_index: [2, E] (row 0 sources < n_src, row 1 destinations < n_dst), PyG EdgeIndex, a
            torch sparse adjacency of shape [n_dst, n_src] (its values weight the messages), or a
            bipartite DistGraph.
        n_src, n_dst: the two node counts (over a DistGraph: this rank's).
        tag, make, flow, dtype: as cached_plan.
        what: the layer, for errors.

    Returns:
        The Plan of max(n_src, n_dst) nodes, or the DistGraph's DistPlan.
    """
    if flow != "source_to_target":
        raise MggError(f"{what}: bipartite input needs flow='source_to_target' in mgg, got {flow!r}")
    if is_distributed(edge_index):
        return cached_plan(edge_index, n_src, None, f"bipartite:{tag}", make, flow, dtype)
    if is_sparse_tensor(edge_index) or not isinstance(edge_index, torch.Tensor):
        raise MggError(
            f"{what}: bipartite input needs edge_index [2, E] or a torch sparse adjacency "
            f"[N_dst, N_src] in mgg, got {type(edge_index).__name__}"
        )
    if hasattr(edge_index, "as_tensor"):  # PyG EdgeIndex
        edge_index = edge_index.as_tensor()
    weight = None
    if edge_index.layout != torch.strided:
        a = (edge_index if edge_index.layout == torch.sparse_coo else edge_index.to_sparse_coo()).coalesce()
        if tuple(a.shape) != (n_dst, n_src):
            raise MggError(
                f"{what}: the adjacency is {tuple(a.shape)} but the input has {n_dst} destinations and "
                f"{n_src} sources (adj[target, source])"
            )
        idx = a.indices()
        edge_index, weight = torch.stack([idx[1], idx[0]]), a.values()
    elif edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise MggError(f"{what}: edge_index must be [2, E], got {list(edge_index.shape)}")
    elif edge_index.numel() and (int(edge_index[0].max()) >= n_src or int(edge_index[1].max()) >= n_dst):
        raise MggError(f"{what}: an edge names a source >= {n_src} or a destination >= {n_dst} (the bipartite sizes)")
    return cached_plan(edge_index, max(n_src, n_dst), weight, f"bipartite:{tag}", make, flow, dtype)


def pad_rows(x: torch.Tensor, rows: int) -> torch.Tensor:
    """x with zero rows appended up to `rows` (differentiable)."""
    return x if x.size(0) == rows else torch.cat([x, x.new_zeros((rows - x.size(0),) + tuple(x.shape[1:]))])

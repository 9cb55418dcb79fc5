"""Turns what a PyG layer receives as its graph (edge_index [+ edge_weight], a torch sparse
tensor, an mgg Graph or Plan) into an mgg Plan, and remembers it per input tensor, so a
full-graph model plans its graph once and not once per epoch."""
from __future__ import annotations

import weakref
from typing import Callable, Optional

import torch

from ..errors import MggError
from ..graph import Graph
from ..plan import Plan

_CACHE: dict = {}
_MAX = 32


def _key_part(t: Optional[torch.Tensor]):
    return None if t is None else (id(t), t._version, tuple(t.shape))


def to_graph(edge_index, num_nodes: int, edge_weight=None) -> Graph:
    if isinstance(edge_index, Graph):
        return edge_index
    if type(edge_index).__module__.startswith("torch_sparse"):  # torch_sparse.SparseTensor adj_t[target, source]
        rowptr, col, w = edge_index.csr()
        rows, cols = edge_index.sparse_sizes()
        if rows != cols:
            raise MggError(f"SparseTensor: adjacency must be square, got {rows} x {cols}")
        return Graph.from_csr(rowptr.cpu(), col.cpu(), None if w is None else w.detach().cpu(), "SparseTensor")
    if isinstance(edge_index, torch.Tensor) and hasattr(edge_index, "as_tensor"):  # PyG EdgeIndex: [2, E]
        edge_index = edge_index.as_tensor()
    if isinstance(edge_index, torch.Tensor) and edge_index.layout == torch.sparse_csr:
        # PyG's SparseTensor convention: adj[target, source]
        w = edge_index.values()
        w = None if bool((w == 1).all()) else w
        return Graph.from_csr(edge_index.crow_indices().cpu(), edge_index.col_indices().cpu(),
                              None if w is None else w.detach().cpu(), "sparse adjacency")
    if isinstance(edge_index, torch.Tensor) and edge_index.is_sparse:
        a = edge_index.coalesce()
        idx = a.indices().cpu()
        return Graph.from_edges(idx[1].numpy(), idx[0].numpy(), num_nodes, a.values().detach().cpu().numpy(),
                                "sparse adjacency")
    if isinstance(edge_index, torch.Tensor):
        return Graph.from_edge_index(edge_index.cpu(), num_nodes, None if edge_weight is None else edge_weight.cpu())
    raise MggError(f"edge_index must be a tensor [2, E] (or PyG EdgeIndex), a torch sparse or torch_sparse "
                   f"SparseTensor adjacency adj_t[target, source], an mgg Graph or Plan; "
                   f"got {type(edge_index).__name__}")


def cached_plan(edge_index, num_nodes: int, edge_weight, tag: str, make: Callable[[Graph], Graph]):
    """The Plan of make(graph) for this input, built once per (input tensors, tag); for an
    mgg.distributed.DistGraph, its DistPlan."""
    if isinstance(edge_index, Plan):
        return edge_index
    from ..distributed.graph import DistGraph

    if isinstance(edge_index, DistGraph):
        return edge_index.plan_for(tag, make)
    if edge_weight is not None and edge_weight.requires_grad:
        raise MggError("edge_weight that requires grad is not supported by mgg layers")
    key = (_key_part(edge_index) if isinstance(edge_index, torch.Tensor) else id(edge_index),
           _key_part(edge_weight), num_nodes, tag)
    hit = _CACHE.get(key)
    if hit is not None:
        refs, plan = hit
        if all(r() is o for r, o in zip(refs, (edge_index, edge_weight)) if o is not None):
            return plan
    plan = Plan(make(to_graph(edge_index, num_nodes, edge_weight)))
    if len(_CACHE) >= _MAX:
        _CACHE.pop(next(iter(_CACHE)))
    refs = tuple(weakref.ref(o) if o is not None else None for o in (edge_index, edge_weight))
    _CACHE[key] = (refs, plan)
    return plan

"""The aggregations mgg's op does not run (PyG's 'lstm', 'softmax', 'std', 'var', lists of
aggregations with their combine modes, Aggregation instances such as MLPAggregation), through
PyG's own aggregation modules, so a layer given one computes what PyG's layer computes.

This path is PyG's speed, not mgg's: the source rows are gathered per edge and reduced by
PyG's module on one process. Under an mgg.distributed.DistGraph it is refused (the rows it
gathers live on other ranks)."""

from __future__ import annotations

import torch

from ..errors import MggError
from ..graph import Graph
from .graph_input import is_adjacency, is_sparse_tensor, refuse_reversed_adjacency


def resolve(name: str, aggr, aggr_kwargs: dict | None, in_channels: int) -> torch.nn.Module:
    """PyG's aggregation module for `aggr`, as PyG's MessagePassing resolves it (SAGEConv's
    'lstm' defaulting its widths to the source width, as PyG's SAGEConv does).

    Args:
        name: the layer's name, for errors.
        aggr: a name, a list of names or modules, or a torch_geometric.nn.aggr.Aggregation.
        aggr_kwargs: PyG's aggr_kwargs (for a list: mode, mode_kwargs, aggrs_kwargs).
        in_channels: the source width (-1: lazy).
    """
    try:
        from torch_geometric.nn.aggr import Aggregation
        from torch_geometric.nn.resolver import aggregation_resolver
    except ImportError:
        raise MggError(
            f"{name}: aggr={aggr!r} runs through PyG's aggregation modules, and torch_geometric is not "
            "installed (mgg's own op aggregates 'mean', 'sum' and 'add')"
        ) from None
    kwargs = dict(aggr_kwargs or {})
    if aggr == "lstm":
        kwargs.setdefault("in_channels", in_channels)
        kwargs.setdefault("out_channels", in_channels)
    if isinstance(aggr, (list, tuple)):
        module = aggregation_resolver("multi", aggrs=list(aggr), **kwargs)
    else:
        module = aggregation_resolver(aggr, **kwargs)
    if not isinstance(module, Aggregation):
        raise MggError(f"{name}: aggr={aggr!r} is not an aggregation PyG knows")
    return module


def out_channels(module: torch.nn.Module, in_channels: int) -> int:
    """The width of the module's output for source rows of `in_channels` (a multi-aggregation
    may concatenate or project its parts)."""
    get = getattr(module, "get_out_channels", None)
    return get(in_channels) if get is not None and in_channels > 0 else in_channels


def edges(name: str, edge_index, flow: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(src, dst) of every input edge: a [2, E] edge_index in its own order (flow decides which
    row is the target), a sparse adjacency adj_t[target, source] in row order, as PyG's
    propagate reads it."""
    if isinstance(edge_index, Graph):  # rows are targets
        src, dst = edge_index.col.long(), edge_index.rows()
        return (dst, src) if flow == "target_to_source" else (src, dst)
    refuse_reversed_adjacency(edge_index, flow)
    if is_sparse_tensor(edge_index):
        dst, src, _ = edge_index.coo()
        return src.long(), dst.long()
    if is_adjacency(edge_index):
        adj = edge_index.to_sparse_csr() if edge_index.layout != torch.sparse_csr else edge_index
        rowptr, col = adj.crow_indices().long(), adj.col_indices().long()
        dst = torch.repeat_interleave(torch.arange(rowptr.numel() - 1, device=col.device), rowptr.diff())
        return col, dst
    if not isinstance(edge_index, torch.Tensor):
        raise MggError(
            f"{name}: this aggregation runs through PyG's module on one process: give an edge_index, a "
            f"sparse adjacency or an mgg.Graph, not a {type(edge_index).__name__}"
        )
    if hasattr(edge_index, "as_tensor"):
        edge_index = edge_index.as_tensor()
    ei = edge_index.long()
    return (ei[1], ei[0]) if flow == "target_to_source" else (ei[0], ei[1])


def aggregate(
    module: torch.nn.Module,
    x_src: torch.Tensor,
    src: torch.Tensor,
    dst: torch.Tensor,
    n_dst: int,
    node_dim: int,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """module's reduction over the edges of x_src's rows at each destination (dim_size n_dst),
    each message scaled by an explainer's mask where one is attached."""
    nd = node_dim % x_src.dim()
    x_j = x_src.index_select(nd, src.to(x_src.device))
    if mask is not None:
        shape = [1] * x_j.dim()
        shape[nd] = -1
        x_j = x_j * mask.to(x_j).view(shape)
    return module(x_j, dst.to(x_src.device), dim_size=n_dst, dim=nd)

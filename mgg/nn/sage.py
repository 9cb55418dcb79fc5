"""SAGEConv (Hamilton et al.'s GraphSAGE layer) with PyG's constructor, forward signature and
state_dict layout, aggregating through mgg's ops: the mean over in-neighbors (the graph's mean
normalisation, weights 1/in-degree), their sum, or their elementwise max or min (the max/min op,
RankPlan.aggregate_extreme), also for bipartite inputs and lazy widths (in_channels=-1). PyG's other
aggregations ('lstm', 'softmax', lists of them, Aggregation modules, aggr_kwargs) run through
PyG's own aggregation module on one process (pyg_aggregation.py), at PyG's speed."""

from __future__ import annotations

from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import MggError
from ..ops import EXTREMES
from ..plan import Config
from . import pyg_aggregation
from .aggregating import Aggregating, split_input
from .graph_input import bipartite_plan, cached_plan, is_sparse_tensor, pad_rows, plan_rows
from .linear import is_lazy, linear

AGGREGATIONS = ("mean", "add", "sum") + EXTREMES


def _widths(in_channels) -> tuple[int, int]:
    """(source width, target width) of PyG's in_channels: an int or a pair; -1 is lazy."""
    pair = (in_channels, in_channels) if isinstance(in_channels, int) else tuple(in_channels)
    if len(pair) != 2 or not all(isinstance(c, int) and (c > 0 or c == -1) for c in pair):
        raise MggError(
            f"SAGEConv: in_channels must be a positive int, -1 (lazy) or a pair of them, got {in_channels!r}"
        )
    return pair


class SAGEConv(Aggregating):
    """out = W_l agg_{j -> i} x_j + b + W_r x_i, as torch_geometric.nn.SAGEConv; agg is the mean
    (default), the sum, or the elementwise max or min of the in-neighbors' rows (max/min: the
    gradient goes to the winning row, ties to the lowest; a torch sparse adjacency's values are
    refused, a SparseTensor's dropped); a node without in-edges aggregates to 0.

    With project=True the aggregated rows are relu(lin(x_j)) (the root term keeps raw x_i); with
    normalize=True the output rows are scaled to unit L2 norm. `edge_index` may be a [2, E]
    tensor, a torch sparse adjacency (its values weight the messages, as in PyG), an mgg.Graph
    or an mgg.distributed.DistGraph. `x` may be a tensor, or a bipartite pair (x_src, x_dst)
    (x_dst may be None; size=(N_src, N_dst)) with an edge_index [2, E], a torch sparse
    adjacency [N_dst, N_src] or a bipartite DistGraph (each rank's shards); a torch_sparse
    SparseTensor's values are dropped, as in PyG."""

    def __init__(
        self,
        in_channels: Union[int, tuple],
        out_channels: int,
        aggr: str = "mean",
        normalize: bool = False,
        root_weight: bool = True,
        project: bool = False,
        bias: bool = True,
        config: Optional[Config] = None,
        autotune: bool = False,
        deterministic: bool = False,
        **kwargs,
    ):
        super().__init__()
        src, dst = _widths(in_channels)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.normalize, self.root_weight, self.project = normalize, root_weight, project
        self._setup(config, autotune, deterministic, dict(kwargs, aggr=aggr), AGGREGATIONS, "mean", pyg_width=src)
        if project:  # PyG's registration order (lin, lin_l, lin_r) and Linear default init
            if src == -1:
                raise MggError(
                    "SAGEConv: does not support lazy initialization with project=True (it needs the source "
                    "width, as in PyG)"
                )
            self.lin = nn.Linear(src, src, bias=True)
        agg_width = pyg_aggregation.out_channels(self.aggr_module, src) if self.pyg_aggregation else src
        self.lin_l = linear(agg_width, out_channels, bias=bias)
        if root_weight:
            self.lin_r = linear(dst, out_channels, bias=False)
        self.reset_parameters()

    def reset_parameters(self):
        """PyG's initialisation: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases (and
        PyG's own for a PyG aggregation module's parameters)."""
        if self.pyg_aggregation:
            self.aggr_module.reset_parameters()
        for lin in (self.lin if self.project else None, self.lin_l, self.lin_r if self.root_weight else None):
            if lin is not None and not is_lazy(lin.weight):
                lin.reset_parameters()

    def forward(self, x, edge_index, size: Optional[tuple] = None) -> torch.Tensor:
        x_src, x_dst, n_src, n_dst, bipartite = split_input(x, size, "SAGEConv", self.node_dim, edge_index)
        if self.project:
            x_src = F.relu(self.lin(x_src))
        if self.hooked():
            return self._finish(self.lin_l(self.propagated(edge_index, x=(x_src, x_dst), size=size)), x_dst)
        if self.pyg_aggregation:
            return self._finish(self.lin_l(self._pyg_aggregate(x_src, edge_index, n_dst)), x_dst)
        sparse_tensor = is_sparse_tensor(edge_index)  # PyG drops a SparseTensor's values in SAGEConv

        def make(g, dt):
            return self._graph_of(g, dt, sparse_tensor)

        tag = f"sage:{self.aggr}:{sparse_tensor}"
        nd = self._nodes(x_src)
        reduce = self._reduce
        if getattr(self, "_explain", None):
            aggregate = lambda t: self._explained(t, edge_index, n_dst)  # noqa: E731
        elif bipartite:
            plan = bipartite_plan(edge_index, n_src, n_dst, tag, make, self.flow, x_src.dtype, "SAGEConv")
            m = plan_rows(plan)
            aggregate = lambda t: self._aggregate(pad_rows(t.movedim(nd, 0), m).movedim(0, nd), plan, reduce).narrow(  # noqa: E731
                nd, 0, n_dst
            )
        else:
            plan = cached_plan(edge_index, n_src, None, tag, make, self.flow, x_src.dtype, self.config.order, x_src)
            aggregate = lambda t: self._aggregate(t, plan, reduce)  # noqa: E731
        lin = self.lin_l
        if is_lazy(lin.weight):
            lin(x_src[..., :0, :])  # sizes the lazy layer
        if reduce == "sum" and lin.weight.size(0) < lin.weight.size(1):  # W (agg x) = agg (W x) for sums only
            out = aggregate(F.linear(x_src, lin.weight))
            out = out + lin.bias if lin.bias is not None else out
        else:
            out = lin(aggregate(x_src))
        return self._finish(out, x_dst)

    def _finish(self, out: torch.Tensor, x_dst) -> torch.Tensor:
        """The root term and the normalisation after the aggregation's linear map."""
        if self.root_weight and x_dst is not None:
            out = out + self.lin_r(x_dst)
        if self.normalize:
            out = F.normalize(out, p=2.0, dim=-1)
        return out

    def _pyg_aggregate(self, x_src: torch.Tensor, edge_index, n_dst: int) -> torch.Tensor:
        """The aggregation through PyG's module (an aggregation mgg's op does not run)."""
        src, dst = pyg_aggregation.edges("SAGEConv", edge_index, self.flow)
        mask = self._explain_mask(src.numel()) if getattr(self, "_explain", None) else None
        return pyg_aggregation.aggregate(self.aggr_module, x_src, src, dst, n_dst, self.node_dim, mask)

    def __repr__(self):
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, aggr={self.aggr})"

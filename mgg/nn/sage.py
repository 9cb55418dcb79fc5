"""SAGEConv (Hamilton et al.'s GraphSAGE layer) with PyG's constructor, forward signature and
state_dict layout, aggregating through mgg's op: the mean over in-neighbors (the graph's mean
normalisation, weights 1/in-degree) or their sum. PyG's other aggregations, lazy input widths
and bipartite graphs are refused with one line."""
from __future__ import annotations

from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import MggError
from ..plan import Config
from .conv import _Aggregating
from .graph_cache import cached_plan

AGGREGATIONS = ("mean", "add", "sum")


def _widths(in_channels) -> tuple[int, int]:
    """(source width, target width) of PyG's in_channels: an int, or a pair of equal ints."""
    pair = (in_channels, in_channels) if isinstance(in_channels, int) else tuple(in_channels)
    if len(pair) != 2 or not all(isinstance(c, int) for c in pair):
        raise MggError(f"SAGEConv: in_channels must be an int or a pair of ints, got {in_channels!r}")
    if min(pair) <= 0:
        raise MggError(f"SAGEConv: lazy initialisation (in_channels={in_channels!r}) is not supported by mgg; "
                       f"give the input width")
    if pair[0] != pair[1]:
        raise MggError(f"SAGEConv: bipartite in_channels {pair} are not supported by mgg (sources and targets are "
                       f"the same nodes)")
    return pair


class SAGEConv(_Aggregating):
    """out = W_l agg_{j -> i} x_j + b + W_r x_i, as torch_geometric.nn.SAGEConv; agg is the mean
    (default) or the sum of the in-neighbors' rows; a node without in-edges aggregates to 0.

    With project=True the aggregated rows are relu(lin(x_j)) (the root term keeps raw x_i); with
    normalize=True the output rows are scaled to unit L2 norm. `edge_index` may be a [2, E]
    tensor, a torch sparse adjacency (its values weight the messages, as in PyG), an mgg.Graph
    or an mgg.distributed.DistGraph. `x` may be a tensor or a pair (x_src, x_dst) of tensors with
    one row per node each."""

    def __init__(self, in_channels: Union[int, tuple], out_channels: int, aggr: str = "mean",
                 normalize: bool = False, root_weight: bool = True, project: bool = False, bias: bool = True,
                 config: Optional[Config] = None, autotune: bool = False, deterministic: bool = False, **kwargs):
        super().__init__()
        src, dst = _widths(in_channels)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.normalize, self.root_weight, self.project = normalize, root_weight, project
        self._setup(config, autotune, deterministic, dict(kwargs, aggr=aggr), AGGREGATIONS, "mean")
        if project:  # PyG's registration order (lin, lin_l, lin_r) and Linear default init
            self.lin = nn.Linear(src, src, bias=True)
        self.lin_l = nn.Linear(src, out_channels, bias=bias)
        if root_weight:
            self.lin_r = nn.Linear(dst, out_channels, bias=False)
        self.reset_parameters()

    def reset_parameters(self):
        """PyG's initialisation: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases."""
        if self.project:
            self.lin.reset_parameters()
        self.lin_l.reset_parameters()
        if self.root_weight:
            self.lin_r.reset_parameters()

    def _pair(self, x) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(x, torch.Tensor):
            return x, x
        x_src, x_dst = x
        if x_dst is None or x_dst.size(0) != x_src.size(0):
            raise MggError("SAGEConv: bipartite input (x_src, x_dst) is not supported by mgg; pass x or a pair "
                           "with one row per node each")
        return x_src, x_dst

    def _normalised(self, g, dtype):
        return g.mean_norm(dtype) if self.aggr == "mean" else g

    def forward(self, x, edge_index, size: Optional[tuple] = None) -> torch.Tensor:
        x_src, x_dst = self._pair(x)
        if size is not None and tuple(size) != (x_src.size(0), x_src.size(0)):
            raise MggError(f"SAGEConv: size {tuple(size)} (bipartite message passing) is not supported by mgg")
        if self.project:
            x_src = F.relu(self.lin(x_src))
        plan = cached_plan(edge_index, x_src.size(0), None, f"sage:{self.aggr}", self._normalised, self.flow,
                           x_src.dtype)
        lin = self.lin_l
        if lin.out_features < lin.in_features:  # W (agg x) = agg (W x): aggregate the narrower rows
            out = self._aggregate(F.linear(x_src, lin.weight), plan)
            out = out + lin.bias if lin.bias is not None else out
        else:
            out = lin(self._aggregate(x_src, plan))
        if self.root_weight:
            out = out + self.lin_r(x_dst)
        if self.normalize:
            out = F.normalize(out, p=2.0, dim=-1)
        return out

    def __repr__(self):
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, aggr={self.aggr})"

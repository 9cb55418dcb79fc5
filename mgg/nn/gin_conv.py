"""GINConv with PyG's constructor, forward signature and state_dict layout, aggregating through
mgg's op (aggr 'add', 'mean', 'max', 'min', or PyG's aggregation modules), bipartite inputs included."""

from __future__ import annotations

from typing import Optional

import torch

from ..ops import EXTREMES
from ..plan import Config
from .aggregating import Aggregating, split_input
from .graph_input import bipartite_plan, cached_plan, is_sparse_tensor, pad_rows, plan_rows


def _reset(module) -> None:
    """PyG's reset of a wrapped module: its own reset_parameters if it has one, else its
    children's, depth first (so the random draws are PyG's)."""
    if hasattr(module, "reset_parameters"):
        module.reset_parameters()
    else:
        for child in module.children() if hasattr(module, "children") else []:
            _reset(child)


class GINConv(Aggregating):
    """out = nn((1 + eps) * x + sum_{u -> v} x_u), as torch_geometric.nn.GINConv (aggr 'add', or
    'mean', 'max', 'min': the mean, elementwise max or min of the x_u, 0 without in-edges). `x`
    may be a bipartite pair (x_src, x_dst) (x_dst may be None; size=(N_src, N_dst)) with an
    edge_index [2, E], a torch sparse adjacency [N_dst, N_src] or a bipartite DistGraph (each
    rank's shards)."""

    def __init__(
        self,
        nn: torch.nn.Module,
        eps: float = 0.0,
        train_eps: bool = False,
        config: Optional[Config] = None,
        autotune: bool = False,
        deterministic: bool = False,
        **kwargs,
    ):
        super().__init__()
        self.nn = nn
        self.initial_eps = eps
        if train_eps:
            self.eps = torch.nn.Parameter(torch.empty(1))
        else:
            self.register_buffer("eps", torch.empty(1))
        self._setup(config, autotune, deterministic, kwargs, ("add", "sum", "mean") + EXTREMES, "add")
        self.reset_parameters()

    def reset_parameters(self):
        _reset(self.nn)
        self.eps.data.fill_(self.initial_eps)

    def forward(self, x, edge_index, size=None) -> torch.Tensor:
        x_src, x_dst, n_src, n_dst, bipartite = split_input(x, size, "GINConv", self.node_dim, edge_index)
        sparse_tensor = is_sparse_tensor(edge_index)  # PyG drops a SparseTensor's values in GINConv

        def make(g, dt):
            return self._graph_of(g, dt, sparse_tensor)

        tag = f"gin:{self.aggr}:{sparse_tensor}"
        if self.hooked():
            out = self.propagated(edge_index, x=(x_src, x_dst), size=size)
        elif getattr(self, "_explain", None):
            out = self._explained(x_src, edge_index, n_dst)
        elif bipartite:
            plan = bipartite_plan(edge_index, n_src, n_dst, tag, make, self.flow, x_src.dtype, "GINConv")
            out = self._aggregate(
                pad_rows(x_src.movedim(self._nodes(x_src), 0), plan_rows(plan)).movedim(0, self._nodes(x_src)),
                plan,
                self._reduce,
            ).narrow(self._nodes(x_src), 0, n_dst)
        else:
            n = x_src.size(self._nodes(x_src))
            plan = cached_plan(edge_index, n, None, tag, make, self.flow, x_src.dtype, self.config.order, x_src)
            out = self._aggregate(x_src, plan, self._reduce)
        if x_dst is not None:
            out = out + (1 + self.eps) * x_dst
        return self.nn(out)

    def __repr__(self):
        return f"{self.__class__.__name__}(nn={self.nn})"

"""GCNConv and GINConv with PyG's constructors, forward signatures and state_dict layout,
aggregating through mgg's op. Arguments PyG's MessagePassing takes are implemented (flow, aggr
where the reduction is a sum or mean, node_dim for 2-D features, cached) or refused with one line."""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn

from ..errors import MggError
from ..plan import Config
from .graph_cache import cached_plan, is_sparse_tensor, run_plan


def _glorot(w: torch.Tensor):
    a = math.sqrt(6.0 / (w.size(-2) + w.size(-1)))
    with torch.no_grad():
        w.uniform_(-a, a)


FLOWS = ("source_to_target", "target_to_source")


class _Aggregating(nn.Module):
    """What the layers share: PyG's MessagePassing arguments, the plan config, the optional
    autotuner, deterministic mode."""

    def _setup(self, config: Optional[Config], autotune: bool, deterministic: bool, kwargs: dict,
               aggregations: tuple, default_aggr: str):
        name = type(self).__name__
        self.aggr = kwargs.pop("aggr", default_aggr)
        self.flow = kwargs.pop("flow", "source_to_target")
        self.node_dim = kwargs.pop("node_dim", -2)
        decomposed = kwargs.pop("decomposed_layers", 1)  # PyG's feature chunking: same result
        if kwargs:
            raise TypeError(f"{name}: unexpected keyword argument(s) {', '.join(sorted(kwargs))}")
        if not isinstance(self.aggr, str) or self.aggr not in aggregations:
            raise MggError(f"{name}: aggr must be one of {aggregations} in mgg, got {self.aggr!r}")
        if self.flow not in FLOWS:
            raise MggError(f"{name}: flow must be one of {FLOWS}, got {self.flow!r}")
        if self.node_dim not in (-2, 0):
            raise MggError(f"{name}: node_dim must be -2 or 0 (features are [nodes, channels]), got {self.node_dim!r}")
        if not isinstance(decomposed, int) or decomposed < 1:
            raise MggError(f"{name}: decomposed_layers must be a positive integer, got {decomposed!r}")
        self.config = config or Config()
        self.deterministic = deterministic
        self.tuner = None
        if autotune:
            from ..runtime.online import OnlineTuner
            self.tuner = OnlineTuner(fallback=self.config)

    def _aggregate(self, x: torch.Tensor, plan) -> torch.Tensor:
        return run_plan(x, plan, self.config, self.deterministic, self.tuner)


class GCNConv(_Aggregating):
    """out = D^-1/2 (A + I) D^-1/2 (x W) + b (Kipf & Welling), as torch_geometric.nn.GCNConv.

    `edge_index` may be a [2, E] tensor (with optional `edge_weight`), a torch sparse
    adjacency, an mgg.Graph, an mgg.Plan that is already normalised, or an
    mgg.distributed.DistGraph. Self-loops and `improved=True` (A + 2I) follow PyG 2.8's gcn_norm
    for each input: a [2, E] edge_index (or an mgg graph) keeps one existing loop per node and
    applies improved only with edge weights (without them PyG's loops take the weights' default,
    1); a torch sparse adjacency gets a loop per node beside its own; a torch_sparse SparseTensor
    has its diagonal replaced.
    `cached=True` keeps the first call's normalised graph and ignores the graph passed later, as
    PyG does (transductive use only)."""

    def __init__(self, in_channels: int, out_channels: int, improved: bool = False, cached: bool = False,
                 add_self_loops: Optional[bool] = None, normalize: bool = True, bias: bool = True,
                 config: Optional[Config] = None, autotune: bool = False, deterministic: bool = False, **kwargs):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.improved, self.cached, self.normalize = improved, cached, normalize
        self.add_self_loops = normalize if add_self_loops is None else add_self_loops
        if self.add_self_loops and not normalize:
            raise MggError("GCNConv: add_self_loops=True needs normalize=True (as in PyG)")
        self._setup(config, autotune, deterministic, kwargs, ("add", "sum", "mean"), "add")
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.register_parameter("bias", nn.Parameter(torch.empty(out_channels)) if bias else None)
        self._cached_plan = None
        self.reset_parameters()

    def reset_parameters(self):
        _glorot(self.lin.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)
        self._cached_plan = None

    def _normalised(self, g, dtype, improved, existing):
        if self.normalize:
            g = g.gcn_norm(self.add_self_loops, improved, dtype, existing)
        return g.mean_norm(dtype) if self.aggr == "mean" else g

    def forward(self, x: torch.Tensor, edge_index, edge_weight: Optional[torch.Tensor] = None) -> torch.Tensor:
        h = self.lin(x)
        if self.cached and self._cached_plan is not None:
            plan = self._cached_plan
        else:
            sparse = isinstance(edge_index, torch.Tensor) and edge_index.layout != torch.strided
            existing = "add" if sparse else "replace" if is_sparse_tensor(edge_index) else "keep"
            improved = self.improved and not (existing == "keep" and edge_weight is None)  # as PyG's gcn_norm
            tag = f"gcn:{self.normalize}:{self.add_self_loops}:{improved}:{existing}:{self.aggr}"
            plan = cached_plan(edge_index, x.size(0), edge_weight, tag,
                               lambda g, dt: self._normalised(g, dt, improved, existing), self.flow, x.dtype)
            if self.cached:
                self._cached_plan = plan
        out = self._aggregate(h, plan)
        return out + self.bias if self.bias is not None else out

    def __repr__(self):
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels})"


class GINConv(_Aggregating):
    """out = nn((1 + eps) * x + sum_{u -> v} x_u), as torch_geometric.nn.GINConv (aggr 'add',
    or 'mean')."""

    def __init__(self, nn: torch.nn.Module, eps: float = 0.0, train_eps: bool = False,
                 config: Optional[Config] = None, autotune: bool = False, deterministic: bool = False, **kwargs):
        super().__init__()
        self.nn = nn
        self.initial_eps = eps
        if train_eps:
            self.eps = torch.nn.Parameter(torch.empty(1))
        else:
            self.register_buffer("eps", torch.empty(1))
        self._setup(config, autotune, deterministic, kwargs, ("add", "sum", "mean"), "add")
        self.reset_parameters()

    def reset_parameters(self):
        for m in self.nn.modules():
            if m is not self.nn and hasattr(m, "reset_parameters"):
                m.reset_parameters()
        self.eps.data.fill_(self.initial_eps)

    def forward(self, x: torch.Tensor, edge_index, size=None) -> torch.Tensor:
        if size is not None:
            raise MggError("GINConv: size (bipartite message passing) is not supported by mgg")
        make = (lambda g, dt: g.mean_norm(dt)) if self.aggr == "mean" else (lambda g, dt: g)
        plan = cached_plan(edge_index, x.size(0), None, f"gin:{self.aggr}", make, self.flow, x.dtype)
        out = self._aggregate(x, plan) + (1 + self.eps) * x
        return self.nn(out)

    def __repr__(self):
        return f"{self.__class__.__name__}(nn={self.nn})"

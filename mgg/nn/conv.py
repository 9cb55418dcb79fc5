"""GCNConv and GINConv with PyG's constructors, forward signatures and state_dict layout,
aggregating through mgg.aggregate."""
from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn

from ..ops import aggregate
from ..plan import Config
from .graph_cache import cached_plan


def _glorot(w: torch.Tensor):
    a = math.sqrt(6.0 / (w.size(-2) + w.size(-1)))
    with torch.no_grad():
        w.uniform_(-a, a)


class _Aggregating(nn.Module):
    """What both layers share: the plan config, the optional autotuner, deterministic mode."""

    def _setup(self, config: Optional[Config], autotune: bool, deterministic: bool):
        self.config = config or Config()
        self.deterministic = deterministic
        self.tuner = None
        if autotune:
            from ..runtime.online import OnlineTuner
            self.tuner = OnlineTuner()

    def _aggregate(self, x: torch.Tensor, plan) -> torch.Tensor:
        from ..distributed.graph import DistPlan

        if isinstance(plan, DistPlan):
            return plan.aggregate(x, self.config, self.deterministic)
        if self.tuner is not None:
            return self.tuner.aggregate(x, plan, self.deterministic)
        return aggregate(x, plan, self.config, deterministic=self.deterministic)


class GCNConv(_Aggregating):
    """out = D^-1/2 (A + I) D^-1/2 (x W) + b (Kipf & Welling), as torch_geometric.nn.GCNConv.

    `edge_index` may be a [2, E] tensor (with optional `edge_weight`), a torch sparse
    adjacency, an mgg.Graph, or an mgg.Plan that is already normalised. `improved=True` uses
    A + 2I whether or not edge weights are given (PyG 2.8 applies it only with edge weights)."""

    def __init__(self, in_channels: int, out_channels: int, improved: bool = False, cached: bool = False,
                 add_self_loops: Optional[bool] = None, normalize: bool = True, bias: bool = True,
                 config: Optional[Config] = None, autotune: bool = False, deterministic: bool = False, **kwargs):
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.improved, self.cached, self.normalize = improved, cached, normalize
        self.add_self_loops = normalize if add_self_loops is None else add_self_loops
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.register_parameter("bias", nn.Parameter(torch.empty(out_channels)) if bias else None)
        self._setup(config, autotune, deterministic)
        self.reset_parameters()

    def reset_parameters(self):
        _glorot(self.lin.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor, edge_index, edge_weight: Optional[torch.Tensor] = None) -> torch.Tensor:
        h = self.lin(x)
        if self.normalize:
            make = lambda g: g.gcn_norm(self.add_self_loops, self.improved)  # noqa: E731
        else:
            make = lambda g: g.add_self_loops() if self.add_self_loops else g  # noqa: E731
        tag = f"gcn:{self.normalize}:{self.add_self_loops}:{self.improved}"
        plan = cached_plan(edge_index, x.size(0), edge_weight, tag, make)
        out = self._aggregate(h, plan)
        return out + self.bias if self.bias is not None else out

    def __repr__(self):
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels})"


class GINConv(_Aggregating):
    """out = nn((1 + eps) * x + sum_{u -> v} x_u), as torch_geometric.nn.GINConv."""

    def __init__(self, nn: torch.nn.Module, eps: float = 0.0, train_eps: bool = False,
                 config: Optional[Config] = None, autotune: bool = False, deterministic: bool = False, **kwargs):
        super().__init__()
        self.nn = nn
        self.initial_eps = eps
        if train_eps:
            self.eps = torch.nn.Parameter(torch.empty(1))
        else:
            self.register_buffer("eps", torch.empty(1))
        self._setup(config, autotune, deterministic)
        self.reset_parameters()

    def reset_parameters(self):
        for m in self.nn.modules():
            if m is not self.nn and hasattr(m, "reset_parameters"):
                m.reset_parameters()
        self.eps.data.fill_(self.initial_eps)

    def forward(self, x: torch.Tensor, edge_index, size=None) -> torch.Tensor:
        plan = cached_plan(edge_index, x.size(0), None, "gin", lambda g: g)
        out = self._aggregate(x, plan) + (1 + self.eps) * x
        return self.nn(out)

    def __repr__(self):
        return f"{self.__class__.__name__}(nn={self.nn})"

"""GCNConv with PyG's constructor, forward signature and state_dict layout, aggregating through
mgg's op: lazy widths, learned edge weights, cached normalisation, flow, node_dim, [B, N, F]."""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..errors import MggError
from ..plan import Config
from .aggregating import Aggregating
from .graph_input import cached_plan, is_sparse_tensor
from .linear import glorot, is_lazy, linear
from .message_passing import explained_edges


class GCNConv(Aggregating):
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

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        improved: bool = False,
        cached: bool = False,
        add_self_loops: Optional[bool] = None,
        normalize: bool = True,
        bias: bool = True,
        config: Optional[Config] = None,
        autotune: bool = False,
        deterministic: bool = False,
        **kwargs,
    ):
        super().__init__()
        if not isinstance(in_channels, int):
            raise MggError(
                f"GCNConv: in_channels must be an int (GCNConv takes one node set, as in PyG), got {in_channels!r}"
            )
        self.in_channels, self.out_channels = in_channels, out_channels
        self.improved, self.cached, self.normalize = improved, cached, normalize
        self.add_self_loops = normalize if add_self_loops is None else add_self_loops
        if self.add_self_loops and not normalize:
            raise MggError(
                "GCNConv: does not support adding self-loops to the graph when no on-the-fly "
                "normalization is applied (add_self_loops=True needs normalize=True, as in PyG)"
            )
        self._setup(config, autotune, deterministic, kwargs, ("add", "sum", "mean"), "add")
        self.lin = linear(in_channels, out_channels, bias=False, glorot=True)
        self.register_parameter("bias", nn.Parameter(torch.empty(out_channels)) if bias else None)
        self._cached_edge_index = None  # PyG's cache attributes: set either to None to re-normalise
        self._cached_adj_t = None
        self.reset_parameters()

    def reset_parameters(self):
        if not is_lazy(self.lin.weight):
            glorot(self.lin.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)
        self._cached_edge_index = None
        self._cached_adj_t = None

    @property
    def _cached_plan(self):
        return self._cached_edge_index if self._cached_edge_index is not None else self._cached_adj_t

    def _normalised(self, g, dtype, improved, existing):
        if self.normalize:
            g = g.gcn_norm(self.add_self_loops, improved, dtype, existing)
        return g.mean_norm(dtype) if self.aggr == "mean" else g

    def forward(self, x: torch.Tensor, edge_index, edge_weight: Optional[torch.Tensor] = None) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise MggError(
                "GCNConv: x must be one tensor; bipartite (x_src, x_dst) input is not supported (as in PyG's GCNConv)"
            )
        h = self.lin(x)
        n = x.size(self._nodes(x))
        explaining = getattr(self, "_explain", None)
        if self.hooked():
            out = self._hooked_propagate(h, edge_index, edge_weight, n)
            return out + self.bias if self.bias is not None else out
        if explaining or (edge_weight is not None and edge_weight.requires_grad and torch.is_grad_enabled()):
            out = self._learned_weights(h, edge_index, edge_weight, n, bool(explaining))
            return out + self.bias if self.bias is not None else out
        sparse = isinstance(edge_index, torch.Tensor) and edge_index.layout != torch.strided
        adj = is_sparse_tensor(edge_index)  # PyG: a SparseTensor's cache; any torch tensor's is _cached_edge_index
        cache = self.cached and self.normalize  # PyG caches the normalisation only
        plan = (self._cached_adj_t if adj else self._cached_edge_index) if cache else None
        if plan is None:
            existing = "add" if sparse else "replace" if is_sparse_tensor(edge_index) else "keep"
            improved = self.improved and not (existing == "keep" and edge_weight is None)  # as PyG's gcn_norm
            tag = f"gcn:{self.normalize}:{self.add_self_loops}:{improved}:{existing}:{self.aggr}"
            plan = cached_plan(
                edge_index,
                n,
                edge_weight,
                tag,
                lambda g, dt: self._normalised(g, dt, improved, existing),
                self.flow,
                x.dtype,
                self.config.order,
                h,
            )
            if cache:
                if adj:
                    self._cached_adj_t = plan
                else:
                    self._cached_edge_index = plan
        out = self._aggregate(h, plan)
        return out + self.bias if self.bias is not None else out

    def message(self, x_j: torch.Tensor, edge_weight: Optional[torch.Tensor]) -> torch.Tensor:
        """PyG's GCN message (run by PyG's propagate, the path with hooks)."""
        return x_j if edge_weight is None else edge_weight.view(-1, 1) * x_j

    def _hooked_propagate(self, h: torch.Tensor, edge_index, edge_weight, n: int) -> torch.Tensor:
        """PyG's propagate over PyG's gcn_norm of a [2, E] edge_index (the normalisation of
        _learned_weights, so the hooks see PyG's edges, weights and messages; an explainer's
        mask is applied by PyG's explain_message)."""
        src, dst, w, _ = self._normalised_edges(h, edge_index, edge_weight, n, "a PyG propagate/message hook", False)
        edges = torch.stack([dst, src]) if self.flow == "target_to_source" else torch.stack([src, dst])
        return self.propagated(edges, x=h, edge_weight=w.to(h.dtype))

    def _normalised_edges(self, h: torch.Tensor, edge_index, edge_weight, n: int, why: str, explaining: bool):
        """(src, dst, w, mask) of PyG's gcn_norm in torch ops (differentiable in edge_weight) on
        a [2, E] edge_index, with the explainer's edge mask extended over the self-loops added
        (None without an explainer)."""
        if h.dim() != 2:
            raise MggError(f"GCNConv: {why} needs 2-D x in mgg")
        src, dst = explained_edges("GCNConv", edge_index, self.flow, why)
        if self.cached and self.normalize and edge_weight is not None and edge_weight.requires_grad:
            raise MggError("GCNConv: cached=True keeps the first weights; it cannot learn edge_weight")
        src, dst = src.to(h.device), dst.to(h.device)
        mask = self._explain_mask(src.numel()) if explaining else None
        dt = torch.float64 if h.dtype == torch.float64 else torch.float32
        w = (
            edge_weight.to(h.device, dt).reshape(-1)
            if edge_weight is not None
            else torch.ones(src.numel(), dtype=dt, device=h.device)
        )
        if self.add_self_loops:  # PyG's add_remaining_self_loops: a node's last loop keeps its weight
            loop = src == dst
            fill = 2.0 if self.improved and edge_weight is not None else 1.0  # PyG 2.8: no weights, loops get 1
            loop_w = w.new_full((n,), fill).index_put((src[loop],), w[loop])
            nodes = torch.arange(n, device=h.device)
            src, dst = torch.cat([src[~loop], nodes]), torch.cat([dst[~loop], nodes])
            w = torch.cat([w[~loop], loop_w])
            mask = None if mask is None else torch.cat([mask.to(w)[~loop], w.new_ones(n)])
        if self.normalize:
            deg = w.new_zeros(n).index_add(0, dst, w)
            dis = deg.pow(-0.5).masked_fill(deg == 0, 0.0)
            w = dis[src] * w * dis[dst]
        return src, dst, w, mask

    def _learned_weights(
        self, h: torch.Tensor, edge_index, edge_weight: torch.Tensor, n: int, explaining: bool
    ) -> torch.Tensor:
        """PyG's gcn_norm in torch ops (differentiable in edge_weight: learned weights) on a
        [2, E] edge_index, the explainer's edge mask on the messages (PyG's explain_message: the
        input edges' mask, 1 on the self-loops added), then the aggregation through the op with
        the gradient in the weights (mgg.functional.aggregate_edges)."""
        from ..functional import aggregate_edges

        why = "an explainer's edge mask" if explaining else "an edge_weight that requires grad"
        src, dst, w, mask = self._normalised_edges(h, edge_index, edge_weight, n, why, explaining)
        if self.aggr == "mean":
            w = w / torch.bincount(dst, minlength=n).clamp(min=1).to(w)[dst]
        if mask is not None:
            w = w * mask.to(w)
        return aggregate_edges(h, src, dst, w, n, self.config, self.deterministic)

    def __repr__(self):
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels})"

"""GCNConv and GINConv with PyG's constructors, forward signatures and state_dict layout,
aggregating through mgg's op. Arguments PyG's MessagePassing takes are implemented (flow, aggr
where the reduction is a sum or mean, node_dim, features [B, N, F], cached) or refused with one
line; GINConv takes bipartite inputs, GCNConv lazy widths and learned edge weights."""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn

from ..errors import MggError
from ..graph import Graph
from ..ops import EXTREMES
from ..plan import Config
from . import pyg_aggregation
from .message_passing import LayerBase, explained_edges
from .plans import bipartite_plan, cached_plan, is_distributed, is_sparse_tensor, pad_rows, plan_rows, run_plan


def glorot(w: torch.Tensor) -> None:
    """PyG's glorot: U(-a, a), a = sqrt(6 / (size(-2) + size(-1)))."""
    a = math.sqrt(6.0 / (w.size(-2) + w.size(-1)))
    with torch.no_grad():
        w.uniform_(-a, a)


FLOWS = ("source_to_target", "target_to_source")


class _LazyLinear(nn.LazyLinear):
    """torch's LazyLinear with PyG's Linear(-1, out) parameters before the first call: the weight
    waits for its width, the bias ([out]) exists from the start. A state_dict saved before the
    first call then loads into either library's layer (torch's lazy bias could not take PyG's)."""

    def __init__(self, out_features: int, bias: bool = True):
        super().__init__(out_features, bias=False)
        if bias:
            self.bias = nn.Parameter(torch.zeros(out_features))

    def initialize_parameters(self, input) -> None:
        if self.has_uninitialized_params():
            with torch.no_grad():
                self.in_features = input.shape[-1]
                self.weight.materialize((self.out_features, self.in_features))
                self.reset_parameters()
        elif self.in_features == 0:  # sized by a loaded state_dict: the input must fit it
            if input.shape[-1] != self.weight.shape[-1]:
                raise MggError(
                    f"a lazy linear layer loaded with in_features {self.weight.shape[-1]} got input of width "
                    f"{input.shape[-1]}"
                )
            self.in_features = input.shape[-1]

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        if self.bias is not None and is_lazy(state_dict.get(prefix + "bias")):
            # torch's LazyLinear saved before its first call (mgg's own layers did): its bias has no
            # values to load; this one keeps its own (load_state_dict passes a copy of the dict)
            state_dict[prefix + "bias"] = self.bias.detach()
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class _GlorotLazyLinear(_LazyLinear):
    """_LazyLinear initialised by glorot once its width is known, as PyG's
    Linear(weight_initializer='glorot')."""

    def reset_parameters(self):
        if not self.has_uninitialized_params() and self.weight.numel():
            glorot(self.weight)
            if self.bias is not None:
                nn.init.zeros_(self.bias)


def linear(in_features: int, out_features: int, bias: bool = True, glorot: bool = False) -> nn.Module:
    """nn.Linear, or for in_features=-1 (PyG's lazy width) a lazy one, sized on the first call."""
    if in_features == -1:
        return (_GlorotLazyLinear if glorot else _LazyLinear)(out_features, bias=bias)
    if not isinstance(in_features, int) or in_features <= 0:
        raise MggError(f"in_channels must be a positive int or -1 (lazy), got {in_features!r}")
    return nn.Linear(in_features, out_features, bias=bias)


def is_lazy(t) -> bool:
    return isinstance(t, nn.parameter.UninitializedParameter)


def refuse_script(name: str):
    raise MggError(
        f"{name}: torch.jit.script is not supported by mgg's layers (their op takes a plan object); use torch.compile"
    )


def adjacency_shape(edge_index) -> Optional[tuple]:
    """(N_dst, N_src) of a sparse adjacency adj_t[target, source] (torch sparse or torch_sparse),
    None for an edge_index [2, E] or an mgg graph."""
    if is_sparse_tensor(edge_index):
        return tuple(int(s) for s in edge_index.sparse_sizes())
    if isinstance(edge_index, torch.Tensor) and edge_index.layout != torch.strided:
        return tuple(int(s) for s in edge_index.shape[:2])
    return None


def split_input(x, size, name: str, node_dim: int = -2, edge_index=None):
    """(x_src, x_dst, n_src, n_dst, bipartite) of PyG's x (a tensor, or a pair whose second part
    may be None) and size (N_src, N_dst). Without size, N_dst is the rows of a sparse adjacency
    edge_index, else that of x_dst, else N_src, as in PyG. Over a DistGraph, x is this rank's
    shard and n_src, n_dst the rows it owns (rank_input)."""
    if isinstance(x, torch.Tensor):
        x_src = x_dst = x
    elif isinstance(x, (tuple, list)) and len(x) == 2 and isinstance(x[0], torch.Tensor):
        x_src, x_dst = x
    else:
        raise MggError(f"{name}: x must be a tensor or a pair (x_src, x_dst), got {type(x).__name__}")
    if is_distributed(edge_index):
        return rank_input(x_src, x_dst, size, name, node_dim, edge_index)
    n_src = x_src.size(node_dim)
    n_dst = x_dst.size(node_dim) if x_dst is not None else n_src
    adj = adjacency_shape(edge_index)
    if adj is not None and size is None:
        if adj[1] != n_src or (x_dst is not None and adj[0] != n_dst):
            raise MggError(
                f"{name}: the adjacency is {adj} (adj[target, source]) but the input has {n_src} "
                f"sources and {n_dst} destinations"
            )
        n_dst = adj[0]
    if size is not None:
        size = tuple(int(s) for s in size)
        if size[0] != n_src or (x_dst is not None and size[1] != n_dst):
            raise MggError(f"{name}: size {size} does not match the inputs' {n_src} sources and {n_dst} destinations")
        n_dst = size[1]
    bipartite = n_src != n_dst
    return x_src, x_dst, n_src, n_dst, bipartite


def rank_input(x_src, x_dst, size, name: str, node_dim: int, graph):
    """split_input over a DistGraph: the rank's shards (graph.local_src(x_src),
    graph.local_dst(x_dst), or local(x) of a square graph) checked against the rows it owns, and
    size, if given, against the graph's (N_src, N_dst)."""
    n_src, n_dst = graph.num_src_rows, graph.num_dst_rows
    if size is not None and tuple(int(s) for s in size) != graph.size:
        raise MggError(f"{name}: size {tuple(size)} is not the DistGraph's (N_src, N_dst) {graph.size}")
    rows = (x_src.size(node_dim), None if x_dst is None else x_dst.size(node_dim))
    if rows[0] != n_src or rows[1] not in (None, n_dst):
        fix = "pass its shards: local_src(x_src), local_dst(x_dst)"
        if not graph.bipartite:
            fix = "the DistGraph is square; a bipartite graph is DistGraph(..., size=(N_src, N_dst))"
        raise MggError(
            f"{name}: rank {graph.rank} owns {n_src} sources and {n_dst} destinations of the DistGraph, got "
            f"{rows[0]} x_src rows and {rows[1]} x_dst rows ({fix})"
        )
    return x_src, x_dst, n_src, n_dst, graph.bipartite


class _Aggregating(LayerBase):
    """What the layers share: PyG's MessagePassing arguments, the plan config, the optional
    autotuner, deterministic mode, an explainer's edge mask on the messages."""

    def _setup(
        self,
        config: Optional[Config],
        autotune: bool,
        deterministic: bool,
        kwargs: dict,
        aggregations: tuple,
        default_aggr: str,
        pyg_width: Optional[int] = None,
    ):
        """PyG's MessagePassing arguments. An aggregation outside `aggregations` (or one with
        aggr_kwargs) is refused, unless the layer passes pyg_width (its source width): then it
        runs through PyG's aggregation module (pyg_aggregation.py), as aggr_module."""
        name = type(self).__name__
        aggr = kwargs.pop("aggr", default_aggr)
        self.flow = kwargs.pop("flow", "source_to_target")
        self.node_dim = kwargs.pop("node_dim", -2)
        self.keep_decomposed_layers(kwargs.pop("decomposed_layers", 1))
        aggr_kwargs = kwargs.pop("aggr_kwargs", None)
        if kwargs:
            raise TypeError(f"{name}: unexpected keyword argument(s) {', '.join(sorted(kwargs))}")
        self.pyg_aggregation = False  # the aggregation runs through PyG's module (pyg_aggregation.py)
        if not isinstance(aggr, str) or aggr not in aggregations or aggr_kwargs:
            if pyg_width is None:
                if aggr_kwargs:
                    raise MggError(f"{name}: aggr_kwargs is not supported by mgg (its aggregations take no arguments)")
                raise MggError(f"{name}: aggr must be one of {aggregations} in mgg, got {aggr!r}")
            self.aggr_module = pyg_aggregation.resolve(name, aggr, aggr_kwargs, pyg_width)
            aggr = [str(a) for a in aggr] if isinstance(aggr, (list, tuple)) else str(aggr)  # as PyG
            self.pyg_aggregation = True
        elif hasattr(self, "aggr_module"):  # PyG's propagate (the path with hooks) reduces as the op does
            self.aggr_module = pyg_aggregation.resolve(name, aggr, None, -1)
        self.aggr = aggr
        if self.flow not in FLOWS:
            raise MggError(f"{name}: flow must be one of {FLOWS}, got {self.flow!r}")
        if self.node_dim not in (-2, 0):
            raise MggError(f"{name}: node_dim must be -2 or 0 (features are [nodes, channels]), got {self.node_dim!r}")
        self.config = config or Config()
        self.deterministic = deterministic
        self.tuner = None
        if autotune:
            from ..runtime.online import OnlineTuner

            self.tuner = OnlineTuner(fallback=self.config)

    def _aggregate(self, x: torch.Tensor, plan, reduce: str = "sum") -> torch.Tensor:
        """Aggregates along node_dim (reduce: run_plan's); other leading dims (PyG's [B, N, F], a
        static graph shared by B samples) travel as extra columns."""
        if x.dim() == 2:
            return run_plan(x, plan, self.config, self.deterministic, self.tuner, reduce)
        xt = x.movedim(self._nodes(x), 0)
        out = run_plan(xt.reshape(xt.size(0), -1), plan, self.config, self.deterministic, self.tuner, reduce)
        return out.reshape((out.size(0),) + tuple(xt.shape[1:])).movedim(0, self._nodes(x))

    @property
    def _reduce(self) -> str:
        """The op's reduction for the layer's aggr: 'sum' (the plan's weights make a sum or a
        mean) or 'max'/'min' (the max/min op)."""
        return self.aggr if self.aggr in EXTREMES else "sum"

    def _graph_of(self, g: Graph, dtype: torch.dtype, drop_values: bool) -> Graph:
        """The graph the layer aggregates over: without edge values where PyG drops them (a
        torch_sparse SparseTensor's), normalised by in-degree for 'mean'; 'max' and 'min' take no
        weights, so they refuse a weighted graph (a torch sparse adjacency's values other than all
        ones: PyG's to_torch_csc_tensor gives every adjacency values, and the max of 1 * x_j is x_j's)."""
        if self.aggr in EXTREMES and g.weight is not None and not drop_values:
            drop_values = bool((g.weight == 1).all())
        if self.aggr in EXTREMES and g.weight is not None and not drop_values:
            raise MggError(
                f"{type(self).__name__}: aggr={self.aggr!r} over a weighted graph (a sparse adjacency's values) "
                "is not supported by mgg (pass its edge_index)"
            )
        g = Graph._unchecked(g.rowptr, g.col) if drop_values else g
        return g.mean_norm(dtype) if self.aggr == "mean" else g

    def _explained(self, x_src: torch.Tensor, edge_index, n_dst: int) -> torch.Tensor:
        """sum (or mean, by in-degree) over edges of mask[e] * x_src[src_e], mask the attached
        explainer's: PyG's propagate with explain_message, differentiable in the mask
        (mgg.functional.aggregate_edges)."""
        from ..functional import aggregate_edges

        name = type(self).__name__
        if self.aggr in EXTREMES:
            raise MggError(f"{name}: an explainer's edge mask with aggr={self.aggr!r} is not supported by mgg")
        src, dst = explained_edges(name, edge_index, self.flow)
        mask = self._explain_mask(src.numel())
        if x_src.dim() != 2:
            raise MggError(f"{name}: an explainer's edge mask needs 2-D x in mgg, got {tuple(x_src.shape)}")
        src, dst = src.to(x_src.device), dst.to(x_src.device)
        w = mask.to(x_src.device)
        if self.aggr == "mean":
            w = w / torch.bincount(dst, minlength=n_dst).clamp(min=1).to(w)[dst]
        n = max(x_src.size(0), n_dst)
        out = aggregate_edges(pad_rows(x_src, n), src, dst, w, n, self.config, self.deterministic)
        return out.narrow(0, 0, n_dst)

    def _nodes(self, x: torch.Tensor) -> int:
        if x.dim() < 2:
            raise MggError(f"{type(self).__name__}: x must have a node and a channel dimension, got {tuple(x.shape)}")
        return self.node_dim % x.dim()

    def __prepare_scriptable__(self):
        refuse_script(type(self).__name__)


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


def _reset(module) -> None:
    """PyG's reset of a wrapped module: its own reset_parameters if it has one, else its
    children's, depth first (so the random draws are PyG's)."""
    if hasattr(module, "reset_parameters"):
        module.reset_parameters()
    else:
        for child in module.children() if hasattr(module, "children") else []:
            _reset(child)


class GINConv(_Aggregating):
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
            plan = cached_plan(edge_index, x_src.size(self._nodes(x_src)), None, tag, make, self.flow, x_src.dtype)
            out = self._aggregate(x_src, plan, self._reduce)
        if x_dst is not None:
            out = out + (1 + self.eps) * x_dst
        return self.nn(out)

    def __repr__(self):
        return f"{self.__class__.__name__}(nn={self.nn})"

"""What mgg's aggregating layers share: PyG's MessagePassing arguments (flow, aggr, node_dim,
decomposed_layers), the split of PyG's x into sources and destinations (a DistGraph's shards
included), the plan config, the optional autotuner, deterministic mode and an explainer's edge
mask."""

from __future__ import annotations

from typing import Optional

import torch

from ..errors import MggError
from ..graph import Graph
from ..ops import EXTREMES
from ..plan import Config
from . import pyg_aggregation
from .graph_input import is_distributed, is_sparse_tensor, pad_rows, run_plan
from .message_passing import LayerBase, explained_edges

FLOWS = ("source_to_target", "target_to_source")


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


class Aggregating(LayerBase):
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
        g = g.unweighted() if drop_values else g
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

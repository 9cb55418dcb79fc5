"""GATConv (Veličković et al.'s graph attention layer) with PyG's constructor, forward signature
and state_dict layout, its attention through mgg's fused op (mgg.attend): per destination and
head one pass computes the scores, the softmax and the weighted sum, reading each source row and
its source term in one fetch, local and remote sources interleaved as in the aggregation kernels.

Bipartite inputs ((x_src, x_dst), in_channels=(a, b), size) attend over the square plan of
max(N_src, N_dst) nodes with zero-padded sources (mgg.nn.graph_input.bipartite_plan), on one process
or over a bipartite DistGraph (each rank's shards);
in_channels=-1 sizes the layer on its first call. Edge features (edge_dim, edge_attr) add a
per-edge term to the scores: those scores and their softmax are computed per edge with torch ops
(PyG's formula, self-loop features by fill_value), and the weighted sum goes through mgg's op
(mgg.functional.aggregate_edges, one call per head), on one process. What PyG's layer does and mgg does
not (other aggregations) is refused with one line. Attention dropout is drawn from (seed, destination,
source, head) rather than from torch's generator, so the forward and backward passes, every
backend and every rank count draw the same mask for a given seed."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .. import ops
from ..errors import MggError
from ..functional import aggregate_edges, attention_graph
from ..graph import Graph
from ..plan import Config
from .aggregating import refuse_script, split_input
from .graph_input import bipartite_plan, cached_plan, is_distributed, pad_rows, plan_rows
from .linear import glorot, is_lazy, linear
from .message_passing import LayerBase, refuse_hooks

_MIX = 0x9E3779B97F4A7C15
_SEED_BITS = (1 << 62) - 1


# PyG's fill_value reductions (torch_geometric.utils.scatter) -> torch's scatter_reduce
_FILL_REDUCE = {"add": "sum", "sum": "sum", "mean": "mean", "min": "amin", "max": "amax", "mul": "prod"}


@refuse_hooks  # its scores are not PyG's edge_updater and its aggregation not PyG's propagate
class GATConv(LayerBase):
    """out_i = sum_{j -> i} alpha_ij W x_j per head, alpha_ij = softmax_j(leaky_relu(a_src . W x_j
    + a_dst . W x_i)), as torch_geometric.nn.GATConv: heads concatenated (concat=True) or
    averaged, then the residual (residual=True: a bias-free linear map of x) and the bias. With
    add_self_loops (default) a graph's self-loops are replaced by one per node, as PyG does.

    `edge_index` may be a [2, E] tensor (or PyG EdgeIndex), a torch sparse adjacency
    adj[target, source] (its values are ignored: attention makes the weights), an mgg.Graph or an
    mgg.distributed.DistGraph. Duplicate edges of a [2, E] input are separate softmax entries,
    as in PyG.

    Attention dropout (training only) draws a fresh mask per call from a seed that this layer
    derives from the one it drew at construction and a call counter: ranks that build the model
    from the same torch seed and call it equally often agree on it, which the nvshmem backend's
    backward needs. `reseed(seed)` sets it (e.g. to replay a step)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        heads: int = 1,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        edge_dim: Optional[int] = None,
        fill_value="mean",
        bias: bool = True,
        residual: bool = False,
        config: Optional[Config] = None,
        autotune: bool = False,
        deterministic: bool = False,
        **kwargs,
    ):
        super().__init__()
        if "node_dim" in kwargs:  # PyG fixes node_dim=0 itself and raises this TypeError
            raise TypeError("GATConv: got multiple values for keyword argument 'node_dim'")
        aggr = kwargs.pop("aggr", "add")
        self.flow = kwargs.pop("flow", "source_to_target")
        self.keep_decomposed_layers(kwargs.pop("decomposed_layers", 1))
        if kwargs.pop("aggr_kwargs", None):
            raise MggError("GATConv: aggr_kwargs is not supported by mgg (its aggregation takes no arguments)")
        if kwargs:
            raise TypeError(f"GATConv: unexpected keyword argument(s) {', '.join(sorted(kwargs))}")
        if aggr not in ("add", "sum"):
            raise MggError(f"GATConv: aggr must be 'add' in mgg (the attention-weighted sum), got {aggr!r}")
        if self.flow not in ("source_to_target", "target_to_source"):
            raise MggError(f"GATConv: flow must be 'source_to_target' or 'target_to_source', got {self.flow!r}")
        widths = (in_channels,) if isinstance(in_channels, int) else tuple(in_channels)
        if len(widths) not in (1, 2) or not all(isinstance(c, int) and (c > 0 or c == -1) for c in widths):
            raise MggError(
                f"GATConv: in_channels must be a positive int, -1 (lazy) or a pair of them, got {in_channels!r}"
            )
        if not isinstance(out_channels, int) or out_channels <= 0:
            raise MggError(f"GATConv: out_channels must be a positive int, got {out_channels!r}")
        if not isinstance(heads, int) or not 1 <= heads <= 64:
            raise MggError(f"GATConv: heads must be an int in [1, 64], got {heads!r}")
        if edge_dim is not None and (not isinstance(edge_dim, int) or edge_dim <= 0):
            raise MggError(f"GATConv: edge_dim must be a positive int or None, got {edge_dim!r}")
        named = isinstance(fill_value, str) and fill_value in _FILL_REDUCE
        if not (named or isinstance(fill_value, (int, float, torch.Tensor))):
            raise MggError(
                f"GATConv: fill_value must be a number, a tensor or one of {tuple(_FILL_REDUCE)}, got {fill_value!r}"
            )
        if not 0.0 <= dropout < 1.0:
            raise MggError(f"GATConv: dropout must be in [0, 1), got {dropout!r}")
        if autotune:
            raise MggError(
                "GATConv: autotune is not supported for attention (its kernel has no ps/dist to tune); "
                "pass config=Config(wpb=...) instead"
            )
        self.in_channels, self.out_channels, self.heads, self.concat = in_channels, out_channels, heads, concat
        self.negative_slope, self.dropout, self.add_self_loops = float(negative_slope), float(dropout), add_self_loops
        self.edge_dim, self.fill_value, self.aggr, self.node_dim = edge_dim, fill_value, "add", 0
        self.config, self.deterministic = config or Config(), deterministic
        # PyG's registration order: lin (or lin_src, lin_dst for a pair of widths), att_src, att_dst,
        # lin_edge and att_edge (edge_dim), res, bias
        self.lin = self.lin_src = self.lin_dst = None
        if isinstance(in_channels, int):
            self.lin = linear(in_channels, heads * out_channels, bias=False, glorot=True)
        else:
            self.lin_src = linear(in_channels[0], heads * out_channels, bias=False, glorot=True)
            self.lin_dst = linear(in_channels[1], heads * out_channels, bias=False, glorot=True)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        if edge_dim is not None:
            self.lin_edge = linear(edge_dim, heads * out_channels, bias=False, glorot=True)
            self.att_edge = nn.Parameter(torch.empty(1, heads, out_channels))
        else:
            self.lin_edge = None
            self.register_parameter("att_edge", None)
        width = heads * out_channels if concat else out_channels
        self.register_parameter("bias", nn.Parameter(torch.empty(width)) if bias else None)
        self.residual = residual
        self.res = linear(widths[-1], width, bias=False, glorot=True) if residual else None
        self.reset_parameters()
        with torch.random.fork_rng(devices=[]):  # drawn from the global seed, leaving its stream as PyG's
            self._seed_base = int(torch.randint(0, 2**62, (1,)).item())
        self._calls = 0

    def reset_parameters(self):
        """PyG's initialisation, in PyG's order: glorot for lin, lin_edge, res, att_src, att_dst and
        att_edge; zeros for the bias."""
        for lin in (self.lin, self.lin_src, self.lin_dst, self.lin_edge, self.res):
            if lin is not None and not is_lazy(lin.weight):
                glorot(lin.weight)
        for att in (self.att_src, self.att_dst, self.att_edge):
            if att is not None:
                glorot(att)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def reseed(self, seed: int) -> None:
        """Restart the dropout draws from `seed` (the next call's mask is a function of it)."""
        self._seed_base, self._calls = int(seed) & _SEED_BITS, 0

    def draws(self) -> dict:
        """The attention dropout's seed and calls counted (the next mask's; a checkpoint keeps them)."""
        return dict(seed_base=self._seed_base, calls=self._calls)

    def set_draws(self, d: dict) -> None:
        self._seed_base, self._calls = int(d["seed_base"]), int(d["calls"])

    def _next_seed(self) -> int:
        seed = (self._seed_base ^ ((self._calls + 1) * _MIX)) & _SEED_BITS
        self._calls += 1
        return seed

    def _plan(self, edge_index, n: int, probe=None):
        loops = self.add_self_loops
        make = lambda g, _: attention_graph(g, loops)  # noqa: E731
        order = self.config.order
        if order != "user" and self.dropout > 0 and self.training:  # the draw: a function of the edge's place
            if order != "auto":
                raise MggError(f"GATConv: order {order!r} with attention dropout: the draws follow the user's edges")
            order = "user"
        return cached_plan(edge_index, n, None, f"gat:{loops}", make, self.flow, order=order, probe=probe)

    def _bipartite_edges(self, ei: torch.Tensor, k: int) -> torch.Tensor:
        """PyG's edges of a bipartite input: with add_self_loops every self-loop (i -> i) removed
        and one added per node below k = min(N_src, N_dst) (or min(size))."""
        if not self.add_self_loops:
            return ei
        loop = torch.arange(k, device=ei.device)
        return torch.cat([ei[:, ei[0] != ei[1]], torch.stack([loop, loop])], 1)

    def __prepare_scriptable__(self):
        refuse_script("GATConv")

    def forward(
        self,
        x,
        edge_index,
        edge_attr=None,
        size: Optional[tuple] = None,
        return_attention_weights: Optional[bool] = None,
    ):
        x_src, x_dst, n_src, n_dst, bipartite = split_input(x, size, "GATConv", 0, edge_index)
        for t in (x_src, x_dst):
            if t is not None and t.dim() != 2:
                raise MggError(
                    f"GATConv: x must be 2-D [nodes, in_channels], got {tuple(t.shape)} (static graphs "
                    f"are not supported, as in PyG)"
                )
        if self.lin_edge is None:
            edge_attr = None  # PyG ignores edge features without edge_dim
        if getattr(self, "_explain", None):
            raise MggError(
                "GATConv: explainers' edge masks are not supported by mgg's attention op (the mask "
                "would scale each attention-weighted message inside the fused kernel)"
            )
        heads, c = self.heads, self.out_channels
        res = self.res(x_dst) if self.res is not None and x_dst is not None else None
        lin_src, lin_dst = (self.lin, self.lin) if self.lin is not None else (self.lin_src, self.lin_dst)
        for t, lin in ((x_src, lin_src), (x_dst, lin_dst)):
            if t is not None and not is_lazy(lin.weight) and t.size(1) != lin.weight.size(1):
                raise MggError(f"GATConv: x has {t.size(1)} channels but the layer takes {lin.weight.size(1)}")
        h = lin_src(x_src).view(-1, heads, c)
        a_src = (h * self.att_src).sum(-1)
        if x_dst is None:  # PyG: no destination term
            a_dst = a_src.new_zeros((n_dst, heads))
        else:
            a_dst = (
                (h if x_dst is x_src and lin_dst is lin_src else lin_dst(x_dst).view(-1, heads, c)) * self.att_dst
            ).sum(-1)
        p = self.dropout if self.training else 0.0
        seed = self._next_seed() if p > 0 else 0
        if edge_attr is not None:
            out, weights = self._attend_edges(h, a_src, a_dst, edge_index, edge_attr, n_src, n_dst, size, p, seed)
        elif (n_src == 0 or n_dst == 0) and not is_distributed(edge_index):  # PyG: an empty graph, an empty output
            out = h.new_zeros((n_dst, heads, c)) + 0 * h.sum()
            used = torch.empty((2, 0), dtype=torch.long, device=h.device)
            weights = (used, h.new_zeros((0, heads)))
        elif bipartite:
            if self.flow != "source_to_target":
                raise MggError("GATConv: bipartite input needs flow='source_to_target' in mgg")
            if is_distributed(edge_index):
                if return_attention_weights:
                    raise MggError(
                        "GATConv: return_attention_weights needs a [2, E] edge_index or a torch sparse adjacency "
                        "on one process, not a DistGraph"
                    )
                k = min(edge_index.size)  # the loops of the whole graph (rank_input checked size)
            else:
                edge_index = self._bipartite_edge_index(edge_index, return_attention_weights)
                k = min(size) if size is not None else min(n_src, n_dst)
            plan = bipartite_plan(
                edge_index,
                n_src,
                n_dst,
                f"gat:{self.add_self_loops}:{k}",
                lambda g, _: Graph.from_edge_index(self._bipartite_edges(g.edge_index(), k), g.num_nodes),
                self.flow,
                torch.float32,
                "GATConv",
            )
            m = plan_rows(plan)
            out = self._attend(pad_rows(h, m), pad_rows(a_src, m), pad_rows(a_dst, m), plan, p, seed)[:n_dst]
            weights = None
            if return_attention_weights:
                ei = self._bipartite_edges(edge_index.to(h.device, torch.long), k)
                weights = (ei, self._alpha(ei[0], ei[1], n_dst, a_src, a_dst, p, seed))
        else:
            out = self._attend(h, a_src, a_dst, self._plan(edge_index, n_src, h), p, seed)
            weights = (
                self._attention_weights(edge_index, n_src, a_src, a_dst, p, seed) if return_attention_weights else None
            )
        out = out.reshape(-1, heads * c) if self.concat else out.mean(dim=1)
        if res is not None:
            out = out + res
        if self.bias is not None:
            out = out + self.bias
        if return_attention_weights:
            return out, weights
        return out

    def _bipartite_edge_index(self, edge_index, return_attention_weights) -> torch.Tensor:
        """The [2, E] edge_index of a bipartite input on one process: an EdgeIndex's tensor, or a
        torch sparse adjacency's edges (attention ignores its values)."""
        if hasattr(edge_index, "as_tensor"):
            edge_index = edge_index.as_tensor()
        if isinstance(edge_index, torch.Tensor) and edge_index.layout != torch.strided:
            if return_attention_weights:
                raise MggError(
                    "GATConv: return_attention_weights with a bipartite sparse adjacency is not "
                    "supported by mgg; pass edge_index [2, E]"
                )
            idx = edge_index.to_sparse_coo().coalesce().indices()  # adj[target, source]
            edge_index = torch.stack([idx[1], idx[0]])
        if not isinstance(edge_index, torch.Tensor):
            raise MggError(
                "GATConv: bipartite input needs edge_index [2, E] or a torch sparse adjacency in mgg, "
                f"got {type(edge_index).__name__}"
            )
        return edge_index

    def _attend(self, h, a_src, a_dst, plan, p: float, seed: int) -> torch.Tensor:
        """[rows, heads, C] over a one-rank Plan or a DistPlan (mgg.plan.Aggregation)."""
        return plan.attend(h, a_src, a_dst, self.negative_slope, p, seed, self.config)

    def _attention_weights(self, edge_index, n: int, a_src, a_dst, p: float, seed: int):
        """PyG's attention weights on one process: for a [2, E] input (edge_index used, alpha
        [E', H]), the edges after self-loops are replaced (removed, then 0..n-1 appended); for a
        torch sparse adjacency (adj, alpha), adj in the input's layout with alpha [nnz, H] as its
        values (the adjacency's loops replaced likewise) and alpha in adj's order. Alpha is
        after dropout."""
        if isinstance(edge_index, torch.Tensor) and hasattr(edge_index, "as_tensor"):  # PyG EdgeIndex
            edge_index = edge_index.as_tensor()
        if self.flow != "source_to_target":
            raise MggError("GATConv: return_attention_weights needs flow='source_to_target'")
        layout = edge_index.layout if isinstance(edge_index, torch.Tensor) else None
        if layout in (torch.sparse_coo, torch.sparse_csr):
            a = (edge_index if layout == torch.sparse_coo else edge_index.to_sparse_coo()).coalesce()
            ei = a.indices().flip(0)
        elif layout == torch.strided and edge_index.dim() == 2:
            ei = edge_index
        else:
            raise MggError(
                "GATConv: return_attention_weights needs a [2, E] edge_index or a torch sparse adjacency on one process"
            )
        ei = ei.to(a_src.device, torch.long)
        if self.add_self_loops:
            ei = ei[:, ei[0] != ei[1]]
            loop = torch.arange(n, device=ei.device)
            ei = torch.cat([ei, torch.stack([loop, loop])], 1)
        if layout == torch.strided:
            return ei, self._alpha(ei[0], ei[1], n, a_src, a_dst, p, seed)
        adj = torch.sparse_coo_tensor(ei.flip(0), torch.ones(ei.size(1), device=ei.device), (n, n)).coalesce()
        ei = adj.indices().flip(0)  # the adjacency's own (row-major) order
        alpha = self._alpha(ei[0], ei[1], n, a_src, a_dst, p, seed)
        adj = torch.sparse_coo_tensor(adj.indices(), alpha, (n, n) + alpha.shape[1:], is_coalesced=True)
        return (adj.to_sparse_csr() if layout == torch.sparse_csr else adj), alpha

    def _attend_edges(self, h, a_src, a_dst, edge_index, edge_attr, n_src: int, n_dst: int, size, p: float, seed: int):
        """(out [N_dst, heads, C], (edges, alpha)) with edge features: PyG's edges (self-loops
        replaced, their features by fill_value), scores a_src + a_dst + att_edge . lin_edge(e),
        the softmax per destination with torch ops, the weighted sum through mgg's op per head."""
        if isinstance(edge_index, torch.Tensor) and hasattr(edge_index, "as_tensor"):  # PyG EdgeIndex
            edge_index = edge_index.as_tensor()
        if not isinstance(edge_index, torch.Tensor) or edge_index.layout != torch.strided or edge_index.dim() != 2:
            raise MggError(
                "GATConv: edge features need edge_index [2, E] on one process in mgg (not a sparse adjacency "
                f"or a distributed graph), got {type(edge_index).__name__}"
            )
        ei = edge_index.to(h.device, torch.long)
        attr = edge_attr.view(-1, 1) if edge_attr.dim() == 1 else edge_attr
        if attr.size(0) != ei.size(1):
            raise MggError(f"GATConv: edge_attr has {attr.size(0)} rows for {ei.size(1)} edges")
        attr = attr.to(h.device)
        if self.add_self_loops:
            keep = ei[0] != ei[1]
            ei, attr = ei[:, keep], attr[keep]
            k = min(size) if size is not None else min(n_src, n_dst)
            loop = torch.arange(k, device=ei.device)
            ei = torch.cat([ei, torch.stack([loop, loop])], 1)
            attr = torch.cat([attr, self._loop_attr(ei[1, : keep.sum()], attr, k)])
        src, dst = (ei[1], ei[0]) if self.flow == "target_to_source" else (ei[0], ei[1])
        a_edge = (self.lin_edge(attr).view(-1, self.heads, self.out_channels) * self.att_edge).sum(-1)
        alpha = self._alpha(src, dst, n_dst, a_src, a_dst, p, seed, a_edge)
        n = max(n_src, n_dst)
        x = pad_rows(h, n)
        out = torch.stack(
            [
                aggregate_edges(x[:, k], src, dst, alpha[:, k], n, self.config, self.deterministic)[:n_dst]
                for k in range(self.heads)
            ],
            1,
        )
        return out.to(h.dtype), (ei, alpha)

    def _loop_attr(self, targets: torch.Tensor, attr: torch.Tensor, k: int) -> torch.Tensor:
        """The features of the k self-loops (PyG's add_self_loops): fill_value, or the reduction
        it names over each node's incoming edges (0 for a node without any)."""
        shape = (k,) + tuple(attr.shape[1:])
        fill = self.fill_value
        if isinstance(fill, (int, float)):
            return attr.new_full(shape, float(fill))
        if isinstance(fill, torch.Tensor):
            return fill.to(attr.device, attr.dtype).expand(shape).contiguous()
        rows = max(k, int(targets.max()) + 1 if targets.numel() else 0)
        index = targets.view(-1, *[1] * (attr.dim() - 1)).expand_as(attr)
        out = attr.new_zeros((rows,) + tuple(attr.shape[1:]))
        return out.scatter_reduce(0, index, attr, _FILL_REDUCE[fill], include_self=False)[:k]

    def _alpha(self, src, dst, n_dst: int, a_src, a_dst, p: float, seed: int, a_edge=None) -> torch.Tensor:
        """Softmax over each destination's in-edges of leaky_relu(a_src + a_dst (+ a_edge)), after
        dropout."""
        acc = torch.float32 if a_src.dtype in (torch.float16, torch.bfloat16) else a_src.dtype
        score = a_src[src] + a_dst[dst]
        if a_edge is not None:
            score = score + a_edge.to(score.dtype)
        e = F.leaky_relu(score, self.negative_slope).to(acc)
        top = e.new_full((n_dst, self.heads), float("-inf")).scatter_reduce_(0, dst[:, None].expand_as(e), e, "amax")
        w = (e - top[dst]).exp()
        total = e.new_zeros((n_dst, self.heads)).index_add_(0, dst, w)
        alpha = w / total[dst]
        if p > 0:
            alpha = alpha * ops.attention_keep(dst, src, self.heads, seed, p).to(alpha)
        return alpha.to(a_src.dtype)

    def __repr__(self):
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"

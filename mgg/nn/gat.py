"""GATConv (Veličković et al.'s graph attention layer) with PyG's constructor, forward signature
and state_dict layout, its attention through mgg's fused op (mgg.attend): per destination and
head one pass computes the scores, the softmax and the weighted sum, reading each source row and
its source term in one fetch, local and remote sources interleaved as in the aggregation kernels.

What PyG's layer does and mgg does not (edge features, bipartite inputs, lazy widths, other
aggregations) is refused with one line. Attention dropout is drawn from (seed, destination,
source, head) rather than from torch's generator, so the forward and backward passes, every
backend and every rank count draw the same mask for a given seed."""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import MggError
from ..ops import attend, attention_graph, attention_table
from ..plan import Config
from .graph_cache import cached_plan

_MIX = 0x9E3779B97F4A7C15
_SEED_BITS = (1 << 62) - 1


def _glorot(t: torch.Tensor) -> None:
    """PyG's glorot: U(-a, a), a = sqrt(6 / (size(-2) + size(-1)))."""
    a = math.sqrt(6.0 / (t.size(-2) + t.size(-1)))
    with torch.no_grad():
        t.uniform_(-a, a)


class GATConv(nn.Module):
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

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, dropout: float = 0.0, add_self_loops: bool = True,
                 edge_dim: Optional[int] = None, fill_value="mean", bias: bool = True, residual: bool = False,
                 config: Optional[Config] = None, autotune: bool = False, deterministic: bool = False, **kwargs):
        super().__init__()
        if "node_dim" in kwargs:  # PyG fixes node_dim=0 itself and raises this TypeError
            raise TypeError("GATConv: got multiple values for keyword argument 'node_dim'")
        aggr = kwargs.pop("aggr", "add")
        self.flow = kwargs.pop("flow", "source_to_target")
        decomposed = kwargs.pop("decomposed_layers", 1)
        if kwargs:
            raise TypeError(f"GATConv: unexpected keyword argument(s) {', '.join(sorted(kwargs))}")
        if aggr not in ("add", "sum"):
            raise MggError(f"GATConv: aggr must be 'add' in mgg (the attention-weighted sum), got {aggr!r}")
        if self.flow not in ("source_to_target", "target_to_source"):
            raise MggError(f"GATConv: flow must be 'source_to_target' or 'target_to_source', got {self.flow!r}")
        if not isinstance(decomposed, int) or decomposed < 1:
            raise MggError(f"GATConv: decomposed_layers must be a positive integer, got {decomposed!r}")
        if not isinstance(in_channels, int):
            raise MggError(f"GATConv: in_channels must be an int in mgg (bipartite (src, dst) widths are not "
                           f"supported), got {in_channels!r}")
        if in_channels <= 0:
            raise MggError(f"GATConv: lazy initialisation (in_channels={in_channels}) is not supported by mgg; give "
                           f"the input width")
        if not isinstance(out_channels, int) or out_channels <= 0:
            raise MggError(f"GATConv: out_channels must be a positive int, got {out_channels!r}")
        if not isinstance(heads, int) or not 1 <= heads <= 64:
            raise MggError(f"GATConv: heads must be an int in [1, 64], got {heads!r}")
        if edge_dim is not None:
            raise MggError("GATConv: edge features (edge_dim) are not supported by mgg")
        if not 0.0 <= dropout < 1.0:
            raise MggError(f"GATConv: dropout must be in [0, 1), got {dropout!r}")
        if autotune:
            raise MggError("GATConv: autotune is not supported for attention (its kernel has no ps/dist to tune); "
                           "pass config=Config(wpb=...) instead")
        self.in_channels, self.out_channels, self.heads, self.concat = in_channels, out_channels, heads, concat
        self.negative_slope, self.dropout, self.add_self_loops = float(negative_slope), float(dropout), add_self_loops
        self.edge_dim, self.fill_value, self.aggr, self.node_dim = edge_dim, fill_value, "add", 0
        self.config, self.deterministic = config or Config(), deterministic
        # PyG's registration order: lin, att_src, att_dst, bias, res
        self.lin = nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        width = heads * out_channels if concat else out_channels
        self.register_parameter("bias", nn.Parameter(torch.empty(width)) if bias else None)
        self.res = nn.Linear(in_channels, width, bias=False) if residual else None
        self.reset_parameters()
        self._seed_base = int(torch.randint(0, 2**62, (1,)).item())  # after the weights: PyG's init draws stay
        self._calls = 0

    def reset_parameters(self):
        """PyG's initialisation: glorot for lin, res, att_src and att_dst; zeros for the bias."""
        _glorot(self.lin.weight)
        if self.res is not None:
            _glorot(self.res.weight)
        _glorot(self.att_src)
        _glorot(self.att_dst)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def reseed(self, seed: int) -> None:
        """Restart the dropout draws from `seed` (the next call's mask is a function of it)."""
        self._seed_base, self._calls = int(seed) & _SEED_BITS, 0

    def _next_seed(self) -> int:
        seed = (self._seed_base ^ ((self._calls + 1) * _MIX)) & _SEED_BITS
        self._calls += 1
        return seed

    def _plan(self, edge_index, n: int):
        loops = self.add_self_loops
        return cached_plan(edge_index, n, None, f"gat:{loops}", lambda g, _: attention_graph(g, loops), self.flow)

    def forward(self, x: torch.Tensor, edge_index, edge_attr=None, size: Optional[tuple] = None,
                return_attention_weights: Optional[bool] = None):
        if not isinstance(x, torch.Tensor):
            raise MggError("GATConv: x must be one tensor [nodes, in_channels] in mgg (bipartite (x_src, x_dst) "
                           "input is not supported)")
        if x.dim() != 2:
            raise MggError(f"GATConv: x must be 2-D [nodes, in_channels], got {tuple(x.shape)} (static graphs are "
                           f"not supported, as in PyG)")
        if x.size(1) != self.in_channels:
            raise MggError(f"GATConv: x has {x.size(1)} channels but the layer takes {self.in_channels}")
        if edge_attr is not None:
            raise MggError("GATConv: edge_attr is not supported by mgg (edge_dim is None)")
        n = x.size(0)
        if size is not None and tuple(size) != (n, n):
            raise MggError(f"GATConv: size {tuple(size)} (bipartite message passing) is not supported by mgg")
        plan = self._plan(edge_index, n)
        heads, c = self.heads, self.out_channels
        h = self.lin(x).view(-1, heads, c)
        a_src = (h * self.att_src).sum(-1)
        a_dst = (h * self.att_dst).sum(-1)
        p = self.dropout if self.training else 0.0
        seed = self._next_seed() if p > 0 else 0
        out = self._attend(h, a_src, a_dst, plan, p, seed)
        out = out.reshape(-1, heads * c) if self.concat else out.mean(dim=1)
        if self.res is not None:
            out = out + self.res(x)
        if self.bias is not None:
            out = out + self.bias
        if return_attention_weights:
            return out, self._attention_weights(edge_index, n, a_src, a_dst, p, seed)
        return out

    def _attend(self, h, a_src, a_dst, plan, p: float, seed: int) -> torch.Tensor:
        from ..distributed.graph import DistPlan

        if isinstance(plan, DistPlan):
            out = plan.attend(attention_table(h, a_src), a_dst.contiguous(), self.heads, self.negative_slope, p, seed,
                              self.config)
            return out.view(-1, self.heads, self.out_channels)
        return attend(h, a_src, a_dst, plan, self.negative_slope, p, seed, self.config)

    def _attention_weights(self, edge_index, n: int, a_src, a_dst, p: float, seed: int):
        """PyG's (edge_index used, alpha [E', H]) for a [2, E] input on one process: the edges
        after self-loops are replaced (removed, then 0..n-1 appended), alpha after dropout."""
        if isinstance(edge_index, torch.Tensor) and hasattr(edge_index, "as_tensor"):  # PyG EdgeIndex
            edge_index = edge_index.as_tensor()
        if not isinstance(edge_index, torch.Tensor) or edge_index.layout != torch.strided or edge_index.dim() != 2:
            raise MggError("GATConv: return_attention_weights needs a [2, E] edge_index on one process")
        if self.flow != "source_to_target":
            raise MggError("GATConv: return_attention_weights needs flow='source_to_target'")
        ei = edge_index.to(a_src.device, torch.long)
        if self.add_self_loops:
            ei = ei[:, ei[0] != ei[1]]
            loop = torch.arange(n, device=ei.device)
            ei = torch.cat([ei, torch.stack([loop, loop])], 1)
        src, dst = ei[0], ei[1]
        acc = torch.float32 if a_src.dtype in (torch.float16, torch.bfloat16) else a_src.dtype
        e = F.leaky_relu(a_src[src] + a_dst[dst], self.negative_slope).to(acc)
        top = e.new_full((n, self.heads), float("-inf")).scatter_reduce_(0, dst[:, None].expand_as(e), e, "amax")
        w = (e - top[dst]).exp()
        total = e.new_zeros((n, self.heads)).index_add_(0, dst, w)
        alpha = w / total[dst]
        if p > 0:
            alpha = alpha * torch.ops.mgg.attention_keep(dst, src, self.heads, seed, p).to(alpha)
        return ei, alpha.to(a_src.dtype)

    def __repr__(self):
        return f"{self.__class__.__name__}({self.in_channels}, {self.out_channels}, heads={self.heads})"


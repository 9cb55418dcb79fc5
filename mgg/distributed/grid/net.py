"""Graph convolutions on Plexus's 3D grid (plexus-3d-parallel.txt, Algorithms 1 and 2, section
3.2), those that are an SpMM then a GEMM: GCN, SAGE (mean; its root term is an SpMM by the identity)
and GIN with one linear layer (the SpMM by A + (1 + eps) I). Layer l with roles (a, b, c)
(shards.roles) on this rank:

    F    its input: rows over a, columns over b (layer 0: rows also cut over c, gathered first)
    H    = sum over a of SpMM(A_l[rows over c, columns over a], F)       (mgg's op on the shard)
    W    its weight: rows over b, columns over a, rows also cut over c (gathered before use)
    Q    = sum over b of H @ W (SAGE: + H_root @ W_root), plus the bias's columns over a; relu
         between layers
    out  rows over c, columns over a, the same on each rank of b: the next layer's input as it
         stands (roles (c, a, b))

The adjoints are the collectives' own (grid.collectives): W's gradient reduce-scattered over c,
H's all-reduced over a, the input's all-reduced (layer 0: reduce-scattered) over c. The adjacency
shards are normalised as the one-process layer normalises the whole graph (GCN: Graph.gcn_norm,
SAGE: Graph.mean_norm, GIN: the plain sum) and planned once. The last layer's logits are gathered
over a (the classes), so each rank holds every class of its output rows; loss(...) is the cross
entropy over a rank's rows, summed over the grid to the whole graph's."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from ...errors import MggError
from ...functional import node_dropout
from ...graph import Graph
from ...plan import Plan
from .blocks import PreparedBlocks, WholeGraph
from .collectives import Grid, gather, share, sum_and_share, sum_over
from .shards import Orders, roles, span


class _NoEdges(torch.autograd.Function):
    """The product of an empty shard: zeros, and a zero gradient (so the input's adjoint collective
    still runs on this rank as on the others)."""

    @staticmethod
    def forward(ctx, x, rows):
        ctx.shape = x.shape
        return x.new_zeros((rows, x.size(1)))

    @staticmethod
    def backward(ctx, g):
        return g.new_zeros(ctx.shape), None


class GridLayerShard:
    """Layer l's adjacency shard on this rank, planned once: rows over c in the layer's output
    order, columns over a in its input order (`source`: a blocks.WholeGraph or PreparedBlocks)."""

    def __init__(self, grid: Grid, source, layer: int, identity: bool = False):
        a, _, c = roles(layer)
        cuts_c, cuts_a = source.cuts(grid.extent(c)), source.cuts(grid.extent(a))
        self.row_span = (cuts_c[grid.coord[c]], cuts_c[grid.coord[c] + 1])
        self.col_span = (cuts_a[grid.coord[a]], cuts_a[grid.coord[a] + 1])
        # the node ids of the input rows this shard reads (its columns), for dropout's mask
        self.col_nodes = torch.from_numpy(source.node_ids(layer, self.col_span, "input"))
        read = source.identity_block if identity else source.block
        rows, cols, w = read(layer, self.row_span, self.col_span)
        self.rows, self.cols = self.row_span[1] - self.row_span[0], self.col_span[1] - self.col_span[0]
        m = max(self.rows, self.cols)
        g = None
        if m:
            g = Graph.from_edges(
                torch.from_numpy(cols), torch.from_numpy(rows), m, weight=torch.from_numpy(w), what="grid shard"
            )
        self.nnz = 0 if g is None else g.num_edges
        self.plan = None  # the plan that sums the shard's edges (it keeps what it needs of them)
        if self.nnz:
            # rows x cols, no square padding: the rank's rows read a table of its columns (GatheredShard)
            self.plan = Plan(g, bounds=np.array([0, self.rows, m]), gathered=(0, self.cols)).rank_plan(0)
        del g, rows, cols, w  # the edges as read: the plan holds them in its own layout

    def spmm(self, x: torch.Tensor) -> torch.Tensor:
        """The shard's rows of A x, x being the rows of its columns [cols, D]."""
        if self.plan is None:
            return _NoEdges.apply(x, self.rows)
        return self.plan.aggregate(x, x.new_empty((0, x.size(1))))


class _ReluOwnedGrad(torch.autograd.Function):
    """relu_ whose adjoint zeroes the gradient in place: the gradient reaching it (between layers:
    the next layer's share, dropout or SpMM adjoints made it) is a new table nothing else reads."""

    @staticmethod
    def forward(ctx, h):
        ctx.mark_dirty(h)
        out = torch.relu_(h)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        if not g.is_contiguous() or torch.is_grad_enabled():  # a broadcast gradient, or a double backward
            return torch.ops.aten.threshold_backward(g, out, 0)
        return torch.ops.aten.threshold_backward.grad_input(g, out, 0, grad_input=g)


CONVS = ("gcn", "sage", "gin")


class GridNet(torch.nn.Module):
    """len(dims) - 1 graph convolutions of kind `conv` (dims[0] input features, dims[-1] classes)
    over `grid`.

    Args:
        grid: this rank's Grid.
        graph: the whole graph (every rank loads the same), normalised here as GCNConv does; or
            where the blocks come from (mgg.distributed.grid.blocks: WholeGraph, or
            PreparedBlocks: a prepared dataset of which this rank reads only its blocks).
        dims: the widths, input first.
        permute: Plexus's double permutation (two seeded node orders, alternating by layer) of a
            whole graph.
        seed: the permutations' seed.
        bias: a bias per layer, as GCNConv's.
        dropout: the probability of zeroing an entry of each layer's input while training (as
            mgg.nn.models' GCN places it), drawn by node (mgg.nn.dropout.node_dropout: the same for every
            grid, and for every backend of mgg train).
        input_dropout: whether the first layer's input is dropped too (GCN's protocol); False
            drops only between layers, after the ReLU (mgg.nn.models' SAGE, PyG's reddit.py).
        conv: gcn (GCNConv), sage (SAGEConv, mean, with its root weight) or gin (GINConv with one
            nn.Linear, eps fixed).
        eps: GIN's eps.
    """

    def __init__(
        self,
        grid: Grid,
        graph,
        dims: Sequence[int],
        permute: bool = True,
        seed: int = 0,
        bias: bool = True,
        dtype: torch.dtype = torch.float32,
        dropout: float = 0.0,
        conv: str = "gcn",
        eps: float = 0.0,
        input_dropout: bool = True,
    ):
        super().__init__()
        if len(dims) < 2:
            raise MggError(f"GridNet: dims needs the input width and at least one layer's, got {list(dims)}")
        if not 0.0 <= dropout < 1.0:
            raise MggError(f"GridNet: dropout must be in [0, 1), got {dropout}")
        self.grid, self.dims, self.num_nodes = grid, list(dims), graph.num_nodes
        if conv not in CONVS:
            raise MggError(
                f"the grid runs {', '.join(CONVS)} (an SpMM then a GEMM); {conv!r} runs on the halo, node-halo, "
                "allgather or nvshmem backends"
            )
        self.dropout, self.step, self.conv, self.eps = dropout, 0, conv, float(eps)
        self.dropout_seed = seed
        self.input_dropout = input_dropout
        layers = range(len(dims) - 1)
        self.source = (
            graph
            if isinstance(graph, (WholeGraph, PreparedBlocks))
            else WholeGraph(graph, Orders.make(graph.num_nodes, permute, seed), conv, dtype)
        )
        self.shards = [GridLayerShard(grid, self.source, layer) for layer in layers]
        # SAGE's root term and GIN's (1 + eps) x: an SpMM by the identity (in the layer's orders)
        self.self_shards = (
            [GridLayerShard(grid, self.source, layer, identity=True) for layer in layers] if conv != "gcn" else []
        )
        self.weights = torch.nn.ParameterList()
        self.root_weights = torch.nn.ParameterList()
        self.biases = torch.nn.ParameterList()
        for layer, (d_in, d_out) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
            full = torch.empty(d_in, d_out, dtype=dtype)
            torch.nn.init.xavier_uniform_(full, generator=torch.Generator().manual_seed(seed + layer))
            self.weights.append(torch.nn.Parameter(self._weight_piece(full, layer)))
            if conv == "sage":
                torch.nn.init.xavier_uniform_(full, generator=torch.Generator().manual_seed(seed + 1000 + layer))
                self.root_weights.append(torch.nn.Parameter(self._weight_piece(full, layer)))
            if bias:
                self.biases.append(torch.nn.Parameter(self._bias_piece(torch.zeros(d_out, dtype=dtype), layer)))

    # --- what this rank holds of the whole tensors -------------------------------------------
    def weight_span(self, layer: int) -> tuple:
        """((first row, end), (first column, end)) of layer's whole W (d_in x d_out) held here:
        rows over b, then cut over c; columns over a."""
        a, b, c = roles(layer)
        g = self.grid
        r0, r1 = span(self.dims[layer], g.extent(b), g.coord[b])
        p0, p1 = span(r1 - r0, g.extent(c), g.coord[c])
        return (r0 + p0, r0 + p1), span(self.dims[layer + 1], g.extent(a), g.coord[a])

    def bias_span(self, layer: int) -> tuple:
        """(first, end) of layer's bias held here (its columns over a; copies over b and c)."""
        a = roles(layer)[0]
        return span(self.dims[layer + 1], self.grid.extent(a), self.grid.coord[a])

    def input_columns(self) -> tuple:
        """(first, end) of the input features' columns held here (over layer 0's b)."""
        b = roles(0)[1]
        return span(self.dims[0], self.grid.extent(b), self.grid.coord[b])

    def _weight_piece(self, full: torch.Tensor, layer: int) -> torch.Tensor:
        rows, cols = self.weight_span(layer)
        return full[rows[0] : rows[1], cols[0] : cols[1]].clone()

    def _bias_piece(self, full: torch.Tensor, layer: int) -> torch.Tensor:
        b0, b1 = self.bias_span(layer)
        return full[b0:b1].clone()

    def load_weights(
        self,
        weights: Sequence[torch.Tensor],
        biases: Optional[Sequence[torch.Tensor]] = None,
        root_weights: Optional[Sequence[torch.Tensor]] = None,
    ) -> None:
        """Each layer's whole W (d_in x d_out: GCNConv's lin.weight.T, SAGEConv's lin_l.weight.T,
        GINConv's nn.weight.T), bias and (SAGE) root weight (lin_r.weight.T); this rank keeps its pieces."""
        with torch.no_grad():
            for layer, w in enumerate(weights):
                self.weights[layer].copy_(self._weight_piece(w.to(self.weights[layer].dtype), layer))
            for layer, w in enumerate(root_weights or []):
                self.root_weights[layer].copy_(self._weight_piece(w.to(self.root_weights[layer].dtype), layer))
            for layer, b in enumerate(biases or []):
                self.biases[layer].copy_(self._bias_piece(b.to(self.biases[layer].dtype), layer))

    def input_span(self) -> tuple:
        """The positions of this rank's input rows in layer 0's input order (layer 0's columns,
        over x, then cut over z as torch.chunk cuts)."""
        _, _, c = roles(0)
        c0, c1 = self.shards[0].col_span
        p0, p1 = span(c1 - c0, self.grid.extent(c), self.grid.coord[c])
        return c0 + p0, c0 + p1

    def input_nodes(self) -> np.ndarray:
        """The node ids of this rank's input rows (layer 0: rows over x, then cut over z)."""
        return self.source.node_ids(0, self.input_span(), "input")

    def input_shard(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's piece of the whole feature matrix x (user order)."""
        if x.shape != (self.num_nodes, self.dims[0]):
            raise MggError(
                f"GridNet: x must be [{self.num_nodes}, {self.dims[0]}] (nodes, dims[0]), got {list(x.shape)}"
            )
        c0, c1 = self.input_columns()
        return x[torch.from_numpy(self.input_nodes())][:, c0:c1].contiguous()

    def output_nodes(self) -> np.ndarray:
        """The node ids of the rows of forward()'s result on this rank."""
        last = len(self.dims) - 2
        return self.source.node_ids(last, self.shards[last].row_span, "output")

    # --- the computation --------------------------------------------------------------------
    def forward(self, x_shard: torch.Tensor) -> torch.Tensor:
        """x_shard (input_shard's) -> the logits of output_nodes(), every class."""
        g, h = self.grid, x_shard
        for layer, shard in enumerate(self.shards):
            a, b, c = roles(layer)
            d_in = self.dims[layer]
            drop = self.training and self.dropout > 0 and (layer > 0 or self.input_dropout)
            ids = shard.col_nodes
            if layer == 0:
                # the gathered table (a new one, read by the SpMM alone) dropped in place: no dropped
                # copy of it, nor of this rank's rows (dropout draws by node: the same masks)
                gathered = g.extent(c) > 1
                h = gather(h, g, c, 0, shard.cols, reduce_back=True)
                h = self._drop(h, ids, layer, d_in, in_place=gathered) if drop else h
            else:
                # its users (the dropout, the SpMMs; several: summed by autograd) each make a new
                # gradient table: summed over c in place
                h = share(h, g, c, grad_owned=True)
                h = self._drop(h, ids, layer, d_in) if drop else h
            rows_w = _length(span(d_in, g.extent(b), g.coord[b]))
            w = gather(self.weights[layer], g, c, 0, rows_w, reduce_back=True)
            if self.conv == "gcn":
                q = sum_and_share(shard.spmm(h), g, a) @ w
            elif self.conv == "gin":
                own = self.self_shards[layer].spmm(h)
                q = sum_and_share(shard.spmm(h) + (1 + self.eps) * own, g, a) @ w
            else:  # sage: the mean of the neighbours by W, the node's own row by W_root
                w_root = gather(self.root_weights[layer], g, c, 0, rows_w, reduce_back=True)
                own = sum_and_share(self.self_shards[layer].spmm(h), g, a)
                q = sum_and_share(shard.spmm(h), g, a) @ w + own @ w_root
            h = sum_over(q, g, b)  # a new table, q's or the sum's: the bias and ReLU go in place
            if len(self.biases):
                h = h.add_(share(self.biases[layer], g, c))
            if layer < len(self.shards) - 1:
                h = _ReluOwnedGrad.apply(h)
        if self.training:
            self.step += 1
        a_last = roles(len(self.shards) - 1)[0]
        return gather(h, g, a_last, 1, self.dims[-1], reduce_back=False)

    def _drop(self, h: torch.Tensor, ids: torch.Tensor, layer: int, d_in: int, in_place=False) -> torch.Tensor:
        """Layer `layer`'s dropout of h, whose rows are the nodes `ids` and whose columns this rank's
        piece (over b) of the layer's d_in input columns."""
        b = roles(layer)[1]
        c0, _ = span(d_in, self.grid.extent(b), self.grid.coord[b])
        # its gradient is a new table (the SpMMs' adjoints, summed by autograd): dropped in place
        return node_dropout(
            h, ids.to(h.device), self.dropout, self.dropout_seed, self.step, layer, c0, in_place, grad_owned=True
        )

    def draws(self) -> dict:
        """The dropout's training steps counted (what the next mask depends on; a checkpoint keeps it)."""
        return dict(step=self.step)

    def set_draws(self, d: dict) -> None:
        self.step = int(d["step"])

    def loss(self, logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """This rank's share of the mean cross entropy over the nodes of `mask` (whole-graph
        labels and mask, user order): its rows' sum over the mask's count. The shares of the
        ranks along the last layer's row axis add up to the mean; the other ranks hold copies
        (whole_loss adds them up, for a report)."""
        nodes = torch.from_numpy(self.output_nodes())
        return self.rows_loss(logits, labels[nodes], mask[nodes], int(mask.sum()))

    @staticmethod
    def rows_loss(logits: torch.Tensor, labels: torch.Tensor, keep: torch.Tensor, total: int) -> torch.Tensor:
        """loss() from the labels and mask of this rank's output rows (output_nodes()) alone, and
        the mask's count over the whole graph."""
        return torch.nn.functional.cross_entropy(logits[keep], labels[keep], reduction="sum") / max(total, 1)

    def whole_loss(self, share_of_loss: torch.Tensor) -> float:
        """The mean loss over the whole graph from this rank's share (a collective over the last
        layer's row axis; not counted in the moved bytes, which are the training step's)."""
        c_last = roles(len(self.shards) - 1)[2]
        t = self.grid.on_comm(share_of_loss.detach().reshape(1)).clone()
        if self.grid.extent(c_last) > 1:
            torch.distributed.all_reduce(t, group=self.grid.group[c_last])
        return float(t)

    def balance(self) -> dict:
        """Nonzeros of this rank's shard per layer."""
        return {layer: s.nnz for layer, s in enumerate(self.shards)}


def _length(sp: tuple) -> int:
    return sp[1] - sp[0]

"""Plexus's model of an epoch on the 3D grid (plexus-3d-parallel.txt, section 4), with mgg's pieces:

- communication: every collective of mgg.distributed.grid's GCN, per rank and axis, from the same
  shard bounds and ring formula (grid.comm_sizes) the run counts with, so the bytes equal the run's;
  an axis's bandwidth is the intra-node rate where its groups stay inside a node, else the network
  rate of a node shared by its groups that cross it (eq. 4.5-4.6: min(gpus_per_node, the ranks
  between two neighbours of the axis));
- the SpMM: each rank's shard (nonzeros even across shards: the double permutation's purpose) at
  both ends of the range kernel's bandwidth bound (kernel_model.band), forward and backward; the row
  width each shard gathers is D / G_b, so tall-skinny shapes pay the narrow rows' gather rate;
- memory per GPU: adjacency shards (min(6, L) of them: roles x permutations), features, saved
  activations, weights with their gradients and Adam's two states.

The dense GEMMs and the loss are left out, as in Plexus's model."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...runtime import kernel_model as km
from .comm_sizes import ring_bytes
from .shape import AXES, GridShape, factorizations
from .shards import bounds, roles, span


@dataclass(frozen=True)
class GraphStats:
    """What the model needs of a graph and a network of GridNet's layers: nodes, nonzeros of the
    normalised adjacency (self-loops included), the widths (input, hidden..., classes) and the
    layer (GridNet's conv: SAGE moves and keeps a root term's H and W as well)."""

    name: str
    nodes: int
    nonzeros: int
    dims: tuple
    conv: str = "gcn"


# ogbn-products (OGB): 2,449,029 nodes, 61,859,140 undirected edges (123,718,280 nonzeros) plus a
# self-loop each; 100 features, 47 classes; Plexus's 3-layer GCN with 128 hidden (section 6)
OGBN_PRODUCTS = GraphStats("ogbn-products", 2_449_029, 123_718_280 + 2_449_029, (100, 128, 128, 47))


def _len(sp: tuple) -> int:
    return sp[1] - sp[0]


def _piece_bytes(n: int, parts: int) -> int:
    """Rows of the padded buffer an all-gather / reduce-scatter of n items over `parts` moves."""
    b = bounds(n, parts)
    return (b[1] - b[0]) * parts


def terms(conv: str) -> int:
    """SpMM-then-GEMM terms of a layer of GridNet's `conv`, each with its H and W: SAGE's root term is a
    second; GIN adds its (1 + eps) x before the one product."""
    return 2 if conv == "sage" else 1


def rank_bytes(
    shape: GridShape, nodes: int, dims, elem: int, input_grad: bool = False, bias: bool = True, conv: str = "gcn"
) -> dict:
    """axis -> array over ranks of the bytes each sends in one forward and backward (a training
    step of mgg.distributed.grid.GridNet of kind `conv`), as grid.collectives counts them: SAGE's
    root term adds an H and a W of its own; GIN's moves as GCN's."""
    out = {a: np.zeros(shape.size) for a in AXES}
    layers = len(dims) - 1
    ext = shape.extent
    for r in range(shape.size):
        co = shape.coords(r)

        def add(axis, kind, numel, r=r):
            out[axis][r] += ring_bytes(kind, numel * elem, ext(axis))

        for layer in range(layers):
            a, b, c = roles(layer)
            d_in, d_out = dims[layer], dims[layer + 1]
            n_a = _len(span(nodes, ext(a), co[a]))
            n_c = _len(span(nodes, ext(c), co[c]))
            w_b = _len(span(d_in, ext(b), co[b]))
            w_a = _len(span(d_out, ext(a), co[a]))
            if layer == 0:  # the input gathered over c; its gradient reduce-scattered
                add(c, "all_gather", _piece_bytes(n_a, ext(c)) * w_b)
                if input_grad:
                    add(c, "reduce_scatter", _piece_bytes(n_a, ext(c)) * w_b)
            else:  # the input's gradient all-reduced over c
                add(c, "all_reduce", n_a * w_b)
            for _ in range(terms(conv)):  # SAGE: the root term's H and W too
                add(a, "all_reduce", n_c * w_b)  # H forward
                if layer > 0 or input_grad:  # H's gradient (none where H is the input, without its gradient)
                    add(a, "all_reduce", n_c * w_b)
                add(c, "all_gather", _piece_bytes(w_b, ext(c)) * w_a)  # W gathered
                add(c, "reduce_scatter", _piece_bytes(w_b, ext(c)) * w_a)  # W's gradient
            add(b, "all_reduce", n_c * w_a)  # Q
            if bias:
                add(c, "all_reduce", w_a)  # the bias's gradient
        a_last, _, c_last = roles(layers - 1)
        n_c = _len(span(nodes, ext(c_last), co[c_last]))
        add(a_last, "all_gather", n_c * _piece_bytes(dims[-1], ext(a_last)))  # the logits' classes
    return out


@dataclass(frozen=True)
class Network:
    """gpus_per_node GPUs per node; intra_gbps: one GPU's rate inside a node; inter_gbps: one
    node's network rate (GB/s, one way)."""

    gpus_per_node: int
    intra_gbps: float
    inter_gbps: float

    def axis_bytes_per_s(self, shape: GridShape, axis: str) -> float:
        if shape.inside_node(axis, self.gpus_per_node):
            return self.intra_gbps * 1e9
        stride = {"y": 1, "x": shape.y, "z": shape.x * shape.y}[axis]
        return self.inter_gbps * 1e9 / min(self.gpus_per_node, stride)


def spmm_s(shape: GridShape, stats: GraphStats, elem: int, gpu: km.Gpu) -> float:
    """A step's SpMMs (forward, and backward with A^T) on the busiest rank, bandwidth-bound."""
    total = 0.0
    for layer in range(len(stats.dims) - 1):
        a, b, c = roles(layer)
        rows = -(-stats.nodes // shape.extent(c))
        cols = -(-stats.nodes // shape.extent(a))
        nnz = stats.nonzeros / (shape.extent(a) * shape.extent(c))
        width = -(-stats.dims[layer] // shape.extent(b))
        row = km.row_bytes(width, elem)
        for out_rows in (rows, cols):  # forward: A's rows; backward: A^T's
            stream = nnz * 8.0 + out_rows * (8.0 + row)
            total += km.bandwidth_s(stream, nnz * float(row), row, stream + nnz * row, gpu)
    return total


def memory_bytes(shape: GridShape, stats: GraphStats, elem: int) -> float:
    """The busiest rank's bytes: adjacency shards, the input and saved activations, weights with
    gradients and Adam's two states (Plexus section 5.1: min(6, L) shards with both permutations)."""
    layers = len(stats.dims) - 1
    total = 0.0
    for layer in range(min(6, layers)):
        a, _, c = roles(layer)
        nnz = stats.nonzeros / (shape.extent(a) * shape.extent(c))
        total += nnz * (4 + elem) + (-(-stats.nodes // shape.extent(c)) + 1) * 8
    for layer in range(layers):
        a, b, c = roles(layer)
        n_a, n_c = -(-stats.nodes // shape.extent(a)), -(-stats.nodes // shape.extent(c))
        d_in, d_out = stats.dims[layer], stats.dims[layer + 1]
        w_b, w_a = -(-d_in // shape.extent(b)), -(-d_out // shape.extent(a))
        k = terms(stats.conv)  # SAGE: the root term's H and W too
        total += (n_a * w_b + k * n_c * w_b + 2 * n_c * w_a) * elem  # input, H, Q and its activation
        total += k * w_b * w_a * elem * (1 + 4 / shape.extent(c))  # W gathered; its piece, gradient, Adam
    return total


@dataclass(frozen=True)
class GridPrediction:
    shape: GridShape
    low_s: float
    high_s: float
    bytes_axis: dict  # axis -> the busiest rank's bytes per step
    memory: float
    fits: bool


def predict(
    shape: GridShape, stats: GraphStats, net: Network, gpu: str = "h100", elem: int = 4, memory_limit: float = 80e9
) -> GridPrediction:
    per_rank = rank_bytes(shape, stats.nodes, stats.dims, elem, conv=stats.conv)
    comm = sum(float(per_rank[a].max()) / net.axis_bytes_per_s(shape, a) for a in AXES)
    ends = km.band(km.gpu_named(gpu))
    spmm = [spmm_s(shape, stats, elem, ends[k]) for k in ("optimistic", "pessimistic")]
    mem = memory_bytes(shape, stats, elem)
    return GridPrediction(
        shape, comm + min(spmm), comm + max(spmm), {a: float(per_rank[a].max()) for a in AXES}, mem, mem <= memory_limit
    )


def rank_grids(
    gpus: int, stats: GraphStats, net: Network, gpu: str = "h100", elem: int = 4, memory_limit: float = 80e9
) -> list:
    """Every grid of `gpus` ranks, those that fit first, by the band's middle, fastest first."""
    preds = [predict(s, stats, net, gpu, elem, memory_limit) for s in factorizations(gpus)]
    return sorted(preds, key=lambda p: (not p.fits, (p.low_s + p.high_s) / 2, str(p.shape)))

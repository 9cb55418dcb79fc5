"""The case the grid tests share between the test process (the one-process reference) and the
torchrun workers (tests/workers/grid_worker.py): a random directed graph whose node count, widths
and classes divide evenly by none of the grids' extents (uneven shards, and some empty ones: 3
classes over 4 or 8 ranks), float64, seeded weights (a root weight per layer for SAGE)."""

import torch

from mgg.nn import GCNConv, GINConv, SAGEConv
from mgg.testing import random_graph

NODES, EDGES, DIMS = 101, 700, (13, 6, 5, 3)
DEPTHS = (2, 3)
CONVS = ("gcn", "sage", "gin")
EPS = 0.25  # GIN's


def case(layers: int):
    """graph, x, labels, mask, weights (d_in x d_out), biases, root weights of `layers` layers."""
    gen = torch.Generator().manual_seed(layers)
    graph = random_graph(NODES, EDGES, seed=3)
    dims = DIMS[:layers] + (DIMS[-1],)
    x = torch.randn(NODES, dims[0], dtype=torch.float64, generator=gen)
    labels = torch.randint(0, dims[-1], (NODES,), generator=gen)
    mask = torch.rand(NODES, generator=gen) < 0.6
    pairs = list(zip(dims[:-1], dims[1:], strict=True))
    weights = [torch.randn(i, o, dtype=torch.float64, generator=gen) / i**0.5 for i, o in pairs]
    biases = [torch.randn(o, dtype=torch.float64, generator=gen) for o in dims[1:]]
    roots = [torch.randn(i, o, dtype=torch.float64, generator=gen) / i**0.5 for i, o in pairs]
    return graph, x, labels, mask, weights, biases, roots


def one_layer(kind: str, w, b, root):
    """The one-process layer with the case's weights, and its weight, bias and root weight."""
    with torch.no_grad():
        if kind == "gcn":
            conv = GCNConv(w.size(0), w.size(1)).double()
            conv.lin.weight.copy_(w.T)
            conv.bias.copy_(b)
            return conv, conv.lin.weight, conv.bias, None
        if kind == "sage":
            conv = SAGEConv(w.size(0), w.size(1)).double()
            conv.lin_l.weight.copy_(w.T)
            conv.lin_l.bias.copy_(b)
            conv.lin_r.weight.copy_(root.T)
            return conv, conv.lin_l.weight, conv.lin_l.bias, conv.lin_r.weight
        conv = GINConv(torch.nn.Linear(w.size(0), w.size(1)), eps=EPS).double()
        conv.nn.weight.copy_(w.T)
        conv.nn.bias.copy_(b)
        return conv, conv.nn.weight, conv.nn.bias, None

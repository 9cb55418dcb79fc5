"""mgg.nn layers replace PyG's: same constructors, state_dict layout, outputs and gradients
(compared in float64, where the tolerance holds on every CPU: mgg.testing.assert_same_formula)."""
import pytest
import torch

import mgg.nn as mnn
from mgg.testing import assert_same_formula

pyg_nn = pytest.importorskip("torch_geometric.nn")


def _edge_index(cora):
    return cora.graph.edge_index()


@pytest.mark.parametrize("kw", [dict(), dict(improved=True), dict(add_self_loops=False), dict(bias=False),
                                dict(normalize=False)])
def test_gcnconv_loads_pyg_state_and_matches(cora, kw):
    torch.manual_seed(0)
    ref = pyg_nn.GCNConv(1433, 16, **kw).double()
    ours = mnn.GCNConv(1433, 16, **kw).double()
    assert ours.state_dict().keys() == ref.state_dict().keys()
    ours.load_state_dict(ref.state_dict())
    ei = _edge_index(cora)
    x = cora.x.double().requires_grad_()
    # PyG 2.8 ignores improved=True when edge_weight is None (its loops are added before the
    # weights default to ones) and applies A + 2I with explicit unit weights: mgg does the same
    for w in ([None, torch.ones(ei.size(1), dtype=torch.float64)] if kw.get("improved") else []):
        assert_same_formula(ours(x, ei, w), ref(x, ei, w))
    a, b = ours(x, ei), ref(x, ei)
    assert_same_formula(a, b)
    ga = torch.autograd.grad(a.square().sum(), [x, ours.lin.weight])
    gb = torch.autograd.grad(b.square().sum(), [x, ref.lin.weight])
    for u, v in zip(ga, gb, strict=True):
        assert_same_formula(u, v)


def test_gcnconv_edge_weight_and_sparse_input(cora):
    torch.manual_seed(1)
    ei = _edge_index(cora)
    w = torch.rand(ei.size(1), dtype=torch.float64)
    ref = pyg_nn.GCNConv(8, 4).double()
    ours = mnn.GCNConv(8, 4).double()
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(cora.graph.num_nodes, 8, dtype=torch.float64)
    assert_same_formula(ours(x, ei, w), ref(x, ei, w))
    n = cora.graph.num_nodes
    adj = torch.sparse_coo_tensor(ei.flip(0), torch.ones(ei.size(1)), (n, n))  # adj[target, source]
    assert_same_formula(ours(x, adj), ref(x, ei))
    assert_same_formula(ours(x, adj.to_sparse_csr()), ref(x, ei))


@pytest.mark.parametrize("train_eps", [False, True])
def test_ginconv_loads_pyg_state_and_matches(cora, train_eps):
    torch.manual_seed(2)
    mlp = lambda: torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))  # noqa: E731
    ref = pyg_nn.GINConv(mlp(), eps=0.3, train_eps=train_eps).double()
    ours = mnn.GINConv(mlp(), eps=0.3, train_eps=train_eps).double()
    assert ours.state_dict().keys() == ref.state_dict().keys()
    ours.load_state_dict(ref.state_dict())
    ei = _edge_index(cora)
    x = torch.randn(cora.graph.num_nodes, 12, dtype=torch.float64, requires_grad=True)
    a, b = ours(x, ei), ref(x, ei)
    assert_same_formula(a, b)
    assert_same_formula(torch.autograd.grad(a.sum(), x)[0], torch.autograd.grad(b.sum(), x)[0])


def test_drop_in_replacement_in_a_pyg_model(cora):
    """A model written against PyG loads its checkpoint into the same model built with mgg."""
    from mgg.nn.models import GCN

    torch.manual_seed(3)
    ref = GCN(1433, 16, 7, conv_module=pyg_nn).double()
    ours = GCN(1433, 16, 7).double()
    ours.load_state_dict(ref.state_dict())
    ref.eval(), ours.eval()
    ei, x = _edge_index(cora), cora.x.double()
    assert_same_formula(ours(x, ei), ref(x, ei))


@pytest.mark.parametrize("kw", [dict(flow="target_to_source"), dict(aggr="mean"), dict(node_dim=0),
                                dict(aggr="sum", decomposed_layers=2)])
def test_message_passing_arguments_match_pyg(kw):
    """PyG's MessagePassing arguments do what they do in PyG (on a directed graph, where flow
    matters)."""
    from mgg.testing import random_graph

    g = random_graph(200, 1500, seed=9, skew=0.5)
    ei = g.edge_index()
    x = torch.randn(200, 6, dtype=torch.float64)
    torch.manual_seed(4)
    ref = pyg_nn.GCNConv(6, 5, **kw).double()
    ours = mnn.GCNConv(6, 5, **kw).double()
    ours.load_state_dict(ref.state_dict())
    assert_same_formula(ours(x, ei), ref(x, ei))
    mlp = torch.nn.Linear(6, 5).double()
    gin_kw = {k: v for k, v in kw.items() if k != "decomposed_layers"}
    ref_gin, ours_gin = pyg_nn.GINConv(mlp, eps=0.1, **gin_kw), mnn.GINConv(mlp, eps=0.1, **gin_kw)
    assert_same_formula(ours_gin(x, ei), ref_gin(x, ei))


def test_cached_keeps_the_first_graph_as_pyg_does(cora):
    ei = _edge_index(cora)
    x = torch.randn(cora.graph.num_nodes, 4, dtype=torch.float64)
    ref, ours = pyg_nn.GCNConv(4, 3, cached=True).double(), mnn.GCNConv(4, 3, cached=True).double()
    ours.load_state_dict(ref.state_dict())
    first = ours(x, ei)
    assert_same_formula(first, ref(x, ei))
    tiny = ei[:, :2]  # PyG ignores the graph of later calls once cached
    assert_same_formula(ours(x, tiny), ref(x, tiny))
    torch.testing.assert_close(ours(x, tiny), first)
    ours.reset_parameters()  # clears the cache, as in PyG
    assert ours._cached_plan is None


def test_gat_model_follows_pyg_example_with_pyg_layers(cora):
    """examples/gat.py: GATConv(in, 8, heads=8, dropout=0.6) -> ELU -> GATConv(64, classes,
    heads=1, concat=False, dropout=0.6), with dropout 0.6 before each layer."""
    from mgg.nn.models import GAT, build

    torch.manual_seed(5)
    model = build("gat", 1433, 7, conv_module=pyg_nn, num_layers=2, dropout=0.6)
    assert isinstance(model, GAT)
    first, last = model.convs
    assert (first.in_channels, first.out_channels, first.heads, first.concat, first.dropout) == (1433, 8, 8, True, 0.6)
    assert (last.in_channels, last.out_channels, last.heads, last.concat, last.dropout) == (64, 7, 1, False, 0.6)
    model.eval()
    x, ei = cora.x, _edge_index(cora)
    h = torch.nn.functional.elu(first(x, ei))
    torch.testing.assert_close(model(x, ei), last(h, ei))


@pytest.mark.parametrize("improved", [False, True])
@pytest.mark.parametrize("kind", ["edge_index", "edge_index+weight", "coo", "csr"])
def test_gcnconv_self_loops_and_improved_follow_pygs_gcn_norm(improved, kind):
    """On a graph that has self-loops of its own, every input kind gets PyG's normalisation:
    an edge_index keeps one existing loop per node (improved only with weights), a torch sparse
    adjacency gets a loop beside its own."""
    from mgg.testing import random_graph

    ei = random_graph(100, 800, seed=1).edge_index()
    assert bool((ei[0] == ei[1]).any())
    gen = torch.Generator().manual_seed(2)
    w = torch.rand(ei.size(1), dtype=torch.float64, generator=gen) + 0.5
    x = torch.randn(100, 5, dtype=torch.float64, generator=gen)
    torch.manual_seed(0)
    ref = pyg_nn.GCNConv(5, 3, improved=improved).double()
    ours = mnn.GCNConv(5, 3, improved=improved).double()
    ours.load_state_dict(ref.state_dict())
    adj = torch.sparse_coo_tensor(ei.flip(0), w, (100, 100)).coalesce()  # adj[target, source]
    args = {"edge_index": (ei,), "edge_index+weight": (ei, w), "coo": (adj,), "csr": (adj.to_sparse_csr(),)}[kind]
    assert_same_formula(ours(x, *args), ref(x, *args))

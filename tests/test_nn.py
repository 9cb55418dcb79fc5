"""mgg.nn layers replace PyG's: same constructors, state_dict layout, outputs and gradients."""
import pytest
import torch

import mgg.nn as mnn

pyg_nn = pytest.importorskip("torch_geometric.nn")


def _edge_index(cora):
    return cora.graph.edge_index()


@pytest.mark.parametrize("kw", [dict(), dict(improved=True), dict(add_self_loops=False), dict(bias=False),
                                dict(normalize=False)])
def test_gcnconv_loads_pyg_state_and_matches(cora, kw):
    torch.manual_seed(0)
    ref = pyg_nn.GCNConv(1433, 16, **kw)
    ours = mnn.GCNConv(1433, 16, **kw)
    assert ours.state_dict().keys() == ref.state_dict().keys()
    ours.load_state_dict(ref.state_dict())
    ei = _edge_index(cora)
    x = cora.x.clone().requires_grad_()
    # PyG 2.8 ignores improved=True when edge_weight is None (its loops are added before the
    # weights default to ones); with explicit unit weights it applies A + 2I, as mgg always does.
    w = torch.ones(ei.size(1)) if kw.get("improved") else None
    a, b = ours(x, ei, w), ref(x, ei, w)
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    ga = torch.autograd.grad(a.square().sum(), [x, ours.lin.weight])
    gb = torch.autograd.grad(b.square().sum(), [x, ref.lin.weight])
    for u, v in zip(ga, gb, strict=True):
        torch.testing.assert_close(u, v, rtol=1e-4, atol=1e-5)


def test_gcnconv_edge_weight_and_sparse_input(cora):
    torch.manual_seed(1)
    ei = _edge_index(cora)
    w = torch.rand(ei.size(1))
    ref = pyg_nn.GCNConv(8, 4)
    ours = mnn.GCNConv(8, 4)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(cora.graph.num_nodes, 8)
    torch.testing.assert_close(ours(x, ei, w), ref(x, ei, w), rtol=1e-4, atol=1e-5)
    n = cora.graph.num_nodes
    adj = torch.sparse_coo_tensor(ei.flip(0), torch.ones(ei.size(1)), (n, n))  # adj[target, source]
    torch.testing.assert_close(ours(x, adj), ref(x, ei), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ours(x, adj.to_sparse_csr()), ref(x, ei), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("train_eps", [False, True])
def test_ginconv_loads_pyg_state_and_matches(cora, train_eps):
    torch.manual_seed(2)
    mlp = lambda: torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))  # noqa: E731
    ref = pyg_nn.GINConv(mlp(), eps=0.3, train_eps=train_eps)
    ours = mnn.GINConv(mlp(), eps=0.3, train_eps=train_eps)
    assert ours.state_dict().keys() == ref.state_dict().keys()
    ours.load_state_dict(ref.state_dict())
    ei = _edge_index(cora)
    x = torch.randn(cora.graph.num_nodes, 12, requires_grad=True)
    a, b = ours(x, ei), ref(x, ei)
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.autograd.grad(a.sum(), x)[0], torch.autograd.grad(b.sum(), x)[0],
                               rtol=1e-4, atol=1e-5)


def test_drop_in_replacement_in_a_pyg_model(cora):
    """A model written against PyG loads its checkpoint into the same model built with mgg."""
    from mgg.nn.models import GCN

    torch.manual_seed(3)
    ref = GCN(1433, 16, 7, conv_module=pyg_nn)
    ours = GCN(1433, 16, 7)
    ours.load_state_dict(ref.state_dict())
    ref.eval(), ours.eval()
    ei = _edge_index(cora)
    torch.testing.assert_close(ours(cora.x, ei), ref(cora.x, ei), rtol=1e-4, atol=1e-5)


def test_plan_is_cached_per_input(cora):
    from mgg.nn import graph_cache

    conv = mnn.GCNConv(4, 4)
    ei = _edge_index(cora)
    x = torch.randn(cora.graph.num_nodes, 4)
    conv(x, ei)
    size = len(graph_cache._CACHE)
    conv(x, ei)
    assert len(graph_cache._CACHE) == size
    ei2 = ei.clone()
    ei2[0, 0] = 5  # a different graph is planned anew
    conv(x, ei2)
    assert len(graph_cache._CACHE) == size + 1


@pytest.mark.parametrize("kw", [dict(flow="target_to_source"), dict(aggr="mean"), dict(node_dim=0),
                                dict(aggr="sum", decomposed_layers=2)])
def test_message_passing_arguments_match_pyg(kw):
    """PyG's MessagePassing arguments do what they do in PyG (on a directed graph, where flow
    matters)."""
    from mgg.testing import random_graph

    g = random_graph(200, 1500, seed=9, skew=0.5)
    ei = g.edge_index()
    x = torch.randn(200, 6)
    torch.manual_seed(4)
    ref = pyg_nn.GCNConv(6, 5, **kw)
    ours = mnn.GCNConv(6, 5, **kw)
    ours.load_state_dict(ref.state_dict())
    torch.testing.assert_close(ours(x, ei), ref(x, ei), rtol=1e-4, atol=1e-5)
    mlp = torch.nn.Linear(6, 5)
    gin_kw = {k: v for k, v in kw.items() if k != "decomposed_layers"}
    ref_gin, ours_gin = pyg_nn.GINConv(mlp, eps=0.1, **gin_kw), mnn.GINConv(mlp, eps=0.1, **gin_kw)
    torch.testing.assert_close(ours_gin(x, ei), ref_gin(x, ei), rtol=1e-4, atol=1e-5)


def test_cached_keeps_the_first_graph_as_pyg_does(cora):
    ei = _edge_index(cora)
    x = torch.randn(cora.graph.num_nodes, 4)
    ref, ours = pyg_nn.GCNConv(4, 3, cached=True), mnn.GCNConv(4, 3, cached=True)
    ours.load_state_dict(ref.state_dict())
    first = ours(x, ei)
    torch.testing.assert_close(first, ref(x, ei), rtol=1e-4, atol=1e-5)
    tiny = ei[:, :2]  # PyG ignores the graph of later calls once cached
    torch.testing.assert_close(ours(x, tiny), ref(x, tiny), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ours(x, tiny), first)
    ours.reset_parameters()  # clears the cache, as in PyG
    assert ours._cached_plan is None


@pytest.mark.parametrize("make, err, msg", [
    (lambda: mnn.GCNConv(4, 4, aggr="max"), "MggError", "aggr must be one of"),
    (lambda: mnn.GCNConv(4, 4, node_dim=1), "MggError", "node_dim must be -2 or 0"),
    (lambda: mnn.GCNConv(4, 4, flow="sideways"), "MggError", "flow must be one of"),
    (lambda: mnn.GCNConv(4, 4, normalize=False, add_self_loops=True), "MggError", "add_self_loops=True needs"),
    (lambda: mnn.GCNConv(4, 4, bogus=1), "TypeError", "unexpected keyword argument"),
    (lambda: mnn.GINConv(torch.nn.Identity(), aggr="max"), "MggError", "aggr must be one of"),
])
def test_unsupported_arguments_are_refused_in_one_line(make, err, msg):
    import mgg

    with pytest.raises(getattr(mgg, err, TypeError), match=msg) as e:
        make()
    assert "\n" not in str(e.value)


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

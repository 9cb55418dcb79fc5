"""mgg.nn's layers where PyG is not needed (the comparisons with PyG's layers are in test_nn.py,
test_sage.py and test_gat.py, skipped without PyG): the plan cache, and the one-line refusals of
what a layer does not implement."""
import pytest
import torch

import mgg
import mgg.nn as mnn


def test_plan_is_cached_per_input(cora):
    """(The cache starts empty: other tests may have filled it to its bound, where a new plan
    replaces the oldest and the count stays.)"""
    from mgg.nn import graph_cache

    graph_cache.clear()
    conv = mnn.GCNConv(4, 4)
    ei = cora.graph.edge_index()
    x = torch.randn(cora.graph.num_nodes, 4)
    conv(x, ei)
    assert len(graph_cache._CACHE) == 1
    conv(x, ei)
    assert len(graph_cache._CACHE) == 1
    ei2 = ei.clone()
    ei2[0, 0] = 5  # a different graph is planned anew
    conv(x, ei2)
    assert len(graph_cache._CACHE) == 2


@pytest.mark.parametrize("make, err, msg", [
    (lambda: mnn.GCNConv(4, 4, aggr="max"), "MggError", "aggr must be one of"),
    (lambda: mnn.GCNConv(4, 4, node_dim=1), "MggError", "node_dim must be -2 or 0"),
    (lambda: mnn.GCNConv(4, 4, flow="sideways"), "MggError", "flow must be one of"),
    (lambda: mnn.GCNConv(4, 4, normalize=False, add_self_loops=True), "MggError", "add_self_loops=True needs"),
    (lambda: mnn.GCNConv(4, 4, bogus=1), "TypeError", "unexpected keyword argument"),
    (lambda: mnn.GINConv(torch.nn.Identity(), aggr="max"), "MggError", "aggr must be one of"),
])
def test_gcn_gin_refuse_what_they_do_not_implement_in_one_line(make, err, msg):
    with pytest.raises(getattr(mgg, err, TypeError), match=msg) as e:
        make()
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("make, err, msg", [
    (lambda: mnn.SAGEConv(4, 4, aggr="max"), "MggError", r"aggr must be one of \('mean', 'add', 'sum'\)"),
    (lambda: mnn.SAGEConv(4, 4, aggr=["mean", "max"]), "MggError", "aggr must be one of"),
    (lambda: mnn.SAGEConv(-1, 4), "MggError", "lazy initialisation"),
    (lambda: mnn.SAGEConv((-1, -1), 4), "MggError", "lazy initialisation"),
    (lambda: mnn.SAGEConv((4, 6), 4), "MggError", "bipartite in_channels"),
    (lambda: mnn.SAGEConv(4, 4, flow="sideways"), "MggError", "flow must be one of"),
    (lambda: mnn.SAGEConv(4, 4, bogus=1), "TypeError", "unexpected keyword argument"),
    (lambda: mnn.SAGEConv(4, 4)((torch.ones(3, 4), torch.ones(2, 4)), torch.tensor([[0], [1]])), "MggError",
     "bipartite input"),
    (lambda: mnn.SAGEConv(4, 4)((torch.ones(3, 4), None), torch.tensor([[0], [1]])), "MggError", "bipartite input"),
    (lambda: mnn.SAGEConv(4, 4)(torch.ones(3, 4), torch.tensor([[0], [1]]), size=(3, 2)), "MggError",
     "size .* not supported"),
])
def test_sage_refuses_what_it_does_not_implement_in_one_line(make, err, msg):
    with pytest.raises(getattr(mgg, err, TypeError), match=msg) as e:
        make()
    assert "\n" not in str(e.value)


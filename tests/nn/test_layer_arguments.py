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
    from mgg.nn import graph_input

    graph_input.clear()
    conv = mnn.GCNConv(4, 4)
    ei = cora.graph.edge_index()
    x = torch.randn(cora.graph.num_nodes, 4)
    conv(x, ei)
    assert len(graph_input._CACHE) == 1
    conv(x, ei)
    assert len(graph_input._CACHE) == 1
    ei2 = ei.clone()
    ei2[0, 0] = 5  # a different graph is planned anew
    conv(x, ei2)
    assert len(graph_input._CACHE) == 2


@pytest.mark.parametrize(
    "make, err, msg",
    [
        (lambda: mnn.GCNConv(4, 4, aggr="max"), "MggError", "aggr must be one of"),
        (lambda: mnn.GCNConv(4, 4, node_dim=1), "MggError", "node_dim must be -2 or 0"),
        (lambda: mnn.GCNConv(4, 4, flow="sideways"), "MggError", "flow must be one of"),
        (lambda: mnn.GCNConv(4, 4, normalize=False, add_self_loops=True), "MggError", "add_self_loops=True needs"),
        (lambda: mnn.GCNConv(4, 4, bogus=1), "TypeError", "unexpected keyword argument"),
        (lambda: mnn.GINConv(torch.nn.Identity(), aggr="lstm"), "MggError", "aggr must be one of"),
    ],
)
def test_gcn_gin_refuse_what_they_do_not_implement_in_one_line(make, err, msg):
    with pytest.raises(getattr(mgg, err, TypeError), match=msg) as e:
        make()
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "make, err, msg",
    [
        (
            lambda: mnn.SAGEConv(-1, 4, project=True),
            "MggError",
            "does not support lazy initialization with project=True",
        ),
        (lambda: mnn.SAGEConv((4, 6, 2), 4), "MggError", "in_channels must be"),
        (lambda: mnn.SAGEConv(0, 4), "MggError", "in_channels must be"),
        (lambda: mnn.SAGEConv(4, 4, flow="sideways"), "MggError", "flow must be one of"),
        (lambda: mnn.SAGEConv(4, 4, bogus=1), "TypeError", "unexpected keyword argument"),
        (
            lambda: mnn.SAGEConv(4, 4, flow="target_to_source")(
                (torch.ones(3, 4), torch.ones(2, 4)), torch.tensor([[0], [1]])
            ),
            "MggError",
            "bipartite input needs flow='source_to_target'",
        ),
        (
            lambda: mnn.SAGEConv(4, 4)((torch.ones(3, 4), torch.ones(2, 4)), torch.tensor([[0], [2]])),
            "MggError",
            "destination >= 2",
        ),
        (
            lambda: mnn.SAGEConv(4, 4)(torch.ones(3, 4), torch.tensor([[0], [1]]), size=(3, 2)),
            "MggError",
            r"size \(3, 2\) does not match",
        ),
        (
            lambda: mnn.SAGEConv(4, 4)((torch.ones(3, 4), torch.ones(2, 4)), torch.eye(3).to_sparse()),
            "MggError",
            r"adjacency is \(3, 3\)",
        ),
    ],
)
def test_sage_refuses_what_it_does_not_implement_in_one_line(make, err, msg):
    with pytest.raises(getattr(mgg, err, TypeError), match=msg) as e:
        make()
    assert "\n" not in str(e.value)


EI = torch.tensor([[0, 1, 2], [1, 2, 0]])


@pytest.mark.parametrize(
    "make, err, msg",
    [
        (lambda: mnn.GCNConv((4, 4), 4), "MggError", "GCNConv takes one node set"),
        (lambda: mnn.GCNConv(4, 4)((torch.ones(3, 4), torch.ones(3, 4)), EI), "MggError", "bipartite"),
        (
            lambda: mnn.GCNConv(4, 4)(
                torch.ones(3, 4),
                torch.sparse_coo_tensor(EI.flip(0), torch.ones(3), (3, 3)),
                torch.ones(3, requires_grad=True),
            ),
            "MggError",
            "requires grad needs edge_index",
        ),
        (
            lambda: mnn.GCNConv(4, 4, cached=True)(torch.ones(3, 4), EI, torch.ones(3, requires_grad=True)),
            "MggError",
            "cannot learn edge_weight",
        ),
        (
            lambda: mnn.GINConv(torch.nn.Identity())((torch.ones(3, 4), torch.ones(2, 4)), [[0], [1]]),
            "MggError",
            "bipartite input needs edge_index",
        ),
        (lambda: mnn.GATConv(4, 4, edge_dim=-2), "MggError", "edge_dim must be"),
        (
            lambda: mnn.GATConv(4, 4, edge_dim=2)(torch.ones(3, 4), EI, edge_attr=torch.ones(2, 2)),
            "MggError",
            "edge_attr",
        ),
        (
            lambda: mnn.GATConv(4, 4)(
                (torch.ones(3, 4), torch.ones(2, 4)),
                torch.sparse_coo_tensor(EI[:, :1].flip(0), torch.ones(1), (2, 3)),
                return_attention_weights=True,
            ),
            "MggError",
            "bipartite sparse adjacency",
        ),
        (
            lambda: mnn.SAGEConv(4, 4)(
                (torch.ones(3, 4), None), torch.sparse_coo_tensor(EI[:, :1].flip(0), torch.ones(1), (2, 4))
            ),
            "MggError",
            "adjacency is",
        ),
        (lambda: mnn.GATConv(4, 4)(torch.ones(2, 3, 4), EI), "MggError", "static graphs"),
        (lambda: mnn.GATConv(4, 4, aggr="max"), "MggError", "aggr must be 'add'"),
        (lambda: mnn.GATConv((4, 4, 4), 4), "MggError", "in_channels must be"),
        (lambda: mnn.GATConv(4, 4, aggr_kwargs={"a": 1}), "MggError", "aggr_kwargs is not supported"),
    ]
    + [
        (
            lambda make=make: make()(torch.ones(3, 4), torch.sparse_coo_tensor(EI.flip(0), torch.ones(3), (3, 3))),
            "MggError",
            "target_to_source' does not apply to a sparse adjacency",
        )
        for make in (
            lambda: mnn.GCNConv(4, 4, flow="target_to_source"),
            lambda: mnn.SAGEConv(4, 4, flow="target_to_source"),
            lambda: mnn.GINConv(torch.nn.Identity(), flow="target_to_source"),
            lambda: mnn.GATConv(4, 4, flow="target_to_source"),
        )
    ]
    + [
        (lambda make=make: torch.jit.script(make()), "MggError", "use torch.compile")
        for make in (
            lambda: mnn.GCNConv(4, 4),
            lambda: mnn.GINConv(torch.nn.Identity()),
            lambda: mnn.SAGEConv(4, 4),
            lambda: mnn.GATConv(4, 4),
        )
    ],
)
def test_layers_refuse_what_they_do_not_implement_in_one_line(make, err, msg):
    with pytest.raises(getattr(mgg, err, TypeError), match=msg) as e:
        make()
    assert "\n" not in str(e.value)


def test_aggregate_edges_gradients_pass_gradcheck():
    """mgg.functional.aggregate_edges (learned edge weights): the gradients in x and in the weights, on a
    graph with duplicate edges, self-loops and isolated nodes, against finite differences."""
    from mgg.functional import aggregate_edges
    from mgg.testing import quirky_edges

    ei = quirky_edges(40, 150)
    gen = torch.Generator().manual_seed(30)
    x = torch.randn(40, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    w = torch.rand(ei.size(1), dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: aggregate_edges(x, ei[0], ei[1], w, 40), (x, w))


class _FakeSparseTensor:
    """What mgg reads of a torch_sparse.SparseTensor (csr(), sparse_sizes()), under its module name."""

    __module__ = "torch_sparse.tensor"

    def __init__(self, rowptr, col, value, n):
        self.parts, self.n = (rowptr, col, value), n

    def csr(self):
        return self.parts

    def sparse_sizes(self):
        return self.n, self.n


@pytest.mark.parametrize(
    "make",
    [lambda: mnn.SAGEConv(4, 3), lambda: mnn.SAGEConv(4, 3, aggr="sum"), lambda: mnn.GINConv(torch.nn.Identity())],
    ids=["sage-mean", "sage-sum", "gin"],
)
def test_sparse_tensor_values_are_dropped_by_sage_and_gin_as_in_pyg(make):
    """PyG's SAGEConv and GINConv call adj_t.set_value(None) on a SparseTensor: its values do not
    weight the messages (a torch sparse tensor's do)."""
    g = mgg.Graph.from_edge_index(torch.tensor([[0, 1, 2, 2, 0], [1, 2, 0, 1, 1]]), 3)
    adj_t = _FakeSparseTensor(g.rowptr, g.col, torch.tensor([3.0, 0.5, 2.0, 7.0, 1.5], dtype=torch.float64), 3)
    conv = make().double()
    x = torch.randn(3, 4, dtype=torch.float64)
    torch.testing.assert_close(conv(x, adj_t), conv(x, g.edge_index()), rtol=0, atol=1e-12)

"""mgg.nn.SAGEConv replaces PyG's: same constructor, state_dict layout, outputs and gradients
for every option both implement, on multigraphs with isolated nodes, duplicate edges and self
loops and on Cora; what mgg does not implement is refused in one line."""
import itertools

import numpy as np
import pytest
import torch

import mgg
import mgg.nn as mnn
from mgg.testing import random_graph

pyg_nn = pytest.importorskip("torch_geometric.nn")

TOL = dict(rtol=1e-4, atol=1e-5)
OPTIONS = [dict(aggr=a, normalize=n, root_weight=r, project=p, bias=b)
           for a, n, r, p, b in itertools.product(["mean", "sum", "add"], *[[False, True]] * 4)]


def _id(kw):
    return ",".join(f"{k}={v}" for k, v in kw.items())


@pytest.fixture(scope="module")
def multigraph():
    """Directed, with hub targets, nodes without in-edges, duplicate edges and self loops."""
    g = random_graph(150, 400, seed=5, skew=0.5)
    ei = g.edge_index()
    extra = torch.tensor([[3, 3, 7, 7, 7], [3, 9, 9, 9, 7]])  # a self loop, a triple edge, another loop
    ei = torch.cat([ei, extra], 1)
    src, dst = ei.numpy()
    assert (np.bincount(dst, minlength=150) == 0).sum() > 20  # isolated (no in-edges) nodes
    assert (src == dst).sum() >= 2
    assert len({(int(s), int(d)) for s, d in zip(src, dst, strict=True)}) < ei.size(1)  # duplicates
    return ei


def _pair(kw, in_dim, out_dim, **extra):
    """PyG's layer and mgg's, built from the same seed (so with the same initial weights)."""
    torch.manual_seed(0)
    ref = pyg_nn.SAGEConv(in_dim, out_dim, **kw, **extra)
    torch.manual_seed(0)
    ours = mnn.SAGEConv(in_dim, out_dim, **kw, **extra)
    return ref, ours


def _assert_same(ref, ours, x, graph_ref, graph_ours):
    """Outputs, and gradients of a random projection of them in x and every parameter."""
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    a, b = ours(xa, graph_ours), ref(xb, graph_ref)
    torch.testing.assert_close(a, b, **TOL)
    r = torch.randn(a.shape, generator=torch.Generator().manual_seed(1))
    pa, pb = dict(ours.named_parameters()), dict(ref.named_parameters())
    ga = torch.autograd.grad((a * r).sum(), [xa, *pa.values()])
    gb = torch.autograd.grad((b * r).sum(), [xb, *(pb[k] for k in pa)])
    for name, u, v in zip(["x", *pa], ga, gb, strict=True):
        torch.testing.assert_close(u, v, **TOL, msg=lambda m, name=name: f"grad of {name}: {m}")


@pytest.mark.parametrize("dims", [(12, 5), (5, 12)], ids=["narrowing", "widening"])
@pytest.mark.parametrize("kw", OPTIONS, ids=_id)
def test_options_match_pyg_on_a_multigraph(multigraph, kw, dims):
    """Every combination of aggr, normalize, root_weight, project and bias; the narrowing case
    aggregates after lin_l (mgg reorders), the widening one before (as PyG)."""
    ref, ours = _pair(kw, *dims)
    assert list(ours.state_dict()) == list(ref.state_dict())  # PyG's names, in PyG's order
    for k, v in ref.state_dict().items():  # same seed, same initial weights
        assert torch.equal(ours.state_dict()[k], v), k
    x = torch.randn(150, dims[0], generator=torch.Generator().manual_seed(2))
    _assert_same(ref, ours, x, multigraph, multigraph)
    assert repr(ours) == repr(ref)


@pytest.mark.parametrize("kw", [dict(), dict(project=True, normalize=True), dict(aggr="sum", root_weight=False)],
                         ids=_id)
def test_cora_matches_pyg(cora, kw):
    ref, ours = _pair(kw, 1433, 16)
    ours.load_state_dict(ref.state_dict())
    ei = cora.graph.edge_index()
    _assert_same(ref, ours, cora.x, ei, ei)


def test_pyg_state_dict_loads_into_a_fresh_layer(cora):
    torch.manual_seed(3)
    ref = pyg_nn.SAGEConv(1433, 7, project=True)
    ours = mnn.SAGEConv(1433, 7, project=True)  # different initial weights
    ours.load_state_dict(ref.state_dict())
    ei = cora.graph.edge_index()
    torch.testing.assert_close(ours(cora.x, ei), ref(cora.x, ei), **TOL)


@pytest.mark.parametrize("kw", [dict(flow="target_to_source"), dict(node_dim=0),
                                dict(aggr="sum", flow="target_to_source")], ids=_id)
def test_message_passing_arguments_match_pyg(multigraph, kw):
    """(PyG 2.8's SAGEConv fails with decomposed_layers > 1: its x is a pair; mgg ignores it.)"""
    ref, ours = _pair(kw, 6, 4)
    x = torch.randn(150, 6, generator=torch.Generator().manual_seed(4))
    _assert_same(ref, ours, x, multigraph, multigraph)


@pytest.mark.parametrize("aggr", ["mean", "sum"])
def test_graph_inputs(multigraph, aggr):
    """A torch sparse adjacency adj[target, source] (its values weight the messages, as in PyG),
    an mgg Graph, and a pair (x_src, x_dst) with in_channels a pair of equal ints."""
    ref, ours = _pair(dict(aggr=aggr), 6, 4)
    x = torch.randn(150, 6, generator=torch.Generator().manual_seed(5))
    n = 150
    w = torch.rand(multigraph.size(1), generator=torch.Generator().manual_seed(6)) + 0.5
    coo = torch.sparse_coo_tensor(multigraph.flip(0), w, (n, n), check_invariants=True).coalesce()
    _assert_same(ref, ours, x, coo, coo)
    _assert_same(ref, ours, x, coo.to_sparse_csr(), coo.to_sparse_csr())
    _assert_same(ref, ours, x, multigraph, mgg.Graph.from_edge_index(multigraph, n))
    ref2, ours2 = _pair(dict(aggr=aggr), (6, 6), 4)
    x_dst = torch.randn(150, 6, generator=torch.Generator().manual_seed(7))
    a = ours2((x, x_dst), multigraph, size=(n, n))
    torch.testing.assert_close(a, ref2((x, x_dst), multigraph, size=(n, n)), **TOL)


def test_sage_model_is_a_drop_in(cora):
    """PyG examples/reddit.py's GraphSAGE built with PyG's layers loads into mgg's."""
    from mgg.nn.models import SAGE

    torch.manual_seed(8)
    ref, ours = SAGE(1433, 32, 7, conv_module=pyg_nn), SAGE(1433, 32, 7)
    ours.load_state_dict(ref.state_dict())
    ref.eval(), ours.eval()
    ei = cora.graph.edge_index()
    torch.testing.assert_close(ours(cora.x, ei), ref(cora.x, ei), **TOL)


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
def test_unsupported_arguments_are_refused_in_one_line(make, err, msg):
    with pytest.raises(getattr(mgg, err, TypeError), match=msg) as e:
        make()
    assert "\n" not in str(e.value)

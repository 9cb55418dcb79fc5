"""mgg.nn.SAGEConv replaces PyG's: same constructor, state_dict layout, outputs and gradients
for every option both implement, on multigraphs with isolated nodes, duplicate edges and self
loops and on Cora, compared in float64 (mgg.testing.assert_same_formula: a tolerance that holds
on every CPU); what mgg does not implement is refused in one line."""

import itertools

import numpy as np
import pytest
import torch

import mgg
import mgg.nn as mnn
from mgg.testing import assert_same_formula, random_graph

pyg_nn = pytest.importorskip("torch_geometric.nn")

OPTIONS = [
    dict(aggr=a, normalize=n, root_weight=r, project=p, bias=b)
    for a, n, r, p, b in itertools.product(["mean", "sum", "add", "max", "min"], *[[False, True]] * 4)
]


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
    """PyG's layer and mgg's in float64, built from the same seed (so with the same initial
    weights)."""
    torch.manual_seed(0)
    ref = pyg_nn.SAGEConv(in_dim, out_dim, **kw, **extra).double()
    torch.manual_seed(0)
    ours = mnn.SAGEConv(in_dim, out_dim, **kw, **extra).double()
    return ref, ours


def _assert_same(ref, ours, x, graph_ref, graph_ours):
    """Outputs, and gradients of a random projection of them in x and every parameter (float64)."""
    xa, xb = x.double().requires_grad_(), x.double().requires_grad_()
    a, b = ours(xa, graph_ours), ref(xb, graph_ref)
    assert_same_formula(a, b)
    r = torch.randn(a.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    pa, pb = dict(ours.named_parameters()), dict(ref.named_parameters())
    ga = torch.autograd.grad((a * r).sum(), [xa, *pa.values()])
    gb = torch.autograd.grad((b * r).sum(), [xb, *(pb[k] for k in pa)])
    for name, u, v in zip(["x", *pa], ga, gb, strict=True):
        assert_same_formula(u, v, msg=lambda m, name=name: f"grad of {name}: {m}")


@pytest.mark.parametrize("dims", [(12, 5), (5, 12)], ids=["narrowing", "widening"])
@pytest.mark.parametrize("kw", OPTIONS, ids=_id)
def test_options_match_pyg_on_a_multigraph(multigraph, kw, dims):
    """Every combination of aggr, normalize, root_weight, project and bias; the narrowing case
    aggregates after lin_l (mgg reorders sums; max and min always aggregate first, as PyG), the
    widening one before (as PyG)."""
    ref, ours = _pair(kw, *dims)
    assert list(ours.state_dict()) == list(ref.state_dict())  # PyG's names, in PyG's order
    for k, v in ref.state_dict().items():  # same seed, same initial weights
        assert torch.equal(ours.state_dict()[k], v), k
    x = torch.randn(150, dims[0], generator=torch.Generator().manual_seed(2))
    _assert_same(ref, ours, x, multigraph, multigraph)
    assert repr(ours) == repr(ref)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(project=True, normalize=True),
        dict(aggr="sum", root_weight=False),
        dict(aggr="max"),
        dict(aggr="min", project=True),
    ],
    ids=_id,
)
def test_cora_matches_pyg(cora, kw):
    """Max and min run on Cora's graph with continuous features: Cora's are 0/1, so almost every
    max is a tie, whose gradient mgg gives to the lowest row and PyG splits evenly among the tied
    edges (tests/core/test_extreme.py tests mgg's tie rule)."""
    ref, ours = _pair(kw, 1433, 16)
    ours.load_state_dict(ref.state_dict())
    ei = cora.graph.edge_index()
    x = cora.x if kw.get("aggr", "mean") in ("mean", "sum") else _continuous(cora.x)
    _assert_same(ref, ours, x, ei, ei)


def _continuous(x: torch.Tensor) -> torch.Tensor:
    """Features of x's shape without ties (random normal)."""
    return torch.randn(x.shape, generator=torch.Generator().manual_seed(11), dtype=torch.float64)


def test_pyg_state_dict_loads_into_a_fresh_layer(cora):
    torch.manual_seed(3)
    ref = pyg_nn.SAGEConv(1433, 7, project=True).double()
    ours = mnn.SAGEConv(1433, 7, project=True).double()  # different initial weights
    ours.load_state_dict(ref.state_dict())
    ei, x = cora.graph.edge_index(), cora.x.double()
    assert_same_formula(ours(x, ei), ref(x, ei))


@pytest.mark.parametrize(
    "kw", [dict(flow="target_to_source"), dict(node_dim=0), dict(aggr="sum", flow="target_to_source")], ids=_id
)
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
    w = torch.rand(multigraph.size(1), generator=torch.Generator().manual_seed(6), dtype=torch.float64) + 0.5
    coo = torch.sparse_coo_tensor(multigraph.flip(0), w, (n, n), check_invariants=True).coalesce()
    _assert_same(ref, ours, x, coo, coo)
    _assert_same(ref, ours, x, coo.to_sparse_csr(), coo.to_sparse_csr())
    _assert_same(ref, ours, x, multigraph, mgg.Graph.from_edge_index(multigraph, n))
    ref2, ours2 = _pair(dict(aggr=aggr), (6, 6), 4)
    x, x_dst = x.double(), torch.randn(150, 6, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    a = ours2((x, x_dst), multigraph, size=(n, n))
    assert_same_formula(a, ref2((x, x_dst), multigraph, size=(n, n)))


def test_sage_model_is_a_drop_in(cora):
    """PyG examples/reddit.py's GraphSAGE built with PyG's layers loads into mgg's."""
    from mgg.nn.models import SAGE

    torch.manual_seed(8)
    ref, ours = SAGE(1433, 32, 7, conv_module=pyg_nn).double(), SAGE(1433, 32, 7).double()
    ours.load_state_dict(ref.state_dict())
    ref.eval(), ours.eval()
    ei, x = cora.graph.edge_index(), cora.x.double()
    assert_same_formula(ours(x, ei), ref(x, ei))


def _bipartite(n_src=30, n_dst=17, seed=20):
    """Sources < n_src, destinations < n_dst, with duplicates, edges i -> i and destinations
    without in-edges."""
    gen = torch.Generator().manual_seed(seed)
    ei = torch.stack([torch.randint(0, n_src, (80,), generator=gen), torch.randint(0, n_dst - 3, (80,), generator=gen)])
    return torch.cat([ei, torch.tensor([[3, 3, 5, 29], [3, 3, 5, 0]])], 1)


@pytest.mark.parametrize("graph", ["edge_index", "coo", "csr"])
@pytest.mark.parametrize(
    "kw", [dict(), dict(aggr="sum"), dict(project=True, normalize=True), dict(root_weight=False)], ids=_id
)
def test_bipartite_matches_pyg(kw, graph):
    """(x_src, x_dst) with in_channels (6, 4) on 30 sources and 17 destinations, and (x_src, None)
    with size: outputs and gradients of both inputs and every parameter equal PyG's; a torch
    sparse adjacency [N_dst, N_src] weights the messages with its values, as in PyG."""
    ei = _bipartite()
    gen = torch.Generator().manual_seed(21)
    w = torch.rand(ei.size(1), dtype=torch.float64, generator=gen) + 0.5
    adj = torch.sparse_coo_tensor(ei.flip(0), w, (17, 30)).coalesce()
    _check_bipartite(kw, {"edge_index": ei, "coo": adj, "csr": adj.to_sparse_csr()}[graph], gen)


@pytest.mark.parametrize(
    "kw",
    [
        dict(aggr="max"),
        dict(aggr="min"),
        dict(aggr="max", project=True, normalize=True),
        dict(aggr="min", root_weight=False),
    ],
    ids=_id,
)
def test_bipartite_max_min_match_pyg(kw):
    """The same for max and min (destinations without in-edges aggregate to 0, as in PyG)."""
    _check_bipartite(kw, _bipartite(), torch.Generator().manual_seed(21))


def _check_bipartite(kw, g, gen):
    for x_dst_given in (True, False):
        ref, ours = _pair(kw, (6, 4), 5)
        xs = torch.randn(30, 6, dtype=torch.float64, generator=gen, requires_grad=True)
        xd = torch.randn(17, 4, dtype=torch.float64, generator=gen, requires_grad=True) if x_dst_given else None
        a, b = ours((xs, xd), g, size=(30, 17)), ref((xs, xd), g, size=(30, 17))
        assert a.shape == (17, 5)
        assert_same_formula(a, b)
        pa, pb = dict(ours.named_parameters()), dict(ref.named_parameters())
        if not x_dst_given:
            pa.pop("lin_r.weight", None)
        inputs = [xs] + ([xd] if x_dst_given and kw.get("root_weight", True) else [])
        r = torch.randn(a.shape, dtype=torch.float64, generator=gen)  # (normalize: |out|^2 has no gradient)
        ga = torch.autograd.grad((a * r).sum(), inputs + list(pa.values()))
        gb = torch.autograd.grad((b * r).sum(), inputs + [pb[k] for k in pa])
        for name, u, v in zip(["x_src", "x_dst"][: len(inputs)] + list(pa), ga, gb, strict=True):
            assert_same_formula(u, v, msg=lambda m, name=name: f"grad of {name}: {m}")


PYG_AGGREGATIONS = [
    dict(aggr="lstm"),
    dict(aggr="softmax", aggr_kwargs=dict(learn=True)),
    dict(aggr="std"),
    dict(aggr=["mean", "max", "sum"], aggr_kwargs=dict(mode="cat")),
    dict(aggr=["mean", "min"], aggr_kwargs=dict(mode="proj", mode_kwargs=dict(in_channels=12, out_channels=7))),
    dict(
        aggr=["sum", "std"],
        aggr_kwargs=dict(mode="attn", mode_kwargs=dict(in_channels=12, out_channels=8, num_heads=2)),
    ),
]


@pytest.mark.parametrize("graph", ["edge_index", "coo", "csr"])
@pytest.mark.parametrize("kw", PYG_AGGREGATIONS, ids=lambda kw: str(kw["aggr"]))
def test_pyg_aggregations_match_pyg(multigraph, kw, graph):
    """Aggregations mgg's op does not run go through PyG's own module (mgg.nn.pyg_aggregation):
    the same parameters under the same names, outputs and gradients (the module's own
    parameters too) equal PyG's, for an edge_index and a torch sparse adjacency (whose values
    these aggregations ignore, as in PyG). LSTM needs targets in order, as in PyG."""
    order = torch.argsort(multigraph[1], stable=True)
    ei = multigraph[:, order]
    adj = torch.sparse_coo_tensor(ei.flip(0), torch.rand(ei.size(1)) + 0.5, (150, 150)).coalesce()
    if kw["aggr"] == "lstm" and graph != "edge_index":
        pytest.skip("PyG's LSTM aggregation takes the edges as given; a coalesced adjacency merges duplicates")
    g = {"edge_index": ei, "coo": adj, "csr": adj.to_sparse_csr()}[graph]
    ref, ours = _pair(kw, 12, 5)
    assert list(ours.state_dict()) == list(ref.state_dict())
    for k, v in ref.state_dict().items():
        assert torch.equal(ours.state_dict()[k], v), k
    x = torch.randn(150, 12, generator=torch.Generator().manual_seed(2))
    _assert_same(ref, ours, x, g, g)
    assert repr(ours) == repr(ref)


def test_pyg_aggregation_bipartite_and_module_instances():
    """A PyG Aggregation instance (MLPAggregation) and a bipartite input with size, as PyG."""
    from torch_geometric.nn.aggr import MLPAggregation

    ei = _bipartite()
    order = torch.argsort(ei[1], stable=True)
    ei = ei[:, order]
    gen = torch.Generator().manual_seed(4)
    xs, xd = torch.randn(30, 6, generator=gen, dtype=torch.float64), torch.randn(17, 4, generator=gen).double()
    for make in (lambda: "softmax", lambda: MLPAggregation(6, 6, max_num_elements=16, num_layers=1)):
        ref = pyg_nn.SAGEConv((6, 4), 5, aggr=make()).double()
        ours = mnn.SAGEConv((6, 4), 5, aggr=make()).double()
        ours.load_state_dict(ref.state_dict())  # PyG's names
        assert_same_formula(ours((xs, xd), ei, size=(30, 17)), ref((xs, xd), ei, size=(30, 17)))
        assert_same_formula(ours((xs, None), ei, size=(30, 17)), ref((xs, None), ei, size=(30, 17)))


def test_pyg_aggregation_is_refused_on_a_dist_graph_and_without_pyg(monkeypatch):
    """It runs on one process, and needs PyG's modules: otherwise one line each."""
    conv = mnn.SAGEConv(4, 4, aggr="std")
    with pytest.raises(mgg.MggError, match="runs through PyG's module on one process") as e:
        conv(torch.ones(3, 4), object())
    assert "\n" not in str(e.value)
    import sys

    monkeypatch.setitem(sys.modules, "torch_geometric.nn.resolver", None)  # import fails
    with pytest.raises(mgg.MggError, match="torch_geometric is not installed") as e:
        mnn.SAGEConv(4, 4, aggr="std")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("aggr", ["max", "min"])
def test_max_min_float32_match_pyg(cora, aggr):
    """float32 on Cora's graph (the kernels' storage type; continuous features, so no ties):
    outputs and gradients within 1e-5 of PyG's."""
    torch.manual_seed(9)
    ref = pyg_nn.SAGEConv(1433, 16, aggr=aggr)
    ours = mnn.SAGEConv(1433, 16, aggr=aggr)
    ours.load_state_dict(ref.state_dict())
    ei = cora.graph.edge_index()
    x = _continuous(cora.x).float()
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    a, b = ours(xa, ei), ref(xb, ei)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    r = torch.randn(a.shape, generator=torch.Generator().manual_seed(10))
    ga = torch.autograd.grad((a * r).sum(), [xa, *ours.parameters()])
    gb = torch.autograd.grad((b * r).sum(), [xb, *ref.parameters()])
    for u, v in zip(ga, gb, strict=True):
        torch.testing.assert_close(u, v, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("aggr", ["max", "min"])
def test_max_min_over_a_weighted_adjacency_is_refused(multigraph, aggr):
    w = torch.rand(multigraph.size(1), dtype=torch.float64) + 0.5
    coo = torch.sparse_coo_tensor(multigraph.flip(0), w, (150, 150)).coalesce()
    with pytest.raises(mgg.MggError, match="over a weighted graph") as e:
        mnn.SAGEConv(6, 4, aggr=aggr).double()(torch.randn(150, 6, dtype=torch.float64), coo)
    assert "\n" not in str(e.value)

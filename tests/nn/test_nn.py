"""mgg.nn layers replace PyG's: same constructors, state_dict layout, outputs and gradients
(compared in float64, where the tolerance holds on every CPU: mgg.testing.assert_same_formula)."""

import pytest
import torch

import mgg.nn as mnn
from mgg.testing import assert_same_formula

pyg_nn = pytest.importorskip("torch_geometric.nn")


def _edge_index(cora):
    return cora.graph.edge_index()


@pytest.mark.parametrize(
    "kw", [dict(), dict(improved=True), dict(add_self_loops=False), dict(bias=False), dict(normalize=False)]
)
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
    for w in [None, torch.ones(ei.size(1), dtype=torch.float64)] if kw.get("improved") else []:
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


@pytest.mark.parametrize("aggr", ["add", "max", "min"])
@pytest.mark.parametrize("train_eps", [False, True])
def test_ginconv_loads_pyg_state_and_matches(cora, train_eps, aggr):
    torch.manual_seed(2)
    mlp = lambda: torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32))  # noqa: E731
    ref = pyg_nn.GINConv(mlp(), eps=0.3, train_eps=train_eps, aggr=aggr).double()
    ours = mnn.GINConv(mlp(), eps=0.3, train_eps=train_eps, aggr=aggr).double()
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


@pytest.mark.parametrize(
    "kw", [dict(flow="target_to_source"), dict(aggr="mean"), dict(node_dim=0), dict(aggr="sum", decomposed_layers=2)]
)
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


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(improved=True),
        dict(add_self_loops=False),
        dict(normalize=False),
        dict(aggr="mean"),
        dict(flow="target_to_source"),
    ],
    ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()) or "default",
)
def test_gcnconv_learned_edge_weights_match_pyg(kw):
    """An edge_weight that requires grad (learned weights, explainers' edge masks): outputs and the
    gradients in x, the edge weights (through gcn_norm's loops and normalisation) and the weight
    matrix equal PyG's, on a graph with duplicate edges, self-loops and isolated nodes."""
    from mgg.testing import quirky_edges

    ei = quirky_edges()
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(120, 6, dtype=torch.float64, generator=gen)
    w = torch.rand(ei.size(1), dtype=torch.float64, generator=gen) + 0.5
    torch.manual_seed(0)
    ref = pyg_nn.GCNConv(6, 4, **kw).double()
    ours = mnn.GCNConv(6, 4, **kw).double()
    ours.load_state_dict(ref.state_dict())
    xa, xb, wa, wb = (t.clone().requires_grad_() for t in (x, x, w, w))
    a, b = ours(xa, ei, wa), ref(xb, ei, wb)
    assert_same_formula(a, b)
    g = torch.randn(a.shape, dtype=torch.float64, generator=gen)
    ga = torch.autograd.grad(a, [xa, wa, ours.lin.weight], g)
    gb = torch.autograd.grad(b, [xb, wb, ref.lin.weight], g)
    for name, u, v in zip(["x", "edge_weight", "lin.weight"], ga, gb, strict=True):
        assert_same_formula(u, v, msg=lambda m, name=name: f"grad of {name}: {m}")
    with torch.no_grad():  # evaluation with the learned weights: the plain path
        assert_same_formula(ours(x, ei, wa), ref(x, ei, wb))


@pytest.mark.parametrize("normalize", [True, False])
def test_gcnconv_cache_attributes_as_pyg(cora, normalize):
    """cached=True keeps the normalised graph in PyG's attributes (_cached_edge_index for any torch
    tensor input, _cached_adj_t for a SparseTensor); setting one to None re-normalises; without
    normalize nothing is cached (PyG caches the normalisation only), so each call's graph counts."""
    ei = _edge_index(cora)
    n = cora.graph.num_nodes
    x = torch.randn(n, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(12))
    ref = pyg_nn.GCNConv(4, 3, cached=True, normalize=normalize).double()
    ours = mnn.GCNConv(4, 3, cached=True, normalize=normalize).double()
    ours.load_state_dict(ref.state_dict())
    adj = torch.sparse_coo_tensor(ei[:, :3000].flip(0), torch.ones(3000, dtype=torch.float64), (n, n)).coalesce()
    for graph in (ei, ei[:, :50], adj):
        assert_same_formula(ours(x, graph), ref(x, graph))
    assert (ours._cached_edge_index is not None) == normalize and ours._cached_adj_t is None
    ours._cached_edge_index, ref._cached_edge_index = None, None  # the reset users write
    for graph in (adj, ei):
        assert_same_formula(ours(x, graph), ref(x, graph))


LAZY = [
    lambda m: m.GCNConv(-1, 5),
    lambda m: m.SAGEConv(-1, 5),
    lambda m: m.SAGEConv((-1, -1), 5, aggr="sum"),
    lambda m: m.GATConv(-1, 5, heads=2, residual=True),
    lambda m: m.GATConv((-1, -1), 3, heads=2),
]


@pytest.mark.parametrize("make", LAZY, ids=["gcn", "sage", "sage-pair", "gat", "gat-pair"])
def test_lazy_in_channels_as_pyg(make):
    """in_channels=-1 (and (-1, -1)): the layer sizes itself on the first call and initialises as
    PyG does (the same weights from the same seed); its state_dict has PyG's keys before and after,
    PyG's sized state loads into it, and it then gives PyG's numbers; a PyG state also loads into
    an mgg layer never called."""
    ref, ours, fresh = (torch.manual_seed(13) and make(m) for m in (pyg_nn, mnn, mnn))
    assert list(ours.state_dict()) == list(ref.state_dict())
    gen = torch.Generator().manual_seed(14)
    x = torch.randn(40, 6, generator=gen)
    ei = torch.randint(0, 40, (2, 160), generator=gen)
    torch.manual_seed(15)
    ref(x, ei)
    torch.manual_seed(15)
    ours(x, ei)
    assert list(ours.state_dict()) == list(ref.state_dict())
    for k, v in ref.state_dict().items():  # PyG's initialisation (glorot or kaiming) with the same draws
        assert torch.equal(ours.state_dict()[k], v), k
    ref.double(), ours.double()
    ours.load_state_dict(ref.state_dict())
    fresh.load_state_dict(ref.state_dict())
    fresh.double()
    assert_same_formula(ours(x.double(), ei), ref(x.double(), ei))
    assert_same_formula(fresh(x.double(), ei), ref(x.double(), ei))


BATCHED = [
    lambda m: m.GCNConv(6, 4),
    lambda m: m.GCNConv(6, 4, aggr="mean", flow="target_to_source"),
    lambda m: m.SAGEConv(6, 4),
    lambda m: m.GINConv(torch.nn.Linear(6, 4)),
]


@pytest.mark.parametrize("make", BATCHED, ids=["gcn", "gcn-mean-t2s", "sage", "gin"])
def test_batched_features_as_pyg(make):
    """Node features [B, N, F] (a static graph shared by B samples; PyG's node_dim=-2): outputs and
    input gradients equal PyG's."""
    from mgg.testing import quirky_edges

    ei = quirky_edges()
    torch.manual_seed(15)
    ref = make(pyg_nn).double()
    ours = make(mnn).double()
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(3, 120, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(16))
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    a, b = ours(xa, ei), ref(xb, ei)
    assert a.shape == b.shape == (3, 120, 4)
    assert_same_formula(a, b)
    assert_same_formula(torch.autograd.grad(a.square().sum(), xa)[0], torch.autograd.grad(b.square().sum(), xb)[0])


def _bipartite(n_src=30, n_dst=17, seed=17):
    """A bipartite edge_index (sources < n_src, destinations < n_dst) with duplicates, edges i -> i
    and destinations without in-edges."""
    gen = torch.Generator().manual_seed(seed)
    ei = torch.stack([torch.randint(0, n_src, (80,), generator=gen), torch.randint(0, n_dst - 3, (80,), generator=gen)])
    return torch.cat([ei, torch.tensor([[3, 3, 5, 29], [3, 3, 5, 0]])], 1)


@pytest.mark.parametrize("aggr", ["add", "max", "min"])
@pytest.mark.parametrize("mode", ["pair", "none", "square-pair"])
def test_ginconv_bipartite_as_pyg(mode, aggr):
    """GINConv on (x_src, x_dst), (x_src, None) with size, and a pair of equal sizes: outputs and
    gradients of both inputs and the MLP equal PyG's."""
    ei = _bipartite()
    gen = torch.Generator().manual_seed(18)
    xs = torch.randn(30, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    n_dst = 30 if mode == "square-pair" else 17
    xd = torch.randn(n_dst, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    torch.manual_seed(19)
    mlp = torch.nn.Linear(6, 3).double()
    ref = pyg_nn.GINConv(mlp, eps=0.2, train_eps=True, aggr=aggr).double()
    ours = mnn.GINConv(mlp, eps=0.2, train_eps=True, aggr=aggr).double()
    args = ((xs, None), ei) if mode == "none" else ((xs, xd), ei)
    kw = dict(size=(30, 17)) if mode == "none" else {}
    a, b = ours(*args, **kw), ref(*args, **kw)
    assert a.shape == (n_dst, 3)
    assert_same_formula(a, b)
    extra = [] if mode == "none" else [xd]  # (x, None): no root term, so no eps
    ga = torch.autograd.grad(a.square().sum(), [xs, mlp.weight] + extra + ([ours.eps] if extra else []))
    gb = torch.autograd.grad(b.square().sum(), [xs, mlp.weight] + extra + ([ref.eps] if extra else []))
    for u, v in zip(ga, gb, strict=True):
        assert_same_formula(u, v)

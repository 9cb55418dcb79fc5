"""GAT's attention through mgg.nn.GATConv against PyG's GATConv (the outside oracle: outputs,
input and weight gradients, attention weights, in float64 with mgg.testing.assert_same_formula) on
graphs with every quirk and on Cora, and training on Cora. The op itself, without PyG, is tested
in test_attend.py."""

import pytest
import torch

import mgg
from mgg.nn import GATConv
from mgg.testing import assert_same_formula, quirky_edges, random_graph

pyg_nn = pytest.importorskip("torch_geometric.nn")


def pair(seed=0, dtype=torch.float64, **kw):
    """PyG's layer and mgg's with PyG's weights."""
    torch.manual_seed(seed)
    ref = pyg_nn.GATConv(**kw).to(dtype)
    ours = GATConv(**kw).to(dtype)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def assert_same_step(ref, ours, x, ei):
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    a, b = ref(xa, ei), ours(xb, ei)
    assert_same_formula(b, a)
    g = torch.randn_like(a)
    a.backward(g)
    b.backward(g)
    assert_same_formula(xb.grad, xa.grad)
    for (name, p), q in zip(ref.named_parameters(), ours.parameters(), strict=True):
        assert_same_formula(q.grad, p.grad, msg=name)


KWARGS = [
    dict(heads=1),
    dict(heads=4),
    dict(heads=3, concat=False),
    dict(heads=2, residual=True),
    dict(heads=2, add_self_loops=False),
    dict(heads=2, bias=False, negative_slope=0.1),
    dict(heads=2, concat=False, residual=True, add_self_loops=False),
]


@pytest.mark.parametrize("kw", KWARGS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_matches_pyg_on_quirky_graph(kw):
    ref, ours = pair(in_channels=12, out_channels=5, **kw)
    x = torch.randn(120, 12, dtype=torch.float64)
    assert_same_step(ref, ours, x, quirky_edges())


def test_matches_pyg_on_cora(cora):
    """Cora as PyG's examples/gat.py has it (8 heads of 8), in float64."""
    ref, ours = pair(in_channels=1433, out_channels=8, heads=8)
    x = cora.x.double()
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ei = cora.graph.edge_index()
    a, b = ref(xa, ei), ours(xb, ei)
    assert_same_formula(b, a)
    a.sum().backward()
    b.sum().backward()
    assert_same_formula(ours.lin.weight.grad, ref.lin.weight.grad)
    assert_same_formula(ours.att_src.grad, ref.att_src.grad)
    assert_same_formula(ours.att_dst.grad, ref.att_dst.grad)


def test_state_dict_layout_is_pygs():
    ref, ours = pair(in_channels=6, out_channels=3, heads=2, residual=True)
    assert list(ours.state_dict()) == list(ref.state_dict())
    assert all(ours.state_dict()[k].shape == v.shape for k, v in ref.state_dict().items())


def test_graph_inputs_agree():
    """[2, E], a sparse COO adjacency (adj[target, source]) and mgg.Graph give the same
    output on a simple graph."""
    ei = torch.unique(random_graph(80, 500, seed=3).edge_index(), dim=1)  # a simple graph (coalescing merges)
    g = mgg.Graph.from_edge_index(ei, 80)
    _, ours = pair(in_channels=4, out_channels=3, heads=2)
    x = torch.randn(80, 4, dtype=torch.float64)
    want = ours(x, ei)
    adj = torch.sparse_coo_tensor(torch.stack([ei[1], ei[0]]), torch.ones(ei.size(1)), (80, 80), check_invariants=True)
    assert_same_formula(ours(x, adj), want)
    assert_same_formula(ours(x, g), want)


def test_attention_weights_match_pyg():
    ref, ours = pair(in_channels=7, out_channels=4, heads=3)
    x, ei = torch.randn(120, 7, dtype=torch.float64), quirky_edges()
    out, (used, alpha) = ours(x, ei, return_attention_weights=True)
    out_r, (used_r, alpha_r) = ref(x, ei, return_attention_weights=True)
    assert torch.equal(used, used_r)
    assert_same_formula(alpha, alpha_r)
    assert_same_formula(out, out_r)
    assert ours(x, ei, return_attention_weights=False).shape == out.shape  # PyG: False returns the tensor


@pytest.mark.full  # make test-full (tests/conftest.py)
def test_gat_trains_on_cora_like_pygs(cora):
    """examples/gat.py's model and protocol, 60 epochs, mgg's layers and PyG's from one seed:
    both learn (validation accuracy well above chance), within a few points of each other."""
    from mgg.training.loop import TrainConfig, train_once

    ours = train_once(cora, TrainConfig(model="gat", epochs=60), 0, progress=False)
    theirs = train_once(cora, TrainConfig(model="gat", epochs=60, conv_module=pyg_nn), 0, progress=False)
    assert ours.val_acc > 0.7 and theirs.val_acc > 0.7
    assert abs(ours.test_acc - theirs.test_acc) < 0.06


def _bipartite(n_src=30, n_dst=17, seed=22):
    """Sources < n_src, destinations < n_dst, with duplicates, edges i -> i and destinations
    without in-edges (the self-loops PyG adds give those one)."""
    gen = torch.Generator().manual_seed(seed)
    ei = torch.stack([torch.randint(0, n_src, (80,), generator=gen), torch.randint(0, n_dst - 3, (80,), generator=gen)])
    return torch.cat([ei, torch.tensor([[3, 3, 5, 29], [3, 3, 5, 0]])], 1)


@pytest.mark.parametrize("inputs", ["pair-widths", "int-width", "x-none", "size"])
@pytest.mark.parametrize(
    "kw",
    [dict(heads=2), dict(heads=2, add_self_loops=False), dict(heads=3, concat=False, residual=True)],
    ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()),
)
def test_bipartite_matches_pyg(kw, inputs):
    """30 sources, 17 destinations: (x_src, x_dst) with in_channels (6, 4) (lin_src, lin_dst) or 6
    (one lin), (x_src, None) (no destination term), and size=(30, 17) with self-loops on the
    first min(size) nodes: outputs, attention weights and every gradient equal PyG's."""
    ei = _bipartite()
    gen = torch.Generator().manual_seed(23)
    widths = (6, 4) if inputs == "pair-widths" else 6
    ref, ours = pair(in_channels=widths, out_channels=5, **kw)
    xs = torch.randn(30, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    xd = torch.randn(17, 4 if inputs == "pair-widths" else 6, dtype=torch.float64, generator=gen, requires_grad=True)
    x, extra = ((xs, None), dict(size=(30, 17))) if inputs == "x-none" else ((xs, xd), {})
    if inputs == "size":
        extra = dict(size=(30, 17))
    out, (used, alpha) = ours(x, ei, return_attention_weights=True, **extra)
    out_r, (used_r, alpha_r) = ref(x, ei, return_attention_weights=True, **extra)
    assert out.shape == (17, 5 * (kw["heads"] if kw.get("concat", True) else 1))
    assert_same_formula(out, out_r)
    assert torch.equal(used, used_r)
    assert_same_formula(alpha, alpha_r)
    g = torch.randn(out.shape, dtype=torch.float64, generator=gen)
    leaves = [xs] + ([] if inputs == "x-none" else [xd])
    names = [n for n, p in ref.named_parameters() if inputs != "x-none" or n not in ("att_dst", "res.weight")]
    pa, pb = dict(ours.named_parameters()), dict(ref.named_parameters())
    ga = torch.autograd.grad(out, leaves + [pa[n] for n in names], g)
    gb = torch.autograd.grad(out_r, leaves + [pb[n] for n in names], g)
    for name, u, v in zip(["x_src", "x_dst"][: len(leaves)] + names, ga, gb, strict=True):
        assert_same_formula(u, v, msg=lambda m, name=name: f"grad of {name}: {m}")


def test_zero_nodes_give_pygs_empty_output():
    ref, ours = pair(in_channels=6, out_channels=5, heads=2)
    x, ei = torch.zeros(0, 6, dtype=torch.float64), torch.zeros(2, 0, dtype=torch.long)
    out, (used, alpha) = ours(x, ei, return_attention_weights=True)
    out_r, (used_r, alpha_r) = ref(x, ei, return_attention_weights=True)
    assert out.shape == out_r.shape == (0, 10)
    assert used.shape == used_r.shape and alpha.shape == alpha_r.shape == (0, 2)
    assert ours(x, ei).shape == (0, 10)


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr])
def test_attention_weights_of_a_sparse_adjacency_in_its_layout(layout):
    """PyG returns (adj, alpha) for a torch sparse input: adj in the input's layout, with self-loops
    replaced, alpha [nnz, heads] as its values in its order."""
    ref, ours = pair(in_channels=7, out_channels=4, heads=3)
    ei = quirky_edges()
    x = torch.randn(120, 7, dtype=torch.float64)
    adj = torch.sparse_coo_tensor(ei.flip(0), torch.ones(ei.size(1), dtype=torch.float64), (120, 120)).coalesce()
    adj = adj if layout == torch.sparse_coo else adj.to_sparse_csr()
    out, (a, alpha) = ours(x, adj, return_attention_weights=True)
    out_r, (a_r, alpha_r) = ref(x, adj, return_attention_weights=True)
    assert a.layout == a_r.layout == layout and a.shape == a_r.shape
    assert_same_formula(out, out_r)
    assert_same_formula(alpha, alpha_r)
    assert_same_formula(a.to_dense(), a_r.to_dense())


def test_fill_value_without_edge_dim_is_pygs_no_op():
    """fill_value fills self-loops' edge features, so without edge_dim PyG ignores it: so does mgg."""
    ref, ours = pair(in_channels=6, out_channels=4, heads=2, fill_value=0.5)
    x = torch.randn(120, 6, dtype=torch.float64)
    assert_same_formula(ours(x, quirky_edges()), ref(x, quirky_edges()))


def test_bipartite_dropout_weights_are_the_ones_applied():
    """In training with attention dropout, the bipartite output is the sum of the returned (kept)
    attention weights times the sources' rows: the op's mask and the returned alpha are drawn
    from the same (seed, edge, head) over the padded plan."""
    torch.manual_seed(24)
    conv = GATConv((6, 4), 3, heads=2, dropout=0.5).double().train()
    ei = _bipartite()
    xs, xd = torch.randn(30, 6, dtype=torch.float64), torch.randn(17, 4, dtype=torch.float64)
    out, (used, alpha) = conv((xs, xd), ei, return_attention_weights=True)
    assert bool((alpha == 0).any())  # some coefficients dropped
    h = conv.lin_src(xs).view(-1, 2, 3)
    want = torch.zeros(17, 2, 3, dtype=torch.float64).index_add_(0, used[1], alpha.unsqueeze(-1) * h[used[0]])
    assert_same_formula(out, want.reshape(17, 6) + conv.bias)


EDGE_KWARGS = [
    dict(heads=1, edge_dim=3),
    dict(heads=3, edge_dim=3, fill_value="mean"),
    dict(heads=2, edge_dim=3, fill_value=0.5, concat=False, residual=True),
    dict(heads=2, edge_dim=3, fill_value="max", negative_slope=0.1),
    dict(heads=2, edge_dim=3, fill_value="add", flow="target_to_source"),
    dict(heads=2, edge_dim=3, fill_value="tensor"),
    dict(heads=2, edge_dim=3, add_self_loops=False, bias=False),
    dict(heads=2, edge_dim=1, fill_value="min"),
]


def _edge_kwargs(kw):
    kw = dict(kw)
    if kw.get("fill_value") == "tensor":
        kw["fill_value"] = torch.tensor([0.3, -1.0, 2.0], dtype=torch.float64)
    return kw


@pytest.mark.parametrize("kw", EDGE_KWARGS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_edge_features_match_pyg(kw):
    """edge_dim and edge_attr on a graph with self-loops, duplicate edges and isolated nodes: the
    self-loops' features by every kind of fill_value, a 1-D edge_attr for edge_dim=1, both flows:
    outputs, attention weights, and gradients of x, edge_attr and every parameter equal PyG's
    (the state_dict is PyG's, lin_edge and att_edge included)."""
    kw = _edge_kwargs(kw)
    ref, ours = pair(in_channels=6, out_channels=4, **kw)
    assert list(ours.state_dict()) == list(ref.state_dict())
    ei = quirky_edges()
    gen = torch.Generator().manual_seed(31)
    x = torch.randn(120, 6, dtype=torch.float64, generator=gen)
    shape = (ei.size(1),) if kw["edge_dim"] == 1 else (ei.size(1), kw["edge_dim"])
    attr = torch.randn(shape, dtype=torch.float64, generator=gen)
    xa, xb, ea, eb = x.clone().requires_grad_(), x.clone().requires_grad_(), attr.clone(), attr.clone()
    ea.requires_grad_()
    eb.requires_grad_()
    a, (ei_a, alpha_a) = ref(xa, ei, ea, return_attention_weights=True)
    b, (ei_b, alpha_b) = ours(xb, ei, eb, return_attention_weights=True)
    assert_same_formula(b, a)
    assert torch.equal(ei_b, ei_a)
    assert_same_formula(alpha_b, alpha_a)
    g = torch.randn(a.shape, dtype=torch.float64, generator=gen)
    a.backward(g)
    b.backward(g)
    assert_same_formula(xb.grad, xa.grad)
    assert_same_formula(eb.grad, ea.grad)
    for (name, p), q in zip(ref.named_parameters(), ours.parameters(), strict=True):
        assert_same_formula(q.grad, p.grad, msg=name)


def test_edge_features_bipartite_match_pyg():
    """(x_src, x_dst) with edge features, self-loops on the first min(N_src, N_dst) nodes."""
    ei = _bipartite()
    gen = torch.Generator().manual_seed(32)
    ref, ours = pair(in_channels=(6, 4), out_channels=3, heads=2, edge_dim=2)
    xs, xd = torch.randn(30, 6, dtype=torch.float64, generator=gen), torch.randn(17, 4, dtype=torch.float64)
    attr = torch.randn(ei.size(1), 2, dtype=torch.float64, generator=gen)
    assert_same_formula(ours((xs, xd), ei, attr), ref((xs, xd), ei, attr))
    assert_same_formula(ours((xs, None), ei, attr, size=(30, 17)), ref((xs, None), ei, attr, size=(30, 17)))


def test_edge_features_without_edge_dim_are_ignored_and_refusals():
    """PyG ignores edge_attr when edge_dim is None (so does mgg); with edge_dim, a sparse
    adjacency, a wrong row count or a bad fill_value are refused in one line."""
    ref, ours = pair(in_channels=6, out_channels=4, heads=2)
    x, ei = torch.randn(120, 6, dtype=torch.float64), quirky_edges()
    attr = torch.randn(ei.size(1), 3, dtype=torch.float64)
    assert_same_formula(ours(x, ei, attr), ref(x, ei, attr))
    conv = GATConv(6, 4, edge_dim=3).double()
    adj = torch.sparse_coo_tensor(ei.flip(0), torch.ones(ei.size(1)), (120, 120))
    for call, msg in [
        (lambda: conv(x, adj, attr), "edge features need edge_index"),
        (lambda: conv(x, ei, attr[:-1]), "edge_attr has"),
        (lambda: GATConv(6, 4, edge_dim=3, fill_value="median"), "fill_value must be"),
        (lambda: GATConv(6, 4, edge_dim=0), "edge_dim must be"),
    ]:
        with pytest.raises(mgg.MggError, match=msg) as e:
            call()
        assert "\n" not in str(e.value)

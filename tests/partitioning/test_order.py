"""Node orders (mgg/partitioning/order.py) and Config(order=...) (mgg/runtime/ordering.py): every
order is a permutation, deterministic; a plan run in an order gives the user's-order result (float64
reference, summation tolerance) for every reduction and GAT's attention, with gradients; deterministic
mode stays bit-identical; bad orders are one line; cached plans follow the graph; order="auto" keeps
an order only where it pays."""

import pytest
import torch

import mgg
from mgg.errors import MggError, PlanError
from mgg.nn import GATConv, GCNConv, GINConv, SAGEConv, graph_input
from mgg.partitioning.order import OrderedPlan, given_order, node_order
from mgg.plan import ORDERS, Config
from mgg.runtime import ordering
from mgg.testing import assert_matches_reference, random_graph

METHODS = [m for m in ORDERS if m != "user"]


@pytest.fixture(scope="module")
def graph():
    return mgg.data.load_graph("sbm:600:12:10:0.9")


@pytest.mark.parametrize("method", ORDERS)
def test_every_order_is_a_deterministic_permutation(graph, method):
    a, b = node_order(graph, method, seed=3), node_order(graph, method, seed=3)
    assert sorted(a.perm.tolist()) == list(range(graph.num_nodes))
    assert (a.perm == b.perm).all() and a.method == method and a.num_ranks == 1
    assert (a.inverse[a.perm] == torch.arange(graph.num_nodes).numpy()).all()


def test_rcm_brings_neighbours_together():
    """What RCM is for: the mean distance between an edge's two ends shrinks (the bandwidth)."""

    def spread(g):
        rows = g.rows().numpy()
        return float(abs(rows - g.col.numpy()).mean())

    rows, cols = 20, 30  # a grid, its ids shuffled
    ids = torch.arange(rows * cols).view(rows, cols)
    src = torch.cat([ids[:, :-1].flatten(), ids[:-1, :].flatten()])
    dst = torch.cat([ids[:, 1:].flatten(), ids[1:, :].flatten()])
    grid = mgg.Graph.from_edges(torch.cat([src, dst]).numpy(), torch.cat([dst, src]).numpy(), rows * cols)
    shuffled = node_order(grid, "random", seed=1).relabel(grid)
    assert spread(node_order(shuffled, "rcm").relabel(shuffled)) < 0.1 * spread(shuffled)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
def test_an_ordered_plan_gives_the_users_result(method, reduce):
    g = random_graph(300, 2500, seed=1, weighted=reduce == "sum", skew=0.5)
    x = torch.randn(300, 24, dtype=torch.float32)
    plan = mgg.make_plan(g, reduce, order=method)
    assert isinstance(plan, OrderedPlan) and plan.order.method == method
    out = mgg.aggregate(x, plan, reduce="max" if reduce == "max" else "sum")
    user = mgg.aggregate(x, mgg.make_plan(g, reduce), reduce="max" if reduce == "max" else "sum")
    if reduce == "max":
        assert torch.equal(out, user)  # the same winners: random floats have no ties
    else:
        ref_graph = g.mean_norm() if reduce == "mean" else g
        assert_matches_reference(out, ref_graph, x)
        assert_matches_reference(user, ref_graph, x)


def test_gradients_and_deterministic_runs_through_an_order():
    g = random_graph(400, 3000, seed=2, weighted=True, skew=0.8)
    x = torch.randn(400, 40, requires_grad=True)
    plan = mgg.make_plan(g, order="rcm")
    out = plan.aggregate(x, Config(2, 3, 2), deterministic=True)
    grad_out = torch.randn_like(out)
    (gx,) = torch.autograd.grad(out, x, grad_out)
    assert_matches_reference(gx, g.transpose(), grad_out)  # d x = A^T grad
    again = plan.aggregate(x, Config(2, 3, 2), deterministic=True)
    assert torch.equal(out, again)  # bit-identical run to run
    (gx2,) = torch.autograd.grad(again, x, grad_out)
    assert torch.equal(gx, gx2)


def test_attention_through_an_order_equals_the_users():
    g = mgg.functional.attention_graph(random_graph(200, 1500, seed=4))
    h = torch.randn(200, 2, 8)
    a_src, a_dst = torch.randn(200, 2), torch.randn(200, 2)
    user = mgg.attend(h, a_src, a_dst, mgg.Plan(g))
    ordered = mgg.attend(h, a_src, a_dst, OrderedPlan(g, node_order(g, "rcm")))
    torch.testing.assert_close(ordered, user, rtol=1e-5, atol=1e-6)


def test_a_custom_permutation_is_taken_and_bad_ones_are_one_line():
    g = random_graph(50, 300, seed=5)
    x = torch.randn(50, 8)
    perm = torch.randperm(50)
    out = mgg.make_plan(g, order=perm).aggregate(x)
    assert_matches_reference(out, g, x)
    bad = {
        "one entry per node: 49 entries": perm[:49],
        "permutation of 0..49: node": torch.cat([perm[:49], perm[:1]]),  # a duplicate, a node missing
        "permutation of 0..49: entry 0 is 50": torch.cat([torch.tensor([50]), perm[1:]]),
        "permutation of 0..49: entry 3 is -1": torch.cat([perm[:3], torch.tensor([-1]), perm[4:]]),
        "1-D integer permutation": perm.float(),
        r"1-D integer permutation, got int64 of shape \(2, 25\)": perm.view(2, 25),
    }
    for msg, p in bad.items():
        with pytest.raises(MggError, match=msg) as e:
            mgg.make_plan(g, order=p)
        assert "\n" not in str(e.value)
    with pytest.raises(MggError, match="order must be one of"):
        mgg.make_plan(g, order="bandwidth")
    with pytest.raises(PlanError, match="order must be one of"):
        Config(order="rcm2")
    with pytest.raises(MggError, match="one-rank plans"):
        mgg.make_plan(g, num_ranks=2, order="rcm")
    with pytest.raises(MggError, match="a one-rank partition"):
        given_order(mgg.partition(g, 2, "random"), 50)


@pytest.mark.parametrize("layer", ["gcn", "gin", "sage", "gat"])
def test_layers_in_an_order_give_their_users_order_output(layer):
    torch.manual_seed(0)
    g = random_graph(250, 2000, seed=6)
    ei = g.edge_index()
    x = torch.randn(250, 16)
    make = {
        "gcn": lambda c: GCNConv(16, 8, config=c),
        "gin": lambda c: GINConv(torch.nn.Linear(16, 8), config=c),
        "sage": lambda c: SAGEConv(16, 8, config=c),
        "gat": lambda c: GATConv(16, 4, heads=2, config=c),
    }[layer]
    torch.manual_seed(1)
    user = make(Config())
    torch.manual_seed(1)
    ordered = make(Config(order="rcm"))
    mgg.nn.clear_plans()
    out = ordered(x, ei)
    planned = [plan for _, plan in graph_input._CACHE.values()]
    assert len(planned) == 1 and isinstance(planned[0], OrderedPlan) and planned[0].order.method == "rcm"
    torch.testing.assert_close(out, user(x, ei), rtol=1e-5, atol=1e-5)


def test_gat_with_attention_dropout_keeps_the_users_order():
    g = random_graph(80, 400, seed=7)
    conv = GATConv(8, 4, dropout=0.5, config=Config(order="rcm"))
    with pytest.raises(MggError, match="attention dropout"):
        conv(torch.randn(80, 8), g.edge_index())
    conv.eval()  # no dropout at inference: the order applies
    x = torch.randn(80, 8)
    mgg.nn.clear_plans()
    out = conv(x, g.edge_index())
    assert any(isinstance(plan, OrderedPlan) for _, plan in graph_input._CACHE.values())
    user = GATConv(8, 4, dropout=0.5)
    user.load_state_dict(conv.state_dict())
    torch.testing.assert_close(out, user.eval()(x, g.edge_index()), rtol=1e-5, atol=1e-5)


def test_a_cached_ordered_plan_follows_the_graph():
    """The plan is remembered per edge_index tensor and its version: an edited graph is planned
    (and ordered) anew, so the order never goes stale."""
    torch.manual_seed(0)
    g = random_graph(120, 900, seed=8)
    ei = g.edge_index().clone()
    conv = GCNConv(6, 6, normalize=False, config=Config(order="rcm"))
    x = torch.randn(120, 6)
    with torch.no_grad():
        w = conv.lin.weight.clone()
        first = conv(x, ei)
        ei[0, :10] = (ei[0, :10] + 1) % 120  # an edit in place: the version counter moves
        second = conv(x, ei)
    edited = mgg.Graph.from_edge_index(ei, 120)
    assert_matches_reference(second - conv.bias, edited, x @ w.T)
    assert not torch.equal(first, second)


def _fake_times(monkeypatch, user_ms: float, rcm_ms: float, cost_s: float = 0.0):
    calls = iter([user_ms, rcm_ms])
    monkeypatch.setattr(ordering, "measure", lambda fn, device, warmup, reps: type("T", (), {"median_ms": next(calls)}))
    monkeypatch.setattr(ordering, "cache_bytes", lambda device: 0)
    monkeypatch.setattr(ordering, "CANDIDATES", ("rcm",))
    real = ordering.node_order

    def slow_order(graph, name):
        o = real(graph, name)
        return type(o)(o.method, o.perm, o.bounds, o.seconds + cost_s)

    monkeypatch.setattr(ordering, "node_order", slow_order)


def test_auto_keeps_an_order_only_where_it_pays(monkeypatch):
    g = random_graph(200, 1200, seed=9)
    x = torch.randn(200, 16)
    _fake_times(monkeypatch, 10.0, 7.0)
    plan, d = ordering.choose(g, x, Config())
    assert isinstance(plan, OrderedPlan) and d.order == "rcm" and d.why.startswith("on: rcm 7.00 ms against 10.00")
    _fake_times(monkeypatch, 10.0, 9.8)  # 2% faster: within the noise
    plan, d = ordering.choose(g, x, Config())
    assert type(plan) is mgg.Plan and d.order == "user" and "under 3% faster" in d.why
    assert ordering.verdict("rcm", 10.0, 7.0, 5.0, payback=400).startswith("off: rcm saves 3.00 ms")  # 1.2 s < 5 s
    assert ordering.verdict("rcm", 10.0, 7.0, 1.0, payback=400).startswith("on")


def test_auto_leaves_a_table_that_fits_the_cache_alone():
    g = random_graph(100, 500, seed=10)
    mgg.nn.clear_plans()
    conv = GCNConv(4, 4, config=Config(order="auto"))
    out = conv(torch.randn(100, 4), g.edge_index())
    assert out.shape == (100, 4)
    from mgg.nn.graph_input import order_decisions

    cache = ordering.size_text(ordering.cache_bytes(torch.device("cpu")))
    assert any(f"order user: off: x (1.6 KB) fits the {cache} cache" in line for line in order_decisions())
    with pytest.raises(MggError, match="needs the features"):
        mgg.make_plan(g, order="auto")


def test_over_a_distgraph_only_the_partitions_order_applies():
    """A DistGraph's partition places its nodes: an explicit order is refused in one line, auto
    keeps the partition's (the DistPlan is what the layer gets)."""
    from mgg.nn.graph_input import cached_plan

    class Dist:  # what cached_plan asks of a DistGraph
        def plan_for(self, tag, prepare):
            return "the DistPlan"

    assert cached_plan(Dist(), 10, None, "t", lambda g, dt: g, order="auto") == "the DistPlan"
    with pytest.raises(MggError, match="order 'rcm' applies to one-process plans"):
        cached_plan(Dist(), 10, None, "t", lambda g, dt: g, order="rcm")


def test_sizes_are_said_in_the_unit_that_shows_them():
    """A core's L2 of 512 KB is not "0 MB"."""
    assert ordering.size_text(512 << 10) == "512 KB"
    assert ordering.size_text(1600) == "1.6 KB"
    assert ordering.size_text(177_152) == "173 KB"
    assert ordering.size_text(3 << 19) == "1.5 MB"
    assert ordering.size_text(32 << 20) == "32 MB"

"""Where mgg's layers once differed from PyG's own in what PyG's conv tests and a side-by-side
run of them showed: constructor arguments kept as attributes, lazy layers' state_dicts before the
first call, GCN's mean over a sparse adjacency with self-loops, max/min over a sparse adjacency
of ones. Each against PyG's layer, float64."""

import pytest
import torch

pytest.importorskip("torch_geometric")
import torch_geometric.nn as pnn  # noqa: E402
from torch_geometric.utils import to_torch_coo_tensor, to_torch_csc_tensor  # noqa: E402

import mgg  # noqa: E402
import mgg.nn as mnn  # noqa: E402
from mgg.testing import assert_same_formula  # noqa: E402

EI = torch.tensor([[0, 1, 1, 2, 3, 3, 0], [1, 1, 0, 1, 2, 3, 3]])  # loops at nodes 1 and 3


def _pair(name, *args, **kwargs):
    torch.manual_seed(0)
    ref = getattr(pnn, name)(*args, **kwargs).double()
    ours = getattr(mnn, name)(*args, **kwargs).double()
    ours.load_state_dict(ref.state_dict())
    return ref, ours


@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.GCNConv(4, 3, decomposed_layers=2),
        lambda lib: lib.GINConv(torch.nn.Linear(4, 3), decomposed_layers=3),
        lambda lib: lib.SAGEConv(4, 3, decomposed_layers=2),
        lambda lib: lib.GATConv(4, 3, decomposed_layers=2),
    ],
)
def test_decomposed_layers_is_kept_as_pyg(make):
    assert make(mnn).decomposed_layers == make(pnn).decomposed_layers > 1


def test_decomposed_layers_chunks_a_hooked_propagate_as_pyg():
    seen = {}
    for lib in (pnn, mnn):
        conv, shapes = lib.GCNConv(16, 32, decomposed_layers=2), []
        conv.register_message_forward_pre_hook(lambda mod, inp, s=shapes: s.append(tuple(inp[0]["x_j"].shape)))
        conv(torch.randn(4, 16), EI)
        seen[lib.__name__] = shapes
    assert seen["mgg.nn"] == seen["torch_geometric.nn"] and len(seen["mgg.nn"]) == 2


def test_gat_keeps_residual_as_pyg():
    for residual in (False, True):
        assert mnn.GATConv(4, 3, residual=residual).residual is pnn.GATConv(4, 3, residual=residual).residual


@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.SAGEConv(-1, 4),
        lambda lib: lib.SAGEConv((-1, -1), 4),
        lambda lib: lib.GCNConv(-1, 4),
        lambda lib: lib.GATConv(-1, 4, heads=2),
    ],
)
def test_lazy_state_dict_before_the_first_call_loads_both_ways(make):
    x = torch.randn(4, 8)
    ref, ours = make(pnn), make(mnn)
    assert list(ref.state_dict()) == list(ours.state_dict())
    ours.load_state_dict(make(pnn).state_dict())  # PyG's, saved before its first call
    ref.load_state_dict(make(mnn).state_dict())
    ref(x, EI)
    ours(x, EI)
    ours.load_state_dict(ref.state_dict())  # both sized now: the same numbers
    torch.testing.assert_close(ours(x, EI), ref(x, EI))


@pytest.mark.parametrize("aggr", ["add", "mean"])  # a sum is the same with loops merged or not; a mean is not
def test_gcn_over_a_sparse_adjacency_with_self_loops(aggr):
    ref, ours = _pair("GCNConv", 3, 2, aggr=aggr)
    adj = to_torch_csc_tensor(EI, size=(4, 4)).t().double()
    x = torch.randn(4, 3, dtype=torch.float64)
    assert_same_formula(ours(x, EI), ref(x, EI))
    assert_same_formula(ours(x, adj), ref(x, adj))


@pytest.mark.parametrize("name", ["GINConv", "SAGEConv"])
@pytest.mark.parametrize("aggr", ["max", "min"])
@pytest.mark.parametrize("layout", ["csc", "coo"])
def test_max_min_over_a_sparse_adjacency_of_ones(name, aggr, layout):
    args = (torch.nn.Linear(3, 2),) if name == "GINConv" else (3, 2)
    ref, ours = _pair(name, *args, aggr=aggr)
    adj = (to_torch_csc_tensor if layout == "csc" else to_torch_coo_tensor)(EI, size=(4, 4)).t().double()
    x = torch.randn(4, 3, dtype=torch.float64)
    assert_same_formula(ours(x, adj), ref(x, adj))


def test_a_lazy_state_dict_from_torchs_lazy_linear_loads():
    """mgg's layers held torch's LazyLinear, whose bias is lazy too, before their first call; such
    a state_dict still loads (the layer keeps its own bias) and the layer then runs."""
    ours = mnn.SAGEConv(-1, 4)
    old = {k: torch.nn.parameter.UninitializedParameter() for k in ours.state_dict()}
    assert not ours.load_state_dict(old).missing_keys
    assert ours(torch.randn(4, 8), EI).shape == (4, 4)


def test_gat_draws_from_torchs_generator_as_pyg():
    """Building a GATConv leaves the global generator where PyG's leaves it: layers built after
    it get PyG's weights under the same seed (mgg's dropout seed is drawn aside, fork_rng)."""
    states = []
    for lib in (pnn, mnn):
        torch.manual_seed(3)
        lib.GATConv(4, 3, heads=2)
        states.append(lib.GATConv(6, 2).att_src.detach().clone())
    torch.testing.assert_close(states[0], states[1], rtol=0, atol=0)


@pytest.mark.parametrize(
    "name, args, kwargs",
    [
        ("GCNConv", (4, 3), {}),
        ("GCNConv", (4, 3), {"cached": True}),
        ("SAGEConv", (4, 3), {}),
        ("SAGEConv", (4, 3), {"aggr": "max"}),
        ("GINConv", (torch.nn.Linear(4, 3),), {}),
    ],
)
@pytest.mark.parametrize("graph", ["edge_index", "csr"])
def test_zero_nodes_give_pygs_empty_output(name, args, kwargs, graph):
    """x of 0 rows and a graph without edges: an empty output and gradients, as PyG gives."""
    ref, ours = _pair(name, *args, **kwargs)
    x = torch.zeros(0, 4, dtype=torch.float64, requires_grad=True)
    ei = torch.zeros(2, 0, dtype=torch.long)
    g = (
        ei
        if graph == "edge_index"
        else torch.sparse_csr_tensor(
            torch.zeros(1, dtype=torch.long), ei[0], torch.ones(0, dtype=torch.float64), (0, 0)
        )
    )
    out, out_r = ours(x, g), ref(x, ei)
    assert out.shape == out_r.shape == (0, 3)
    out.sum().backward()
    assert x.grad.shape == (0, 4)
    if kwargs.get("cached"):
        return  # a cached layer reuses its first graph, as PyG's does
    # and a graph that names a node x has no row for is one line, not an index error
    with pytest.raises(mgg.MggError, match="edge_index has 1 edges but x has no rows"):
        ours(x, torch.tensor([[0], [0]]))


def test_clear_plans_after_an_edit_the_version_counter_does_not_see():
    """An edit through .data keeps the tensor's version, so the remembered plan stays until
    mgg.nn.clear_plans(); an edit through the tensor itself is seen at once."""
    ref, ours = _pair("GCNConv", 4, 3)
    x = torch.randn(4, 4, dtype=torch.float64)
    ei = EI.clone()
    assert_same_formula(ours(x, ei), ref(x, ei))
    ei.data[1, 0] = 3  # unseen: the old graph's plan is used
    assert not torch.allclose(ours(x, ei), ref(x, ei))
    mnn.clear_plans()
    assert_same_formula(ours(x, ei), ref(x, ei))
    ei[1, 0] = 2  # seen: a new version
    assert_same_formula(ours(x, ei), ref(x, ei))

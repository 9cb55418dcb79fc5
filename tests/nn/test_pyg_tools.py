"""mgg's layers under PyG's own tools, against the same script with PyG's layers (float64):
to_hetero's per-edge-type calls, the explainers' edge masks (GNNExplainer on a GCN; set_masks on
SAGE and GIN), and PyG's propagate/message/aggregate hooks (GCN, GIN, SAGE through PyG's propagate;
GAT refuses them in one line)."""

import pytest
import torch

pytest.importorskip("torch_geometric")
import torch_geometric.nn as pnn  # noqa: E402
from torch_geometric.datasets import FakeHeteroDataset  # noqa: E402
from torch_geometric.explain import Explainer, GNNExplainer  # noqa: E402
from torch_geometric.explain.algorithm.utils import clear_masks, set_masks  # noqa: E402

import mgg  # noqa: E402
import mgg.nn as mnn  # noqa: E402
from mgg.errors import MggError  # noqa: E402
from mgg.testing import assert_same_formula  # noqa: E402


class _Hetero(torch.nn.Module):
    def __init__(self, nn, kind: str):
        super().__init__()
        if kind == "sage":
            self.c1, self.c2 = nn.SAGEConv((-1, -1), 16), nn.SAGEConv((-1, -1), 3)
        else:
            self.c1 = nn.GATConv((-1, -1), 8, heads=2, add_self_loops=False)
            self.c2 = nn.GATConv((-1, -1), 3, add_self_loops=False)

    def forward(self, x, edge_index):
        return self.c2(self.c1(x, edge_index).relu(), edge_index)


def _hetero_pair(kind: str):
    """The dataset, and to_hetero models of PyG's and mgg's layers with the same weights."""
    torch.manual_seed(0)
    data = FakeHeteroDataset(num_node_types=2, num_edge_types=4, avg_num_nodes=40, num_classes=3)[0]
    x = {k: v.double() for k, v in data.x_dict.items()}
    models = []
    for nn in (pnn, mnn):
        torch.manual_seed(1)
        m = pnn.to_hetero(_Hetero(nn, kind), data.metadata(), aggr="sum").double()
        m(x, data.edge_index_dict)  # sizes the lazy layers
        models.append(m)
    ref, ours = models
    missing = ours.load_state_dict(ref.state_dict())
    assert not missing.missing_keys and not missing.unexpected_keys
    return data, x, ref, ours


@pytest.mark.parametrize("kind", ["sage", "gat"])
def test_to_hetero_model_trains_as_with_pygs_layers(kind):
    data, x, ref, ours = _hetero_pair(kind)
    target = data["v0"].y
    out_ref, out = ref(x, data.edge_index_dict), ours(x, data.edge_index_dict)
    assert set(out) == set(out_ref) == set(data.node_types)
    for t in out_ref:
        assert_same_formula(out[t], out_ref[t], msg=t)
    losses = []
    for model in (ref, ours):
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        trace = []
        for _ in range(30):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x, data.edge_index_dict)["v0"], target)
            loss.backward()
            opt.step()
            trace.append(loss.item())
        losses.append(trace)
    assert losses[1][-1] < 0.8 * losses[1][0]  # it trains
    assert losses[1] == pytest.approx(losses[0], rel=1e-8)  # as PyG's layers, step by step


def _graph(n=30, e=120, f=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=g)
    ei[:, :4] = torch.arange(4).repeat(2, 1)  # a few self-loops: the mask skips those PyG re-adds
    return torch.randn(n, f, generator=g, dtype=torch.float64), ei


class _GCN(torch.nn.Module):
    def __init__(self, nn):
        super().__init__()
        self.c1, self.c2 = nn.GCNConv(8, 16), nn.GCNConv(16, 3)

    def forward(self, x, edge_index):
        return self.c2(self.c1(x, edge_index).relu(), edge_index).log_softmax(-1)


def test_gnnexplainer_explains_an_mgg_gcn_as_pygs():
    x, ei = _graph()
    explanations = []
    for nn in (pnn, mnn):
        torch.manual_seed(2)
        model = _GCN(nn).double()
        explainer = Explainer(
            model,
            algorithm=GNNExplainer(epochs=30),
            explanation_type="model",
            node_mask_type="attributes",
            edge_mask_type="object",
            model_config=dict(mode="multiclass_classification", task_level="node", return_type="log_probs"),
        )
        torch.manual_seed(3)
        default = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)  # GNNExplainer draws its masks in the default dtype
        try:
            explanations.append(explainer(x, ei, index=5).edge_mask)
        finally:
            torch.set_default_dtype(default)
    ref, ours = explanations
    assert ref.dtype == ours.dtype == torch.float64
    assert (ours > 0).sum() > 4 and ours.std() > 0  # the masks reached the loss through mgg's op
    assert_same_formula(ours, ref)


@pytest.mark.parametrize(
    "layer",
    [
        lambda nn: nn.SAGEConv(8, 5),
        lambda nn: nn.SAGEConv(8, 5, aggr="sum"),
        lambda nn: nn.SAGEConv(8, 5, project=True),
        lambda nn: nn.GINConv(torch.nn.Linear(8, 5)),
        lambda nn: nn.GINConv(torch.nn.Linear(8, 5), aggr="mean"),
        lambda nn: nn.GCNConv(8, 5),
        lambda nn: nn.GCNConv(8, 5, add_self_loops=False, normalize=False),
        lambda nn: nn.GCNConv(8, 5, improved=True),  # no edge weights: PyG's loops get 1, not 2
    ],
    ids=["sage-mean", "sage-sum", "sage-project", "gin-add", "gin-mean", "gcn", "gcn-plain", "gcn-improved"],
)
def test_an_edge_mask_scales_messages_as_pygs_explain_message(layer):
    x, ei = _graph()
    mask = torch.randn(ei.size(1), dtype=torch.float64)
    outs, grads = [], []
    for nn in (pnn, mnn):
        torch.manual_seed(4)
        conv = layer(nn).double()
        m = mask.clone().requires_grad_()
        set_masks(conv, m, ei, apply_sigmoid=True)
        out = conv(x, ei)
        (out * torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view_as(out)).sum().backward()
        clear_masks(conv)
        outs.append(out)
        grads.append(m.grad)
    assert_same_formula(outs[1], outs[0])
    assert_same_formula(grads[1], grads[0])
    assert grads[1].abs().sum() > 0


def test_gat_refuses_an_edge_mask_in_one_line():
    x, ei = _graph()
    conv = mnn.GATConv(8, 4).double()
    set_masks(conv, torch.zeros(ei.size(1)), ei)
    with pytest.raises(MggError, match="edge masks are not supported"):
        conv(x, ei)


_HOOKED = {
    "gcn": lambda nn: nn.GCNConv(8, 4),
    "gcn-improved-mean": lambda nn: nn.GCNConv(8, 4, improved=True, aggr="mean"),
    "gin": lambda nn: nn.GINConv(torch.nn.Linear(8, 4), train_eps=True),
    "sage": lambda nn: nn.SAGEConv(8, 4),
    "sage-max-project": lambda nn: nn.SAGEConv(8, 4, aggr="max", project=True, normalize=True),
    "sage-multi": lambda nn: nn.SAGEConv(8, 4, aggr=["mean", "sum"]),
}


def _record(conv, log: list) -> None:
    """Every PyG hook kind on conv, each appending what it sees to log; the propagate hook also
    changes the output (PyG lets a forward hook return a replacement)."""
    conv.register_propagate_forward_pre_hook(lambda m, inp: log.append(("propagate-pre", inp[0])))
    conv.register_message_forward_pre_hook(lambda m, inp: log.append(("message-pre", inp[0]["x_j"])))
    conv.register_message_forward_hook(lambda m, inp, out: log.append(("message", out)))
    conv.register_aggregate_forward_pre_hook(lambda m, inp: log.append(("aggregate-pre", inp[0]["index"])))
    conv.register_aggregate_forward_hook(lambda m, inp, out: log.append(("aggregate", out)))
    conv.register_propagate_forward_hook(lambda m, inp, out: 2 * out)


@pytest.mark.parametrize("bipartite", [False, True])
@pytest.mark.parametrize("layer", list(_HOOKED))
def test_pyg_hooks_see_what_pygs_layer_shows_them(layer, bipartite):
    """With PyG's hooks registered, mgg's layer runs PyG's propagate: each hook sees PyG's
    tensors (edges, messages, aggregates), the output and every gradient are PyG's."""
    if bipartite and layer.startswith("gcn"):
        pytest.skip("GCNConv takes one node set (as PyG)")
    x, ei = _graph()
    if bipartite:
        x = (x, torch.randn(12, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(3)))
        ei = ei[:, ei[1] < 12]
    runs = []
    for nn in (pnn, mnn):
        torch.manual_seed(1)
        conv = _HOOKED[layer](nn).double()
        if runs:
            conv.load_state_dict(runs[0][0].state_dict())
        log = []
        _record(conv, log)
        inputs = [t.detach().clone().requires_grad_() for t in (x if bipartite else (x,))]
        out = conv(tuple(inputs) if bipartite else inputs[0], ei)
        out.pow(2).sum().backward()
        runs.append((conv, log, out, inputs))
    (pc, plog, pout, pin), (mc, mlog, mout, min_) = runs
    assert [k for k, _ in mlog] == [k for k, _ in plog] and len(plog) == 5
    for (kind, got), (_, want) in zip(mlog, plog, strict=True):
        if want.is_floating_point():
            assert_same_formula(got, want, kind)
        else:
            assert torch.equal(got, want), kind
    assert_same_formula(mout, pout)
    for a, b in zip(min_, pin, strict=True):
        assert_same_formula(a.grad, b.grad)
    for (name, a), (_, b) in zip(mc.named_parameters(), pc.named_parameters(), strict=True):
        assert_same_formula(a.grad, b.grad, name)


def test_decomposed_layers_chunk_the_messages_as_pyg():
    """PyG's own test: with decomposed_layers=2 the message hook sees half the channels each time."""
    x, ei = _graph()
    shapes, outs = {}, {}
    for name, nn in (("pyg", pnn), ("mgg", mnn)):
        torch.manual_seed(1)
        conv = nn.GCNConv(8, 4).double()
        conv.register_message_forward_pre_hook(lambda m, inp, n=name: shapes.setdefault(n, []).append(inp[0]["x_j"]))
        conv.decomposed_layers = 2
        outs[name] = conv(x, ei)
    assert [t.shape[1] for t in shapes["mgg"]] == [2, 2]
    for a, b in zip(shapes["mgg"], shapes["pyg"], strict=True):
        assert_same_formula(a, b)
    assert_same_formula(outs["mgg"], outs["pyg"])


def test_without_hooks_the_layer_leaves_pygs_propagate_alone():
    """A removed hook puts the layer back on mgg's fused op (propagate is not called)."""
    x, ei = _graph()
    conv = mnn.SAGEConv(8, 4).double()
    handle = conv.register_message_forward_pre_hook(lambda m, inp: None)
    hooked = conv(x, ei)
    handle.remove()

    def refuse(*a, **k):
        raise AssertionError("propagate ran without hooks")

    conv.propagate = refuse
    assert_same_formula(conv(x, ei), hooked)


def test_hooks_need_an_edge_index_or_adjacency():
    x, ei = _graph()
    g = mgg.Graph.from_edge_index(ei, 30)
    conv = mnn.GINConv(torch.nn.Identity()).double()
    conv.register_message_forward_pre_hook(lambda m, inp: None)
    with pytest.raises(MggError, match="PyG's propagate") as e:
        conv(x, g)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kind", ["propagate", "message", "aggregate", "message_and_aggregate", "edge_update"])
@pytest.mark.parametrize("when", ["pre_hook", "hook"])
def test_hooks_that_would_never_run_are_refused_in_one_line(kind, when):
    """GATConv's attention does not run through PyG's propagate, and no layer calls PyG's
    edge_updater: those hooks are refused at registration."""
    convs = [mnn.GATConv(4, 4)] + ([mnn.GCNConv(4, 4), mnn.SAGEConv(4, 4)] if kind == "edge_update" else [])
    for conv in convs:
        assert isinstance(conv, pnn.MessagePassing)
        with pytest.raises(MggError, match="never calls propagate") as e:
            getattr(conv, f"register_{kind}_forward_{when}")(lambda *a: None)
        assert "\n" not in str(e.value)


def test_torch_forward_hooks_run():
    x, ei = _graph()
    seen = []
    conv = mnn.GCNConv(8, 4).double()
    conv.register_forward_hook(lambda mod, args, out: seen.append(out.shape))
    conv(x, ei)
    assert seen == [torch.Size([30, 4])]


@pytest.mark.parametrize(
    "layer",
    [
        lambda nn: nn.GINConv(torch.nn.Linear(6, 5)),
        lambda nn: nn.SAGEConv((6, 6), 5),
        lambda nn: nn.GATConv((6, 6), 5, heads=2),
    ],
    ids=["gin", "sage", "gat"],
)
@pytest.mark.parametrize("with_dst", [True, False])
def test_a_sparse_adjacency_gives_the_destination_count(layer, with_dst):
    """PyG takes N_dst from a sparse adjacency adj_t [N_dst, N_src] when neither size nor x_dst
    gives it: (x_src, None) with a [2, 4] adjacency has 2 destinations."""
    from torch_geometric.utils import to_torch_csc_tensor

    x1, x2 = torch.randn(4, 6, dtype=torch.float64), torch.randn(2, 6, dtype=torch.float64)
    ei = torch.tensor([[0, 1, 2, 3], [0, 0, 1, 1]])
    adj_t = to_torch_csc_tensor(ei, torch.ones(4, dtype=torch.float64), size=(4, 2)).t()
    x = (x1, x2 if with_dst else None)
    outs = []
    for nn in (pnn, mnn):
        torch.manual_seed(5)
        conv = layer(nn).double()
        outs.append((conv(x, adj_t), conv(x, ei, size=(4, 2))))
    (ref_adj, ref_ei), (ours_adj, ours_ei) = outs
    assert ours_adj.shape[0] == 2
    assert_same_formula(ours_adj, ref_adj)
    assert_same_formula(ours_ei, ref_ei)
    with pytest.raises(MggError, match="adjacency is"):
        mnn.SAGEConv(6, 5).double()((x1[:3], None), adj_t)

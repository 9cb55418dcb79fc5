"""mgg's layers under PyG's own tools, against the same script with PyG's layers (float64):
to_hetero's per-edge-type calls, the explainers' edge masks (GNNExplainer on a GCN; set_masks on
SAGE and GIN), and the propagate/message hooks they refuse in one line."""

import pytest
import torch

pytest.importorskip("torch_geometric")
import torch_geometric.nn as pnn  # noqa: E402
from torch_geometric.datasets import FakeHeteroDataset  # noqa: E402
from torch_geometric.explain import Explainer, GNNExplainer  # noqa: E402
from torch_geometric.explain.algorithm.utils import clear_masks, set_masks  # noqa: E402

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
    ],
    ids=["sage-mean", "sage-sum", "sage-project", "gin-add", "gin-mean", "gcn", "gcn-plain"],
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


@pytest.mark.parametrize("kind", ["propagate", "message", "aggregate", "message_and_aggregate", "edge_update"])
@pytest.mark.parametrize("when", ["pre_hook", "hook"])
def test_hooks_that_would_never_run_are_refused_in_one_line(kind, when):
    for conv in (mnn.GCNConv(4, 4), mnn.SAGEConv(4, 4), mnn.GINConv(torch.nn.Identity()), mnn.GATConv(4, 4)):
        assert isinstance(conv, pnn.MessagePassing)
        with pytest.raises(MggError, match="never call propagate"):
            getattr(conv, f"register_{kind}_forward_{when}")(lambda *a: None)


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

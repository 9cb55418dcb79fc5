"""GAT's attention: mgg.nn.GATConv against PyG's GATConv (the outside oracle: outputs, input and
weight gradients, attention weights) on graphs with every quirk, mgg.attend against a plain
torch reference with dropout, gradcheck, the ops' registration (opcheck), dtypes, and bad input.
The distributed backends are tested in test_distributed.py (halo, allgather) and
test_nvshmem_runtime.py (nvshmem, threads as PEs)."""
import pytest
import torch
import torch.nn.functional as F

import mgg
from mgg import MggError, ops
from mgg.nn import GATConv
from mgg.testing import random_graph, with_devices

pyg_nn = pytest.importorskip("torch_geometric.nn")


def quirky_edges(n: int = 120, e: int = 900, seed: int = 0) -> torch.Tensor:
    """A [2, E] edge_index with duplicate edges, self-loops (some nodes twice) and isolated
    nodes (the last 10 have no edges at all)."""
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n - 10, (2, e), generator=g)
    loops = torch.tensor([[3, 3, 7], [3, 3, 7]])
    return torch.cat([ei, ei[:, :40], loops], 1)


def reference_attend(h, a_src, a_dst, src, dst, slope, keep=None):
    """out_i = sum_e alpha_e h_src(e), alpha softmax over each destination's edges, in torch."""
    n = h.size(0)
    e = F.leaky_relu(a_src[src] + a_dst[dst], slope)
    top = e.new_full((n, h.size(1)), float("-inf")).scatter_reduce_(0, dst[:, None].expand_as(e), e, "amax")
    w = (e - top[dst]).exp()
    alpha = w / e.new_zeros((n, h.size(1))).index_add_(0, dst, w)[dst]
    if keep is not None:
        alpha = alpha * keep.to(alpha)
    return h.new_zeros(h.shape).index_add_(0, dst, alpha.unsqueeze(-1) * h[src])


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
    torch.testing.assert_close(b, a)
    g = torch.randn_like(a)
    a.backward(g)
    b.backward(g)
    torch.testing.assert_close(xb.grad, xa.grad)
    for (name, p), q in zip(ref.named_parameters(), ours.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, msg=name)


KWARGS = [dict(heads=1), dict(heads=4), dict(heads=3, concat=False), dict(heads=2, residual=True),
          dict(heads=2, add_self_loops=False), dict(heads=2, bias=False, negative_slope=0.1),
          dict(heads=2, concat=False, residual=True, add_self_loops=False)]


@pytest.mark.parametrize("kw", KWARGS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_matches_pyg_on_quirky_graph(kw):
    ref, ours = pair(in_channels=12, out_channels=5, **kw)
    x = torch.randn(120, 12, dtype=torch.float64)
    assert_same_step(ref, ours, x, quirky_edges())


def test_matches_pyg_on_cora(cora):
    """Cora as PyG's examples/gat.py has it (8 heads of 8), float32."""
    ref, ours = pair(dtype=torch.float32, in_channels=1433, out_channels=8, heads=8)
    x = cora.x.clone()
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ei = cora.graph.edge_index()
    a, b = ref(xa, ei), ours(xb, ei)
    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    a.sum().backward()
    b.sum().backward()
    torch.testing.assert_close(ours.lin.weight.grad, ref.lin.weight.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(ours.att_src.grad, ref.att_src.grad, rtol=1e-4, atol=1e-6)


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
    adj = torch.sparse_coo_tensor(torch.stack([ei[1], ei[0]]), torch.ones(ei.size(1)), (80, 80),
                                  check_invariants=True)
    torch.testing.assert_close(ours(x, adj), want)
    torch.testing.assert_close(ours(x, g), want)


def test_attention_weights_match_pyg():
    ref, ours = pair(in_channels=7, out_channels=4, heads=3)
    x, ei = torch.randn(120, 7, dtype=torch.float64), quirky_edges()
    out, (used, alpha) = ours(x, ei, return_attention_weights=True)
    out_r, (used_r, alpha_r) = ref(x, ei, return_attention_weights=True)
    assert torch.equal(used, used_r)
    torch.testing.assert_close(alpha, alpha_r)
    torch.testing.assert_close(out, out_r)
    assert ours(x, ei, return_attention_weights=False).shape == out.shape  # PyG: False returns the tensor


def test_dropout_mask_is_the_one_the_op_applies():
    """In training the returned alpha (after dropout) reproduces the output: the kernel and
    attention_keep draw the same mask; about p of the coefficients are dropped; the forward's mask
    is the backward's (gradcheck with dropout); eval mode drops nothing."""
    torch.manual_seed(1)
    conv = GATConv(5, 4, heads=2, dropout=0.4, add_self_loops=False, bias=False).double()
    x, ei = torch.randn(120, 5, dtype=torch.float64), quirky_edges()
    conv.reseed(99)
    out, (used, alpha) = conv(x, ei, return_attention_weights=True)
    h = conv.lin(x).view(-1, 2, 4)
    want = h.new_zeros(h.shape).index_add_(0, used[1], alpha.unsqueeze(-1) * h[used[0]])
    torch.testing.assert_close(out, want.reshape(120, -1))
    dropped = (alpha == 0).double().mean().item()
    assert 0.3 < dropped < 0.5, dropped
    conv.reseed(99)
    torch.testing.assert_close(conv(x, ei), out)  # one seed, one mask
    assert not torch.equal(conv(x, ei), out)  # the next call draws anew
    conv.eval()
    _, (_, alpha_eval) = conv(x, ei, return_attention_weights=True)
    assert bool((alpha_eval > 0).all())


@with_devices
@pytest.mark.parametrize("heads, channels", [(1, 1), (2, 16), (8, 8), (1, 257)])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_attend_matches_torch_reference_with_hubs(device, heads, channels, dropout):
    """Hub rows of thousands of in-edges (cut across partitions and blocks), forward and
    backward, against the plain torch reference in float64."""
    g = mgg.ops.attention_graph(random_graph(2000, 30000, seed=9, skew=0.9))
    src, dst = g.edge_index()
    gen = torch.Generator().manual_seed(heads * channels)
    h, a_src, a_dst = (torch.randn(*s, dtype=torch.float64, generator=gen)
                       for s in ((2000, heads, channels), (2000, heads), (2000, heads)))
    keep = torch.ops.mgg.attention_keep(dst, src, heads, 3, dropout) if dropout else None
    ref = [t.clone().requires_grad_() for t in (h, a_src, a_dst)]
    want = reference_attend(*ref, src, dst, 0.2, keep)
    dtype = torch.float32 if device == "cuda" else torch.float64
    got_in = [t.to(device, dtype).requires_grad_() for t in (h, a_src, a_dst)]
    got = ops.attend(*got_in, g, 0.2, dropout, 3)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else {}
    torch.testing.assert_close(got.double().cpu(), want.detach(), **tol)
    w = torch.randn(want.shape, dtype=torch.float64, generator=gen)
    (want * w).sum().backward()
    (got * w.to(device, dtype)).sum().backward()
    for a, b in zip(got_in, ref, strict=True):
        torch.testing.assert_close(a.grad.double().cpu(), b.grad, **tol)


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_attend_matches_torch_reference_and_gradcheck(dropout):
    g = mgg.ops.attention_graph(random_graph(40, 200, seed=5, skew=0.5))
    src, dst = g.edge_index()
    gen = torch.Generator().manual_seed(2)
    h, a_src, a_dst = (torch.randn(*s, dtype=torch.float64, generator=gen, requires_grad=True)
                       for s in ((40, 3, 4), (40, 3), (40, 3)))
    keep = torch.ops.mgg.attention_keep(dst, src, 3, 17, dropout) if dropout else None
    out = ops.attend(h, a_src, a_dst, g, 0.2, dropout, 17)
    torch.testing.assert_close(out, reference_attend(h, a_src, a_dst, src, dst, 0.2, keep))
    assert torch.autograd.gradcheck(lambda *t: ops.attend(*t, g, 0.2, dropout, 17), (h, a_src, a_dst))


def test_opcheck():
    g = mgg.ops.attention_graph(random_graph(30, 150, seed=6))
    rp = mgg.Plan(g).rank_plan(0, mgg.Config())
    table = torch.randn(30, 2 * 4, dtype=torch.float64)
    a_dst = torch.randn(30, 2, dtype=torch.float64)
    plan, params = rp.op_args("cpu")
    args = (table, table.new_empty((0, 8)), a_dst, plan, params, 2, 0.2, 0.3, 5, None, 0)
    torch.library.opcheck(torch.ops.mgg.attend.default, args)
    src, dst = g.edge_index()
    torch.library.opcheck(torch.ops.mgg.attention_keep.default, (dst, src, 2, 5, 0.3))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_storage(dtype):
    """Half-precision features, fp32 softmax and sums: close to the float64 result."""
    g = mgg.ops.attention_graph(random_graph(200, 3000, seed=8, skew=0.7))
    gen = torch.Generator().manual_seed(3)
    h, a_src, a_dst = (torch.randn(*s, dtype=torch.float64, generator=gen) for s in ((200, 2, 16), (200, 2), (200, 2)))
    want = ops.attend(h, a_src, a_dst, g)
    got = ops.attend(h.to(dtype), a_src.to(dtype), a_dst.to(dtype), g)
    assert got.dtype == dtype
    tol = {torch.float16: 2e-2, torch.bfloat16: 8e-2, torch.float32: 1e-5}[dtype]
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
    hh = h.to(dtype).requires_grad_()
    ops.attend(hh, a_src.to(dtype), a_dst.to(dtype), g).sum().backward()
    assert hh.grad.dtype == dtype and bool(torch.isfinite(hh.grad).all())


@with_devices
def test_devices_agree(device):
    """The same layer on each device gives CPU's outputs, gradients and dropout mask."""
    torch.manual_seed(4)
    conv = GATConv(9, 6, heads=3, dropout=0.5)
    x, ei = torch.randn(120, 9), quirky_edges()
    conv.reseed(7)
    xa = x.clone().requires_grad_()
    want = conv(xa, ei)
    want.square().sum().backward()
    conv = conv.to(device)
    conv.reseed(7)
    xb = x.to(device).requires_grad_()
    got = conv(xb, ei.to(device))
    got.square().sum().backward()
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xb.grad.cpu(), xa.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("make, err, msg", [
    (lambda: GATConv((4, 4), 2), MggError, "in_channels must be an int"),
    (lambda: GATConv(-1, 2), MggError, "lazy initialisation"),
    (lambda: GATConv(4, 2, edge_dim=3), MggError, "edge features"),
    (lambda: GATConv(4, 2, autotune=True), MggError, "autotune is not supported"),
    (lambda: GATConv(4, 2, aggr="mean"), MggError, "aggr must be 'add'"),
    (lambda: GATConv(4, 2, node_dim=0), TypeError, "multiple values for keyword argument 'node_dim'"),
    (lambda: GATConv(4, 2, heads=0), MggError, "heads must be an int"),
    (lambda: GATConv(4, 2, dropout=1.0), MggError, r"dropout must be in \[0, 1\)"),
    (lambda: GATConv(4, 2, colour="red"), TypeError, "unexpected keyword argument"),
    (lambda: GATConv(4, 2)(torch.randn(5, 3), torch.tensor([[0], [1]])), MggError, "x has 3 channels"),
    (lambda: GATConv(4, 2)(torch.randn(5, 2, 4), torch.tensor([[0], [1]])), MggError, "x must be 2-D"),
    (lambda: GATConv(4, 2)(torch.randn(5, 4), torch.tensor([[0], [1]]), edge_attr=torch.ones(1, 2)), MggError,
     "edge_attr is not supported"),
    (lambda: GATConv(4, 2)(torch.randn(5, 4), torch.tensor([[0], [1]]), size=(5, 3)), MggError, "bipartite"),
    (lambda: GATConv(4, 2)(torch.randn(5, 4), torch.tensor([[0], [9]])), MggError, "9"),
    (lambda: ops.attend(torch.randn(5, 2, 3), torch.randn(5, 3), torch.randn(5, 2), random_graph(5, 8, seed=1)),
     MggError, "a_src, a_dst"),
])
def test_bad_input_is_one_line(make, err, msg):
    with pytest.raises(err, match=msg) as e:
        make()
    assert "\n" not in str(e.value)


def test_gat_trains_on_cora_like_pygs(cora):
    """examples/gat.py's model and protocol, 60 epochs, mgg's layers and PyG's from one seed:
    both learn (validation accuracy well above chance), within a few points of each other."""
    from mgg.train import TrainConfig, train_once

    ours = train_once(cora, TrainConfig(model="gat", epochs=60), 0, progress=False)
    theirs = train_once(cora, TrainConfig(model="gat", epochs=60, conv_module=pyg_nn), 0, progress=False)
    assert ours.val_acc > 0.7 and theirs.val_acc > 0.7
    assert abs(ours.test_acc - theirs.test_acc) < 0.06

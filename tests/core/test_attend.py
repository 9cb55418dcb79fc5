"""GAT's attention op without PyG: mgg.attend against the plain torch reference
(mgg.testing.attention_reference) with hub rows and dropout, gradcheck, the ops' registration
(opcheck), storage dtypes against the float64 reference at tolerances derived from their rounding,
GATConv's dropout mask, and bad input. GATConv against PyG's layer is in test_gat.py; the
distributed backends in test_distributed.py (halo, allgather) and test_nvshmem_runtime.py
(nvshmem, threads as PEs). The device-parametrised tests also run "emu": the CUDA host code and
kernels under the SIMT emulator on CPU tensors (simt/emulator.py), on smaller graphs unless
MGG_EMU_FULL=1."""

import pytest
import torch

import mgg
from mgg import MggError, functional
from mgg.nn import GATConv
from mgg.testing import (
    assert_attention_gradients_match_reference,
    assert_attention_matches_reference,
    attention_reference,
    quirky_edges,
    random_graph,
)
from simt import emulator
from simt.emulator import gpu_and_emulated, with_devices_emulated


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


@with_devices_emulated
@pytest.mark.parametrize("heads, channels", [(1, 1), (2, 16), (8, 8), (1, 256), (1, 257)])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_attend_matches_torch_reference_with_hubs(device, heads, channels, dropout):
    """Hub rows of thousands of in-edges (cut across partitions and blocks; emulated: hundreds,
    unless MGG_EMU_FULL=1), forward and backward, against the plain torch reference in float64.
    The CUDA kernels take at most 256 channels per head: 257 is refused in one line."""
    cuda = device == "cuda" or bool(emulator.ACTIVE)
    n, e = (300, 4000) if emulator.ACTIVE and not emulator.FULL else (2000, 30000)
    g = mgg.functional.attention_graph(random_graph(n, e, seed=9, skew=0.9))
    src, dst = g.edge_index()
    gen = torch.Generator().manual_seed(heads * channels)
    h, a_src, a_dst = (
        torch.randn(*s, dtype=torch.float64, generator=gen) for s in ((n, heads, channels), (n, heads), (n, heads))
    )
    keep = torch.ops.mgg.attention_keep(dst, src, heads, 3, dropout) if dropout else None
    dtype = torch.float32 if cuda else torch.float64
    got_in = [t.to(device, dtype).requires_grad_() for t in (h, a_src, a_dst)]
    if cuda and channels > 256:
        with pytest.raises(RuntimeError, match="mgg.attend: attention heads of 257 channels exceed the kernels' 256 "):
            functional.attend(*got_in, g, 0.2, dropout, 3)
        return
    got = functional.attend(*got_in, g, 0.2, dropout, 3)
    assert_attention_matches_reference(got, *got_in, src, dst, 0.2, keep)
    w = torch.randn(got.shape, dtype=torch.float64, generator=gen).to(device, dtype)
    got.backward(w)
    assert_attention_gradients_match_reference([t.grad for t in got_in], *got_in, src, dst, 0.2, w, keep)


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_attend_matches_torch_reference_and_gradcheck(dropout):
    g = mgg.functional.attention_graph(random_graph(40, 200, seed=5, skew=0.5))
    src, dst = g.edge_index()
    gen = torch.Generator().manual_seed(2)
    h, a_src, a_dst = (
        torch.randn(*s, dtype=torch.float64, generator=gen, requires_grad=True) for s in ((40, 3, 4), (40, 3), (40, 3))
    )
    keep = torch.ops.mgg.attention_keep(dst, src, 3, 17, dropout) if dropout else None
    out = functional.attend(h, a_src, a_dst, g, 0.2, dropout, 17)
    torch.testing.assert_close(out, attention_reference(h, a_src, a_dst, src, dst, 0.2, keep))
    assert torch.autograd.gradcheck(lambda *t: functional.attend(*t, g, 0.2, dropout, 17), (h, a_src, a_dst))


def test_opcheck():
    g = mgg.functional.attention_graph(random_graph(30, 150, seed=6))
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
    """Features and terms stored in dtype, softmax and sums in fp32: the output and the gradients
    of h, a_src and a_dst against the float64 reference of the inputs as stored, at tolerances
    derived from the storage and accumulation rounding (mgg.testing)."""
    g = functional.attention_graph(random_graph(200, 3000, seed=8, skew=0.7))
    src, dst = g.edge_index()
    gen = torch.Generator().manual_seed(3)
    h, a_src, a_dst = (
        torch.randn(*s, dtype=torch.float64, generator=gen).to(dtype) for s in ((200, 2, 16), (200, 2), (200, 2))
    )
    ins = [t.clone().requires_grad_() for t in (h, a_src, a_dst)]
    got = functional.attend(*ins, g)
    assert got.dtype == dtype
    assert_attention_matches_reference(got, h, a_src, a_dst, src, dst, 0.2)
    go = torch.randn(got.shape, dtype=torch.float64, generator=gen).to(dtype)
    got.backward(go)
    assert all(t.grad.dtype == dtype for t in ins)
    assert_attention_gradients_match_reference([t.grad for t in ins], h, a_src, a_dst, src, dst, 0.2, go)


@gpu_and_emulated
def test_cuda_agrees_with_cpu(device):
    """The same layer on the GPU (or emulated) in float32 gives the CPU's float64 outputs and
    input gradients, with the same dropout mask."""
    torch.manual_seed(4)
    conv = GATConv(9, 6, heads=3, dropout=0.5)
    x, ei = torch.randn(120, 9), quirky_edges()
    conv.reseed(7)
    xa = x.double().requires_grad_()
    with emulator.suspended():  # the reference on the CPU kernels
        want = conv.double()(xa, ei)
        want.square().sum().backward()
    calls = emulator.CALLS["attend"]
    conv = conv.float().to(device)
    conv.reseed(7)
    xb = x.to(device).requires_grad_()
    got = conv(xb, ei.to(device))
    got.square().sum().backward()
    err = (got.double().cpu() - want).abs().max().item()
    assert err <= 1e-5 * max(1.0, want.abs().max().item()), err
    gerr = (xb.grad.double().cpu() - xa.grad).abs().max().item()
    assert gerr <= 1e-4 * max(1.0, xa.grad.abs().max().item()), gerr
    assert emulator.CALLS["attend"] - calls == (1 if emulator.ACTIVE else 0)


@pytest.mark.parametrize(
    "make, err, msg",
    [
        (lambda: GATConv((4, 4, 4), 2), MggError, "in_channels must be a positive int, -1"),
        (lambda: GATConv(0, 2), MggError, "in_channels must be a positive int, -1"),
        (lambda: GATConv(4, 2, edge_dim=1.5), MggError, "edge_dim must be a positive int"),
        (lambda: GATConv(4, 2, autotune=True), MggError, "autotune is not supported"),
        (lambda: GATConv(4, 2, aggr="mean"), MggError, "aggr must be 'add'"),
        (lambda: GATConv(4, 2, node_dim=0), TypeError, "multiple values for keyword argument 'node_dim'"),
        (lambda: GATConv(4, 2, heads=0), MggError, "heads must be an int"),
        (lambda: GATConv(4, 2, dropout=1.0), MggError, r"dropout must be in \[0, 1\)"),
        (lambda: GATConv(4, 2, colour="red"), TypeError, "unexpected keyword argument"),
        (lambda: GATConv(4, 2)(torch.randn(5, 3), torch.tensor([[0], [1]])), MggError, "x has 3 channels"),
        (lambda: GATConv(4, 2)(torch.randn(5, 2, 4), torch.tensor([[0], [1]])), MggError, "x must be 2-D"),
        (
            lambda: GATConv(4, 2, edge_dim=2)(torch.randn(5, 4), torch.tensor([[0], [1]]), edge_attr=torch.ones(3, 2)),
            MggError,
            "edge_attr has 3 rows for 1 edges",
        ),
        (
            lambda: GATConv(4, 2)(torch.randn(5, 4), torch.tensor([[0], [1]]), size=(5, 3)),
            MggError,
            r"size \(5, 3\) does not match",
        ),
        (lambda: GATConv(4, 2)(torch.randn(5, 4), torch.tensor([[0], [9]])), MggError, "9"),
        (
            lambda: functional.attend(
                torch.randn(5, 2, 3), torch.randn(5, 3), torch.randn(5, 2), random_graph(5, 8, seed=1)
            ),
            MggError,
            "a_src, a_dst",
        ),
    ],
)
def test_bad_input_is_one_line(make, err, msg):
    with pytest.raises(err, match=msg) as e:
        make()
    assert "\n" not in str(e.value)

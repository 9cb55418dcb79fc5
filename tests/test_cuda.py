"""The CUDA implementations against the CPU implementation and cuSPARSE (torch.sparse.mm).
Skipped without a GPU; run on the H100/H200 (bench/gpu_verify.sh)."""
import numpy as np
import pytest
import torch

import mgg
from mgg import Config, Graph, Plan
from mgg.ops import _run, _run_peers

from conftest import random_graph, requires_cuda

pytestmark = [requires_cuda, pytest.mark.gpu]

DIMS = [1, 16, 31, 64, 128, 256, 257, 1030, 2100]
TOL = {torch.float32: 1e-4, torch.float16: 3e-3, torch.bfloat16: 2e-2}


@pytest.fixture(scope="module", params=["uniform", "skewed"])
def graph(request):
    return random_graph(2000, 40000, seed=7, weighted=True, skew=0.0 if request.param == "uniform" else 0.9)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("config", [Config(1, 1, 1), Config(16, 4, 4), Config(32, 16, 16)], ids=str)
@pytest.mark.parametrize("deterministic", [False, True])
def test_forward_matches_cpu_and_cusparse(graph, dim, config, deterministic):
    x = torch.randn(graph.num_nodes, dim)
    plan = Plan(graph)
    cpu = mgg.aggregate(x, plan, config)
    out = mgg.aggregate(x.cuda(), plan, config, deterministic=deterministic)
    ref = torch.sparse.mm(graph.to_torch_sparse().cuda(), x.cuda())
    torch.testing.assert_close(out.cpu(), cpu, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dim", [33, 256])
def test_dtypes_forward_backward(graph, dtype, dim):
    plan = Plan(graph)
    x = torch.randn(graph.num_nodes, dim).to(dtype)
    xg = x.cuda().requires_grad_()
    out = mgg.aggregate(xg, plan, Config(8, 2, 4))
    g = torch.randn_like(out)
    (grad,) = torch.autograd.grad(out, xg, g)
    xc = x.clone().requires_grad_()
    out_c = mgg.aggregate(xc, plan, Config(8, 2, 4))
    (grad_c,) = torch.autograd.grad(out_c, xc, g.cpu())
    tol = TOL[dtype]
    torch.testing.assert_close(out.cpu().float(), out_c.float(), rtol=tol, atol=tol)
    torch.testing.assert_close(grad.cpu().float(), grad_c.float(), rtol=tol, atol=tol)


def test_backward_directed_equals_transpose():
    g = random_graph(500, 8000, seed=3, weighted=True, skew=0.8)
    x = torch.randn(500, 70, device="cuda", requires_grad=True)
    go = torch.randn(500, 70, device="cuda")
    (grad,) = torch.autograd.grad(mgg.aggregate(x, Plan(g)), x, go)
    ref = torch.sparse.mm(g.to_torch_sparse().t().to_sparse_csr().cuda(), go)
    torch.testing.assert_close(grad, ref, rtol=1e-4, atol=1e-4)


def test_deterministic_mode_is_bit_identical():
    g = random_graph(3000, 90000, seed=9, weighted=True, skew=0.9)
    x = torch.randn(3000, 96, device="cuda")
    plan = Plan(g)
    first = mgg.aggregate(x, plan, Config(4, 2, 4), deterministic=True)
    for _ in range(20):
        assert torch.equal(mgg.aggregate(x, plan, Config(4, 2, 4), deterministic=True), first)


def test_output_not_left_from_previous_call():
    g = random_graph(300, 3000, seed=1)
    plan = Plan(g)
    x = torch.randn(300, 64, device="cuda")
    a = mgg.aggregate(x, plan)
    mgg.aggregate(x * 100, plan)
    torch.testing.assert_close(mgg.aggregate(x, plan), a)


@pytest.mark.parametrize("deterministic", [False, True])
def test_every_row_written_over_garbage(deterministic):
    """The output is torch.empty: the caching allocator hands back memory full of NaN here, so
    a row the kernels failed to write (an isolated node, a cut row) would show."""
    g = Graph.from_edges(np.arange(5000) % 400, np.r_[np.zeros(3000, int), np.arange(2000) % 350], 500)
    plan = Plan(g)
    x = torch.randn(500, 72, device="cuda")
    for cfg in (Config(1, 1, 1), Config(4, 2, 2), Config(16, 4, 4)):
        torch.full((500 * 72 * 4,), float("nan"), device="cuda")  # freed at once, reused below
        out = mgg.aggregate(x, plan, cfg, deterministic=deterministic)
        ref = torch.sparse.mm(g.to_torch_sparse().cuda(), x)
        assert not out.isnan().any()
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("dim", [16, 200, 300])
@pytest.mark.parametrize("deterministic", [False, True])
def test_peers_direct_in_one_process(ranks, dim, deterministic):
    """aggregate_peers with direct loads: each rank reads remote rows from the other ranks'
    slices of one device table (what PEs do through nvshmem_ptr), against cuSPARSE."""
    g = random_graph(3000, 60000, seed=5, weighted=True, skew=0.8)
    x = torch.randn(3000, dim, device="cuda")
    plan = Plan(g, ranks)
    tables = [x[int(plan.bounds[r]):int(plan.bounds[r + 1])] for r in range(ranks)]
    out = torch.cat([_run_peers(tables[r], tables, r, plan.rank_plan(r, Config(8, 2, 4)), "direct", deterministic)
                     for r in range(ranks)])
    torch.testing.assert_close(out, torch.sparse.mm(g.to_torch_sparse().cuda(), x), rtol=1e-4, atol=1e-4)


def test_halo_and_peers_agree_and_large_blocks_tile_columns():
    """wpb = 16 with D = 2100: shared memory forces narrower column tiles."""
    g = random_graph(1500, 30000, seed=8, skew=0.5)
    x = torch.randn(1500, 2100, device="cuda")
    plan = Plan(g, 2)
    cfg = Config(32, 16, 16)
    tables = [x[int(plan.bounds[r]):int(plan.bounds[r + 1])] for r in range(2)]
    for r in range(2):
        rp = plan.rank_plan(r, cfg)
        halo = x[rp.partition.halo_nodes.cuda()].contiguous()
        a = _run(tables[r].contiguous(), halo, rp, False)
        b = _run_peers(tables[r], tables, r, rp, "direct", False)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_bad_schedule_is_an_error_on_the_gpu():
    g = random_graph(200, 3000, seed=3)
    rp = Plan(g).rank_plan(0, Config(4, 2, 2)).to("cuda")
    x = torch.randn(200, 8, device="cuda")
    args = list(rp.op_args())
    args[8] = args[8].clone()
    args[8][0, 1] += 50  # block 0 claims rows it may not hold
    with pytest.raises(RuntimeError, match="block 0 has rows|written 2 times|outside its block"):
        torch.ops.mgg.aggregate(x, x.new_empty((0, 8)), *args, False)
    args = list(rp.op_args())
    args[2] = args[2].clone()
    args[2][5] = 10**6  # local_col out of range
    with pytest.raises(RuntimeError, match=r"local_col\[5\] = 1000000 is outside \[0, 200\)"):
        torch.ops.mgg.aggregate(x, x.new_empty((0, 8)), *args, False)
    torch.cuda.synchronize()  # the context is still healthy


def test_torch_compile_on_gpu():
    g = random_graph(400, 5000, seed=2, weighted=True)
    rp = Plan(g).rank_plan(0, Config()).to("cuda")
    x = torch.randn(400, 48, device="cuda")
    f = torch.compile(lambda t: torch.ops.mgg.aggregate(t, t.new_empty((0, 48)), *rp.op_args(), False).relu(),
                      fullgraph=True)
    ref = torch.sparse.mm(g.to_torch_sparse().cuda(), x).relu()
    torch.testing.assert_close(f(x), ref, rtol=1e-4, atol=1e-4)


def test_bad_input_is_an_error_not_a_crash():
    g = random_graph(100, 500)
    rp = Plan(g).rank_plan(0, Config()).to("cuda")
    x = torch.randn(100, 8, device="cuda")
    args = list(rp.op_args())
    args[0] = args[0].cpu()  # a plan tensor on the wrong device
    with pytest.raises(RuntimeError, match="every plan tensor must be on cuda"):
        torch.ops.mgg.aggregate(x, x.new_empty((0, 8)), *args, False)
    with pytest.raises(RuntimeError, match="float64 is supported on the CPU only"):
        torch.ops.mgg.aggregate(x.double(), x.new_empty((0, 8)).double(), *rp.op_args(), False)
    with pytest.raises(RuntimeError, match="NVSHMEM is not initialised|not in NVSHMEM's symmetric heap"):
        _run_peers(x, [x, x], 0, Plan(g, 2).rank_plan(0, Config()), "get-warp", False)
    torch.cuda.synchronize()  # the context is still healthy

"""The CUDA implementation against the CPU implementation and cuSPARSE (torch.sparse.mm).
Skipped without a GPU; run on the H100/H200 (scripts/gpu_verify.sh)."""
import pytest
import torch

import mgg
from mgg import Config, Plan

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
    torch.cuda.synchronize()  # the context is still healthy

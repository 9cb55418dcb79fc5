"""torch.ops.mgg.aggregate on the CPU against torch.sparse and PyG; autograd, opcheck,
torch.compile, multi-rank plans and bad input."""
import pytest
import torch

import mgg
from mgg import Config, Graph, MggError, Plan, make_plan
from mgg.ops import _run

from conftest import random_graph

CONFIGS = [Config(1, 1, 1), Config(4, 3, 2), Config(32, 16, 16)]


def dense_ref(g: Graph, x: torch.Tensor) -> torch.Tensor:
    return (g.to_torch_sparse(torch.float64) @ x.double())


@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dim", [1, 7, 32, 33, 130])
def test_matches_torch_sparse(config, weighted, dim):
    g = random_graph(300, 3000, seed=dim, weighted=weighted, skew=0.7)
    x = torch.randn(300, dim)
    out = mgg.aggregate(x, Plan(g), config)
    torch.testing.assert_close(out, dense_ref(g, x).float(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype, tol", [(torch.float16, 2e-3), (torch.bfloat16, 1e-2), (torch.float64, 1e-12)])
def test_dtypes_accumulate_in_fp32(dtype, tol):
    g = random_graph(200, 4000, weighted=True)
    x = torch.randn(200, 40).to(dtype)
    out = mgg.aggregate(x, g)
    assert out.dtype == dtype
    ref = dense_ref(g, x.double())  # exact sum of the stored (rounded) inputs
    # fp32 accumulation: only the final rounding to the storage type remains
    torch.testing.assert_close(out.double(), ref.to(dtype).double(), rtol=tol, atol=tol)


def test_large_dim():
    g = random_graph(50, 400, weighted=True)
    x = torch.randn(50, 1030)
    torch.testing.assert_close(mgg.aggregate(x, g), dense_ref(g, x).float(), rtol=1e-5, atol=1e-5)


def test_reductions_match_pyg(cora):
    pyg_utils = pytest.importorskip("torch_geometric.utils")
    g = cora.graph
    ei = g.edge_index()
    x = torch.randn(g.num_nodes, 24)
    for reduce in ("sum", "mean"):
        ref = pyg_utils.scatter(x[ei[0]], ei[1], 0, g.num_nodes, reduce=reduce)
        torch.testing.assert_close(mgg.aggregate(x, g, reduce=reduce), ref, rtol=1e-5, atol=1e-5)


def test_gcn_weights_match_pyg_propagate(cora):
    gcn = pytest.importorskip("torch_geometric.nn.conv.gcn_conv")
    ei = cora.graph.edge_index()
    x = torch.randn(cora.graph.num_nodes, 16)
    conv = gcn.GCNConv(16, 16, bias=False)
    ei_n, w = gcn.gcn_norm(ei, None, cora.graph.num_nodes)
    ref = conv.propagate(ei_n, x=x, edge_weight=w)
    out = mgg.aggregate(x, cora.graph.gcn_norm())
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("directed", [True, False])
def test_gradcheck_through_transposed_plan(directed):
    g = random_graph(25, 120, seed=5, weighted=True)
    if not directed:
        g = Graph.from_scipy(g.to_scipy() + g.to_scipy().T)
    plan = Plan(g)
    assert (plan.transposed is plan) == (not directed)
    x = torch.randn(25, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: mgg.aggregate(t, plan, Config(3, 2, 1)), (x,))
    # and the gradient equals A^T g exactly
    g_out = torch.randn(25, 3, dtype=torch.float64)
    (grad,) = torch.autograd.grad(mgg.aggregate(x, plan), x, g_out)
    torch.testing.assert_close(grad, g.to_torch_sparse(torch.float64).t() @ g_out)


def _raw_args(g, dim=8, dtype=torch.float32, config=Config(4, 2, 2)):
    rp = Plan(g).rank_plan(0, config)
    x = torch.randn(g.num_nodes, dim, dtype=dtype)
    return (x, x.new_empty((0, dim)), *rp.op_args(), False)


def test_opcheck():
    g = random_graph(60, 500, weighted=True)
    torch.library.opcheck(torch.ops.mgg.aggregate.default, _raw_args(g))
    torch.library.opcheck(torch.ops.mgg.aggregate.default, _raw_args(random_graph(60, 500), dtype=torch.bfloat16))


def test_torch_compile_traces_the_op():
    g = random_graph(80, 600, weighted=True)
    args = _raw_args(g)
    f = torch.compile(lambda x: torch.ops.mgg.aggregate(x, *args[1:]) * 2, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(f(args[0]), 2 * dense_ref(g, args[0]).float(), rtol=1e-5, atol=1e-5)


def test_deterministic_and_thread_count_independent():
    g = random_graph(200, 5000, weighted=True)
    x = torch.randn(200, 64)
    plan = Plan(g)
    n = torch.get_num_threads()
    a = mgg.aggregate(x, plan, deterministic=True)
    torch.set_num_threads(1)
    try:
        b = mgg.aggregate(x, plan, deterministic=True)
    finally:
        torch.set_num_threads(n)
    assert torch.equal(a, b)


@pytest.mark.parametrize("ranks", [2, 3, 5])
def test_multi_rank_plan_reassembles_global_result(ranks):
    """Each rank aggregates its rows from its own range (local) and a halo of peers' rows
    (remote); stacked, the ranks give the single-rank answer."""
    g = random_graph(150, 2000, weighted=True, skew=0.5)
    x = torch.randn(150, 20)
    plan = Plan(g, ranks)
    parts = []
    for r in range(ranks):
        rp = plan.rank_plan(r, Config(3, 2, 2))
        p = rp.partition
        parts.append(_run(x[p.row_begin:p.row_end].contiguous(), x[p.halo_nodes].contiguous(), rp, False))
    torch.testing.assert_close(torch.cat(parts), dense_ref(g, x).float(), rtol=1e-5, atol=1e-5)


def test_bad_input_errors():
    g = random_graph(30, 100)
    with pytest.raises(MggError, match="x has 29 rows but the graph has 30 nodes"):
        mgg.aggregate(torch.randn(29, 4), g)
    with pytest.raises(MggError, match="x must be a 2-D tensor"):
        mgg.aggregate(torch.randn(30), g)
    with pytest.raises(MggError, match="reduce must be one of"):
        make_plan(g, "max")
    with pytest.raises(MggError, match="runs one rank"):
        mgg.aggregate(torch.randn(30, 4), Plan(g, 2))
    args = list(_raw_args(g))
    with pytest.raises(RuntimeError, match="x must be float32, float64, float16 or bfloat16"):
        torch.ops.mgg.aggregate(args[0].int(), args[1].int(), *args[2:])
    bad = list(args)
    bad[4] = args[4].clone()
    bad[4][3] = 1000  # local_col out of range
    with pytest.raises(RuntimeError, match=r"local_col\[3\] = 1000 is outside \[0, 30\)"):
        torch.ops.mgg.aggregate(*bad)
    bad = list(args)
    bad[3] = args[3].long()
    with pytest.raises(RuntimeError, match="local_part_row must be Int"):
        torch.ops.mgg.aggregate(*bad)
    bad = list(args)
    bad[2] = args[2].flip(0).contiguous()
    with pytest.raises(RuntimeError, match="local_part_ptr must start at 0"):
        torch.ops.mgg.aggregate(*bad)
    bad = list(args)
    bad[13] = 0
    with pytest.raises(RuntimeError, match="warps_per_block must be in"):
        torch.ops.mgg.aggregate(*bad)

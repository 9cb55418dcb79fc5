"""torch.ops.mgg.aggregate on the CPU against torch.sparse and PyG; autograd, opcheck,
torch.compile, multi-rank plans and bad input."""
import numpy as np
import pytest
import torch

import mgg
from mgg import Config, Graph, MggError, Plan, make_plan
from mgg.ops import _run, _run_peers

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


def test_opcheck_peers():
    g = random_graph(60, 500, weighted=True)
    plan = Plan(g, 3)
    x = torch.randn(60, 8)
    tables = [x[int(plan.bounds[r]):int(plan.bounds[r + 1])].contiguous() for r in range(3)]
    rp = plan.rank_plan(1, Config(4, 2, 2))
    torch.library.opcheck(torch.ops.mgg.aggregate_peers.default, (tables[1], tables, 1, *rp.peer_op_args(), 0, False))


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
    bad[14] = 0
    with pytest.raises(RuntimeError, match="warps_per_block must be in"):
        torch.ops.mgg.aggregate(*bad)


def _corrupt(args, index, fn):
    bad = list(args)
    bad[index] = args[index].clone()
    fn(bad[index])
    return bad


@pytest.mark.parametrize("index, fn, msg", [
    (10, lambda b: b.__setitem__((0, 1), b[0, 1] + 1), r"block 0 has rows|written 2 times|outside its block"),
    (10, lambda b: b.__setitem__((-1, 1), b[-1, 1] - 1), r"lies outside its block|is written 0 times"),
    (10, lambda b: b.__setitem__((0, 3), b[0, 3] + 100), r"local partitions; the schedule allows 0 to"),
    (10, lambda b: b.__setitem__((1, 2), b[1, 2] + 1), r"partitions do not follow block 0"),
    (7, lambda r: r.__setitem__(0, 10**6), r"remote_part_row\[0\] = 1000000 is outside"),
    (2, lambda p: p.__setitem__(3, p[2] - 1), r"local_part_ptr decreases at partition"),
])
def test_bad_schedule_is_an_error(index, fn, msg):
    """A schedule that would read outside the plan or leave a row unwritten is refused."""
    g = random_graph(40, 600, seed=4)
    plan = Plan(g, 2)
    rp = plan.rank_plan(0, Config(16, 8, 2))
    assert rp.fixups.size(0) == 0 and rp.num_blocks > 2
    p = rp.partition
    x = torch.randn(g.num_nodes, 8)
    args = (x[p.row_begin:p.row_end].contiguous(), x[p.halo_nodes].contiguous(), *rp.op_args(), False)
    torch.ops.mgg.aggregate(*args)  # the plan itself is fine
    with pytest.raises(RuntimeError, match=msg):
        torch.ops.mgg.aggregate(*_corrupt(args, index, fn))


def test_heavy_rows_are_cut_and_fixed_up():
    """A hub row with far more partitions than a block holds is cut across blocks; the fixup
    sums the pieces (here most rows are heavy)."""
    g = Graph.from_edges(np.arange(3000) % 97, np.arange(3000) % 3, 97)
    rp = Plan(g).rank_plan(0, Config(2, 1, 2))
    assert rp.fixups.size(0) == 3 and rp.num_blocks > 3
    x = torch.randn(97, 40, dtype=torch.float64)
    for det in (False, True):
        torch.testing.assert_close(mgg.aggregate(x, Plan(g), Config(2, 1, 2), deterministic=det), dense_ref(g, x))


@pytest.mark.parametrize("ranks", [1, 2, 4])
@pytest.mark.parametrize("deterministic", [False, True])
def test_peers_op_reads_each_pes_table(ranks, deterministic):
    """aggregate_peers: remote rows addressed by (owner PE, offset) in each PE's own table,
    as under NVSHMEM; in one process the PEs' tables are slices of one tensor."""
    g = random_graph(120, 2500, seed=6, weighted=True, skew=0.7)
    x = torch.randn(120, 19, dtype=torch.float64)
    plan = Plan(g, ranks)
    tables = [x[int(plan.bounds[r]):int(plan.bounds[r + 1])].contiguous() for r in range(ranks)]
    out = torch.cat([_run_peers(tables[r], tables, r, plan.rank_plan(r, Config(3, 2, 2)), "direct", deterministic)
                     for r in range(ranks)])
    torch.testing.assert_close(out, dense_ref(g, x))


def test_peers_op_bad_input():
    g = random_graph(50, 400, seed=2)
    plan = Plan(g, 2)
    rp = plan.rank_plan(0, Config(2, 1, 2))
    x = torch.randn(50, 4)
    tables = [x[:int(plan.bounds[1])].contiguous(), x[int(plan.bounds[1]):].contiguous()]
    with pytest.raises(RuntimeError, match="NVSHMEM get, which needs CUDA tensors"):
        _run_peers(tables[0], tables, 0, rp, "get-warp", False)
    with pytest.raises(MggError, match="fetch must be one of"):
        _run_peers(tables[0], tables, 0, rp, "teleport", False)
    with pytest.raises(RuntimeError, match=r"my_pe 2 is outside \[0, 2\)"):
        _run_peers(tables[0], tables, 2, rp, "direct", False)
    short = [tables[0], tables[1][:1]]  # PE 1's table lacks rows the plan reads
    if rp.partition.remote_offset.max() > 0:
        with pytest.raises(RuntimeError, match=r"remote_offset\[\d+\] = \d+ is outside \[0, 1\) of PE 1"):
            _run_peers(tables[0], short, 0, rp, "direct", False)
    with pytest.raises(RuntimeError, match=r"peers\[1\] must be 2-D with the same dim"):
        _run_peers(tables[0], [tables[0], tables[1][:, :2].contiguous()], 0, rp, "direct", False)

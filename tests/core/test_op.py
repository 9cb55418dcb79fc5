"""torch.ops.mgg.aggregate and aggregate_peers against a float64 reference, torch.sparse and PyG,
on every available device (one body for CPU and CUDA): autograd registered on the ops, opcheck,
torch.compile, multi-rank plans, deterministic mode, and bad input. Tests marked
with_devices_emulated run a third time, "emu": the CUDA host code and kernels under the SIMT
emulator on CPU tensors (simt/emulator.py)."""

import numpy as np
import pytest
import torch

import mgg
from mgg import Config, Graph, MggError, Plan, make_plan
from mgg.plan import STEP_FIELDS, STEP_PARAMS
from mgg.testing import (
    CONFIGS,
    assert_exact_reference,
    assert_matches_reference,
    assert_same_formula,
    dense_reference,
    exact_inputs,
    random_graph,
    with_devices,
)
from simt import emulator
from simt.emulator import with_devices_emulated

F = {name: i for i, name in enumerate(STEP_FIELDS)}


@pytest.fixture(scope="module", params=["uniform", "skewed"])
def graph(request):
    """Weighted, with hub rows of thousands of edges in the skewed case (cut across blocks)."""
    return random_graph(2000, 40000, seed=7, weighted=True, skew=0.0 if request.param == "uniform" else 0.9)


@with_devices
@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("dim", [1, 16, 31, 64, 257, 1030])
def test_forward_matches_reference(graph, device, config, deterministic, dim):
    x = torch.randn(graph.num_nodes, dim, device=device)
    out = mgg.aggregate(x, Plan(graph), config, deterministic=deterministic)
    assert out.device.type == device and out.shape == (graph.num_nodes, dim)
    assert_matches_reference(out, graph, x)


EXACT_DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


@with_devices
@pytest.mark.parametrize("config", [*CONFIGS, Config(8, 2, 4, interleave=False)], ids=str)
@pytest.mark.parametrize("dtype", EXACT_DTYPES, ids=str)
def test_exact_case_forward_and_backward(graph, device, config, dtype):
    """Exact cases (mgg.testing.exact_inputs): every partial sum is exact, so the output and the
    gradient (the transposed step) equal the float64 reference rounded once, bit for bit, in every
    config, mode and storage type, with hub rows cut across blocks."""
    if device == "cuda" and dtype == torch.float64:
        pytest.skip("the CUDA kernels store fp32, fp16 and bf16")
    g, x = exact_inputs(graph, 33, dtype, seed=1, device=device)
    go = exact_inputs(graph, 33, dtype, seed=2, device=device)[1]
    for det in (False, True):
        xr = x.clone().requires_grad_()
        out = mgg.aggregate(xr, Plan(g), config, deterministic=det)
        assert_exact_reference(out, g, x)
        out.backward(go)
        assert_exact_reference(xr.grad, g.transpose(), go)


@with_devices
def test_cusparse_oracle(device):
    """The outside oracle: torch.sparse (cuSPARSE on a GPU) in float64 gives the same sums (on the
    CPU mgg in float64 too; on a GPU mgg in float32 within the oracle's tolerance)."""
    g = random_graph(3000, 60000, seed=2, weighted=True, skew=0.5)
    x = torch.randn(3000, 96, dtype=torch.float64, device=device)
    ref = torch.sparse.mm(g.to_torch_sparse(torch.float64).to(device), x)
    if device == "cpu":
        assert_same_formula(mgg.aggregate(x, g), ref)
    else:
        x32 = x.float()
        out = mgg.aggregate(x32, g)
        assert_matches_reference(out, g, x32)
        assert_matches_reference(ref.to(out.dtype), g, x32)  # cuSPARSE agrees with the float64 reference


@with_devices
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("dim", [33, 256])
def test_dtypes_forward_backward(graph, device, dtype, dim):
    """Storage in the dtype, accumulation in fp32; the backward runs the transposed step."""
    x = torch.randn(graph.num_nodes, dim).to(dtype).to(device).requires_grad_()
    out = mgg.aggregate(x, Plan(graph), Config(8, 2, 4))
    assert out.dtype == dtype
    assert_matches_reference(out, graph, x)
    g = torch.randn_like(out)
    (grad,) = torch.autograd.grad(out, x, g)
    assert grad.dtype == dtype
    assert_matches_reference(grad, graph.transpose(), g)


def test_float64_on_cpu():
    g = random_graph(200, 4000, weighted=True)
    x = torch.randn(200, 40, dtype=torch.float64)
    torch.testing.assert_close(mgg.aggregate(x, g), dense_reference(g, x), rtol=1e-12, atol=1e-12)


def test_reductions_match_pyg(cora):
    pyg_utils = pytest.importorskip("torch_geometric.utils")
    g = cora.graph
    ei = g.edge_index()
    x = torch.randn(g.num_nodes, 24, dtype=torch.float64)
    for reduce in ("sum", "mean"):
        ref = pyg_utils.scatter(x[ei[0]], ei[1], 0, g.num_nodes, reduce=reduce)
        assert_same_formula(mgg.aggregate(x, g.mean_norm(torch.float64) if reduce == "mean" else g), ref)


def test_gcn_weights_match_pyg_propagate(cora):
    gcn = pytest.importorskip("torch_geometric.nn.conv.gcn_conv")
    ei = cora.graph.edge_index()
    x = torch.randn(cora.graph.num_nodes, 16, dtype=torch.float64)
    conv = gcn.GCNConv(16, 16, bias=False).double()
    ei_n, w = gcn.gcn_norm(ei, None, cora.graph.num_nodes, dtype=torch.float64)
    ref = conv.propagate(ei_n, x=x, edge_weight=w)
    out = mgg.aggregate(x, cora.graph.gcn_norm(dtype=torch.float64))
    assert_same_formula(out, ref)


@pytest.mark.parametrize("directed", [True, False])
def test_gradcheck(directed):
    g = random_graph(25, 120, seed=5, weighted=True)
    if not directed:
        g = Graph.from_scipy(g.to_scipy() + g.to_scipy().T)
    plan = Plan(g)
    x = torch.randn(25, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: mgg.aggregate(t, plan, Config(3, 2, 1)), (x,))
    g_out = torch.randn(25, 3, dtype=torch.float64)
    (grad,) = torch.autograd.grad(mgg.aggregate(x, plan), x, g_out)
    torch.testing.assert_close(grad, g.to_torch_sparse(torch.float64).t() @ g_out)
    # a symmetric graph's transposed step is its own local part: no second copy of the edges
    p = plan.shard(0)
    assert (p.transposed is p.local) == (not directed)


def _op_args(g, dim=8, dtype=torch.float32, config=Config(4, 2, 2), device="cpu", requires_grad=False):
    plan, params = Plan(g).rank_plan(0, config).op_args(device)
    x = torch.randn(g.num_nodes, dim, dtype=dtype, device=device, requires_grad=requires_grad)
    return (x, x.new_empty((0, dim)), plan, params, False)


@with_devices_emulated
def test_raw_op_is_differentiable(device):
    """Autograd lives on the op: a direct call differentiates (here on a directed graph)."""
    g = random_graph(300, 4000, seed=3, weighted=True, skew=0.6)
    x, x_remote, plan, params, det = _op_args(g, 70, device=device, requires_grad=True)
    out = torch.ops.mgg.aggregate(x, x_remote, plan, params, det)
    go = torch.randn_like(out)
    out.backward(go)
    assert_matches_reference(x.grad, g.transpose(), go)


@with_devices
def test_opcheck(device):
    g = random_graph(60, 500, weighted=True)
    for dtype in (torch.float32, torch.bfloat16):
        for rg in (False, True):
            torch.library.opcheck(
                torch.ops.mgg.aggregate.default,
                _op_args(g, dtype=dtype, device=device, requires_grad=rg and dtype == torch.float32),
            )


@with_devices
def test_opcheck_peers(device):
    g = random_graph(60, 500, weighted=True)
    plan = Plan(g, 3)
    for rg in (False, True):
        x = torch.randn(60, 8, device=device)
        tables = [x[int(plan.bounds[r]) : int(plan.bounds[r + 1])].clone().requires_grad_(rg) for r in range(3)]
        p, params = plan.rank_plan(1, Config(4, 2, 2)).op_args(device, peers=True)
        torch.library.opcheck(torch.ops.mgg.aggregate_peers.default, (tables[1], tables, 1, p, params, 0, False))


@with_devices
def test_torch_compile_forward_and_backward(device):
    g = random_graph(80, 600, weighted=True)
    x, x_remote, plan, params, det = _op_args(g, device=device, requires_grad=True)
    backend = "aot_eager" if device == "cpu" else "inductor"
    f = torch.compile(
        lambda t: torch.ops.mgg.aggregate(t, x_remote, plan, params, det).relu() * 2, fullgraph=True, backend=backend
    )
    out = f(x)
    ref = (dense_reference(g, x).float().relu() * 2).to(device)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    out.sum().backward()
    xr = x.detach().clone().requires_grad_()
    (torch.ops.mgg.aggregate(xr, x_remote, plan, params, det).relu() * 2).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-5, atol=1e-5)


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


@with_devices
def test_deterministic_mode_is_bit_identical(device):
    g = random_graph(3000, 90000, seed=9, weighted=True, skew=0.9)
    x = torch.randn(3000, 96, device=device, requires_grad=True)
    plan = Plan(g)
    first = mgg.aggregate(x, plan, Config(4, 2, 4), deterministic=True)
    (gfirst,) = torch.autograd.grad(first.sum(), x)
    for _ in range(20 if device == "cuda" else 3):
        out = mgg.aggregate(x, plan, Config(4, 2, 4), deterministic=True)
        assert torch.equal(out, first)
        assert torch.equal(torch.autograd.grad(out.sum(), x)[0], gfirst)


@with_devices_emulated
@pytest.mark.parametrize("deterministic", [False, True])
def test_every_row_written_over_garbage(device, deterministic, poisoned_empty):
    """Every output is allocated full of NaN (torch's fill_uninitialized_memory, checked here):
    a row the kernels failed to write (an isolated node, a cut row) stays NaN and fails."""
    g = Graph.from_edges(np.arange(5000) % 400, np.r_[np.zeros(3000, int), np.arange(2000) % 350], 500)
    plan = Plan(g)
    x = torch.randn(500, 72, device=device)
    assert bool(torch.empty(4, 72, device=device).isnan().all())  # the poison is on
    for cfg in (Config(1, 1, 1), Config(4, 2, 2), Config(16, 4, 4)):
        out = mgg.aggregate(x, plan, cfg, deterministic=deterministic)
        assert not out.isnan().any()
        assert_matches_reference(out, g, x)


@with_devices_emulated
@pytest.mark.parametrize("ranks", [2, 3, 5])
def test_multi_rank_plan_reassembles_and_differentiates(device, ranks):
    """Each rank aggregates its rows from its own range (local) and a halo of peers' rows
    (remote); stacked, the ranks give the single-rank answer, and the op's adjoint gives the
    gradients of both the rank's rows and its halo rows."""
    g = random_graph(150, 2000, weighted=True, skew=0.5)
    x = torch.randn(150, 20, device=device)
    plan = Plan(g, ranks)
    parts, grad = [], torch.zeros_like(x)
    go = torch.randn(150, 20, device=device)
    for r in range(ranks):
        p = plan.shard(r)
        own = x[p.row_begin : p.row_end].clone().requires_grad_()
        halo = x[torch.from_numpy(p.halo_nodes).to(device)].clone().requires_grad_()
        out = plan.rank_plan(r, Config(3, 2, 2)).aggregate(own, halo)
        parts.append(out.detach())
        out.backward(go[p.row_begin : p.row_end])
        grad[p.row_begin : p.row_end] += own.grad
        grad.index_add_(0, torch.from_numpy(p.halo_nodes).to(device), halo.grad)
    assert_matches_reference(torch.cat(parts), g, x)
    assert_matches_reference(grad, g.transpose(), go)


def test_heavy_rows_are_cut_and_fixed_up():
    """A hub row of far more items than a warp takes is cut across many warps; the fixup sums the
    pieces in order (here every row with edges is a hub)."""
    g = Graph.from_edges(np.arange(3000) % 97, np.arange(3000) % 3, 97)
    rp = Plan(g).rank_plan(0, Config(2, 1, 2))
    assert rp.fixups.size(0) == 3 and rp.num_warps > 1000
    assert torch.all(rp.fixups[:, 2] - rp.fixups[:, 1] >= 400)  # each row summed from hundreds of warps
    x = torch.randn(97, 40, dtype=torch.float64)
    for det in (False, True):
        torch.testing.assert_close(mgg.aggregate(x, Plan(g), Config(2, 1, 2), deterministic=det), dense_reference(g, x))


@with_devices_emulated
@pytest.mark.parametrize("ranks", [1, 2, 4])
@pytest.mark.parametrize("deterministic", [False, True])
def test_peers_op_reads_each_pes_table(device, ranks, deterministic):
    """aggregate_peers: remote rows addressed by (owner PE, offset) in each PE's own table, as
    under NVSHMEM; in one process the PEs' tables are slices of one tensor. Its adjoint gives
    each table's gradient."""
    g = random_graph(120, 2500, seed=6, weighted=True, skew=0.7)
    dtype = torch.float64 if device == "cpu" and not emulator.ACTIVE else torch.float32
    x = torch.randn(120, 19, dtype=dtype, device=device)
    plan = Plan(g, ranks)
    tables = [x[int(plan.bounds[r]) : int(plan.bounds[r + 1])].clone().requires_grad_() for r in range(ranks)]
    out = torch.cat(
        [
            plan.rank_plan(r, Config(3, 2, 2)).aggregate_peers(tables[r], tables, r, "direct", deterministic)
            for r in range(ranks)
        ]
    )
    assert_matches_reference(out, g, x)
    go = torch.randn_like(out)
    out.backward(go)
    grad = torch.cat([t.grad for t in tables])
    assert_matches_reference(grad, g.transpose(), go)
    ge, xe = exact_inputs(g, 19, dtype, seed=3, device=device)  # and an exact case, bit for bit
    plan = Plan(ge, ranks)
    tables = [xe[int(plan.bounds[r]) : int(plan.bounds[r + 1])] for r in range(ranks)]
    out = torch.cat(
        [
            plan.rank_plan(r, Config(3, 2, 2)).aggregate_peers(tables[r], tables, r, "direct", deterministic)
            for r in range(ranks)
        ]
    )
    assert_exact_reference(out, ge, xe)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("deterministic", [False, True])
def test_peers_once_reads_each_halo_row_once_and_sums_alike(dtype, deterministic):
    """run_peers_once (issue 34) in one process, 3 PEs: fp32/float64 not deterministic take the
    overlapped path (local edges, then remote edges from the gathered halo table, added), equal
    to A @ x by the tight oracle; deterministic mode and half storage aggregate in one step after
    the gather, bit-identical to run_peers (MGG's per-edge reads). The exact case holds bit for
    bit on every path."""
    g = random_graph(150, 3000, seed=9, weighted=True, skew=0.6)
    plan = Plan(g, 3)
    x = torch.randn(150, 17, dtype=torch.float64).to(dtype)
    tables = [x[int(plan.bounds[r]) : int(plan.bounds[r + 1])] for r in range(3)]
    rps = [plan.rank_plan(r, Config(3, 2, 2)) for r in range(3)]
    once = torch.cat([rps[r].aggregate_peers_once(tables[r], tables, r, "direct", deterministic) for r in range(3)])
    edge = torch.cat([rps[r].aggregate_peers(tables[r], tables, r, "direct", deterministic) for r in range(3)])
    assert_matches_reference(once, g, x)
    if deterministic or dtype == torch.bfloat16:
        assert torch.equal(once, edge)
    ge, xe = exact_inputs(g, 17, torch.float32, seed=4)
    plan = Plan(ge, 3)
    tables = [xe[int(plan.bounds[r]) : int(plan.bounds[r + 1])] for r in range(3)]
    out = torch.cat(
        [plan.rank_plan(r, Config(3, 2, 2)).aggregate_peers_once(tables[r], tables, r, "direct") for r in range(3)]
    )
    assert_exact_reference(out, ge, xe)


def test_bad_input_errors():
    g = random_graph(30, 100)
    with pytest.raises(MggError, match="x has 29 rows but the graph has 30 nodes"):
        mgg.aggregate(torch.randn(29, 4), g)
    with pytest.raises(MggError, match="x must be a 2-D tensor"):
        mgg.aggregate(torch.randn(30), g)
    with pytest.raises(MggError, match="reduce must be one of"):
        make_plan(g, "lstm")
    with pytest.raises(MggError, match="runs one rank"):
        mgg.aggregate(torch.randn(30, 4), Plan(g, 2))
    x, xr, plan, params, det = _op_args(g)
    with pytest.raises(RuntimeError, match="x must be float32, float64, float16 or bfloat16"):
        torch.ops.mgg.aggregate(x.int(), xr.int(), plan, params, det)
    bad = list(plan)
    bad[F["local_col"]] = plan[F["local_col"]].clone()
    bad[F["local_col"]][3] = 1000
    with pytest.raises(RuntimeError, match=r"local_col\[3\] = 1000 is outside \[0, 30\)"):
        torch.ops.mgg.aggregate(x, xr, bad, params, det)
    bad = list(plan)
    bad[F["local_col"]] = plan[F["local_col"]].long()
    with pytest.raises(RuntimeError, match="local_col must be Int"):
        torch.ops.mgg.aggregate(x, xr, bad, params, det)
    bad = list(plan)
    bad[F["local_rowptr"]] = plan[F["local_rowptr"]].flip(0).contiguous()
    with pytest.raises(RuntimeError, match="local_rowptr must start at 0"):
        torch.ops.mgg.aggregate(x, xr, bad, params, det)
    bad = list(params)
    bad[STEP_PARAMS.index("wpb")] = 0
    with pytest.raises(RuntimeError, match="warps_per_block must be in"):
        torch.ops.mgg.aggregate(x, xr, plan, bad, det)
    with pytest.raises(RuntimeError, match="plan must list 22 tensors"):
        torch.ops.mgg.aggregate(x, xr, plan[:11], params, det)
    with pytest.raises(RuntimeError, match="remote_rowptr has 5 entries, expected 31"):
        bad = list(plan)
        bad[F["remote_rowptr"]] = torch.zeros(5, dtype=torch.long)
        bad[F["remote_col"]] = torch.zeros(0, dtype=torch.int)
        torch.ops.mgg.aggregate(x, xr, bad, params, det)
    plan_f, params_f = Plan(g).rank_plan(0, Config()).op_args("cpu", transposed=False)
    xg = torch.randn(30, 4, requires_grad=True)
    out = torch.ops.mgg.aggregate(xg, xg.new_empty((0, 4)), plan_f, params_f, False)
    with pytest.raises(RuntimeError, match="has no transposed step"):
        out.sum().backward()


def _corrupt(plan, field, fn):
    bad = list(plan)
    bad[F[field]] = plan[F[field]].clone()
    fn(bad[F[field]])
    return bad


R = {name: i for i, name in enumerate(mgg.plan.RANGE_FIELDS)}


@pytest.mark.parametrize(
    "field, fn, msg",
    [
        ("ranges", lambda r: r.__setitem__((1, R["row"]), r[1, R["row"]] + 1), r"ranges\[1\]\.row is"),
        ("ranges", lambda r: r.__setitem__((-1, R["local"]), r[-1, R["local"]] - 1), r"ranges\[\d+\]\.local is"),
        ("ranges", lambda r: r.__setitem__((1, R["remote"]), r[1, R["remote"]] + 1), r"ranges\[1\]\.remote is"),
        ("ranges", lambda r: r.__setitem__((0, R["tail_slot"]), -1), r"ranges\[0\]\.tail_slot is -1 but"),
        ("ranges", lambda r: r.__setitem__((1, R["head_slot"]), 5), r"ranges\[1\]\.head_slot is 5 but"),
        ("fixups", lambda f: f.__setitem__((0, 0), f[0, 0] + 1), r"fixups\[0\]\.row is"),
        ("remote_col", lambda r: r.__setitem__(0, 10**6), r"remote_col\[0\] = 1000000 is outside"),
        ("local_rowptr", lambda p: p.__setitem__(3, p[2] - 1), r"local_rowptr decreases at entry"),
        ("ranges", None, r"ranges has \d+ entries but ps = 4 and dist = 8 give \d+"),
        ("fixups", lambda f: None, None),
    ],
)
def test_bad_schedule_is_an_error(field, fn, msg):
    """A schedule other than the one the step's row pointers, ps and dist give (csrc/core/schedule.h),
    which could read outside the plan, leave a row unwritten or sum a carry row into another, is
    refused in one line."""
    g = random_graph(40, 600, seed=4)
    plan = Plan(g, 2)
    rp = plan.rank_plan(0, Config(4, 8, 2))
    assert rp.fixups.size(0) >= 1 and rp.num_warps > 2
    assert rp.ranges[0, R["tail_slot"]] >= 0 and rp.ranges[1, R["head_slot"]] >= 0  # warp 0 ends inside a row
    p = rp.shard
    x = torch.randn(g.num_nodes, 8)
    args, params = rp.op_args("cpu")
    own, halo = x[p.row_begin : p.row_end].contiguous(), x[torch.from_numpy(p.halo_nodes)].contiguous()
    torch.ops.mgg.aggregate(own, halo, args, params, False)  # the plan itself is fine
    if msg is None:  # num_slots that disagrees with the fixups
        bad_params = list(params)
        bad_params[STEP_PARAMS.index("num_slots")] = rp.schedule.num_slots + 3
        with pytest.raises(RuntimeError, match=rf"num_slots is {rp.schedule.num_slots + 3} but the fixups use"):
            torch.ops.mgg.aggregate(own, halo, args, bad_params, False)
        return
    if fn is None:  # a record short
        bad = list(args)
        bad[F[field]] = args[F[field]][:-1].clone()
        with pytest.raises(RuntimeError, match=msg):
            torch.ops.mgg.aggregate(own, halo, bad, params, False)
        return
    with pytest.raises(RuntimeError, match=msg):
        torch.ops.mgg.aggregate(own, halo, _corrupt(args, field, fn), params, False)


def test_peers_op_bad_input():
    g = random_graph(50, 400, seed=2)
    plan = Plan(g, 2)
    rp = plan.rank_plan(0, Config(2, 1, 2))
    x = torch.randn(50, 4)
    tables = [x[: int(plan.bounds[1])].contiguous(), x[int(plan.bounds[1]) :].contiguous()]
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="NVSHMEM get, which needs CUDA tensors"):
            rp.aggregate_peers(tables[0], tables, 0, "get-warp")
    with pytest.raises(MggError, match="fetch must be one of"):
        rp.aggregate_peers(tables[0], tables, 0, "teleport")
    with pytest.raises(RuntimeError, match=r"my_pe 2 is outside \[0, 2\)"):
        rp.aggregate_peers(tables[0], tables, 2, "direct")
    short = [tables[0], tables[1][:1]]  # PE 1's table lacks rows the plan reads
    if rp.shard.remote_offset.max() > 0:
        with pytest.raises(RuntimeError, match=r"remote_col\[\d+\] = \d+ is outside \[0, 1\) of PE 1"):
            rp.aggregate_peers(tables[0], short, 0, "direct")
    with pytest.raises(RuntimeError, match=r"peers\[1\] must be 2-D with the same dim"):
        rp.aggregate_peers(tables[0], [tables[0], tables[1][:, :2].contiguous()], 0, "direct")


def _edge_storages(plan: Plan, device) -> dict:
    """Distinct storages of the plans' edge arrays (col, weight) on a device, per step."""
    seen = {}
    for rp in list(plan._plans.values()):
        args, _ = rp.op_args(device, transposed=True)
        for step, base in (("forward", 0), ("transposed", len(STEP_FIELDS))):
            for name in ("local_col", "local_weight", "remote_col", "remote_weight"):
                t = args[base + F[name]]
                if t is not None:
                    seen.setdefault(f"{step} {name}", set()).add(t.untyped_storage().data_ptr())
    return seen


@with_devices
def test_configs_share_one_copy_of_the_edges(device):
    """Trying 20 configs (as the tuner does) keeps one device copy of the partition's edge
    arrays; per config only the O(blocks) schedule is new, and old plans are evicted."""
    g = random_graph(3000, 60000, seed=1, weighted=True, skew=0.5)
    plan = Plan(g)
    x = torch.randn(3000, 32, device=device, requires_grad=True)
    configs = [Config(ps, d, w) for ps in (1, 4, 16, 32) for d in (1, 4) for w in (1, 4, 8)][:20]
    mgg.aggregate(x, plan, configs[0]).sum().backward()
    if device == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
    for c in configs[1:]:
        mgg.aggregate(x, plan, c).sum().backward()
    storages = _edge_storages(plan, device)
    assert {k: len(v) for k, v in storages.items()} == {
        "forward local_col": 1,
        "forward local_weight": 1,
        "transposed local_col": 1,
        "transposed local_weight": 1,
    }
    assert len(plan._plans) <= plan.max_cached_plans
    if device == "cuda":  # what grew is the cached plans' schedules, not copies of the edges
        torch.cuda.synchronize()
        schedules = sum(
            (t.numel() * 8)
            for rp in plan._plans.values()
            for t in (rp.blocks, rp.fixups, rp.schedule_t.blocks, rp.schedule_t.fixups)
        )
        grown = torch.cuda.memory_allocated() - base
        assert grown <= schedules + (1 << 20), f"device memory grew by {grown} bytes; schedules hold {schedules}"


def test_repeated_calls_are_lookups_that_still_check():
    """A one-rank plan keeps each kind of call's op arguments (Plan._calls, keyed by config,
    gradient, device, dtype and shape): the call again gives the same bits, a gradient after a call
    without one still flows (the transposed step is there), an x of another shape is still
    checked, and dropping a plan forgets them."""
    g = random_graph(200, 1500, seed=3, weighted=True)
    plan = Plan(g)
    x = torch.randn(200, 8, dtype=torch.float64)
    with torch.no_grad():
        first = mgg.aggregate(x, plan)
    assert torch.equal(mgg.aggregate(x, plan), first)
    xg = x.clone().requires_grad_(True)
    out = mgg.aggregate(xg, plan)
    assert torch.equal(out.detach(), first)
    out.backward(torch.ones_like(out))
    a = g.to_torch_sparse(torch.float64).to_dense()
    torch.testing.assert_close(xg.grad, a.t() @ torch.ones(200, 8, dtype=torch.float64))
    with pytest.raises(MggError, match="x has 199 rows but the graph has 200 nodes"):
        mgg.aggregate(torch.randn(199, 8, dtype=torch.float64), plan)
    assert torch.equal(mgg.aggregate(x, plan, Config(1, 1, 1)), first)
    plan.drop(0, Config())
    assert not plan._calls and torch.equal(mgg.aggregate(x, plan), first)


def test_gpu_only_placements_are_refused_on_the_cpu_in_one_line():
    if torch.cuda.is_available():
        pytest.skip("checks the refusal where no GPU is visible")
    from mgg import memory

    g = random_graph(50, 400, seed=2)
    plan = Plan(g, 2)
    x = torch.randn(50, 4)
    tables = [x[: int(plan.bounds[1])].contiguous(), x[int(plan.bounds[1]) :].contiguous()]
    with pytest.raises(RuntimeError, match="fetch 'uva' reads pinned host memory from a GPU kernel") as e:
        plan.rank_plan(0, Config()).aggregate_peers(tables[0], tables, 0, "uva")
    assert "use fetch 'direct'" in str(e.value).splitlines()[0]
    for make in (memory.pinned_table, memory.managed_table):
        with pytest.raises(MggError, match="needs a CUDA GPU and none is visible"):
            make(x)


def test_allgather_volume_in_the_plan_statistics():
    g = random_graph(300, 3000, seed=4, skew=0.5)
    stats = Plan(g, 3).stats()
    assert [s["allgather_rows"] for s in stats] == [300 - s["nodes"] for s in stats]
    gathered = Plan(g, 3, gathered=True)
    p = gathered.shard(1)
    assert p.num_remote_edges == 0 and p.transposed.num_rows == 300  # every node's gradient
    x = torch.randn(300, 7, dtype=torch.float64)
    out = torch.cat([gathered.rank_plan(r, Config(4, 2, 2)).aggregate(x, x.new_empty((0, 7))) for r in range(3)])
    torch.testing.assert_close(out, dense_reference(g, x))

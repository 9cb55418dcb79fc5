"""torch.ops.mgg.aggregate_extreme (max/min aggregation, csrc/core/extreme.h) on the CPU executor:
float64 against outside oracles (torch.Tensor.scatter_reduce with amax/amin, PyG's scatter) on
random graphs with empty rows, hub rows and remote neighbors (every rank of multi-rank plans),
the gradient (to the winning row only) against torch's, gradcheck, the tie and NaN rules,
storage types, opcheck, torch.compile, and bad input refused in one line."""

import numpy as np
import pytest
import torch

import mgg
from mgg import Config, Graph, MggError, Plan
from mgg.testing import random_graph

AMAX = {"max": "amax", "min": "amin"}


def edges_of(g: Graph) -> tuple[torch.Tensor, torch.Tensor]:
    """(src, dst) of every edge of g, int64."""
    rowptr = torch.as_tensor(np.asarray(g.rowptr), dtype=torch.int64)
    dst = torch.repeat_interleave(torch.arange(g.num_nodes), rowptr[1:] - rowptr[:-1])
    return torch.as_tensor(np.asarray(g.col), dtype=torch.int64), dst


def oracle(g: Graph, x: torch.Tensor, reduce: str) -> torch.Tensor:
    """torch's scatter_reduce (include_self=False over zeros: a row without edges stays 0)."""
    src, dst = edges_of(g)
    out = torch.zeros(g.num_nodes, x.size(1), dtype=x.dtype)
    return out.scatter_reduce(0, dst[:, None].expand(-1, x.size(1)), x[src], AMAX[reduce], include_self=False)


def empty_hub_graph(n: int = 300, seed: int = 0) -> Graph:
    """Hub rows 0 and 1 (degree 2000 and 700), rows n-30.. without in-edges, the rest 0-10."""
    rng = np.random.default_rng(seed)
    dst = np.concatenate([np.zeros(2000, np.int64), np.ones(700, np.int64), rng.integers(2, n - 30, 1500)])
    return Graph.from_edges(rng.integers(0, n, dst.size), dst, n)


GRAPHS = {
    "uniform": lambda: random_graph(400, 3000, seed=1),
    "skewed": lambda: random_graph(400, 4000, seed=2, skew=0.9),
    "empty-and-hub-rows": empty_hub_graph,
}


def run_ranks(plan: Plan, x: torch.Tensor, reduce: str, config: Config = Config()) -> torch.Tensor:
    """Every rank's step of `plan` (own rows of x, its halo rows from x), rows in graph order;
    differentiable in x."""
    outs = []
    for r in range(plan.num_ranks):
        rp = plan.rank_plan(r, config)
        lo, hi = int(plan.bounds[r]), int(plan.bounds[r + 1])
        x_remote = x[torch.from_numpy(rp.shard.halo_nodes)]
        outs.append(rp.aggregate_extreme(x[lo:hi].contiguous(), x_remote.contiguous(), reduce))
    return torch.cat(outs)


@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("ranks", [1, 2, 4])
@pytest.mark.parametrize("graph", list(GRAPHS))
def test_float64_matches_scatter_reduce_forward_and_backward(graph, ranks, reduce):
    g = GRAPHS[graph]()
    x = torch.randn(g.num_nodes, 37, dtype=torch.float64, requires_grad=True)  # tie-free (continuous)
    out = run_ranks(Plan(g, ranks), x, reduce, Config(4, 2, 4))
    xr = x.detach().clone().requires_grad_()
    ref = oracle(g, xr, reduce)
    assert torch.equal(out, ref)
    indeg = torch.as_tensor(np.diff(np.asarray(g.rowptr)))
    assert bool((out[indeg == 0] == 0).all())
    if graph == "empty-and-hub-rows":
        assert int((indeg == 0).sum()) >= 30 and int(indeg.max()) >= 2000
    go = torch.randn_like(out)
    out.backward(go)
    ref.backward(go)
    # the same terms, summed in another order (and torch splits duplicate edges' ties: g/3 * 3)
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_matches_pyg_scatter(reduce):
    from torch_geometric.utils import scatter

    g = GRAPHS["empty-and-hub-rows"]()
    x = torch.randn(g.num_nodes, 16, dtype=torch.float64)
    src, dst = edges_of(g)
    ref = scatter(x[src], dst, 0, dim_size=g.num_nodes, reduce=reduce)
    assert torch.equal(mgg.aggregate(x, g, reduce=reduce), ref)
    assert torch.equal(mgg.aggregate(x, mgg.make_plan(g, reduce), reduce=reduce), ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("reduce", ["max", "min"])
def test_storage_types_are_exact(dtype, reduce):
    """Max and min pick one of the inputs: every storage type equals the oracle bit for bit."""
    g = random_graph(300, 3000, seed=3, skew=0.5)
    x = torch.randn(300, 45).to(dtype).requires_grad_()
    out = run_ranks(Plan(g, 2), x, reduce)
    assert out.dtype == dtype and torch.equal(out, oracle(g, x.detach(), reduce))
    out.sum().backward()
    assert x.grad.dtype == dtype


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_gradcheck(reduce):
    g = random_graph(30, 150, seed=4)
    plan = Plan(g, 2)
    x = torch.randn(30, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: run_ranks(plan, t, reduce), (x,))
    assert torch.autograd.gradgradcheck(lambda t: run_ranks(plan, t, reduce), (x,))


def test_ties_go_to_the_lowest_row_and_nan_wins():
    """Row 0 reads rows 5, 2, 7, 2 (in that edge order), all equal in column 0: the value comes
    from row 2, which gets the whole gradient (torch would split it between the tied edges). In
    column 1 row 7 holds NaN, which propagates (as torch.amax) and takes the gradient; in column 2
    rows 5 and 7 hold NaN: the lower, 5, wins. Row 1 has no in-edges: 0, no gradient."""
    g = Graph.from_edges(np.array([5, 2, 7, 2]), np.array([0, 0, 0, 0]), 8)
    x = torch.zeros(8, 3, dtype=torch.float64)
    x[[2, 5, 7], 0] = 1.5
    x[:, 1] = torch.arange(8.0)
    x[7, 1] = float("nan")
    x[[5, 7], 2] = float("nan")
    for reduce in ("max", "min"):
        plan = mgg.make_plan(g, reduce)
        args, params = plan.rank_plan(0).op_args("cpu", transposed=False)
        out, arg = torch.ops.mgg.aggregate_extreme(x, x.new_empty(0, 3), args, params, reduce)
        assert arg[0].tolist() == [2, 7, 5] and arg[1].tolist() == [-1, -1, -1]
        assert out[0, 0] == 1.5 and out[0, 1:].isnan().all() and (out[1:] == 0).all()
        xg = x.clone().requires_grad_()
        mgg.aggregate(xg, plan, reduce=reduce).backward(torch.ones(8, 3, dtype=torch.float64))
        expected = torch.zeros(8, 3, dtype=torch.float64)
        expected[2, 0] = expected[7, 1] = expected[5, 2] = 1
        assert torch.equal(xg.grad, expected)


def test_tie_between_own_and_halo_rows_goes_to_the_own_row():
    """With ranks, the index is the row of [x | x_remote]: a rank's own rows come before its halo
    rows, so a tie between an own row and a remote one goes to the own row."""
    g = Graph.from_edges(np.array([0, 3]), np.array([3, 3]), 4)  # row 3 (rank 1 of 2) reads 0 (remote) and 3
    plan = Plan(g, bounds=np.array([0, 2, 4]))
    x = torch.ones(4, 2, dtype=torch.float64, requires_grad=True)
    run_ranks(plan, x, "max").sum().backward()
    assert x.grad[:, 0].tolist() == [0, 0, 0, 1]


def test_opcheck_and_compile():
    g = random_graph(60, 500, seed=5)
    plan = Plan(g)
    args, params = plan.rank_plan(0, Config(4, 2, 2)).op_args("cpu", transposed=False)
    for rg in (False, True):
        x = torch.randn(60, 8, requires_grad=rg)
        torch.library.opcheck(torch.ops.mgg.aggregate_extreme.default, (x, x.new_empty(0, 8), args, params, "max"))
    ranks = Plan(g, 3)  # rank 1 of 3: own rows and halo rows, both differentiable
    rp = ranks.rank_plan(1, Config(4, 2, 2))
    r_args, r_params = rp.op_args("cpu", transposed=False)
    own = torch.randn(int(ranks.bounds[2] - ranks.bounds[1]), 8, requires_grad=True)
    halo = torch.randn(rp.shard.num_halo, 8, requires_grad=True)
    torch.library.opcheck(torch.ops.mgg.aggregate_extreme.default, (own, halo, r_args, r_params, "min"))
    x = torch.randn(60, 8, requires_grad=True)
    remote = x.new_empty(0, 8)
    f = torch.compile(
        lambda t: torch.ops.mgg.aggregate_extreme(t, remote, args, params, "min")[0].relu() * 2,
        fullgraph=True,
        backend="aot_eager",
    )
    out = f(x)
    assert torch.equal(out, oracle(g, x.detach(), "min").relu() * 2)
    out.sum().backward()
    xr = x.detach().clone().requires_grad_()
    (oracle(g, xr, "min").relu() * 2).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-6, atol=1e-6)


def test_bad_input_is_refused_in_one_line():
    g = random_graph(20, 80, seed=6, weighted=True)
    x = torch.randn(20, 4)
    args, params = Plan(g).rank_plan(0).op_args("cpu", transposed=False)
    cases = [
        (lambda: torch.ops.mgg.aggregate_extreme(x, x.new_empty(0, 4), args, params, "max"), "has edge weights"),
        (lambda: torch.ops.mgg.aggregate_extreme(x, x.new_empty(0, 4), args, params, "lstm"), "'max' or 'min'"),
        (lambda: mgg.aggregate(x, g, reduce="lstm"), "reduce must be one of"),
        (lambda: mgg.aggregate(x, Plan(g), reduce="mean"), "applies when a Graph is passed"),
        (lambda: Plan(g).rank_plan(0).aggregate_extreme(x, x.new_empty(0, 4), "median"), "reduce must be one of"),
        (lambda: mgg.make_plan(g, "max").aggregate_extreme(x[:5], "max"), "x has 5 rows"),
    ]
    for call, words in cases:
        with pytest.raises((MggError, RuntimeError)) as e:
            call()
        msg = str(e.value).strip()
        assert words in msg and "\n" not in msg.split("\nException raised from")[0], msg


def test_nvshmem_backend_refuses_max_min_in_one_line():
    """The nvshmem backend's kernels read peers' rows in place for sums only: max/min is refused
    (tests/distributed/test_distributed.py runs the halo and allgather backends)."""
    from mgg.distributed.backends import BACKENDS

    with pytest.raises(MggError, match="use backend 'halo' or 'allgather'") as e:
        BACKENDS["nvshmem"].aggregate_extreme(None, torch.zeros(1, 1), None, None, "max")
    assert "\n" not in str(e.value)

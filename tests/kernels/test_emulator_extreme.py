"""The max/min kernel's own CUDA source (csrc/kernels/extreme_kernel.cuh, through the CUDA op's
host code ops/device_aggregate.h) run by the SIMT emulator on the CPU (simt/emulator.py's
torch.ops.mgg_emu): every rank of real multi-rank plans, fp32/fp16/bf16, graphs with hub rows
(thousands of edges: many edge chunks per warp), rows without in-edges and duplicate edges (ties),
widths that cut the columns into several tiles, warps per block 1 to 16 and several scheduling
seeds: the output and the arg (which source row won) equal the CPU executor's bit for bit, and
the output equals torch's scatter_reduce; the same under ASan/UBSan through the runner."""

import numpy as np
import pytest
import torch

from mgg import Config, Graph, Plan
from mgg.testing import random_graph
from simt import emulator
from simt.emulated_ops import aggregate_extreme
from tests.core.test_extreme import empty_hub_graph, oracle

pytestmark = pytest.mark.skipif(emulator.available() is not None, reason=str(emulator.available()))


@pytest.fixture(scope="module", autouse=True)
def ops():
    emulator.load_ops()


def tied_graph(n: int = 200, seed: int = 0) -> Graph:
    """Few distinct values (so many ties between different rows) and duplicate edges."""
    rng = np.random.default_rng(seed)
    dst = rng.integers(0, n - 10, 1600)
    src = rng.integers(0, n, 1600)
    return Graph.from_edges(np.concatenate([src, src[:200]]), np.concatenate([dst, dst[:200]]), n)


def distinct_hub_graph(n: int = 2200, seed: int = 0) -> Graph:
    """Hub rows 0 and 1 reading 2000 and 700 distinct sources (so a dropped edge drops its row's
    value: a chunk boundary that loses an edge shows), rows n-30.. without in-edges."""
    rng = np.random.default_rng(seed)
    dst = np.concatenate([np.zeros(2000, np.int64), np.ones(700, np.int64), rng.integers(2, n - 30, 3000)])
    src = np.concatenate([rng.permutation(n)[:2000], rng.permutation(n)[:700], rng.integers(0, n, 3000)])
    return Graph.from_edges(src, dst, n)


CASES = {  # name -> (graph, dim, ranks, config, values)
    "hub-rows": (empty_hub_graph, 33, 2, Config(8, 2, 2), "randn"),
    "distinct-hub-rows": (distinct_hub_graph, 33, 2, Config(4, 2, 4), "randn"),
    "one-rank-wpb1": (lambda: random_graph(150, 900, seed=1, skew=0.5), 40, 1, Config(1, 1, 1), "randn"),
    "four-ranks-wpb16": (lambda: random_graph(300, 3000, seed=2), 31, 4, Config(32, 16, 16), "randn"),
    "dim1": (lambda: random_graph(120, 600, seed=3), 1, 2, Config(4, 1, 2), "randn"),
    "dim300-tiles": (lambda: random_graph(120, 900, seed=4, skew=0.5), 300, 2, Config(4, 2, 4), "randn"),
    "ties": (tied_graph, 40, 2, Config(4, 2, 4), "ties"),
}


def values(n: int, dim: int, dtype: torch.dtype, kind: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(n + dim)
    if kind == "ties":
        return torch.randint(-3, 4, (n, dim), generator=g).to(dtype)
    return torch.randn(n, dim, generator=g).to(dtype)


def both(plan: Plan, x: torch.Tensor, reduce: str, config: Config, seed: int):
    """(emulated, CPU) per rank: (out, arg) of each."""
    torch.ops.mgg_emu.set_seed(seed)
    found = []
    for r in range(plan.num_ranks):
        rp = plan.rank_plan(r, config)
        lo, hi = int(plan.bounds[r]), int(plan.bounds[r + 1])
        own, remote = x[lo:hi].contiguous(), x[torch.from_numpy(rp.shard.halo_nodes)].contiguous()
        args, params = rp.op_args("cpu", transposed=False)
        emu = torch.ops.mgg_emu.aggregate_extreme(own, remote, args, params, reduce)
        cpu = torch.ops.mgg.aggregate_extreme(own, remote, args, params, reduce)
        found.append((emu, cpu))
    return found


@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_kernel_equals_cpu_executor(case, dtype, reduce):
    make, dim, ranks, config, kind = CASES[case]
    g = make()
    x = values(g.num_nodes, dim, dtype, kind)
    plan = Plan(g, ranks)
    for seed in (1, 2):
        found = both(plan, x, reduce, config, seed)
        for r, ((out, arg), (ref, ref_arg)) in enumerate(found):
            assert not out.isnan().any(), f"rank {r}: output elements never written"
            assert torch.equal(arg, ref_arg), f"rank {r}: {int((arg != ref_arg).sum())} args differ"
            assert torch.equal(out, ref), f"rank {r}: {int((out != ref).sum())} outputs differ"
        assert torch.equal(torch.cat([o for (o, _), _ in found]), oracle(g, x, reduce))


@pytest.mark.parametrize("case", ["hub-rows", "distinct-hub-rows", "four-ranks-wpb16", "dim300-tiles", "ties"])
def test_runner_under_sanitizers_equals_cpu_executor(tmp_path, case):
    """The same kernel by the runner (simt/emulated_ops.py's aggregate_extreme: the emulator
    built with ASan and UBSan, out NaN-filled and arg poisoned first, so an unwritten element or
    an out-of-bounds read shows), bf16 and fp32, max and min: out and arg equal the CPU op's."""
    make, dim, ranks, config, kind = CASES[case]
    g = make()
    plan = Plan(g, ranks)
    for dtype, reduce in ((torch.float32, "max"), (torch.bfloat16, "min")):
        x = values(g.num_nodes, dim, dtype, kind)
        found = aggregate_extreme(tmp_path / f"{dtype}-{reduce}", plan, x, config, reduce, seed=5)
        for r, (out, arg) in enumerate(found):
            rp = plan.rank_plan(r, config)
            lo, hi = int(plan.bounds[r]), int(plan.bounds[r + 1])
            args, params = rp.op_args("cpu", transposed=False)
            remote = x[torch.from_numpy(rp.shard.halo_nodes)].contiguous()
            ref, ref_arg = torch.ops.mgg.aggregate_extreme(x[lo:hi].contiguous(), remote, args, params, reduce)
            assert torch.equal(arg, ref_arg), f"rank {r}: {int((arg != ref_arg).sum())} args differ"
            assert torch.equal(out, ref), f"rank {r}: {int((out != ref).sum())} outputs differ"


def test_emulated_op_autograd():
    """The op's registered autograd over the emulated kernel: the gradient goes to the winning
    rows, as torch's (tie-free fp32 values)."""
    g = empty_hub_graph(200, seed=5)
    plan = Plan(g)
    x = torch.randn(200, 20, requires_grad=True)
    with emulator.emulated_ops(seed=3):
        out = plan.rank_plan(0).aggregate_extreme(x, x.new_empty(0, 20), "max")
    assert emulator.CALLS["aggregate_extreme"] > 0
    xr = x.detach().clone().requires_grad_()
    ref = oracle(g, xr, "max")
    assert torch.equal(out, ref)
    go = torch.randn_like(out)
    out.backward(go)
    ref.backward(go)
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-6, atol=1e-6)  # sums in another order


@pytest.mark.parametrize("aggr", ["max", "min"])
def test_sage_through_emulated_kernel_matches_pyg(aggr):
    """mgg.nn.SAGEConv(aggr=max/min) with the op on the emulated CUDA path, float32: output and
    gradients within 1e-5 of PyG's SAGEConv (graph with hub rows and rows without in-edges)."""
    pyg_nn = pytest.importorskip("torch_geometric.nn")
    import mgg.nn as mnn

    ei = empty_hub_graph(300, seed=6).edge_index()
    torch.manual_seed(0)
    ref = pyg_nn.SAGEConv(12, 5, aggr=aggr)
    ours = mnn.SAGEConv(12, 5, aggr=aggr)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(300, 12)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    calls = emulator.CALLS["aggregate_extreme"]
    with emulator.emulated_ops(seed=4):
        a = ours(xa, ei)
    assert emulator.CALLS["aggregate_extreme"] > calls
    b = ref(xb, ei)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    ga = torch.autograd.grad(a.square().sum(), [xa, *ours.parameters()])
    gb = torch.autograd.grad(b.square().sum(), [xb, *ref.parameters()])
    for u, v in zip(ga, gb, strict=True):
        torch.testing.assert_close(u, v, rtol=1e-5, atol=1e-5)

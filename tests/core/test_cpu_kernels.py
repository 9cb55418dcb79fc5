"""The CPU row kernels (csrc/ops/cpu/row_kernels*.{h,cpp}): every width a tile can end at (each
tile size, with and without a partial last vector) and every storage dtype against the float64
reference and torch.sparse; the same bits for 1 to 4 threads, however the rows are shared out;
the copy of the kernels this CPU runs and the default copy (ATEN_CPU_CAPABILITY=default) in a
process of its own; no read past the end of a part's columns (the prefetch looks ahead), seen
with a column array that ends at an unreadable page; every row written over NaN poison."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import mgg
from mgg import _C, Config, Graph, Plan
from mgg.testing import assert_matches_reference, random_graph

# Widths around each tile size of an AVX2 (8 floats, 4 doubles) and an AVX-512 (16, 8) vector:
# one to eight vectors in a tile, more than one tile, and a last vector of 1 to V - 1 elements.
WIDTHS = [1, 3, 4, 5, 8, 9, 15, 16, 17, 24, 31, 33, 40, 63, 64, 65, 71, 127, 128, 129, 200, 257]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
ACC = {torch.float64: torch.float64}


@pytest.fixture(scope="module")
def graph():
    """Weighted, with hub rows (skew) and rows without in-edges."""
    return random_graph(700, 9000, seed=11, weighted=True, skew=0.8)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", WIDTHS)
def test_every_width_and_dtype(graph, dim, dtype, poisoned_empty):
    x = torch.randn(graph.num_nodes, dim).to(dtype)
    out = mgg.aggregate(x, Plan(graph))
    assert out.dtype == dtype and not out.isnan().any()
    assert_matches_reference(out, graph, x, ACC.get(dtype, torch.float32))
    if dtype in (torch.float32, torch.float64):  # the outside oracle: MKL's CSR product
        want = graph.to_torch_sparse(dtype) @ x
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dim", [1, 9, 64, 129])
@pytest.mark.parametrize("reduce", ["mean", "max", "min"])
def test_other_reductions_at_tail_widths(graph, dim, reduce):
    """mean (weights 1/deg) and max/min (their own kernel) against torch's scatter_reduce."""
    g = Graph.from_csr(graph.rowptr, graph.col)  # unweighted
    x = torch.randn(g.num_nodes, dim)
    out = mgg.aggregate(x, g, reduce=reduce)
    src, dst = g.col, g.rows()
    want = torch.zeros(g.num_nodes, dim).scatter_reduce(
        0,
        dst.unsqueeze(1).expand(-1, dim),
        x[src],
        {"mean": "mean", "max": "amax", "min": "amin"}[reduce],
        include_self=False,
    )
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)


def _ranks_forward_backward(plan: Plan, x: torch.Tensor, go: torch.Tensor):
    """Every rank's rows from its own rows and its halo (the table op's remote part), and the
    gradient of x through each rank's transposed step."""
    parts, grad = [], torch.zeros_like(x)
    for r in range(plan.num_ranks):
        p = plan.shard(r)
        own = x[p.row_begin : p.row_end].clone().requires_grad_()
        halo = x[torch.from_numpy(p.halo_nodes)].clone().requires_grad_()
        out = plan.rank_plan(r, Config()).aggregate(own, halo)
        parts.append(out.detach())
        out.backward(go[p.row_begin : p.row_end])
        grad[p.row_begin : p.row_end] += own.grad
        grad.index_add_(0, torch.from_numpy(p.halo_nodes), halo.grad)
    return torch.cat(parts), grad


@pytest.mark.parametrize("ranks", [1, 3])
@pytest.mark.parametrize("dim", [16, 33])
def test_thread_counts_give_the_same_bits(ranks, dim):
    """Enough work for every thread to get a range (so the ranges' bounds move with the count),
    local and remote parts, forward and backward: identical for 1, 2, 3 and 4 threads."""
    g = random_graph(6000, 120000, seed=5, weighted=True, skew=0.9)
    plan = Plan(g, ranks)
    x, go = torch.randn(g.num_nodes, dim), torch.randn(g.num_nodes, dim)
    n = torch.get_num_threads()
    runs = []
    try:
        for threads in (1, 2, 3, 4):
            torch.set_num_threads(threads)
            runs.append(_ranks_forward_backward(plan, x, go))
    finally:
        torch.set_num_threads(n)
    assert_matches_reference(runs[0][0], g, x)
    assert_matches_reference(runs[0][1], g.transpose(), go)
    for out, grad in runs[1:]:
        assert torch.equal(out, runs[0][0]) and torch.equal(grad, runs[0][1])


def test_this_cpu_runs_the_copy_aten_chooses():
    """The kernels' instruction set follows ATen's choice for this CPU."""
    isa = _C.cpu_kernels()
    want = {"AVX512": "avx512", "AVX2": "avx2"}.get(torch.backends.cpu.get_cpu_capability(), "default")
    assert isa == want


def _python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_default_copy_in_a_process_of_its_own():
    """ATEN_CPU_CAPABILITY=default runs the default copy, and it agrees with the reference."""
    r = _python(
        """
        import torch, mgg
        from mgg import _C, Plan
        from mgg.testing import assert_matches_reference, random_graph
        assert _C.cpu_kernels() == "default", _C.cpu_kernels()
        g = random_graph(500, 6000, seed=2, weighted=True, skew=0.8)
        for dim in (1, 7, 9, 33, 130):
            for dtype in (torch.float32, torch.bfloat16, torch.float64):
                x = torch.randn(500, dim).to(dtype)
                acc = torch.float64 if dtype == torch.float64 else torch.float32
                assert_matches_reference(mgg.aggregate(x, Plan(g)), g, x, acc)
        print("ok")
        """,
        ATEN_CPU_CAPABILITY="default",
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_no_read_past_the_end_of_the_columns():
    """The prefetch reads the column of an edge kAhead edges on: a kernel that looks past the last
    edge of its range reads past the column array. Here that array ends where an unreadable page
    begins, so such a read is a segmentation fault (in a child process)."""
    r = _python(
        """
        import ctypes, mmap
        import torch, mgg
        from mgg import Config, Plan
        from mgg.plan import STEP_FIELDS
        from mgg.testing import assert_matches_reference, random_graph

        libc = ctypes.CDLL(None)
        page = mmap.PAGESIZE
        g = random_graph(300, 3000, seed=4, weighted=True, skew=0.5)
        plan, params = Plan(g).rank_plan(0, Config()).op_args("cpu")
        plan = list(plan)
        i = STEP_FIELDS.index("local_col")
        col = plan[i]
        nbytes = col.numel() * 4
        pages = (nbytes + page - 1) // page
        buf = mmap.mmap(-1, (pages + 1) * page)  # the column pages, then a guard page
        base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
        assert libc.mprotect(ctypes.c_void_p(base + pages * page), page, 0) == 0  # PROT_NONE
        whole = torch.frombuffer(buf, dtype=torch.int32, count=pages * page // 4)
        guarded = whole[pages * page // 4 - col.numel():]  # ends at the guard page
        guarded.copy_(col)
        plan[i] = guarded
        for dim in (16, 900, 1100):  # x of 900 or more columns is over kPrefetchTableBytes: prefetched
            torch.set_num_threads(1)
            x = torch.randn(300, dim)
            out = torch.ops.mgg.aggregate(x, x.new_empty((0, dim)), plan, params, False)
            assert_matches_reference(out, g, x)
        print("ok")
        """
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", f"exit {r.returncode}: {r.stdout}{r.stderr}"


@pytest.mark.parametrize("config", [Config(1, 1, 1), Config(0, 3, 2), Config(32, 16, 16)], ids=str)
def test_the_schedule_does_not_change_a_bit(graph, config):
    """A CPU thread sums whole rows in edge order: the GPU's warp ranges (the config) do not change
    the result."""
    x = torch.randn(graph.num_nodes, 40)
    assert torch.equal(mgg.aggregate(x, Plan(graph), config), mgg.aggregate(x, Plan(graph), Config()))

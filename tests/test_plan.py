"""Properties of the MGG plan (hypothesis): Algorithm 1's balance, exact edge coverage, MGG's
address translation, neighbor partitions and the block schedule."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mgg import Config, Plan, PlanError, split_ranges
from mgg.graph import Graph
from mgg.plan import block_row_cap, block_schedule, neighbor_partitions


@st.composite
def graphs(draw):
    n = draw(st.integers(1, 60))
    e = draw(st.integers(0, 400))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    # a mix of uniform and hub-heavy destinations
    dst = rng.integers(0, n, e) if draw(st.booleans()) else (rng.pareto(1.0, e) * 3).astype(np.int64) % n
    w = rng.uniform(0.1, 1, e).astype(np.float32) if draw(st.booleans()) else None
    return Graph.from_edges(rng.integers(0, n, e), dst, n, w)


@settings(max_examples=150, deadline=None)
@given(g=graphs(), p=st.integers(1, 8))
def test_split_balance(g, p):
    if p > g.num_nodes:
        with pytest.raises(PlanError, match="exceed the number of nodes"):
            split_ranges(g.rowptr, p)
        return
    b = split_ranges(g.rowptr, p)
    assert b[0] == 0 and b[-1] == g.num_nodes and np.all(np.diff(b) >= 1)
    rp = g.rowptr.numpy()
    edges = rp[b[1:]] - rp[b[:-1]]
    per = -(-g.num_edges // p)
    maxdeg = int(g.degree().max())
    # Algorithm 1: every rank is within one row's degree of ceil(nnz/P), except where a rank must
    # keep one node (P close to N), which can add one more row.
    assert edges.max() <= per + 2 * maxdeg
    if p <= g.num_nodes // 2:
        assert edges.max() <= per + maxdeg


@settings(max_examples=150, deadline=None)
@given(g=graphs(), p=st.integers(1, 6), ps=st.integers(1, 32), dist=st.integers(1, 16), wpb=st.integers(1, 4))
def test_plan_covers_every_edge_once(g, p, ps, dist, wpb):
    p = min(p, g.num_nodes)
    plan = Plan(g, p)
    seen = []
    for r in range(p):
        rp = plan.rank_plan(r, Config(ps, dist, wpb))
        part = rp.partition
        lo, hi = part.row_begin, part.row_end
        # local: rebased ids inside the range
        lrows = np.repeat(np.arange(lo, hi), np.diff(part.local_rowptr.numpy()))
        lcol = part.local_col.numpy().astype(np.int64)
        assert np.all((lcol >= 0) & (lcol < hi - lo))
        seen.append(np.stack([lrows, lcol + lo], 1))
        # remote: owner and offset translate to the global id; halo slot agrees
        rrows = np.repeat(np.arange(lo, hi), np.diff(part.remote_rowptr.numpy()))
        pe, off = part.remote_pe.numpy(), part.remote_offset.numpy()
        glob = plan.bounds[pe] + off
        assert np.all(pe != r) and np.all((off >= 0) & (glob < plan.bounds[pe + 1]))
        assert np.array_equal(part.halo_nodes.numpy()[part.remote_col.numpy()], glob)
        assert np.all(np.diff(part.halo_nodes.numpy()) > 0)
        seen.append(np.stack([rrows, glob], 1))
        # weights follow their edges
        if g.weight is not None:
            a = g.to_scipy()
            ws = np.concatenate([part.local_weight.numpy(), part.remote_weight.numpy()])
            assert np.isclose(ws.sum(), a[lo:hi].sum(), rtol=1e-5, atol=1e-5)
        # partitions: in row order, at most ps edges, exact cover of the part's edges
        for ptr, row, rowptr in ((rp.local_part_ptr, rp.local_part_row, part.local_rowptr),
                                 (rp.remote_part_ptr, rp.remote_part_row, part.remote_rowptr)):
            ptr, row, rowptr = ptr.numpy(), row.numpy(), rowptr.numpy()
            sizes = np.diff(ptr)
            assert np.all(sizes >= 1) and np.all(sizes <= ps)
            assert ptr[0] == 0 and ptr[-1] == rowptr[-1]
            assert np.all(np.diff(row) >= 0)
            assert np.all(ptr[:-1] >= rowptr[row]) and np.all(ptr[1:] <= rowptr[row + 1])
        check_block_schedule(rp)
    got = np.concatenate(seen) if seen else np.zeros((0, 2))
    want = np.stack([g.rows().numpy(), g.col.numpy()], 1)
    key = lambda a: a[np.lexsort((a[:, 1], a[:, 0]))]  # noqa: E731
    assert np.array_equal(key(got), key(want))


def check_block_schedule(rp):
    """The invariants the kernels rely on (csrc/kernels/aggregate_core.h): blocks tile each
    part's partitions in order, hold at most wpb*dist of each and 2*wpb rows, every partition's
    row is in its block, every output row is written once (by a block or by one fixup), and a
    row is cut across blocks only when it does not fit one."""
    c = rp.config
    b, f = rp.blocks.numpy(), rp.fixups.numpy()
    cap, row_cap = c.wpb * c.dist, block_row_cap(c.wpb)
    assert b.shape[1] == 7 and f.shape[1] == 3
    for lo, hi, rows in ((2, 3, rp.local_part_row.numpy()), (4, 5, rp.remote_part_row.numpy())):
        assert np.array_equal(b[1:, lo], b[:-1, hi]) and (b.size == 0 or (b[0, lo] == 0 and b[-1, hi] == rows.size))
        n = b[:, hi] - b[:, lo]
        assert np.all((n >= 0) & (n <= cap))
        blk = np.repeat(np.arange(len(b)), n)
        assert np.all((rows >= b[blk, 0]) & (rows < b[blk, 1]))
    nrows = b[:, 1] - b[:, 0]
    assert np.all((nrows >= 1) & (nrows <= row_cap))
    direct = b[:, 6] < 0
    written = np.concatenate([np.arange(s, e) for s, e in b[direct, :2]] + [f[:, 0], np.zeros(0, np.int64)])
    assert np.array_equal(np.sort(written), np.arange(rp.num_rows))
    # scratch blocks: one row each; the slots of fixup h are [begin, end), in order, used once
    assert np.all(nrows[~direct] == 1)
    assert np.array_equal(np.sort(b[~direct, 6]), np.arange(f[-1, 2] if len(f) else 0))
    for row, s0, s1 in f:
        owners = b[(b[:, 6] >= s0) & (b[:, 6] < s1)]
        assert np.all(owners[:, 0] == row) and len(owners) == s1 - s0 >= 2
        nl, nr = (np.sum(rp.local_part_row.numpy() == row), np.sum(rp.remote_part_row.numpy() == row))
        assert max(nl, nr) > cap  # only rows that do not fit one block are cut


def test_block_schedule_example():
    # rows: 0 has 5 local partitions (heavy for cap 2), 1 empty, 2 and 3 one local + one remote
    lrow = torch.tensor([0, 0, 0, 0, 0, 2, 3], dtype=torch.int32)
    rrow = torch.tensor([2, 3], dtype=torch.int32)
    blocks, fixups = block_schedule(lrow, rrow, 4, dist=2, wpb=1)
    assert blocks.tolist() == [[0, 1, 0, 1, 0, 0, 0], [0, 1, 1, 3, 0, 0, 1], [0, 1, 3, 5, 0, 0, 2],
                               [1, 3, 5, 6, 0, 1, -1], [3, 4, 6, 7, 1, 2, -1]]
    assert fixups.tolist() == [[0, 0, 3]]


def test_ablation_switches():
    g = Graph.from_edges(np.arange(40) % 7, np.arange(40) // 10, 7)  # rows 0..3 with 10 neighbors
    plan = Plan(g, 2)
    off = plan.rank_plan(0, Config(ps=0, dist=2, wpb=1))
    assert off.local_part_row.numel() + off.remote_part_row.numel() <= 2 * off.num_rows
    assert np.all(np.diff(off.local_part_row.numpy()) > 0)  # one partition per row
    check_block_schedule(off)
    contiguous = plan.rank_plan(0, Config(ps=2, dist=2, wpb=1, interleave=False))
    check_block_schedule(contiguous)
    assert contiguous.op_args()[-1] is False  # the kernel's interleave switch


def test_partition_example():
    ptr, row = neighbor_partitions(Graph.from_csr([0, 5, 5, 7], [0] * 7).rowptr, 2)
    assert ptr.tolist() == [0, 2, 4, 5, 7] and row.tolist() == [0, 0, 0, 2]


@pytest.mark.parametrize("kw, msg", [(dict(ps=-1), "ps must be an integer in \\[1, 32\\] or 0"),
                                     (dict(ps=33), "ps must be an integer in \\[1, 32\\]"),
                                     (dict(dist=17), "dist must be"), (dict(wpb=2.5), "wpb must be")])
def test_config_validation(kw, msg):
    with pytest.raises(PlanError, match=msg):
        Config(**kw)


def test_transposed_plan():
    g = Graph.from_edges([0, 0, 1], [1, 2, 2], 3)
    plan = Plan(g)
    assert plan.transposed is not plan
    assert (plan.transposed.graph.to_scipy() != g.to_scipy().T).nnz == 0
    sym = Plan(Graph.from_edges([0, 1], [1, 0], 2))
    assert sym.transposed is sym

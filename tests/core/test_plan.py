"""Properties of the MGG plan (hypothesis): Algorithm 1's balance, exact edge coverage, MGG's
address translation, neighbor partitions and the block schedule."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mgg import Config, Plan, PlanError, split_ranges
from mgg.graph import Graph
from mgg.plan import BLOCK_FIELDS, STEP_FIELDS, STEP_PARAMS
from mgg.testing import random_graph


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


def partitions_of(rowptr: np.ndarray, ps: int) -> tuple[np.ndarray, np.ndarray]:
    """An independent statement of the partitions the schedule implies: (row, first edge) of each
    partition in order, ps edges each (ps = 0: one per non-empty row)."""
    deg = np.diff(rowptr)
    n = (deg > 0).astype(np.int64) if ps == 0 else -(-deg // ps)
    row = np.repeat(np.arange(deg.size), n)
    j = np.arange(row.size) - np.repeat(np.cumsum(n) - n, n)
    return row, rowptr[row] + j * (ps if ps else 0)


@settings(max_examples=150, deadline=None)
@given(g=graphs(), p=st.integers(1, 6), ps=st.integers(0, 32), dist=st.integers(1, 16), wpb=st.integers(1, 4))
def test_plan_covers_every_edge_once(g, p, ps, dist, wpb):
    p = min(p, g.num_nodes)
    plan = Plan(g, p)
    seen = []
    for r in range(p):
        rp = plan.rank_plan(r, Config(ps, dist, wpb))
        part = rp.shard
        lo, hi = part.row_begin, part.row_end
        # local: rebased ids inside the range
        lrows = np.repeat(np.arange(lo, hi), np.diff(part.local.rowptr))
        lcol = part.local.col.astype(np.int64)
        assert np.all((lcol >= 0) & (lcol < hi - lo))
        seen.append(np.stack([lrows, lcol + lo], 1))
        # remote: owner and offset translate to the global id; halo slot and halo owner agree
        rrows = np.repeat(np.arange(lo, hi), np.diff(part.remote.rowptr))
        pe, off = part.remote_pe, part.remote_offset
        glob = plan.bounds[pe] + off
        assert np.all(pe != r) and np.all((off >= 0) & (glob < plan.bounds[pe + 1]))
        assert np.array_equal(part.halo_nodes[part.remote.col], glob)
        assert np.all(np.diff(part.halo_nodes) > 0)
        assert np.array_equal(plan.bounds[part.halo_pe] + part.halo_offset, part.halo_nodes)
        seen.append(np.stack([rrows, glob], 1))
        # weights follow their edges
        if g.weight is not None:
            a = g.to_scipy()
            ws = np.concatenate([part.local.weight, part.remote.weight])
            assert np.isclose(ws.sum(), a[lo:hi].sum(), rtol=1e-5, atol=1e-5)
        check_block_schedule(rp)
        check_transposed(part)
    got = np.concatenate(seen) if seen else np.zeros((0, 2))
    want = np.stack([g.rows().numpy(), g.col.numpy()], 1)
    key = lambda a: a[np.lexsort((a[:, 1], a[:, 0]))]  # noqa: E731
    assert np.array_equal(key(got), key(want))


def check_transposed(part):
    """The backward's step is the transpose of [local | remote] (remote sources after the rows)."""
    n, h = part.num_rows, part.num_halo

    def dense(c, cols):
        w = c.weight if c.weight is not None else np.ones(c.num_edges, np.float32)
        return sp.csr_matrix((w, c.col, c.rowptr), shape=(c.num_rows, cols)).toarray()

    fwd = np.hstack([dense(part.local, n), dense(part.remote, h)]) if h else dense(part.local, n)
    t = part.transposed
    assert t.num_rows == n + h
    assert np.allclose(dense(t, n), fwd.T)


def check_block_schedule(rp):
    """The invariants the kernels rely on (csrc/core/schedule.h): blocks tile each part's
    partitions in order, hold at most wpb*dist of each and 2*wpb rows, each block's first-partition
    fields point at its first row's first partition, every partition's row is in its block, every
    output row is written once (by a block or by one fixup), and a row is cut across blocks only
    when it does not fit one."""
    c = rp.config
    b, f = rp.blocks.numpy(), rp.fixups.numpy()
    B = {name: i for i, name in enumerate(BLOCK_FIELDS)}
    cap, row_cap = c.wpb * c.dist, 2 * c.wpb  # eq. 1's 2 * wpb partial rows
    assert b.shape[1] == len(BLOCK_FIELDS) == 9 and f.shape[1] == 3
    counts = {}
    for part, csr in (("local", rp.shard.local), ("remote", rp.shard.remote)):
        rows, _ = partitions_of(csr.rowptr, c.ps)
        counts[part] = np.bincount(rows, minlength=rp.num_rows)
        lo, hi, first = B[f"{part}_begin"], B[f"{part}_end"], B[f"{part}_first"]
        assert np.array_equal(b[1:, lo], b[:-1, hi]) and (b.size == 0 or (b[0, lo] == 0 and b[-1, hi] == rows.size))
        n = b[:, hi] - b[:, lo]
        assert np.all((n >= 0) & (n <= cap))
        blk = np.repeat(np.arange(len(b)), n)
        assert np.all((rows >= b[blk, 0]) & (rows < b[blk, 1]))
        prefix = np.concatenate([[0], np.cumsum(counts[part])])
        assert np.array_equal(b[:, first], prefix[b[:, B["row_begin"]]])
    nrows = b[:, 1] - b[:, 0]
    assert np.all((nrows >= 1) & (nrows <= row_cap))
    direct = b[:, B["scratch"]] < 0
    written = np.concatenate([np.arange(s, e) for s, e in b[direct, :2]] + [f[:, 0], np.zeros(0, np.int64)])
    assert np.array_equal(np.sort(written), np.arange(rp.num_rows))
    # scratch blocks: one row each; the slots of fixup h are [begin, end), in order, used once
    assert np.all(nrows[~direct] == 1)
    assert np.array_equal(np.sort(b[~direct, B["scratch"]]), np.arange(f[-1, 2] if len(f) else 0))
    assert rp.schedule.num_slots == (f[-1, 2] if len(f) else 0)
    for row, s0, s1 in f:
        owners = b[(b[:, B["scratch"]] >= s0) & (b[:, B["scratch"]] < s1)]
        assert np.all(owners[:, 0] == row) and len(owners) == s1 - s0 >= 2
        assert max(counts["local"][row], counts["remote"][row]) > cap  # only rows that do not fit one block are cut


def test_block_schedule_example():
    # rows: 0 has 9 local edges (5 partitions of ps 2: heavy for cap 2), 1 empty, 2 and 3 one
    # local + one remote edge
    local = torch.tensor([0, 9, 9, 10, 11])
    remote = torch.tensor([0, 0, 0, 1, 2])
    blocks, fixups = torch.ops.mgg.block_schedule(local, remote, 2, 2, 1)
    assert blocks.tolist() == [
        [0, 1, 0, 1, 0, 0, 0, 0, 0],
        [0, 1, 1, 3, 0, 0, 1, 0, 0],
        [0, 1, 3, 5, 0, 0, 2, 0, 0],
        [1, 3, 5, 6, 0, 1, -1, 5, 0],
        [3, 4, 6, 7, 1, 2, -1, 6, 1],
    ]
    assert fixups.tolist() == [[0, 0, 3]]


def test_ablation_switches():
    g = Graph.from_edges(np.arange(40) % 7, np.arange(40) // 10, 7)  # rows 0..3 with 10 neighbors
    plan = Plan(g, 2)
    off = plan.rank_plan(0, Config(ps=0, dist=2, wpb=1))
    rows, _ = partitions_of(off.shard.local.rowptr, 0)
    assert np.all(np.diff(rows) > 0)  # one partition per row
    check_block_schedule(off)
    contiguous = plan.rank_plan(0, Config(ps=2, dist=2, wpb=1, interleave=False))
    check_block_schedule(contiguous)
    _, params = contiguous.op_args("cpu")
    assert params[STEP_PARAMS.index("interleave")] == 0  # the kernel's interleave switch


@pytest.mark.parametrize(
    "kw, msg",
    [
        (dict(ps=-1), "ps must be an integer in \\[1, 32\\] or 0"),
        (dict(ps=33), "ps must be an integer in \\[1, 32\\]"),
        (dict(dist=17), "dist must be"),
        (dict(wpb=2.5), "wpb must be"),
    ],
)
def test_config_validation(kw, msg):
    with pytest.raises(PlanError, match=msg):
        Config(**kw)


def test_limits_come_from_the_extension():
    """The planner's ranges are the launcher's (defined once in csrc/core/limits.h)."""
    from mgg import _C
    from mgg.plan import DIST_RANGE, PS_RANGE, WPB_RANGE

    assert (PS_RANGE, DIST_RANGE, WPB_RANGE) == tuple(tuple(_C.limits[k]) for k in ("ps", "dist", "wpb"))
    assert BLOCK_FIELDS == tuple(_C.BLOCK_FIELDS) and len(STEP_FIELDS) == 11 and len(STEP_PARAMS) == 6
    shape = _C.launch_shape(2100, 16, 32, 4, False, True, 100 * 1024)
    assert 32 <= shape["tile"] < 256 and shape["smem"] <= 100 * 1024 and shape["threads"] == 512
    assert _C.launch_shape(2100, 16, 32, 4, False, True, 1024)["tile"] == 0


def test_transposed_step_of_a_symmetric_graph_is_shared():
    g = Graph.from_edges([0, 0, 1], [1, 2, 2], 3)
    p = Plan(g).shard(0)
    assert p.transposed is not p.local
    sym = Plan(Graph.from_edges([0, 1], [1, 0], 2)).shard(0)
    assert sym.transposed is sym.local


def test_halo_nodes_and_their_return_step():
    """Plan.halo_nodes(r) is rank r's shard's halo list, found without building the shard, and
    halo_return(q) names, for each of q's rows, every (peer, slot in the peer's halo list) that
    reads it, rows in order and peers ascending within a row."""
    g = random_graph(200, 3000, seed=5, skew=0.6)
    fresh, built = Plan(g, 4), Plan(g, 4)
    for r in range(4):
        assert np.array_equal(fresh.halo_nodes(r), built.shard(r).halo_nodes)
    for q in range(4):
        lo = int(fresh.bounds[q])
        step = fresh.halo_return(q, Config())
        rowptr, slot, pe = step.remote.rowptr, step.remote.col, step.remote_pe
        got = set()
        for i in range(rowptr.size - 1):
            peers = pe[rowptr[i] : rowptr[i + 1]]
            assert np.all(np.diff(peers) > 0)
            for p, s in zip(peers, slot[rowptr[i] : rowptr[i + 1]], strict=True):
                assert fresh.halo_nodes(p)[s] == lo + i
                got.add((int(p), lo + i))
        want = {
            (p, int(v))
            for p in range(4)
            if p != q
            for v in fresh.halo_nodes(p)
            if fresh.bounds[q] <= v < fresh.bounds[q + 1]
        }
        assert got == want

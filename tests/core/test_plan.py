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
from mgg.plan import RANGE_FIELDS, STEP_FIELDS, STEP_PARAMS
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


def reference_ranges(lptr: np.ndarray, rptr: np.ndarray, ps: int, dist: int) -> tuple[np.ndarray, np.ndarray]:
    """An independent statement of the warp-range schedule (csrc/core/schedule.h) in numpy: the
    merge path over rows and edges (items: each row's local edges, its remote edges, its end) cut
    every ps * dist items (ps = 0: every dist rows), the carry slots of the rows the cuts fall
    inside (a head slot for the warp that ends such a row, a tail slot for each warp before it
    that holds edges of it, numbered in warp order) and their fixups."""
    rows = lptr.size - 1
    m = lptr + rptr
    if ps == 0:
        row = np.arange(0, rows, dist, dtype=np.int64)
        local, remote = lptr[row], rptr[row]
    else:
        d = np.arange(0, rows + int(m[-1]), ps * dist, dtype=np.int64)
        row = np.searchsorted(m[1:] + np.arange(rows), d, side="left")  # rows whose end item is before d
        taken = d - row - m[row]
        ldeg = lptr[row + 1] - lptr[row]
        local, remote = lptr[row] + np.minimum(taken, ldeg), rptr[row] + np.maximum(taken - ldeg, 0)
    nw = row.size
    row, local, remote = (np.append(a, last) for a, last in ((row, rows), (local, lptr[-1]), (remote, rptr[-1])))
    inside = np.zeros(nw + 1, bool)
    inside[1:nw] = (local[1:nw] > lptr[row[1:nw]]) | (remote[1:nw] > rptr[row[1:nw]])
    head = inside[:nw] & (row[:nw] < row[1:])
    tail = inside[1:]
    flags = np.stack([head, tail], 1).reshape(-1)  # warp order: a warp's head before its tail
    slots = np.where(flags, np.cumsum(flags) - 1, -1).reshape(nw, 2)
    ranges = np.stack([row, local, remote, np.append(slots[:, 0], -1), np.append(slots[:, 1], -1)], 1)
    slot_row = np.zeros(int(flags.sum()), np.int64)  # the row of each slot: a run of slots per split row
    slot_row[slots[:, 0][head]] = row[:nw][head]
    slot_row[slots[:, 1][tail]] = row[1:][tail]
    starts = np.flatnonzero(np.diff(slot_row, prepend=-1))
    ends = np.append(starts[1:], slot_row.size) if starts.size else starts
    fixups = np.stack([slot_row[starts], starts, ends], 1)
    return ranges.astype(np.int64), fixups.astype(np.int64).reshape(-1, 3)


@settings(max_examples=150, deadline=None)
@given(g=graphs(), p=st.integers(1, 6), ps=st.integers(0, 32), dist=st.integers(1, 64), wpb=st.integers(1, 4))
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
        check_range_schedule(rp)
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


def check_range_schedule(rp):
    """The rank plan's schedule is reference_ranges' (an independent statement of it), and what the
    kernels rely on holds: every warp holds ps * dist items (the last at most; ps = 0: at most dist
    whole rows), every output row is written once (by the warp that ends it or by one fixup), and
    each carry slot is written by one warp, for its fixup's row."""
    c = rp.config
    r, f = rp.ranges.numpy(), rp.fixups.numpy()
    F = {name: i for i, name in enumerate(RANGE_FIELDS)}
    assert r.shape[1] == len(RANGE_FIELDS) == 5 and f.shape[1] == 3
    lptr, rptr = rp.shard.local.rowptr, rp.shard.remote.rowptr
    want_r, want_f = reference_ranges(lptr, rptr, c.ps, c.dist)
    assert np.array_equal(r, want_r) and np.array_equal(f, want_f)
    items = np.diff(r[:, F["row"]]) + np.diff(r[:, F["local"]]) + np.diff(r[:, F["remote"]])
    if c.ps:
        assert np.all(items[:-1] == c.ps * c.dist) and (items.size == 0 or 0 < items[-1] <= c.ps * c.dist)
    else:
        assert np.all(np.diff(r[:, F["row"]]) <= c.dist) and np.array_equal(r[:-1, F["local"]], lptr[r[:-1, F["row"]]])
    head, tail = r[:-1, F["head_slot"]], r[:-1, F["tail_slot"]]
    direct = [np.arange(a + (h >= 0), b) for a, b, h in zip(r[:-1, 0], r[1:, 0], head, strict=True)]
    written = np.concatenate(direct + [f[:, 0], np.zeros(0, np.int64)])
    assert np.array_equal(np.sort(written), np.arange(rp.num_rows))
    used = np.concatenate([head[head >= 0], tail[tail >= 0]])
    assert np.array_equal(np.sort(used), np.arange(rp.schedule.num_slots))
    slot_row = np.full(rp.schedule.num_slots, -1)
    for row, s0, s1 in f:
        slot_row[s0:s1] = row
    assert np.array_equal(slot_row[head[head >= 0]], r[:-1, 0][head >= 0])
    assert np.array_equal(slot_row[tail[tail >= 0]], r[1:, 0][tail >= 0])


def test_range_schedule_example():
    # rows: 0 has 9 local edges, 1 none, 2 and 3 one local and one remote edge; ps * dist = 4
    # items a warp: row 0's 9 edges and its end cross three warps, row 2's end and row 3 a cut each
    local = torch.tensor([0, 9, 9, 10, 11])
    remote = torch.tensor([0, 0, 0, 1, 2])
    ranges, fixups = torch.ops.mgg.range_schedule(local, remote, 2, 2)
    assert ranges.tolist() == [
        [0, 0, 0, -1, 0],
        [0, 4, 0, -1, 1],
        [0, 8, 0, 2, 3],
        [2, 10, 0, 4, 5],
        [3, 11, 2, 6, -1],
        [4, 11, 2, -1, -1],
    ]
    assert fixups.tolist() == [[0, 0, 3], [2, 3, 5], [3, 5, 7]]
    want_r, want_f = reference_ranges(local.numpy(), remote.numpy(), 2, 2)
    assert ranges.tolist() == want_r.tolist() and fixups.tolist() == want_f.tolist()


def test_ablation_switches():
    g = Graph.from_edges(np.arange(40) % 7, np.arange(40) // 10, 7)  # rows 0..3 with 10 neighbors
    plan = Plan(g, 2)
    off = plan.rank_plan(0, Config(ps=0, dist=2, wpb=1))
    assert off.fixups.numel() == 0 and off.num_warps == -(-off.num_rows // 2)  # whole rows: nothing split
    check_range_schedule(off)
    contiguous = plan.rank_plan(0, Config(ps=2, dist=2, wpb=1, interleave=False))
    check_range_schedule(contiguous)
    _, params = contiguous.op_args("cpu")
    assert params[STEP_PARAMS.index("interleave")] == 0  # the kernel's interleave switch


@pytest.mark.parametrize(
    "kw, msg",
    [
        (dict(ps=-1), "ps must be an integer in \\[1, 32\\] or 0"),
        (dict(ps=33), "ps must be an integer in \\[1, 32\\]"),
        (dict(dist=1025), "dist must be"),
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
    assert RANGE_FIELDS == tuple(_C.RANGE_FIELDS) and len(STEP_FIELDS) == 11 and len(STEP_PARAMS) == 6
    shape = _C.launch_shape(2100, 8, 32, 4, True, 100 * 1024)
    assert 32 <= shape["tile"] < 256 and shape["smem"] <= 100 * 1024 and shape["threads"] == 256
    assert _C.launch_shape(2100, 16, 32, 4, True, 1024)["tile"] == 0
    assert _C.launch_shape(2100, 16, 32, 4, False, 8 * 1024)["tile"] == 256  # no landing: the widest pass


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

"""The order-aware L2 model (mgg/runtime/locality.py, kernel_model.ReuseProfile): the kernel's
visiting order, the reuse distances against an exact LRU cache, and Che's approximation where the
order is random (the two must agree there)."""

from collections import OrderedDict

import numpy as np
import pytest
import torch

import mgg
from mgg.partitioning.order import OrderedPlan, node_order
from mgg.runtime import kernel_model as km
from mgg.runtime import locality


def lru_hits(trace, capacity: int, stream: int) -> int:
    """Hits of an LRU cache of `capacity` units over `trace`, where each access first brings
    `stream` units read once (never read again) and then reads its unit."""
    cache: OrderedDict = OrderedDict()
    hits, fresh = 0, -1
    for u in trace:
        for _ in range(stream):
            cache[("s", fresh)] = None
            fresh -= 1
            while len(cache) > capacity:
                cache.popitem(last=False)
        if u in cache:
            hits += 1
            cache.move_to_end(u)
        else:
            cache[u] = None
            while len(cache) > capacity:
                cache.popitem(last=False)
    return hits


def profile_of(trace, units: int) -> km.ReuseProfile:
    d, g = mgg._C.reuse_distances(torch.as_tensor(np.asarray(trace, np.int64)), units)
    return km.ReuseProfile.of(d.numpy(), g.numpy())


@pytest.mark.parametrize("capacity, stream", [(1, 0), (4, 0), (16, 0), (40, 0), (16, 1), (40, 3), (60, 2)])
def test_reuse_profile_is_an_exact_lru_cache(capacity, stream):
    rng = np.random.default_rng(capacity * 10 + stream)
    # a trace with locality: a random walk over 200 units, and jumps
    trace = np.cumsum(rng.integers(-3, 4, 3000)) % 200
    jumps = rng.random(3000) < 0.1
    trace[jumps] = rng.integers(0, 200, int(jumps.sum()))
    prof = profile_of(trace, 200)
    row = 32  # bytes of a unit: any, the cache is `capacity` of them
    got = prof.hit_rate(row, stream * row, capacity * row) * trace.size
    assert round(got) == lru_hits(trace.tolist(), capacity, stream)


def test_first_gathers_always_miss_and_a_cache_of_everything_hits_the_rest():
    trace = [0, 1, 2, 0, 1, 2, 3, 0]
    prof = profile_of(trace, 4)
    assert prof.first == 4 and prof.gathers == 8
    assert prof.hit_rate(32, 0, 10**9) == pytest.approx(4 / 8)
    assert prof.hit_rate(32, 0, 32) == 0.0  # one row: every access here changes the row


@pytest.mark.parametrize("stream", [0.0, 64.0])
def test_che_and_reuse_distances_agree_on_a_random_order(stream):
    """Rows drawn independently in proportion to a skewed popularity (the order carries no
    locality): the LRU stack model and Che's approximation give the same hit rate. (Che counts no
    first gathers: the trace is long, 100 gathers a row, so that they weigh 1%.)"""
    rng = np.random.default_rng(0)
    rows = 20000
    weight = 1.0 / np.arange(1, rows + 1) ** 0.8
    trace = rng.choice(rows, 2_000_000, p=weight / weight.sum())
    prof = profile_of(trace, rows)
    che = km.SourceRows.of(np.bincount(trace, minlength=rows))
    for cache_rows in (500, 2000, 8000):
        l2 = cache_rows * 256
        assert prof.hit_rate(256, stream, l2) == pytest.approx(che.hit_rate(256, stream, l2), abs=0.01)


def test_visiting_order_interleaves_the_resident_warps():
    rowptr = np.array([0, 3, 3, 7, 12, 13])  # rows of 3, 0, 4, 5, 1 edges; items: edges + an end per row
    cfg = (1, 4, 1)  # 4 items a warp
    one = locality.visiting_order(rowptr, cfg, resident=1)
    assert one.tolist() == list(range(13))  # one warp at a time: the CSR order
    both = locality.visiting_order(rowptr, cfg, resident=2)
    assert sorted(both.tolist()) == list(range(13))
    # items of edge e: e + its row; warp = item // 4; warps 0 and 1 run together, then 2 and 3, then 4
    item = np.arange(13) + np.repeat(np.arange(5), np.diff(rowptr))
    warp, pos = item // 4, item % 4
    key = [(w // 2, p, w % 2) for w, p in zip(warp[both], pos[both], strict=True)]
    assert key == sorted(key)
    whole = locality.visiting_order(rowptr, (0, 2, 1), resident=2)  # ps = 0: 2 whole rows a warp
    assert sorted(whole.tolist()) == list(range(13)) and whole[:3].tolist() == [0, 3, 1]  # warps 0 and 1 side by side


def test_an_order_with_locality_hits_more_than_a_shuffled_one():
    """Communities whose ids are shuffled: RCM brings each community's rows together, so at a
    cache smaller than the table the gathers hit more often than in the shuffled order; Che's
    model, blind to order, gives both the same."""
    g = mgg.data.load_graph("sbm:4000:40:16:0.95")
    cfg = mgg.Config()
    shuffled = OrderedPlan(g, node_order(g, "random", seed=1))
    rcm = OrderedPlan(g, node_order(g, "rcm"))
    l2 = 400 * 256  # a tenth of the table at 256-byte rows
    resident = 8
    hit = {
        name: locality.reuse_profile(p.graph.rowptr.numpy(), p.graph.col.numpy(), g.num_nodes, cfg, resident)
        for name, p in (("shuffled", shuffled), ("rcm", rcm))
    }
    assert hit["rcm"].hit_rate(256, 8, l2) > hit["shuffled"].hit_rate(256, 8, l2) + 0.2
    che = km.SourceRows.of(np.bincount(g.col.numpy(), minlength=g.num_nodes)).hit_rate(256, 8, l2)
    assert hit["shuffled"].hit_rate(256, 8, l2) == pytest.approx(che, abs=0.05)


def test_the_model_predicts_fewer_dram_bytes_for_the_better_order():
    """A GPU scaled down to the graph (one SM: 32 warps resident; an L2 of a quarter of the
    table): RCM's order predicts fewer DRAM bytes than a shuffled one. (On the whole H200 this
    graph is one wave of 4,224 warps side by side, which no order helps: see the next test.)"""
    g = mgg.data.load_graph("sbm:4000:40:16:0.95")
    cfg = mgg.Config()
    small = km.replace(km.H200, sms=1, l2_bytes=1000 * 256)
    out = {}
    for name in ("random", "rcm"):
        p = OrderedPlan(g, node_order(g, name, seed=1))
        prof = locality.plan_profile(p, cfg, small)
        stats = km.RangeStats.of(p.graph.rowptr.numpy(), None, cfg)
        out[name] = km.predict_range(stats, 64, 4, km.H200_CALIBRATION, small, sources=prof)
    assert out["rcm"].dram_bytes < 0.8 * out["random"].dram_bytes
    assert out["rcm"].hit > out["random"].hit


def test_warps_side_by_side_spread_the_gathers_of_a_small_graph():
    """The visiting order is the GPU's, not a thread's: when one wave of resident warps covers the
    whole graph, the j-th gathers of every warp come together and an order cannot bring a row's
    readers closer in time, so the order-aware model gives RCM no gain there (Che's cannot tell)."""
    g = mgg.data.load_graph("sbm:4000:40:16:0.95")
    cfg = mgg.Config()
    gpu = km.replace(km.H200, l2_bytes=1000 * 256)
    hits = {}
    for name in ("random", "rcm"):
        p = OrderedPlan(g, node_order(g, name, seed=1))
        hits[name] = locality.plan_profile(p, cfg, gpu).hit_rate(256, 8, gpu.l2_bytes)
    assert hits["rcm"] == pytest.approx(hits["random"], abs=0.05)


def test_wave_rows_counts_each_waves_distinct_sources():
    rng = np.random.default_rng(3)
    rowptr = np.concatenate([[0], np.cumsum(rng.integers(0, 9, 60))])
    col = rng.integers(0, 40, int(rowptr[-1]))
    cfg, resident = (2, 3, 1), 4  # 6 items a warp, 4 warps a wave: 24 items
    item = np.arange(col.size) + np.repeat(np.arange(60), np.diff(rowptr))
    wave = item // 6 // resident
    want = np.mean([len(set(col[wave == w].tolist())) for w in range(int(wave[-1]) + 1)])
    assert locality.wave_rows(rowptr, col, cfg, resident) == pytest.approx(want)

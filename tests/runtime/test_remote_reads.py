"""The choice between the nvshmem backend's remote-read modes (mgg/runtime/remote_reads.py): the
faster mode by the slowest rank's measured step time, every mode run alike on every rank (the
steps are collective), and the backend's `auto` mode on threads as PEs keeping the choice."""

import threading

import numpy as np
import pytest
import torch

from mgg import Config, Plan
from mgg.distributed import nvshmem
from mgg.distributed.graph import DistPlan
from mgg.runtime import remote_reads
from mgg.runtime.coordination import Coordinator
from mgg.runtime.remote_reads import choose_remote_reads, estimate_ms, remote_read_bytes
from mgg.testing import random_graph
from tests.distributed.test_nvshmem_runtime import _FakeHeap, _FakeWorld, run_pes


def _timer(ms: dict):
    """A timer that runs the step and reports the time `ms` gives its mode."""

    def timer(fn, device):
        return fn(), ms[fn.args[0]]

    return timer


@pytest.mark.parametrize("fast", ["per-edge", "once"])
def test_the_faster_mode_wins_and_each_runs_alike(fast):
    calls = []
    ms = {"per-edge": 5.0, "once": 5.0, fast: 1.0}
    mode, times = choose_remote_reads(calls.append, "cpu", reps=3, timer=_timer(ms))
    assert mode == fast and times == ms
    assert calls == ["per-edge"] * 4 + ["once"] * 4  # a warm-up and 3 timed runs each, in one order


def test_the_cost_model_prunes_a_mode_it_puts_beyond_slack():
    """Estimates 10 and 1 ms: per-edge is beyond 4x once's, so only once runs (and, alone, is
    not even timed); estimates within the slack measure both."""
    calls = []
    mode, times = choose_remote_reads(calls.append, "cpu", estimates={"per-edge": 10.0, "once": 1.0})
    assert (mode, times, calls) == ("once", {}, [])
    ms = {"per-edge": 1.0, "once": 2.0}
    mode, times = choose_remote_reads(calls.append, "cpu", timer=_timer(ms), estimates={"per-edge": 3.0, "once": 1.0})
    assert mode == "per-edge" and times == ms and calls == ["per-edge"] * 4 + ["once"] * 4


def test_the_estimates_ranks_agree_on_are_the_slowest_ranks():
    """This rank's estimates would prune per-edge; another rank's slower once-estimate (the
    coordinator's max) keeps both, so every rank measures the same modes."""

    class _OtherRankSlowOnce(Coordinator):
        def slowest(self, ms: float) -> float:
            return max(ms, 5.0)

    calls = []
    ms = {"per-edge": 1.0, "once": 2.0}
    mode, _ = choose_remote_reads(
        calls.append, "cpu", _OtherRankSlowOnce(), timer=_timer(ms), estimates={"per-edge": 10.0, "once": 1.0}
    )
    assert set(calls) == {"per-edge", "once"}


def test_estimates_follow_the_bytes_and_bandwidths():
    g = random_graph(300, 6000, seed=2, skew=0.6)
    shard = Plan(g, 4).shard(1)
    b = remote_read_bytes(shard, 32, 4)
    est = estimate_ms(shard, 32, 4, link_bytes_per_s=1e9, memory_bytes_per_s=1e10)
    peer, during, after = b["once"]
    assert est["once"] == pytest.approx(1e3 * (max(peer / 1e9, during / 1e10) + after / 1e10))
    peer, during, _ = b["per-edge"]
    assert est["per-edge"] == pytest.approx(1e3 * max(peer / 1e9, during / 1e10))


class _SlowRankOne(Coordinator):
    """Two ranks; rank 1's `once` steps take 10 ms whatever this rank measured."""

    def __init__(self):
        self.mode = None

    def slowest(self, ms: float) -> float:
        return max(ms, 10.0) if self.mode == "once" else ms


def test_the_slowest_rank_decides():
    coord = _SlowRankOne()

    def step(mode):
        coord.mode = mode

    mode, times = choose_remote_reads(step, "cpu", coord, timer=_timer({"per-edge": 3.0, "once": 1.0}))
    assert mode == "per-edge" and times == {"per-edge": 3.0, "once": 10.0}


def test_bytes_per_mode_follow_the_plan():
    g = random_graph(300, 6000, seed=2, skew=0.6)
    for shard in (Plan(g, 4).shard(r) for r in range(4)):
        b = remote_read_bytes(shard, 64, 2)
        assert b["per-edge"][0] == shard.num_remote_edges * 128 and b["once"][0] == shard.num_halo * 128
        assert b["once"][0] < b["per-edge"][0]  # 6000 edges over 300 nodes: remote rows repeat


@pytest.mark.parametrize("fast", ["per-edge", "once"])
def test_auto_mode_on_threads_as_pes_keeps_the_measured_choice(monkeypatch, fast):
    """DistPlans of the nvshmem backend with remote_reads='auto' on 3 threads as PEs: the first
    step of a layer shape measures both modes (a timer that makes `fast` faster), every later
    step runs the chosen mode, and every result equals A @ x."""
    pes = 3
    g = random_graph(150, 2500, seed=8, weighted=True, skew=0.5)
    bounds = Plan(g, pes).bounds
    x = torch.randn(150, 6, dtype=torch.float64)
    world, local, results, chosen = _FakeWorld(pes), threading.local(), {}, {}
    monkeypatch.setattr(nvshmem.symmetric, "runtime", lambda: local.rt)
    monkeypatch.setattr(remote_reads, "time_once", _timer({"per-edge": 2.0, "once": 2.0, fast: 1.0}))
    ran = []
    real = nvshmem.aggregate
    monkeypatch.setattr(nvshmem, "aggregate", lambda *a: ran.append(a[-1]) or real(*a))

    def pe_main(pe):
        local.rt = nvshmem.Runtime(_FakeHeap(world, pe))
        dp = DistPlan(g, pe, bounds, backend="nvshmem", fetch="direct", remote_reads="auto")
        lo, hi = int(bounds[pe]), int(bounds[pe + 1])
        results[pe] = [dp.aggregate(x[lo:hi], Config(4, 2, 2)) for _ in range(2)]
        chosen[pe] = dp.transport.remote_choice[(6, torch.float64, Config(4, 2, 2))][0]

    run_pes(pes, pe_main, world.barrier)
    assert chosen == dict.fromkeys(range(pes), fast)
    assert ran.count(fast) == pes * (4 + 2) and len(ran) == pes * (8 + 2)  # measured, then two steps
    want = g.to_torch_sparse(torch.float64) @ x
    for i in range(2):
        got = torch.cat([results[pe][i] for pe in range(pes)])
        torch.testing.assert_close(got, want)
    assert np.all(np.array(world.barriers) == 8 + 2)


def test_once_mode_through_the_backend_on_threads_as_pes(monkeypatch):
    """DistPlans of the nvshmem backend with remote_reads='once' on 3 threads as PEs: an
    aggregation and GAT's attention (dropout 0.5) through the backend, forward and backward, equal
    one process's (the attention's gradients return through the outboxes)."""
    from mgg import functional

    pes, heads, c = 3, 2, 4
    g = functional.attention_graph(random_graph(120, 1500, seed=6, skew=0.5))
    bounds = Plan(g, pes).bounds
    gen = torch.Generator().manual_seed(1)
    h, a_src, a_dst = (
        torch.randn(*s, dtype=torch.float64, generator=gen) for s in ((120, heads, c), (120, heads), (120, heads))
    )
    x = torch.randn(120, 5, dtype=torch.float64, generator=gen)
    ref = [t.clone().requires_grad_() for t in (h, a_src, a_dst, x)]
    want = functional.attend(*ref[:3], g, dropout=0.5, seed=7)
    want_agg = Plan(g).aggregate(ref[3])
    (want.pow(2).sum() + want_agg.pow(2).sum()).backward()
    world, local, got = _FakeWorld(pes), threading.local(), {}
    monkeypatch.setattr(nvshmem.symmetric, "runtime", lambda: local.rt)

    def pe_main(pe):
        local.rt = nvshmem.Runtime(_FakeHeap(world, pe))
        dp = DistPlan(g, pe, bounds, backend="nvshmem", fetch="direct", remote_reads="once")
        lo, hi = int(bounds[pe]), int(bounds[pe + 1])
        mine = [t[lo:hi].clone().requires_grad_() for t in (h, a_src, a_dst, x)]
        out = dp.attend(*mine[:3], dropout=0.5, seed=7, config=Config(4, 2, 2))
        agg = dp.aggregate(mine[3], Config(4, 2, 2))
        (out.pow(2).sum() + agg.pow(2).sum()).backward()
        got[pe] = (out.detach(), agg.detach(), [t.grad for t in mine])

    run_pes(pes, pe_main, world.barrier)
    torch.testing.assert_close(torch.cat([got[p][0] for p in range(pes)]), want.detach())
    torch.testing.assert_close(torch.cat([got[p][1] for p in range(pes)]), want_agg.detach())
    for i, r in enumerate(ref):
        torch.testing.assert_close(torch.cat([got[p][2][i] for p in range(pes)]), r.grad)

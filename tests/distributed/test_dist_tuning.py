"""MGG's runtime over ranks (§6 under torchrun; gloo on the CPU): rank 0 decides each candidate and
broadcasts it, every rank times its own step, the step time is the slowest rank's. The worker
(tune_worker.py) injects a synthetic, deterministic per-rank cost with one slow rank, so the
max-over-ranks surface is known exactly and nothing depends on wall time. The nvshmem backend's
side runs with threads as PEs (as in test_distributed.py)."""

import itertools
import json
import os
import pickle
import subprocess
import sys
import threading

import pytest
import torch

from mgg import Config
from mgg.runtime.config_cache import parse_key
from mgg.runtime.limits import DeviceLimits, grid
from tests.cli.test_cli import CORA_CLASSES, assert_above_chance
from tests.distributed.test_distributed import TIMEOUT, worker_env
from tests.workers.tune_worker import disagreeing_cost, rank_cost, slow_rank

WORKER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "workers", "tune_worker.py")


def run_tune_worker(mode: str, nproc: int, tmp_path) -> list:
    out = tmp_path / f"{mode}.pkl"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--standalone",
        WORKER,
        mode,
        str(out),
        str(tmp_path / "cache.json"),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=worker_env())
    assert r.returncode == 0, r.stderr[-3000:]
    return pickle.load(open(out, "rb"))


def step_surface(kind: str, world: int, cost=rank_cost):
    """The step time the tuner sees: the slowest rank's."""
    return lambda c: max(cost(kind, r, world, c) for r in range(world))


@pytest.mark.parametrize("nproc", [2, 4])
def test_ranks_tune_together_and_training_is_unchanged(tmp_path, nproc):
    ranks = run_tune_worker("train", nproc, tmp_path)
    assert [p["rank"] for p in ranks] == list(range(nproc)) and slow_rank(nproc) == nproc - 1
    dims = (16, 5)  # the GCN's two aggregations
    for layer, (kind, dim) in enumerate(zip(ranks[0]["kinds"], dims, strict=True)):
        f = step_surface(kind, nproc)
        runs = [p["tuners"][layer] for p in ranks]
        # the ranks agree at every iteration: one config, one step time (the max), one choice
        assert all(
            [(c, step) for c, _, step in t["probes"]] == [(c, step) for c, _, step in runs[0]["probes"]] for t in runs
        )
        assert len({t["chosen"] for t in runs}) == 1 and len({t["key"] for t in runs}) == 1
        for r, t in enumerate(runs):
            for c, own, step in t["probes"]:
                assert own == rank_cost(kind, r, nproc, Config(*c))
                assert step == f(Config(*c))
        # MGG's search on the max-over-ranks surface: within 5% of the grid's best in <= 15
        probes, chosen = runs[0]["probes"], Config(*runs[0]["chosen"])
        best = min(f(c) for c in grid(dim, DeviceLimits.of("cpu")))
        assert len(probes) <= 15 and f(chosen) <= 1.05 * best, (kind, chosen, f(chosen), best)
        assert chosen == Config(*min(probes, key=lambda p: p[2])[0])
        # the key of the distributed case, and the cache entry rank 0 wrote
        key = parse_key(runs[0]["key"])
        assert (key["ranks"], key["device_name"], key["dim"], key["dtype"], key["backend"], key["fetch"]) == (
            nproc,
            "cpu",
            dim,
            "float64",
            "halo",
            "none",
        )
        assert "/" in key["fingerprint"]  # the graph's and its node ranges'
        entry = json.loads((tmp_path / "cache.json").read_text())["entries"][runs[0]["key"]]
        assert tuple(entry["config"]) == chosen.as_tuple()
        assert [tuple(c) for c in entry["trajectory"]] == [c for c, _, _ in probes]
        # the second run starts tuned, on every rank, with no measurement
        again = [p["again"][layer] for p in ranks]
        assert all(a["from_cache"] and not a["probes"] and a["chosen"] == chosen.as_tuple() for a in again)
    # training is unchanged by tuning: logits equal an untuned run at the final configs, every step
    for p in ranks:
        for tuned, untuned in zip(p["tuned"], p["untuned"], strict=True):
            torch.testing.assert_close(tuned, untuned, rtol=1e-12, atol=1e-12)


def test_a_rank_that_disagrees_runs_rank_0s_decision(tmp_path):
    """Rank 1's own cost favours (2, 1024, 1), its cache names another config for the same key, its
    tuner has another budget and no cost model: it still runs rank 0's candidate at every
    iteration and ends with rank 0's choice; next time it starts from rank 0's cache alone."""
    r0, r1 = run_tune_worker("disagree", 2, tmp_path)
    t0, t1 = r0["tuner"], r1["tuner"]
    # rank 1's own budget is 2: it runs rank 0's whole search instead
    assert [c for c, _, _ in t1["probes"]] == [c for c, _, _ in t0["probes"]] and len(t0["probes"]) > 2
    assert [s for _, _, s in t1["probes"]] == [s for _, _, s in t0["probes"]]
    assert min(t1["probes"], key=lambda p: p[1])[0] == (2, 1024, 1)  # what rank 1 alone would keep
    f = step_surface("bowl", 2, disagreeing_cost)
    assert t0["chosen"] == t1["chosen"] == min((c for c, _, _ in t0["probes"]), key=lambda c: f(Config(*c)))
    assert t1["chosen"] not in ((2, 1024, 1), (2, 16, 16))
    assert r0["same_output"] and r1["same_output"]  # every config computed the same aggregation
    assert r0["again"]["from_cache"] and r1["again"]["from_cache"]
    assert r1["again"]["chosen"] == t0["chosen"] and not r1["again"]["probes"]


@pytest.mark.full  # over 15 s on 2 cores: make test-full runs it
def test_torchrun_train_autotune_prints_and_second_seed_starts_tuned(tmp_path):
    """`mgg train --autotune` under torchrun tunes (no longer ignored): rank 0 prints each layer's
    trajectory and choice; the next seed's layers start from the cache."""
    env = worker_env(dict(MGG_CACHE=str(tmp_path / "tuned.json")))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node=2",
            "--standalone",
            "-m",
            "mgg",
            "train",
            "--epochs",
            "12",
            "--seeds",
            "2",
            "--quiet",
            "--autotune",
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "2 ranks, backend halo" in r.stdout
    assert_above_chance(r.stdout, CORA_CLASSES)
    seed0, seed1 = r.stdout.split("seed 1:")
    assert seed0.count("iter  ps dist wpb") == 2 and "layer 1 chosen: ps=" in seed0 and "layer 2 chosen" in seed0
    assert "2 rank(s), halo on cpu" in seed0
    assert seed1.count("from the config cache: started tuned") == 2
    keys = [parse_key(k) for k in json.loads((tmp_path / "tuned.json").read_text())["entries"]]
    assert sorted((k["ranks"], k["backend"], k["dim"]) for k in keys) == [(2, "halo", 7), (2, "halo", 16)]


class _ThreadCoordinator:
    """Coordination of P threads standing in for P PEs (the protocol of GroupCoordinator)."""

    def __init__(self, shared: dict, rank: int, world: int):
        self.shared, self.rank, self.world = shared, rank, world

    def _exchange(self, value):
        slots, barrier = self.shared["slots"], self.shared["barrier"]
        slots[self.rank] = value
        barrier.wait()
        out = list(slots)
        barrier.wait()
        return out

    def decide(self, decision):
        return self._exchange(decision if self.rank == 0 else None)[0]

    def slowest(self, ms):
        return max(self._exchange(ms))

    def gather(self, values):
        return self._exchange(list(values))

    def sync(self, device):
        self.shared["barrier"].wait()


def test_nvshmem_backend_tunes_with_threads_as_pes(monkeypatch):
    """The tuner over the nvshmem backend's DistPlan (symmetric tables, the fused kernel reading
    peers' rows; here threads as PEs over a fake symmetric heap): every PE runs rank 0's
    candidate, every iteration's rows are the aggregation, the transposed graph's schedules of
    losing configs are dropped too, and the key names the backend and its fetch policy."""
    from mgg import Plan
    from mgg.distributed import DistPlan, nvshmem
    from mgg.runtime.online import OnlineTuner
    from mgg.testing import random_graph
    from tests.distributed.test_nvshmem_runtime import _FakeHeap, _FakeWorld, run_pes

    pes = 3
    g = random_graph(240, 3000, seed=7, weighted=True, skew=0.5)  # directed: a transposed plan of its own
    bounds = Plan(g, pes).bounds
    x = torch.randn(240, 10, dtype=torch.float64)
    ref = g.to_torch_sparse(torch.float64) @ x
    world, local, results = _FakeWorld(pes), threading.local(), {}
    shared = dict(slots=[None] * pes, barrier=threading.Barrier(pes, timeout=60))
    monkeypatch.setattr(nvshmem.symmetric, "runtime", lambda: local.rt)

    def pe_main(pe):
        local.rt = nvshmem.Runtime(_FakeHeap(world, pe))
        dp = DistPlan(g, pe, bounds, backend="nvshmem", fetch="direct")
        tuner = OnlineTuner(
            8,
            use_cache=False,
            coordinator=_ThreadCoordinator(shared, pe, pes),
            timer=lambda step, c: (step(), rank_cost("bowl", pe, pes, c)),
        )
        outs = []
        while not tuner.done:
            outs.append(tuner.aggregate(x[bounds[pe] : bounds[pe + 1]], dp))
        kept = {c for (_, c) in itertools.chain(dp.plan._plans, dp.plan_t._plans)}
        results[pe] = (tuner.summary(), [p.config for p in tuner.probes], outs, kept)

    run_pes(pes, pe_main, world.barrier, shared["barrier"])
    summaries = [results[pe][0] for pe in range(pes)]
    assert all(results[pe][1] == results[0][1] for pe in range(pes)) and len(results[0][1]) == 8
    assert len({s["chosen"] for s in summaries}) == 1
    for i in range(len(results[0][2])):
        torch.testing.assert_close(torch.cat([results[pe][2][i] for pe in range(pes)]), ref)
    assert all(results[pe][3] <= {summaries[0]["chosen"]} for pe in range(pes))
    key = parse_key(summaries[0]["key"])
    assert (key["ranks"], key["backend"], key["fetch"]) == (pes, "nvshmem", "direct")

"""Worker of the distributed tuning tests (test_dist_tuning.py): under torchrun with gloo, each
rank's tuner times its step with a synthetic, deterministic per-rank cost (injected: no wall
time), so the trajectory, the choice and the max-over-ranks surface are known exactly. Rank 0
writes what every rank saw.

    torchrun --standalone --nproc-per-node P tune_worker.py train OUT CACHE
    torchrun --standalone --nproc-per-node 2 tune_worker.py disagree OUT CACHE
"""

import math
import pickle
import sys
import zlib

import torch
import torch.distributed as dist

from mgg import Config
from mgg.data import bundled_planetoid_dir, load_planetoid
from mgg.distributed import DistGraph
from mgg.distributed.process import exit_rank
from mgg.nn.models import build
from mgg.runtime.config_cache import ConfigCache
from mgg.runtime.online import OnlineTuner
from mgg.runtime.targets import DistTarget

STEPS = 18  # training steps: 15 measured candidates per layer, then the chosen config


def slow_rank(world: int) -> int:
    return world - 1


def rank_cost(kind: str, rank: int, world: int, config: Config) -> float:
    """A rank's synthetic step time (ms): a latency surface over log2 of what the halo backend's
    kernel runs, a warp's range (ps * dist items) and the warps of a block (configs of equal range
    and wpb are the same launch: the same time), shared by the ranks' kernels ('bowl' around a
    range of 512 items and wpb 2, or a 'ridge': falling with the range, then rising past the rank's
    best), the slow rank's optimum one step off (its heavier rows favour longer ranges), ±4%
    deterministic ripples per rank and launch, and the slow rank 1.5x the others."""
    slow = slow_rank(world)
    span = config.ps * config.dist
    x = (math.log2(span), math.log2(config.wpb))
    center = (10, 0) if rank == slow else (9, 1)
    if kind == "bowl":
        base = 1 + 0.3 * sum((a - b) ** 2 for a, b in zip(x, center, strict=True))
    else:
        base = 1 + 2 / math.sqrt(span) + 0.05 * config.wpb / 4 + 0.3 * max(0.0, x[0] - center[0])
    ripple = 1 + 0.04 * (2 * zlib.crc32(f"{kind}:{rank}:{span}:{config.wpb}".encode()) / 2**32 - 1)
    return (1.5 if rank == slow else 1 + 0.05 * rank) * base * ripple


def synthetic_timer(kind: str, rank: int, world: int, cost=rank_cost):
    """The tuner's timer: runs the step (its result is used) and reports the synthetic time."""
    return lambda step, config: (step(), cost(kind, rank, world, config))


def cora():
    ds = load_planetoid(bundled_planetoid_dir(), "cora")
    return ds.graph, ds.x[:, :64].contiguous().double(), torch.arange(ds.graph.num_nodes) % 5


def make_model(dg, tuners=None):
    """A 2-layer GCN in float64 (layers aggregate at D = 16 and D = 5), the same initial
    weights every time; tuners: one OnlineTuner per layer, or None (untuned)."""
    torch.manual_seed(0)
    model = build("gcn", 64, 5, 16, num_layers=2, dropout=0.0, autotune=tuners is not None).double()
    for conv, tuner in zip(model.convs, tuners or [None] * 2, strict=True):
        conv.tuner = tuner
    return model


def train(model, x, y, n, dg) -> list:
    """STEPS of plain SGD on the global mean loss; the logits of this rank's rows at every step."""
    from mgg.distributed.comm import allreduce_grads

    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    out = []
    for _ in range(STEPS):
        opt.zero_grad()
        logits = model(x, dg)
        torch.nn.functional.cross_entropy(logits, y, reduction="sum").div(n).backward()
        allreduce_grads(model, dg.group)
        opt.step()
        out.append(logits.detach().clone())
    return out


def summary(t: OnlineTuner) -> dict:
    return dict(
        key=t.key,
        chosen=t.chosen.as_tuple(),
        from_cache=t.from_cache,
        probes=[(p.config.as_tuple(), p.own_ms, p.step_ms) for p in t.probes],
    )


def run_train(out_path: str, cache_path: str) -> dict:
    """Tuned training (each layer its own synthetic surface), the same training untuned at the
    chosen configs, and a second run that starts from the cache."""
    g, x, y = cora()
    dg = DistGraph(g)
    rank, world = dg.rank, dg.world
    x, y = dg.local(x), dg.local(y)
    kinds = ("bowl", "ridge")
    tuners = [OnlineTuner(15, ConfigCache(cache_path), timer=synthetic_timer(k, rank, world)) for k in kinds]
    tuned = train(make_model(dg, tuners), x, y, g.num_nodes, dg)
    untuned_model = make_model(dg)
    for conv, t in zip(untuned_model.convs, tuners, strict=True):
        conv.config = t.chosen
    untuned = train(untuned_model, x, y, g.num_nodes, dg)
    again = [OnlineTuner(15, ConfigCache(cache_path), timer=synthetic_timer(k, rank, world)) for k in kinds]
    make_model(dg, again)(x, dg)
    return dict(
        rank=rank,
        world=world,
        kinds=kinds,
        tuners=[summary(t) for t in tuners],
        tuned=tuned,
        untuned=untuned,
        again=[summary(t) for t in again],
    )


def disagreeing_cost(kind: str, rank: int, world: int, config: Config) -> float:
    """Rank 1 is fastest at (2, 1024, 1) by far (its own data says: keep it); rank 0 is slowest
    there, so the step time (the max) says: move away."""
    if config == Config(2, 1024, 1):
        return 0.01 if rank == 1 else 50.0
    return rank_cost(kind, rank, world, config)


def run_disagree(out_path: str, cache_path: str) -> dict:
    """Rank 1 disagrees in every way a rank could: its own cost favours another config, its cache
    holds another config for the same key, its tuner has another budget and no cost model. It
    still runs rank 0's decision at every iteration, and starts from rank 0's cache next time."""
    g, x, _ = cora()
    dg = DistGraph(g)
    rank, world = dg.rank, dg.world
    plan = dg.plan_for("sum", lambda h: h)
    x = dg.local(x).float()
    own_cache = ConfigCache(f"{cache_path}.rank{rank}")
    if rank == 1:  # the same key as rank 0's, another config
        own_cache.put(DistTarget(plan).key(x.size(1), x.dtype, "cpu"), Config(2, 16, 16), 0.001)
    tuner = OnlineTuner(
        15 if rank == 0 else 2, own_cache, model=rank == 0, timer=synthetic_timer("bowl", rank, world, disagreeing_cost)
    )
    outs = []
    while not tuner.done:
        outs.append(tuner.aggregate(x, plan))
    ref = plan.aggregate(x, tuner.chosen)
    same_output = all(torch.allclose(o, ref, rtol=1e-5, atol=1e-6) for o in outs)
    if rank == 1:  # next run: rank 0's cache has the result, rank 1's own cache file is gone
        own_cache.path.unlink()
    again = OnlineTuner(15, ConfigCache(f"{cache_path}.rank{rank}"), timer=lambda step, c: (step(), 1.0))
    again.aggregate(x, plan)
    return dict(rank=rank, world=world, tuner=summary(tuner), same_output=same_output, again=summary(again))


def main():
    mode, out_path, cache_path = sys.argv[1:4]
    dist.init_process_group("gloo")
    res = (run_train if mode == "train" else run_disagree)(out_path, cache_path)
    parts = [None] * dist.get_world_size()
    dist.all_gather_object(parts, res)
    if dist.get_rank() == 0:
        with open(out_path, "wb") as f:
            pickle.dump(sorted(parts, key=lambda p: p["rank"]), f)


if __name__ == "__main__":
    main()
    exit_rank()  # the ranks meet, no gloo teardown

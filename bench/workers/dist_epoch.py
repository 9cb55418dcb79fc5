"""torchrun worker of the `dist` suite: times full-graph training epochs of a 2-layer GCN
(hidden 16) on one graph over the ranks, with one backend.

    torchrun --standalone --nproc-per-node P bench/workers/dist_epoch.py SPEC DIM BACKEND DEVICE WARMUP REPS OUT \
        [DATA_DIR] [PARTITION]

PARTITION (default range) is a method of mgg.partition: which nodes each rank owns.

Each epoch is forward, loss, backward, weight-gradient all-reduce and optimizer step; ranks
synchronise their device and meet at a barrier around it, so an epoch's time is the slowest
rank's. Rank 0 writes the median/p10/p90 over the timed epochs as JSON.
"""

import json
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

from bench import cache
from bench.suites.common import format_rank_edges
from mgg.distributed import DistGraph
from mgg.distributed.comm import allreduce_grads
from mgg.distributed.process import exit_rank, init_from_env
from mgg.nn.models import build


def main():
    spec, dim, backend, device, warmup, reps, out = sys.argv[1:8]
    data_dir = sys.argv[8] if len(sys.argv) > 8 and sys.argv[8] else None
    partition = sys.argv[9] if len(sys.argv) > 9 else "range"
    dim, warmup, reps = int(dim), int(warmup), int(reps)
    device = "cuda" if device == "cuda" else "cpu"
    t_start = time.perf_counter()
    init_from_env(device, backend)
    g, _ = cache.graph(spec, data_dir)  # the parent left it in the disk cache
    dg = DistGraph(g, backend=backend, partition=partition)
    dev = torch.device(device, torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
    gen = torch.Generator().manual_seed(dg.rank)
    x = torch.randn(dg.num_rows, dim, generator=gen).to(dev)
    y = torch.randint(0, 8, (x.size(0),), generator=gen).to(dev)
    torch.manual_seed(0)
    model = build("gcn", dim, 8, 16, num_layers=2).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    times, prep_s = [], None
    for i in range(warmup + reps):
        if i == 1:  # the first epoch plans the layers' graphs
            prep_s = time.perf_counter() - t_start
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x, dg), y, reduction="sum").div(g.num_nodes).backward()
        allreduce_grads(model, dg.group)
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        dist.barrier()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    peak = torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda" else float("nan")
    stats = next(iter(dg._plans.values())).plan.stats()  # the normalised graph the model aggregates
    peaks = [None] * dg.world
    dist.all_gather_object(peaks, peak)
    if dg.rank == 0:
        a = np.asarray(times)
        with open(out, "w") as f:
            json.dump(
                dict(
                    median_ms=float(np.median(a)),
                    p10_ms=float(np.percentile(a, 10)),
                    p90_ms=float(np.percentile(a, 90)),
                    epochs=len(a),
                    peak_mem_mb=float(max(peaks)),
                    prep_s=prep_s if prep_s is not None else time.perf_counter() - t_start,
                    rank_edges=format_rank_edges(stats),
                ),
                f,
            )


if __name__ == "__main__":
    main()
    exit_rank()  # the ranks meet, NVSHMEM (if started) is finalised, no gloo teardown

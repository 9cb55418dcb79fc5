"""torchrun worker of `python -m bench grid --measure`: for every grid of the world's ranks, times
training steps (forward, mean cross entropy, backward, Adam) of mgg.distributed.grid's GCN on one
graph, and counts the bytes each step moves per axis at the collectives.

    torchrun --standalone --nproc-per-node G bench/workers/grid_epoch.py SPEC DIMS WARMUP REPS OUT [DATA_DIR]

DIMS: D0,D1,...,CLASSES. Ranks meet at a barrier around each step, so a step's time is the slowest
rank's; rank 0 writes, per grid, the median over the timed steps and the busiest rank's bytes per axis
per step (JSON)."""

import json
import statistics
import sys
import time

import torch
import torch.distributed as dist

from bench import cache
from mgg.distributed.grid import Grid, GridNet, factorizations
from mgg.distributed.process import exit_rank


def main():
    spec, dims, warmup, reps, out = sys.argv[1:6]
    data_dir = sys.argv[6] if len(sys.argv) > 6 and sys.argv[6] else None
    dims = [int(d) for d in dims.split(",")]
    warmup, reps = int(warmup), int(reps)
    dist.init_process_group("gloo")
    g, _ = cache.graph(spec, data_dir)  # the parent left it in the disk cache
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(g.num_nodes, dims[0], generator=gen)
    y = torch.randint(0, dims[-1], (g.num_nodes,), generator=gen)
    mask = torch.ones(g.num_nodes, dtype=torch.bool)
    rows = []
    for shape in factorizations(dist.get_world_size()):
        grid = Grid(shape, "cpu")
        model = GridNet(grid, g, dims)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        x_shard = model.input_shard(x)
        times = []
        for i in range(warmup + reps):
            if i == warmup:
                grid.reset_counts()
            dist.barrier()
            t0 = time.perf_counter()
            opt.zero_grad()
            model.loss(model(x_shard), y, mask).backward()
            opt.step()
            dist.barrier()
            times.append((time.perf_counter() - t0) * 1e3)
        moved = torch.tensor([grid.moved[a] / reps for a in "xyz"], dtype=torch.float64)
        dist.all_reduce(moved, op=dist.ReduceOp.MAX)
        rows.append(dict(grid=str(shape), measured_ms=statistics.median(times[warmup:]), bytes=moved.tolist()))
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(rows, f)
    exit_rank(0)


if __name__ == "__main__":
    main()

"""torchrun worker of the `fetch` suite's NVSHMEM modes: P PEs (processes) on this GPU time the
fused kernel of one layer's aggregation for each get scope, every rank its own, after a barrier.

    torchrun --standalone --nproc-per-node P bench/workers/fetch_worker.py SPEC DIM MODES WARMUP REPS OUT [DATA_DIR]

MODES is comma-separated (get-thread,get-warp,get-block). Rank 0 writes, per mode, every rank's
(median, p10, p90, samples) in ms and the bytes each rank reads from its peers, as JSON.
"""

import json
import sys

import torch
import torch.distributed as dist

from bench import cache
from mgg.distributed import DistGraph
from mgg.distributed.process import exit_rank, init_from_env
from mgg.plan import Config
from mgg.runtime.timing import measure


def main():
    spec, dim, modes, warmup, reps, out = sys.argv[1:7]
    data_dir = sys.argv[7] if len(sys.argv) > 7 and sys.argv[7] else None
    dim, warmup, reps = int(dim), int(warmup), int(reps)
    init_from_env("cuda", "nvshmem")
    g, _ = cache.normalized(spec, data_dir)  # the parent left the graph in the disk cache
    dev = torch.device("cuda", torch.cuda.current_device())
    result = {}
    for mode in modes.split(","):
        dg = DistGraph(g, backend="nvshmem", fetch=mode)
        dp = dg.plan_for("fetch", lambda h: h)
        x = torch.randn(dg.row_end - dg.row_begin, dim, generator=torch.Generator().manual_seed(dg.rank)).to(dev)
        with torch.no_grad():
            t = measure(lambda dp=dp, x=x: dp.aggregate(x, Config()), dev, warmup, reps)
        part = dp.plan.shard(dg.rank)
        mine = ((t.median_ms, t.p10_ms, t.p90_ms, t.samples), part.num_remote_edges * dim * x.element_size())
        ranks = [None] * dg.world
        dist.all_gather_object(ranks, mine)
        result[mode] = {"ranks": [r[0] for r in ranks], "traffic": [r[1] for r in ranks]}
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
    exit_rank()  # the ranks meet, NVSHMEM is finalised, no gloo teardown

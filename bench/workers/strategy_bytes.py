"""torchrun worker of `python -m bench strategies --measure` (and tests/distributed/test_strategy.py):
every strategy mgg.distributed.strategy ranks for a GCN on Cora over 2 "machines" of 2 CPU processes
(gloo), one training step each (forward, backward; the input needs no gradient), the bytes counted at
its collectives against the model's: per rank for the row-partitioned strategies (HaloExchange's
rows, node-halo's routes, the 1.5D backends' exchange and row collectives), per axis on the busiest
rank for the grids. Rank 0 writes [{strategy, rank, counted, model}] as JSON.

    torchrun --nproc-per-node 4 bench/workers/strategy_bytes.py OUT
"""

import json
import sys

import torch
import torch.distributed as dist

from mgg.data import load_dataset
from mgg.distributed import DistGraph
from mgg.distributed.grid import Grid, GridNet, GridShape
from mgg.distributed.process import exit_rank
from mgg.distributed.strategy import rank_strategies
from mgg.nn.models import build
from mgg.runtime.cluster_model import Cluster

DIMS = [1433, 16, 7]
CLUSTER = Cluster(2, 2, 450.0, 50.0)


def row_step(ds, strategy) -> float:
    extra = dict(replication=strategy.replication) if strategy.backend.endswith("1.5d") else {}
    dg = DistGraph(ds.graph, backend=strategy.backend, partition="range", gpus_per_node=CLUSTER.gpus_per_node, **extra)
    torch.manual_seed(0)
    model = build("gcn", DIMS[0], DIMS[-1], DIMS[1], dropout=0.0)
    logits = model(dg.local(ds.x), dg)
    train = dg.local(ds.train_mask)
    torch.nn.functional.cross_entropy(logits[train], dg.local(ds.y)[train], reduction="sum").backward()
    if strategy.backend.endswith("1.5d"):
        traffics = [dg.replicas.traffic]
    else:
        traffics = [p.transport.traffic for p in dg._plans.values()]
    if strategy.backend == "node-halo":
        return float(sum(t["inter_node"] + t["intra_node"] for t in traffics))
    return float(sum(t[d][k] for t in traffics for d in t for k in t[d]))


def grid_step(ds, strategy) -> dict:
    grid = Grid(GridShape.parse(strategy.grid), "cpu")
    model = GridNet(grid, ds.graph, DIMS)
    x = model.input_shard(ds.x)
    grid.reset_counts()
    model.loss(model(x), ds.y, ds.train_mask).backward()
    moved = torch.tensor([grid.moved[a] for a in "xyz"], dtype=torch.float64)
    dist.all_reduce(moved, op=dist.ReduceOp.MAX)
    return dict(zip("xyz", moved.tolist(), strict=True))


def main():
    out = sys.argv[1]
    dist.init_process_group("gloo")
    ds = load_dataset("cora")
    rank = dist.get_rank()
    rows = []
    for p in rank_strategies(ds.graph, CLUSTER, DIMS, "gcn", "range"):
        s = p.strategy
        if s.grid:
            counted = grid_step(ds, s)
            rows.append(dict(strategy=str(s), rank="busiest", counted=counted, model=p.per_rank))
            continue
        counted = [None] * dist.get_world_size()
        dist.all_gather_object(counted, row_step(ds, s))
        rows += [
            dict(strategy=str(s), rank=r, counted=counted[r], model=float(p.per_rank[r])) for r in range(len(counted))
        ]
    if rank == 0:
        with open(out, "w") as f:
            json.dump(rows, f)
    exit_rank(0)


if __name__ == "__main__":
    main()

"""Worker of tests/distributed/test_node_halo.py: under torchrun (gloo), the node-halo exchange of
one DistPlan checked against the plan itself and against the flat halo exchange, and its bytes
counted at the collectives against the routes' count.

    torchrun --standalone --nproc-per-node N node_halo_worker.py OUT --gpus-per-node G [--partition M]

Rank 0 writes a dict of what it found (OUT, pickle)."""

import argparse
import pickle

import numpy as np
import torch
import torch.distributed as dist

from mgg.distributed import DistGraph
from mgg.distributed.backends.halo import HaloExchange
from mgg.distributed.backends.node_nvshmem import machine_group
from mgg.distributed.comm import all_reduce
from mgg.distributed.node_routes import NodeRoutes
from mgg.distributed.process import exit_rank
from mgg.testing import random_graph


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--gpus-per-node", type=int, required=True)
    ap.add_argument("--partition", default="range")
    ap.add_argument("--width", type=int, default=5)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    g = random_graph(400, 4000, seed=3, skew=0.6)
    dg = DistGraph(g, backend="node-halo", partition=args.partition, gpus_per_node=args.gpus_per_node)
    dp = dg.plan_for("raw", lambda graph: graph)
    rank, shard = dg.rank, dp.plan.shard(dg.rank)
    lo, hi = shard.row_begin, shard.row_end
    n, d = g.num_nodes, args.width
    table = torch.arange(n * d, dtype=torch.float64).view(n, d)  # row i of the relabelled graph: i*d ..
    x_own = table[lo:hi].clone().requires_grad_(True)
    exchange = dp.exchange
    halo = exchange(x_own)
    found = {}
    found["halo_equal"] = torch.equal(halo, table[torch.from_numpy(shard.halo_nodes)])
    flat = HaloExchange(shard, None)
    found["flat_equal"] = torch.equal(halo.detach(), flat.forward(x_own.detach()))
    before = dict(exchange.traffic)
    # small integers: every sum exact in any order, so the adjoint must equal the flat halo's exactly
    weights = torch.randint(-3, 4, halo.shape, generator=torch.Generator().manual_seed(rank)).double()
    (halo * weights).sum().backward()
    found["grad_equal"] = torch.equal(x_own.grad, flat.backward(weights, hi - lo))
    after = dict(exchange.traffic)
    counts = torch.tensor(
        [before["inter_node"], before["intra_node"], after["inter_node"] - before["inter_node"]], dtype=torch.int64
    )
    all_reduce(counts)
    routes = NodeRoutes(dp.plan, args.gpus_per_node)
    found["forward_inter_bytes"], found["intra_bytes"], found["backward_inter_bytes"] = counts.tolist()
    found["pairs"] = routes.inter_node_rows()
    found["flat_pairs"] = routes.flat_inter_node_rows()
    found["row_bytes"] = d * 8
    flags = [None] * dg.world
    dist.all_gather_object(flags, (found["halo_equal"], found["flat_equal"], found["grad_equal"]))
    found["all_equal"] = [all(f[i] for f in flags) for i in range(3)]
    found["bounds"] = np.asarray(dg.bounds).tolist()
    # node-nvshmem's NVSHMEM job per machine starts over this group: the ranks of the rank's machine
    machine = machine_group(None, args.gpus_per_node)
    one = torch.ones(1)
    all_reduce(one, machine)
    members = [None] * dg.world
    dist.all_gather_object(members, (dist.get_process_group_ranks(machine), int(one)))
    found["machine_groups"] = members
    if rank == 0:
        with open(args.out, "wb") as f:
            pickle.dump(found, f)
    exit_rank(0)


if __name__ == "__main__":
    main()

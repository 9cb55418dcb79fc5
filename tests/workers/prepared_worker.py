"""Worker of tests/distributed/test_prepared.py: each rank reads only its part of a prepared dataset
(mgg.distributed.read_part) and builds a DistGraph of it; beside it, a DistGraph of the whole graph
under the same partition (today's path: every rank loads everything). Rank 0 writes, per rank, what
both gave: every layer plan's arrays, a training step's logits and gradients, and the bytes the part
read against its files' size.

    torchrun --nproc-per-node N prepared_worker.py DIR OUT [--runs halo,node-halo:2,grid:2x2x1] [--model M]
"""

import argparse
import os
import pickle

import numpy as np
import torch
import torch.distributed as dist

from mgg.data.prepared import Prepared
from mgg.distributed import DistGraph
from mgg.distributed.comm import allreduce_grads
from mgg.distributed.prepared import read_part
from mgg.distributed.process import exit_rank
from mgg.nn.models import build
from mgg.partitioning import Partition

SHARD_FIELDS = ("local", "remote")


def shard_arrays(dg: DistGraph) -> dict:
    """Every plan's arrays of this rank: its shard's CSRs, halo and transposed step."""
    out = {}
    for tag, dp in sorted(dg._plans.items()):
        s = dp.plan.shard(dp.rank)
        arrays = {"halo": s.halo_nodes, "halo_pe": s.halo_pe, "remote_pe": s.remote_pe}
        for f in SHARD_FIELDS:
            c = getattr(s, f)
            arrays[f] = (c.rowptr, c.col, c.weight)
        t = s.transposed
        arrays["transposed"] = (t.rowptr, t.col, t.weight)
        out[tag] = arrays
    return out


def step(dg: DistGraph, x, y, train, total: int, model_kind: str, layers: int):
    torch.manual_seed(0)
    model = build(model_kind, x.size(1), 7, 16, num_layers=layers, dropout=0.0).double()
    x = x.double().clone().requires_grad_()
    logits = model(x, dg)
    loss = torch.nn.functional.cross_entropy(logits[train], y[train], reduction="sum") / total
    loss.backward()
    allreduce_grads(model, dg.group)
    return logits.detach(), x.grad, {k: p.grad.clone() for k, p in model.named_parameters()}, float(loss)


def grid_run(args, shape: str):
    """The grid: each rank reads only its blocks (PreparedBlocks) against the whole graph's blocks cut
    at the same bounds in the prepare's order (WholeGraph), the same GridNet over each."""
    from mgg.distributed.grid import Grid, GridNet, GridShape, Orders
    from mgg.distributed.grid.blocks import PreparedBlocks, WholeGraph
    from mgg.training.grid import prepared_data, whole_data

    prepared = Prepared(args.dir)
    grid = Grid(GridShape.parse(shape), "cpu")
    dims = [prepared.manifest.num_features] + [16] * (args.layers - 1) + [7]
    ds = prepared.dataset()
    perm = np.concatenate([prepared.reads.array(f"parts/{p:05d}/ids.npy") for p in range(prepared.parts)])
    inv = np.empty_like(perm)
    inv[perm] = np.arange(perm.size)
    start = prepared.bytes_read
    results = []
    for source in (
        PreparedBlocks(prepared, grid, args.model, torch.float64),
        WholeGraph(ds.graph, Orders(inv, inv), args.model, torch.float64, cuts=prepared.bounds),
    ):
        model = GridNet(grid, source, dims, dtype=torch.float64, conv=args.model, seed=3)
        data = prepared_data(model, source) if isinstance(source, PreparedBlocks) else whole_data(model, ds)
        read = prepared.bytes_read - start
        x = data.x_shard.double().clone().requires_grad_()
        logits = model(x)
        model.rows_loss(logits, data.y, data.masks[0], data.totals[0]).backward()
        shards = [
            None
            if s.plan is None
            else (s.row_span, s.col_span, s.plan.shard.local.rowptr, s.plan.shard.local.col, s.plan.shard.local.weight)
            for s in model.shards
        ]
        grads = {k: p.grad.clone() for k, p in model.named_parameters()}
        results.append(dict(logits=logits.detach(), x_grad=x.grad, grads=grads, shards=shards, read=read))
    return results


def row_run(args, backend: str, gpus_per_node):
    """A row-partitioned backend: this rank's part against the whole graph under the same partition."""
    rank, world = dist.get_rank(), dist.get_world_size()
    part = read_part(args.dir)
    dg = DistGraph(part, backend=backend, gpus_per_node=gpus_per_node)
    total = part.split_counts["train"]
    got = step(dg, part.x, part.y, part.train_mask, total, args.model, args.layers)
    # today's path: the whole dataset on every rank, the same partition handed over
    whole = Prepared(args.dir)
    ds = whole.dataset()
    perm = np.concatenate([whole.reads.array(f"parts/{p:05d}/ids.npy") for p in range(whole.parts)])
    partition = Partition(part.manifest.method, perm, whole.rank_bounds(world))
    full = DistGraph(ds.graph, backend=backend, partition=partition, gpus_per_node=gpus_per_node)
    want = step(full, full.local(ds.x), full.local(ds.y), full.local(ds.train_mask), total, args.model, args.layers)
    files = whole.files_of(whole.parts_of(rank, world))
    return dict(
        parts=list(whole.parts_of(rank, world)),
        plans=shard_arrays(dg),
        full_plans=shard_arrays(full),
        got=got,
        want=want,
        ids_equal=bool(torch.equal(dg.global_ids, full.global_ids)),
        bytes_read=part.bytes_read,
        part_bytes=sum(part.manifest.files[rel].bytes for rel in files),
        gathered=dg.gather(got[0]),
        gathered_full=full.gather(want[0]),
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("out")
    ap.add_argument(
        "--runs",
        default="halo",
        help="comma-separated: halo, allgather, node-halo:G (G ranks a machine), grid:GXxGYxGZ",
    )
    ap.add_argument("--model", default="gcn")
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = dict(rank=rank, agent=int(os.environ.get("GROUP_RANK", 0)))
    for spec in args.runs.split(","):
        backend, _, arg = spec.partition(":")
        if backend == "grid":
            part, whole = grid_run(args, arg)
            mine[spec] = dict(part=part, whole=whole)
        else:
            mine[spec] = row_run(args, backend, int(arg) if arg else None)
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        with open(args.out, "wb") as f:
            pickle.dump(everyone, f)
    exit_rank(0)


if __name__ == "__main__":
    main()

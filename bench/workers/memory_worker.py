"""torchrun worker of `python -m bench memory`: one rank loads a dataset (every rank all of it, or its
part of a prepared directory), builds its plans and trains a GCN for a few epochs, and reports its
memory and reads: peak resident memory (VmHWM), peak anonymous memory (RssAnon, sampled every 5 ms),
the bytes it read while loading (/proc/self/io rchar), the load time, its parts' bytes and its halo.

    torchrun ... bench/workers/memory_worker.py SOURCE LOADER BACKEND OUT [--grid SHAPE] [--epochs E]

LOADER: whole (load_dataset on every rank, the partition's ranges kept) or prepared (SOURCE is a
prepared directory; each rank reads its part). BACKEND: halo, node-halo or grid. Rank 0 writes every
rank's row as JSON."""

import argparse
import json
import os
import threading
import time

import numpy as np
import torch
import torch.distributed as dist

from bench.memory import peak_rss_bytes
from mgg.data import load_dataset
from mgg.data.prepared import Prepared
from mgg.distributed import DistGraph
from mgg.distributed.prepared import read_part
from mgg.distributed.process import exit_rank
from mgg.heap import map_large_blocks
from mgg.training.loop import TrainConfig, normalize_features_, train_once


class AnonPeak:
    """The largest RssAnon seen, sampled every 5 ms on a thread (the kernel keeps no peak of it)."""

    def __init__(self):
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, anon_bytes())
            self._stop.wait(0.005)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return max(self.peak, anon_bytes())


def anon_bytes() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


def rchar() -> int:
    for line in open("/proc/self/io"):
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


def part_bytes(prepared: Prepared, rank: int, world: int) -> int:
    m = prepared.manifest
    return sum(m.files[rel].bytes for rel in prepared.files_of(prepared.parts_of(rank, world)))


def rows_backend(args, cfg: TrainConfig) -> dict:
    rank = dist.get_rank()
    t0, r0 = time.perf_counter(), rchar()
    if args.loader == "prepared":  # as mgg.training.torchrun.train: the features normalised in place
        ds = read_part(args.source)
        normalize_features_(ds.x)
        ds.normalized = True
        dg = DistGraph(ds, backend=args.backend)
    else:
        ds = load_dataset(args.source)
        dg = DistGraph(ds.graph, backend=args.backend, partition="range")
    load_s, read = time.perf_counter() - t0, rchar() - r0
    result = train_once(ds, cfg, 0, progress=False, dg=dg)
    halo = max((p.plan.shard(rank).num_halo for p in dg._plans.values()), default=0)
    return dict(
        load_s=load_s,
        read_bytes=read,
        halo_rows=halo,
        halo_bytes=2 * halo * cfg.hidden * 4,
        test_acc=result.test_acc,
        epoch_ms=result.epoch_ms,
    )


def grid_needed_bytes(model, prepared: Prepared) -> int:
    """The bytes a grid rank needs of a prepared directory, counted from the manifest and the parts'
    block indexes (not from what the reader did): each layer's block, i.e. for every row part its
    block index and the range of its edge files whose sources lie in the block's column parts; the
    input rows' feature columns; the ids of each layer's columns and of the output rows, and the
    output rows' labels and split. The read target compares /proc's count with this."""
    from mgg.data.prepared.layout import part_file

    m, parts = prepared.manifest, model.source.parts  # the source: this rank's PreparedBlocks

    def item(rel):
        return np.dtype(m.files[rel].dtype).itemsize

    def rows_bytes(span, name):
        return (span[1] - span[0]) * item(part_file(0, name))

    edge_names = ("row", "col", "pos") + (("weight",) if m.weighted else ())
    total = 0
    for shard in model.shards:
        cols = parts(shard.col_span)
        for p in parts(shard.row_span):
            index = np.load(prepared.path / part_file(p, "blocks"))
            e = int(index[cols[-1] + 1] - index[cols[0]]) if len(cols) else 0
            total += m.files[part_file(p, "blocks")].bytes + e * sum(item(part_file(p, n)) for n in edge_names)
        total += rows_bytes(shard.col_span, "ids")
    c0, c1 = model.input_columns()
    lo, hi = model.input_span()
    total += (hi - lo) * (c1 - c0) * item(part_file(0, "x"))
    last = model.shards[-1].row_span
    return total + sum(rows_bytes(last, n) for n in ("ids", "y", "split"))


def grid_halo_rows(model) -> int:
    """The grid's halo: the rows of layer 0's input (its columns) that the other ranks of the layer's
    row axis hold and this rank gathers (its features' columns of them), as the halo backends'
    halo rows are the rows other ranks send. Later layers' inputs are the rank's own outputs."""
    from mgg.distributed.grid.shards import roles, span

    shard, c = model.shards[0], roles(0)[2]
    p0, p1 = span(shard.cols, model.grid.extent(c), model.grid.coord[c])
    return shard.cols - (p1 - p0)


def grid_backend(args, cfg: TrainConfig) -> dict:
    from mgg.distributed.grid import Grid, GridNet
    from mgg.distributed.grid.blocks import PreparedBlocks
    from mgg.distributed.grid.model import GraphStats
    from mgg.training.grid import _open, choose_shape, dims_of, prepared_data, whole_data

    world = dist.get_world_size()
    t0, r0 = time.perf_counter(), rchar()
    if args.loader == "prepared":
        prepared = _open(args.source, world)
        m = prepared.manifest
        name, in_dim, classes, nodes, nnz = (
            m.name,
            m.num_features,
            m.num_classes,
            m.num_nodes,
            m.num_edges + m.num_nodes,
        )
    else:
        ds = load_dataset(args.source)
        name, in_dim, classes, nodes = ds.name, ds.x.size(1), ds.num_classes, ds.graph.num_nodes
        nnz = ds.graph.num_edges + nodes
    dims = dims_of(in_dim, classes, cfg)
    shape = choose_shape(args.grid, world, GraphStats(name, nodes, nnz, tuple(dims), "gcn"), world)
    grid = Grid(shape)
    source = PreparedBlocks(prepared, grid, "gcn", torch.float32) if args.loader == "prepared" else ds.graph
    model = GridNet(grid, source, dims, dropout=cfg.dropout)
    data = prepared_data(model, source) if args.loader == "prepared" else whole_data(model, ds)
    load_s, read = time.perf_counter() - t0, rchar() - r0
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    times = []
    for _ in range(cfg.epochs):
        t = time.perf_counter()
        opt.zero_grad()
        model.rows_loss(model(data.x_shard), data.y, data.masks[0], data.totals[0]).backward()
        opt.step()
        times.append((time.perf_counter() - t) * 1e3)
    needed = grid_needed_bytes(model, prepared) if args.loader == "prepared" else None
    halo = grid_halo_rows(model)
    return dict(
        load_s=load_s,
        read_bytes=read,
        needed_bytes=needed,
        halo_rows=halo,
        halo_bytes=halo * (model.input_columns()[1] - model.input_columns()[0]) * 4,
        grid=str(shape),
        epoch_ms=min(times),
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("loader", choices=["whole", "prepared"])
    ap.add_argument("backend", choices=["halo", "node-halo", "grid"])
    ap.add_argument("out")
    ap.add_argument("--grid", default="auto")
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()
    anon = AnonPeak()
    map_large_blocks()  # as mgg train's ranks (mgg.distributed.process.init_from_env)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = TrainConfig(model="gcn", epochs=args.epochs, seeds=(0,), device="cpu")
    row = (grid_backend if args.backend == "grid" else rows_backend)(args, cfg)
    row.update(rank=rank, ranks=world, peak_rss_bytes=peak_rss_bytes(), anon_rss_bytes=anon.stop())
    if args.loader == "prepared":
        row["part_bytes"] = (
            part_bytes(Prepared(args.source), rank, world) if args.backend != "grid" else row.pop("needed_bytes")
        )
    rows = [None] * world
    dist.all_gather_object(rows, row)
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(rows, f)
    exit_rank(0)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()

"""torchrun worker of the `dlrm` suite: sharded embedding-bag lookups of Criteo-Kaggle-like
batches (mgg.embedding.dlrm) over the ranks, mgg's `halo` path against the `alltoall` baseline (torchrec's
row-wise scheme on torch.distributed), and on GPUs with nvshmem4py mgg's `nvshmem` path.

    torchrun --standalone --nproc-per-node P bench/workers/dlrm_worker.py DIM BATCH CAP POOLING DEVICE WARMUP REPS OUT

Each rank looks up its share of a global batch of BATCH samples x 26 tables (mixed sharding:
tables of at least 65,536 rows row-wise, the others table-wise). Table rows are a function of
their id, so every rank checks its bags against torch.nn.functional.embedding_bag over the rows
it reads before anything is timed. A timed step is one batch (its plan included: the pattern
changes every batch; several batches are cycled) forward, then forward and backward; ranks meet
at a barrier around it, so a step's time is the slowest rank's. Rank 0 writes JSON: per impl and
pass the median/p10/p90 ms, bytes sent per batch per rank, and the per-batch plan build time.
"""

import functools
import json
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from mgg.distributed.process import exit_rank
from mgg.embedding import ShardedEmbeddingBagCollection
from mgg.embedding.dlrm import cardinalities, synthetic_batch
from mgg.embedding.plan import BatchStep, bag_edges, merge

BATCHES = 3  # distinct batches cycled through while timing


def row_values(ids: torch.Tensor, dim: int) -> torch.Tensor:
    """The rows of the virtual table, a function of their id (no rank needs the whole table)."""
    j = torch.arange(dim, dtype=torch.float64)
    return torch.sin(ids.double().unsqueeze(1) * 0.7071 + j * 1.3).float()


def check(c, batch, out) -> str:
    """'' if out holds the bags of `batch`, else what differs."""
    for t in range(c.num_tables):
        rows, inv = torch.unique(batch.inputs[t], return_inverse=True)
        table = row_values(c.virtual_rows(t, rows), c.embedding_dim)
        ref = F.embedding_bag(inv, table, batch.offsets[t], mode=c.mode)
        try:
            torch.testing.assert_close(out[:, t].cpu(), ref, rtol=1e-4, atol=1e-5)
        except AssertionError as e:
            return f"table {t}: {str(e).splitlines()[0]}"
    return ""


def plan(c, sizes, b, rank, dev) -> BatchStep:
    """One rank's plan of a batch: the edges of every table, merged into the virtual table, the step."""
    edges = [bag_edges(b.inputs[t], b.offsets[t], None, sizes[t], "sum") for t in range(len(sizes))]
    merged = merge(edges, [functools.partial(c._table_virtual, t) for t in range(len(sizes))])
    return BatchStep(merged, c.bounds.cpu(), rank, c.config, device=dev)


def main():
    dim, batch, cap, pooling, device, warmup, reps, out_path = sys.argv[1:9]
    dim, batch, pooling, warmup, reps = int(dim), int(batch), int(pooling), int(warmup), int(reps)
    cap = None if cap == "none" else int(cap)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device(device)
    sizes = cardinalities(cap)
    b0, b1 = rank * batch // world, (rank + 1) * batch // world
    whole = [synthetic_batch(sizes, batch, pooling, seed=s) for s in range(BATCHES)]
    lookups = sum(i.numel() for i in whole[0].inputs)
    batches = [b.slice(b0, b1) for b in whole]
    del whole
    result = {"impls": {}, "wrong": []}
    from mgg.distributed import nvshmem

    gpu_nvshmem = dev.type == "cuda" and nvshmem.available() is None
    for backend in ("halo", "alltoall") + (("nvshmem",) if gpu_nvshmem else ()):
        c = ShardedEmbeddingBagCollection(
            sizes,
            dim,
            mode="sum",
            sharding="mixed",
            backend=backend,
            device=dev,
            fetch="get-warp" if backend == "nvshmem" else "direct",
            sparse=True,
        )  # as DLRM trains tables: sparse row gradients
        with torch.no_grad():
            c.weight.copy_(row_values(torch.arange(c.row_begin, c.row_end), dim))
        inputs = [([i.to(dev) for i in b.inputs], [o.to(dev) for o in b.offsets]) for b in batches]
        wrong = check(c, batches[0], c(*inputs[0]).detach())
        verdict = [None] * world
        dist.all_gather_object(verdict, wrong)
        if any(verdict):
            result["wrong"].append(f"{backend}: " + "; ".join(f"rank {r}: {v}" for r, v in enumerate(verdict) if v))
            continue
        for pass_ in ("fwd", "fwd+bwd"):
            times, traffic = [], []
            for i in range(warmup + reps):
                inp = inputs[i % BATCHES]
                c.zero_grad(set_to_none=True)
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                dist.barrier()
                t0 = time.perf_counter()
                if pass_ == "fwd":
                    with torch.no_grad():
                        c(*inp)
                else:
                    c(*inp).sum().backward()
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                dist.barrier()
                if i >= warmup:
                    times.append((time.perf_counter() - t0) * 1e3)
                    traffic.append(c.traffic.total)
            sent = [None] * world
            dist.all_gather_object(sent, float(np.mean(traffic)))
            a = np.asarray(times)
            result["impls"][f"{backend}:{pass_}"] = dict(
                median_ms=float(np.median(a)),
                p10_ms=float(np.percentile(a, 10)),
                p90_ms=float(np.percentile(a, 90)),
                reps=len(a),
                rank_bytes=sent,
            )
        if backend == "halo":  # the per-batch plan alone: edges of 26 tables, merged, this rank's step
            ts = []
            for i in range(warmup + reps):
                t0 = time.perf_counter()
                step = plan(c, sizes, batches[i % BATCHES], rank, dev)
                if i >= warmup:
                    ts.append((time.perf_counter() - t0) * 1e3)
            a = np.asarray(ts)
            result["impls"]["plan"] = dict(
                median_ms=float(np.median(a)),
                p10_ms=float(np.percentile(a, 10)),
                p90_ms=float(np.percentile(a, 90)),
                reps=len(a),
                lookups=step.num_local_edges + step.num_remote_edges,
                distinct_rows=int(step.rows.numel()),
                halo_rows=int(step.halo.numel()),
            )
    result["rows"] = int(sum(sizes))
    result["lookups"] = int(lookups)
    dist.barrier()
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
    exit_rank()  # the ranks meet, NVSHMEM (if started) is finalised, no gloo teardown

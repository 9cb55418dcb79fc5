"""The per-batch plan of a sharded embedding lookup against the lookup itself, on one process:

    python -m bench.dlrm_plan [--batch 4096] [--cap 1000000] [--pes 1 2 4] [--reps 20]

For Criteo-Kaggle-like batches (mgg.embedding.dlrm; 26 tables, one-hot and multi-hot of 8), times
- `edges`: checking the 26 tables' inputs and merging them into one batch of the virtual table;
- `step`: one PE's BatchStep (local/remote split, distinct rows, halo, block schedule) of the
  whole batch (the forward step; the backward step is built at the first backward);
- `step+bwd`: the same with the backward step;
- `lookup`: ShardedEmbeddingBagCollection's forward over all PEs, plans included (no grad);
and prints a markdown table of medians (ms). Single-threaded (torch.set_num_threads(1)).
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np
import torch

from mgg.embedding import ShardedEmbeddingBagCollection
from mgg.embedding.dlrm import cardinalities, synthetic_batch
from mgg.embedding.plan import BatchStep, bag_edges, merge


def _median_ms(fn, reps: int) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(ts))


def case(sizes, b, pes: int, dim: int, reps: int) -> tuple[int, list[float]]:
    """(lookups, [edges, step, step+bwd, lookup] medians in ms) of batch b over `pes` PEs."""
    c = ShardedEmbeddingBagCollection(sizes, dim, sharding="mixed", num_pes=pes)
    shift = [functools.partial(c._table_virtual, t) for t in range(len(sizes))]

    def edges():
        return merge([bag_edges(b.inputs[t], b.offsets[t], None, sizes[t], "sum") for t in range(len(sizes))], shift)

    e = edges()
    t = [
        _median_ms(edges, reps),
        _median_ms(lambda: BatchStep(e, c.bounds, 0, c.config, peers=pes > 1), reps),
        _median_ms(lambda: BatchStep(e, c.bounds, 0, c.config, peers=pes > 1).plan_t, reps),
    ]
    with torch.no_grad():
        t.append(_median_ms(lambda: c(b.inputs, b.offsets), max(5, reps // 4)))
    return e.idx.numel(), t


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--cap", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--pes", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    sizes = cardinalities(args.cap)
    print("| pooling | PEs | lookups | edges ms | step ms | step+bwd ms | lookup ms (all PEs, plans incl.) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for pooling in (1, 8):
        b = synthetic_batch(sizes, args.batch, pooling, seed=1)
        for pes in args.pes:
            n, t = case(sizes, b, pes, args.dim, args.reps)
            print(f"| {pooling} | {pes} | {n:,} | " + " | ".join(f"{v:.1f}" for v in t) + " |", flush=True)


if __name__ == "__main__":
    main()

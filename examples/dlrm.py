"""A small DLRM (bottom MLP, sharded embedding bags, dot interaction, top MLP) trained on
Criteo-Kaggle-like synthetic clicks (mgg.embedding.dlrm), its 26 tables sharded over the ranks by
mgg.nn.ShardedEmbeddingBagCollection.

    torchrun --standalone --nproc-per-node 2 examples/dlrm.py [--steps 60] [--backend halo]
    python examples/dlrm.py --reference      # the same model on torch.nn.EmbeddingBag, one process

Every rank trains on its share of each global batch (Adagrad; sparse row gradients for the
tables). The MLPs are replicated (their gradients are summed over the ranks), the tables are not:
each rank holds its rows and receives their whole gradient through the lookup's backward. The
tables start from the same values in both runs, so the loss curves agree up to rounding, and fall.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist

from mgg.distributed.process import exit_rank
from mgg.embedding import ShardedEmbeddingBagCollection
from mgg.embedding.dlrm import DLRM, EmbeddingBags, cardinalities, synthetic_batch


def tables(sizes, dim, dtype):
    return [
        0.1 * torch.randn(n, dim, generator=torch.Generator().manual_seed(100 + t), dtype=dtype)
        for t, n in enumerate(sizes)
    ]


def main(argv=None) -> list[float]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=512, help="global batch (samples)")
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--cap", type=int, default=5000, help="rows of the largest table")
    ap.add_argument("--pooling", type=int, default=1, help="1: one-hot features; > 1: multi-hot bags")
    ap.add_argument("--lr", type=float, default=0.05, help="Adagrad's (as DLRM's reference on Criteo)")
    ap.add_argument("--backend", choices=["halo", "alltoall"], default="halo")
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--reference", action="store_true", help="torch.nn.EmbeddingBag on one process")
    ap.add_argument("--out", default=None, help="write the losses as JSON (rank 0)")
    args = ap.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    distributed = not args.reference and "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    sizes = cardinalities(args.cap)
    init = tables(sizes, args.dim, dtype)
    if args.reference:
        bags = EmbeddingBags(sizes, args.dim, "sum", init)
    else:  # sparse gradients: each step touches few of a table's rows
        bags = ShardedEmbeddingBagCollection(
            sizes,
            args.dim,
            mode="sum",
            sharding="mixed",
            sparse=True,
            backend=args.backend,
            dtype=dtype,
            _weights=init,
            row_wise_min_rows=1000,
        )
    torch.manual_seed(0)  # the same MLPs on every rank and in the reference
    model = DLRM(bags, len(sizes), args.dim).to(dtype)
    opt = torch.optim.Adagrad(model.parameters(), lr=args.lr)  # handles the tables' sparse gradients
    b0, b1 = rank * args.batch // world, (rank + 1) * args.batch // world
    losses = []
    for step in range(args.steps):
        batch = synthetic_batch(sizes, args.batch, args.pooling, seed=step, dtype=dtype).slice(b0, b1)
        opt.zero_grad()
        logits = model(batch.dense, batch.inputs, batch.offsets)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, batch.labels, reduction="sum")
        (loss / args.batch).backward()
        total = loss.detach().clone()
        if distributed:  # the replicated MLPs' gradients, and the loss, summed over the ranks
            for p in [*model.bottom.parameters(), *model.top.parameters(), total]:
                dist.all_reduce(p.grad if isinstance(p, torch.nn.Parameter) else p)
        opt.step()
        losses.append(float(total) / args.batch)
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print(f"step {step:4d}  loss {losses[-1]:.4f}", flush=True)
    if rank == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump({"losses": losses, "world": world}, f)
    if distributed:
        dist.barrier()
    return losses


if __name__ == "__main__":
    main()
    exit_rank()  # under torchrun: the ranks meet and leave without gloo's teardown, which may abort

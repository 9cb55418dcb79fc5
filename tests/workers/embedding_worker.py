"""torchrun worker of test_embedding_dist.py: every rank looks up its share of a global batch in
tables sharded over the gloo group, with the `halo` backend (mgg) and the `alltoall` baseline,
and checks its bags and the gradient of its rows against torch.nn.EmbeddingBag over the whole
batch on one process (float64, assert_same_formula). Exits non-zero on the first mismatch.

    torchrun --standalone --nproc-per-node 2 tests/workers/embedding_worker.py OUT
"""

import json
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

from mgg.distributed.process import exit_rank
from mgg.embedding import ShardedEmbeddingBag, ShardedEmbeddingBagCollection
from mgg.errors import MggError
from mgg.testing import assert_same_formula

D = 5
f64 = torch.float64


def dense(g):
    return g.to_dense() if g.is_sparse else g


def global_batch(n, bags, seed, hot=None):
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(0, 7, (bags,), generator=g)
    inp = torch.randint(0, n, (int(sizes.sum()),), generator=g)
    if hot is not None:
        inp[::3] = hot  # a row many bags of every rank read
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)[:-1]])
    return inp, offsets, torch.rand(inp.numel(), generator=g, dtype=f64)


def share(inp, offsets, psw, b0, b1):
    ends = torch.cat([offsets[1:], offsets.new_tensor([inp.numel()])])
    lo, hi = int(offsets[b0]), int(ends[b1 - 1])
    return inp[lo:hi], offsets[b0:b1] - lo, psw[lo:hi]


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    B = 4 * world + 1
    b0, b1 = rank * B // world, (rank + 1) * B // world
    traffic = {}
    N = 61
    w = torch.randn(N, D, generator=torch.Generator().manual_seed(0), dtype=f64)
    inp, offsets, psw = global_batch(N, B, 1, hot=N - 1)
    mine = share(inp, offsets, psw, b0, b1)
    G = torch.randn(B, D, generator=torch.Generator().manual_seed(2), dtype=f64)
    for backend in ("halo", "alltoall"):
        for mode, weighted in (("sum", False), ("sum", True), ("mean", False), ("max", False)):
            for sparse in (False, True):
                what = f"rank {rank} {backend} {mode}{' psw' if weighted else ''}{' sparse' if sparse else ''}"
                m = ShardedEmbeddingBag(
                    N, D, mode=mode, padding_idx=3, sparse=sparse, backend=backend, dtype=f64, _weight=w
                )
                assert m.weight.shape[0] < N and torch.equal(m.full_weight(), w), what
                out = m(mine[0], mine[1], mine[2] if weighted else None)
                out.backward(G[b0:b1])
                ref = torch.nn.EmbeddingBag(N, D, mode=mode, padding_idx=3, _weight=w.clone())
                r = ref(inp, offsets, psw if weighted else None)
                r.backward(G)
                assert_same_formula(out, r[b0:b1].detach(), msg=f"{what}: bags")
                assert m.weight.grad.is_sparse == sparse, what
                assert_same_formula(
                    dense(m.weight.grad),
                    ref.weight.grad[m.row_begin : m.row_end],
                    msg=f"{what}: gradient of the rank's rows",
                )
                if mode == "sum" and not weighted and not sparse:
                    traffic[backend] = m.traffic.total
    # a rank whose bags are all empty (it asks for nothing, but peers still ask it for rows)
    for backend in ("halo", "alltoall"):
        for mode in ("sum", "max"):
            m = ShardedEmbeddingBag(N, D, mode=mode, backend=backend, dtype=f64, _weight=w)
            if rank == 1:
                inp1, off1 = torch.zeros(0, dtype=torch.long), torch.zeros(3, dtype=torch.long)
            else:
                inp1, off1 = inp, offsets
            out = m(inp1, off1)
            out.sum().backward()
            ref = torch.nn.EmbeddingBag(N, D, mode=mode, _weight=w.clone())
            r = ref(inp1, off1)
            counts = [torch.zeros(N, D, dtype=f64) for _ in range(world)]
            r.sum().backward()
            dist.all_gather(counts, ref.weight.grad)
            assert_same_formula(out, r.detach(), msg=f"rank {rank} {backend} {mode} empty rank: bags")
            assert_same_formula(
                m.weight.grad,
                sum(counts)[m.row_begin : m.row_end],
                msg=f"rank {rank} {backend} {mode} empty rank: gradient",
            )
    try:  # no GPU / nvshmem4py here: a one-line error, not a hang
        ShardedEmbeddingBag(N, D, backend="nvshmem", dtype=f64)
        raise AssertionError("backend nvshmem started without NVSHMEM")
    except MggError as e:
        assert "\n" not in str(e), str(e)
    sizes = [30, 7, 50, 12, 9, 3]
    tables = [
        torch.randn(n, D, generator=torch.Generator().manual_seed(10 + t), dtype=f64) for t, n in enumerate(sizes)
    ]
    batches = [global_batch(n, B, 20 + t) for t, n in enumerate(sizes)]
    for backend in ("halo", "alltoall"):
        for sharding in ("table", "row", "mixed"):
            if sharding == "row" and min(sizes) < world:
                continue
            for mode in ("sum", "mean", "max"):
                what = f"rank {rank} collection {backend} {sharding} {mode}"
                c = ShardedEmbeddingBagCollection(
                    sizes,
                    D,
                    mode=mode,
                    sharding=sharding,
                    backend=backend,
                    dtype=f64,
                    _weights=tables,
                    row_wise_min_rows=20,
                )
                parts = [share(*bt, b0, b1) for bt in batches]
                out = c([p[0] for p in parts], [p[1] for p in parts], [p[2] for p in parts] if mode == "sum" else None)
                Gc = torch.randn(B, len(sizes), D, generator=torch.Generator().manual_seed(3), dtype=f64)
                out.backward(Gc[b0:b1])
                vgrad = torch.zeros(c.num_rows, D, dtype=f64)
                for t, (i, o, p) in enumerate(batches):
                    wt = tables[t].clone().requires_grad_()
                    r = F.embedding_bag(i, wt, o, mode=mode, per_sample_weights=p if mode == "sum" else None)
                    r.backward(Gc[:, t])
                    assert_same_formula(out[:, t], r[b0:b1].detach(), msg=f"{what}: table {t}")
                    vgrad[c.virtual_rows(t, torch.arange(sizes[t]))] = wt.grad
                    assert torch.equal(c.table_weight(t), tables[t]), what
                assert_same_formula(dense(c.weight.grad), vgrad[c.row_begin : c.row_end], msg=f"{what}: gradient")
    dist.barrier()
    if rank == 0:
        with open(sys.argv[1], "w") as f:
            json.dump({"ok": True, "world": world, "traffic": traffic}, f)


if __name__ == "__main__":
    main()
    exit_rank()  # the ranks meet, no gloo teardown

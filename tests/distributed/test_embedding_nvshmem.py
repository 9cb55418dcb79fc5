"""The nvshmem embedding lookup (mgg/distributed/embedding_nvshmem.py) on the CPU with threads as
PEs over the stand-in symmetric heap of test_nvshmem_runtime.py: each PE's bags read peers' rows
in place through aggregate_peers, and the backward returns remote rows' gradients through the
symmetric outboxes; outputs and row gradients equal torch.nn.EmbeddingBag's (float64)."""

import threading

import pytest
import torch

from mgg.distributed import nvshmem
from mgg.embedding.nvshmem import nvshmem_lookup
from mgg.embedding.plan import bag_edges, row_bounds
from mgg.errors import MggError
from mgg.plan import Config
from mgg.testing import assert_same_formula
from tests.distributed.test_nvshmem_runtime import _FakeHeap, _FakeWorld, run_pes

N, D, PES = 50, 4, 3


class _Heap(_FakeHeap):
    """The stand-in heap, with integer tables too (filled with -1 rather than NaN)."""

    def tensor(self, shape, dtype):
        if dtype.is_floating_point:
            return super().tensor(shape, dtype)
        k, self.allocs = self.allocs, self.allocs + 1
        with self.world.lock:
            while len(self.world.heap) <= k:
                self.world.heap.append([None] * self.world.pes)
            self.world.heap[k][self.pe] = torch.full(shape, -1, dtype=dtype)
        self.world.barrier.wait()
        return self.world.heap[k][self.pe]


def _share(inp, offsets, psw, b0, b1):
    ends = torch.cat([offsets[1:], offsets.new_tensor([inp.numel()])])
    lo, hi = int(offsets[b0]), int(ends[b1 - 1])
    return inp[lo:hi], offsets[b0:b1] - lo, psw[lo:hi]


@pytest.mark.parametrize("mode, weighted, sparse", [("sum", True, False), ("mean", False, True), ("sum", False, True)])
def test_nvshmem_lookup_with_threads_as_pes(monkeypatch, mode, weighted, sparse):
    g = torch.Generator().manual_seed(7)
    w = torch.randn(N, D, generator=g, dtype=torch.float64)
    sizes = torch.randint(0, 6, (3 * PES,), generator=g)
    inp = torch.randint(0, N, (int(sizes.sum()),), generator=g)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)[:-1]])
    psw = torch.rand(inp.numel(), generator=g, dtype=torch.float64)
    grad = torch.randn(3 * PES, D, generator=g, dtype=torch.float64)
    bounds = row_bounds(N, PES)
    world, local, results = _FakeWorld(PES), threading.local(), {}
    monkeypatch.setattr(nvshmem.symmetric, "runtime", lambda: local.rt)

    def pe_main(pe):
        local.rt = nvshmem.Runtime(_Heap(world, pe))
        shard = w[bounds[pe] : bounds[pe + 1]].clone().requires_grad_()
        b0, b1 = 3 * pe, 3 * pe + 3
        i, o, p = _share(inp, offsets, psw, b0, b1)
        for _ in range(3):  # the tables ping-pong, the outbox is reused
            e = bag_edges(i, o, p if weighted else None, N, mode, weight_dtype=torch.float64)
            out = nvshmem_lookup(shard, e, bounds, pe, mode, Config(2, 1, 2), fetch="direct", sparse=sparse)
            out.backward(grad[b0:b1])
        results[pe] = (out.detach(), shard.grad)
        local.rt.destroy()

    run_pes(PES, pe_main, world.barrier)
    ref = torch.nn.EmbeddingBag(N, D, mode=mode, _weight=w.clone())
    r = ref(inp, offsets, psw if weighted else None)
    r.backward(3 * grad)
    assert_same_formula(torch.cat([results[pe][0] for pe in range(PES)]), r.detach(), msg="bags")
    got = torch.cat([results[pe][1].to_dense() if sparse else results[pe][1] for pe in range(PES)])
    assert_same_formula(got, ref.weight.grad, msg="gradient of the rows")


def test_nvshmem_lookup_refuses_max():
    e = bag_edges(torch.tensor([1]), torch.tensor([0]), None, N, "max")
    with pytest.raises(MggError, match="max"):
        nvshmem_lookup(torch.zeros(N, D), e, row_bounds(N, 1), 0, "max", Config())

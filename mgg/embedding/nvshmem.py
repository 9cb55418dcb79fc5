"""Sharded embedding-bag lookups over NVSHMEM (MGG's path; the NVSHMEM runtime of mgg.distributed.nvshmem):
each rank's rows are written into a symmetric table, and the fused kernel
(mgg.ops.aggregate_peers) reads local rows from its own table and remote rows from their
owners' tables, by NVSHMEM get or peer loads, over the batch's plan (peers named by PE and
offset). No index or row exchange precedes the lookup.

The backward runs the batch's compact transposed step (the op) and must return each remote row's
gradient to its owner, whose batch plan does not say who read its rows. Each rank writes the ids
and gradients of the remote rows it read into a symmetric outbox, sorted by owner (so a peer's
rows for one owner are contiguous), and every owner reads, from each peer's outbox, the slice of
ids in its range and those rows (peer loads through the symmetric views), and adds them. The
outbox's capacity is the largest count over the PEs (each PE publishes its count first), grown
collectively, never shrunk. Barriers: one in the forward (the rows are written before any PE
reads), three in the backward (counts, outboxes, and the end of the reads before an outbox is
rewritten).

Tested on the CPU with threads as PEs over a stand-in symmetric heap
(tests/distributed/test_embedding_nvshmem.py); not yet run on GPUs with NVSHMEM.
"""

from __future__ import annotations

import torch

from .. import ops
from ..distributed.nvshmem import symmetric
from ..errors import MggError
from .plan import BatchStep, Edges


class _Outbox:
    """A PE's symmetric outbox: ids [capacity] and rows [capacity, dim], and its views of every
    PE's."""

    def __init__(self, heap, capacity: int, dim: int, dtype: torch.dtype, world: int):
        self.capacity = capacity
        self.ids = heap.tensor([capacity], torch.int64)
        self.rows = heap.tensor([capacity, dim], dtype)
        self.peer_ids = [heap.peer(self.ids, pe) for pe in range(world)]
        self.peer_rows = [heap.peer(self.rows, pe) for pe in range(world)]
        if any(v is None for v in self.peer_ids + self.peer_rows):
            raise MggError(
                "the nvshmem embedding backward reads peers' outboxes by loads: every PE must be "
                "reachable (one node with peer access)"
            )

    def free(self, heap) -> None:
        heap.free(self.ids)
        heap.free(self.rows)


def _return_gradients(rt, step: BatchStep, halo_grad: torch.Tensor, rows: int, world: int) -> torch.Tensor:
    """Every peer's gradients of this PE's rows, summed [rows, D] (collective)."""
    heap, me = rt.heap, rt.heap.my_pe()
    dim, dtype, dev = halo_grad.size(1), halo_grad.dtype, halo_grad.device
    # kept on the runtime: {"count": (table, peer views), (dim, dtype): _Outbox}; NVSHMEM's
    # finalize releases them with the heap
    state = rt.__dict__.setdefault("embedding_outboxes", {})
    if "count" not in state:
        count = heap.tensor([1], torch.int64)
        state["count"] = (count, [heap.peer(count, pe) for pe in range(world)])
    count, peer_count = state["count"]
    h = step.halo.numel()
    count.fill_(h)  # 1. every PE's count, so all size the outbox alike
    heap.barrier()
    counts = [int(peer_count[pe][0]) for pe in range(world)]
    box = state.get((dim, dtype))
    if box is None or box.capacity < max(counts):  # every PE decides alike: a collective reallocation
        if box is not None:
            box.free(heap)
        box = state[(dim, dtype)] = _Outbox(
            heap, max(max(counts), 2 * (box.capacity if box else 0), 1024), dim, dtype, world
        )
    box.ids[:h].copy_(step.halo.to(box.ids.device))  # 2. ids sorted, hence grouped by owner
    box.rows[:h].copy_(halo_grad)
    heap.barrier()
    lo, hi = step.row_begin, step.row_end  # 3. from every peer, the rows in this PE's range
    grad = halo_grad.new_zeros((rows, dim))
    for pe in range(world):
        if pe == me or counts[pe] == 0:
            continue
        ids = box.peer_ids[pe][: counts[pe]]
        a, b = (int(v) for v in torch.searchsorted(ids, torch.tensor([lo, hi], device=ids.device)))
        if b > a:
            grad.index_add_(0, (ids[a:b] - lo).to(dev), box.peer_rows[pe][a:b].to(dev))
    heap.barrier()  # no PE rewrites its outbox or count while another still reads them
    return grad


class _NvshmemLookup(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight, step: BatchStep, range_rows: list, fetch: str, deterministic: bool, sparse: bool):
        rt = symmetric.runtime()
        t = symmetric.publish(rt, weight.detach(), range_rows, fetch)  # written before any PE reads
        me = rt.heap.my_pe()
        ctx.step, ctx.args, ctx.rows = step, (len(range_rows), deterministic, sparse), weight.size(0)
        return ops.aggregate_peers(t.own, t.peers, me, step.plan, step.params, ops.fetch_code(fetch), deterministic)

    @staticmethod
    def backward(ctx, grad):
        step, (world, det, sparse) = ctx.step, ctx.args
        own, halo = step.split_grad(step.grad_rows(grad, det))
        rt = symmetric.runtime()
        from_peers = _return_gradients(rt, step, halo.contiguous(), ctx.rows, world)
        index = torch.cat([step.local_rows.to(grad.device), torch.arange(ctx.rows, device=grad.device)])
        values = torch.cat([own, from_peers])
        if sparse:
            gw = torch.sparse_coo_tensor(index.unsqueeze(0), values, (ctx.rows, grad.size(1)), check_invariants=False)
        else:
            gw = from_peers.index_add_(0, step.local_rows.to(grad.device), own)
        return gw, None, None, None, None, None


def nvshmem_lookup(
    weight: torch.Tensor,
    edges: Edges,
    bounds: torch.Tensor,
    rank: int,
    mode: str,
    config,
    fetch: str = "get-warp",
    sparse: bool = False,
    deterministic: bool = False,
    traffic=None,
) -> torch.Tensor:
    """This rank's bags [edges.num_bags, D] over NVSHMEM (modes 'sum' and 'mean'; the kernels
    have no max). Every PE calls it for every batch (the barriers are collective).

    Args:
        weight: this rank's rows [bounds[rank+1] - bounds[rank], D].
        edges: this rank's batch (global row ids).
        bounds: int64 [P + 1], the rows of each PE.
        mode: 'sum' or 'mean' (the weights are in edges).
        config: the plan's Config.
        fetch: how remote rows are read (mgg._C.FETCH).
        sparse: the table's gradient as a sparse COO tensor.
        traffic: a mgg.embedding.exchange.Traffic that counts the remote rows the kernel
            reads (one per remote lookup: the kernel fetches per edge).
    """
    if mode == "max":
        raise MggError(
            "mode 'max' has no kernel reduction; the nvshmem backend runs 'sum' and 'mean' (use backend 'halo' for max)"
        )
    range_rows = (bounds[1:] - bounds[:-1]).tolist()
    step = BatchStep(edges, bounds, rank, config, peers=True, device=weight.device)
    if traffic is not None:
        traffic.row_bytes += step.num_remote_edges * weight.size(1) * weight.element_size()
    return _NvshmemLookup.apply(weight, step, range_rows, fetch, deterministic, sparse)

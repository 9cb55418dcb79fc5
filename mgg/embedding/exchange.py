"""Sharded embedding-bag lookups over the ranks of a torch.distributed group (gloo on the CPU,
NCCL or gloo on GPUs), per batch: each rank owns a contiguous range of the (virtual) table's
rows and looks up its own bags (data-parallel batches).

- `halo` (mgg): per batch, each rank asks every owner for the distinct rows its bags read
  (a row asked for twice is fetched once), receives them with one all-to-all, and runs the
  lookup through mgg.ops.aggregate over its per-batch plan (own rows in place, the halo
  rows as the remote table). The adjoint sends each halo row's gradient back to its owner.
- `alltoall` (the baseline of DLRM systems: torchrec's row-wise sharding): indices go to their
  owners with an all-to-all, each owner pools its part of every requester's bags
  (torch.nn.functional.embedding_bag), and the partial bags come back with a second all-to-all
  and are summed (max: maximised). Built on torch.distributed and torch only.

- `nvshmem` (MGG's path on GPUs): the fused kernel reads peers' rows in place from symmetric
  tables (embedding_nvshmem.py); modes sum and mean.

halo and alltoall count the bytes each rank sends per forward (`Traffic`), the figure the dlrm bench suite
reports beside the times.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .. import ops
from .plan import BatchStep, Edges
from .rows import scatter_rows, segment_max

EMBEDDING_BACKENDS = ("halo", "alltoall", "nvshmem")


@dataclass
class Traffic:
    """Bytes this rank sent to other ranks in the last forward (indices and rows)."""

    index_bytes: int = 0
    row_bytes: int = 0

    @property
    def total(self) -> int:
        return self.index_bytes + self.row_bytes


def _on_wire(t: torch.Tensor, group) -> torch.Tensor:
    """t where the group's backend moves it: gloo moves host tensors, NCCL device tensors."""
    backend = dist.get_backend(group)
    if backend == "gloo" and t.is_cuda:
        return t.cpu()
    if backend == "nccl" and not t.is_cuda:
        return t.cuda()
    return t


def _a2a(send: torch.Tensor, out_counts: list, in_counts: list, group) -> torch.Tensor:
    """Rows to each rank (grouped in rank order, out_counts rows each) -> rows from each rank,
    on send's device (staged where the backend needs it)."""
    device = send.device
    send = _on_wire(send.contiguous(), group)
    recv = send.new_empty((sum(in_counts),) + tuple(send.shape[1:]))
    dist.all_to_all_single(recv, send, in_counts, out_counts, group=group)
    return recv.to(device)


def _counts(local: torch.Tensor, group) -> torch.Tensor:
    """local [P, k] int64 (row p: what this rank tells rank p) -> [P, k] (row p: what rank p told
    us), on the host."""
    local = _on_wire(local.contiguous(), group)
    got = torch.empty_like(local)
    dist.all_to_all_single(got, local, group=group)
    return got.cpu()


class _HaloFetch(torch.autograd.Function):
    """weight (own rows) -> the halo rows of a batch step, from their owners."""

    @staticmethod
    def forward(ctx, weight, step: BatchStep, world: int, group, sparse: bool, traffic: Traffic):
        recv_counts = torch.bincount(step.halo_pe, minlength=world)
        send_counts = _counts(recv_counts.unsqueeze(1), group).squeeze(1)
        rc, sc = recv_counts.tolist(), send_counts.tolist()
        requested = _a2a(step.halo, rc, sc, group)  # the global ids peers ask us for
        send_index = (requested - step.row_begin).to(weight.device)
        rows = _a2a(weight.index_select(0, send_index), sc, rc, group)
        traffic.index_bytes += step.halo.numel() * 8
        traffic.row_bytes += send_index.numel() * weight.size(1) * weight.element_size()
        ctx.save_for_backward(send_index)
        ctx.counts, ctx.group, ctx.rows, ctx.sparse = (rc, sc), group, weight.size(0), sparse
        return rows

    @staticmethod
    def backward(ctx, grad):
        (send_index,) = ctx.saved_tensors
        rc, sc = ctx.counts
        back = _a2a(grad.contiguous(), rc, sc, ctx.group)
        return scatter_rows(send_index, back, ctx.rows, ctx.sparse), None, None, None, None, None


class _StepLookup(torch.autograd.Function):
    """out = the batch step's aggregation of the own rows (in place) and the halo rows through
    mgg.ops.aggregate; the backward runs the step's compact transposed step (the op again)
    and scatters the own rows' part into the table's gradient (dense or sparse)."""

    @staticmethod
    def forward(ctx, weight, halo_rows, step: BatchStep, sparse: bool, deterministic: bool):
        ctx.step, ctx.sparse, ctx.det, ctx.rows = step, sparse, deterministic, weight.size(0)
        return ops.aggregate(weight, halo_rows.contiguous(), step.plan, step.params, deterministic)

    @staticmethod
    def backward(ctx, grad):
        step = ctx.step
        own, halo = step.split_grad(step.grad_rows(grad, ctx.det))
        gw = (
            scatter_rows(step.local_rows.to(grad.device), own, ctx.rows, ctx.sparse)
            if ctx.needs_input_grad[0]
            else None
        )
        return gw, halo, None, None, None


def halo_lookup(
    weight: torch.Tensor,
    edges: Edges,
    bounds: torch.Tensor,
    rank: int,
    world: int,
    mode: str,
    config,
    group=None,
    sparse: bool = False,
    deterministic: bool = False,
    traffic: Optional[Traffic] = None,
) -> torch.Tensor:
    """This rank's bags [edges.num_bags, D] from the rows of every rank (mgg's path).

    Args:
        weight: this rank's rows [bounds[rank+1] - bounds[rank], D].
        edges: this rank's batch (mgg.embedding.plan.bag_edges; row ids are global).
        bounds: int64 [world + 1], the rows of each rank.
        mode: 'sum' / 'mean' go through the op; 'max' reduces the fetched rows with torch's
            scatter_reduce (the kernels have no max reduction).
        config: the plan's Config.
        sparse: the table's gradient as a sparse COO tensor.
    """
    traffic = traffic if traffic is not None else Traffic()
    step = BatchStep(edges, bounds, rank, config, peers=False, device=weight.device)
    halo_rows = _HaloFetch.apply(weight, step, world, group, sparse, traffic)
    if mode != "max":
        return _StepLookup.apply(weight, halo_rows, step, sparse, deterministic)
    own = F.embedding(step.local_rows.to(weight.device), weight, sparse=sparse)
    a = step.local_begin
    rows = torch.cat([halo_rows[:a], own, halo_rows[a:]])  # the distinct rows, in id order
    return segment_max(rows.index_select(0, step.inverse.to(weight.device)), step.bag.to(weight.device), edges.num_bags)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, out_counts, in_counts, group):
        ctx.args = (in_counts, out_counts, group)
        return _a2a(x, out_counts, in_counts, group)

    @staticmethod
    def backward(ctx, grad):
        return _a2a(grad.contiguous(), *ctx.args), None, None, None


def alltoall_lookup(
    weight: torch.Tensor,
    edges: Edges,
    bounds: torch.Tensor,
    rank: int,
    world: int,
    mode: str,
    group=None,
    sparse: bool = False,
    traffic: Optional[Traffic] = None,
) -> torch.Tensor:
    """This rank's bags [edges.num_bags, D] the way torchrec's row-wise sharding computes them:
    indices to their owners (all-to-all), pooling there (F.embedding_bag), partial bags back
    (all-to-all) and summed (max: maximised). Differentiable in weight through torch.

    Args: as halo_lookup.
    """
    traffic = traffic if traffic is not None else Traffic()
    dev = weight.device
    idx, bag, w = edges.idx.to(dev), edges.bag.to(dev), edges.weight
    owner = torch.searchsorted(bounds.to(dev), idx, right=True) - 1
    order = torch.argsort(owner, stable=True)
    send_counts = torch.bincount(owner, minlength=world).cpu()
    tell = torch.stack([send_counts, torch.full((world,), edges.num_bags, dtype=torch.int64)], 1)
    heard = _counts(tell, group)
    recv_counts, their_bags = heard[:, 0].tolist(), heard[:, 1].tolist()
    sc = send_counts.tolist()
    r_idx = _a2a(idx[order], sc, recv_counts, group)
    r_bag = _a2a(bag[order], sc, recv_counts, group)
    r_w = None if w is None else _a2a(w.to(dev)[order], sc, recv_counts, group)
    peers_edges = sum(c for p, c in enumerate(sc) if p != rank)
    traffic.index_bytes += peers_edges * (16 + (0 if w is None else w.element_size()))
    # pool every requester's bags over our rows: bag b of rank s is bag base[s] + b here
    base = torch.zeros(world + 1, dtype=torch.int64)
    torch.cumsum(torch.tensor(their_bags), 0, out=base[1:])
    src_rank = torch.repeat_interleave(torch.arange(world), torch.tensor(recv_counts)).to(dev)
    g_bag = r_bag + base.to(dev)[src_rank]
    total = int(base[-1])
    offsets = torch.searchsorted(g_bag, torch.arange(total, device=dev))
    lo = int(bounds[rank])
    if mode == "max":  # an empty partial bag is -inf, so it never wins the max of the partials
        src = F.embedding(r_idx - lo, weight, sparse=sparse)
        pooled = src.new_full((total, src.size(1)), float("-inf"))
        pooled = pooled.scatter_reduce(0, g_bag.unsqueeze(1).expand_as(src), src, "amax")
    else:
        pooled = F.embedding_bag(
            r_idx - lo,
            weight,
            offsets,
            mode="sum",
            sparse=sparse,
            per_sample_weights=None if r_w is None else r_w.to(weight.dtype),
        )
    back = _AllToAll.apply(pooled, their_bags, [edges.num_bags] * world, group)
    traffic.row_bytes += sum(b for p, b in enumerate(their_bags) if p != rank) * weight.size(1) * weight.element_size()
    parts = back.view(world, edges.num_bags, weight.size(1))
    if mode != "max":
        return parts.sum(0)
    out = parts.amax(0)
    return out.masked_fill(torch.isinf(out), 0.0)

"""The `allgather` backend, CAGNET's 1D algorithm: every rank gathers every rank's rows each
layer (torch.distributed all_gather: NCCL on GPUs, gloo on the CPU) and aggregates its own rows
from the whole table with the local kernel. Its adjoint reduce-scatters the gradient of the
gathered table: each rank receives the sum, over ranks, of the gradients of its own rows. It
moves every other rank's rows every layer, the simplest full-graph baseline of the seeds."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..comm import all_gather_rows, staged


class AllGather:
    """The gathered table of a group whose rank r owns range_rows[r] rows."""

    def __init__(self, range_rows: list[int], group=None):
        self.range_rows, self.group = range_rows, group
        self.rank = dist.get_rank(group)
        self.most = max(range_rows)

    def forward(self, x_own: torch.Tensor) -> torch.Tensor:
        """x_own [own rows, D] -> every rank's rows [N, D], in rank order."""
        return all_gather_rows(x_own, self.range_rows, self.group)

    def backward(self, grad_all: torch.Tensor) -> torch.Tensor:
        """The adjoint: the sum over ranks of the gradients of this rank's rows (reduce-scatter;
        over gloo, which has none, an all-reduce and this rank's slice)."""
        device, g = grad_all.device, grad_all.contiguous()
        begin = sum(self.range_rows[: self.rank])
        rows = self.range_rows[self.rank]
        if staged(g, self.group) or dist.get_backend(self.group) == "gloo":
            g = g.cpu().clone() if staged(g, self.group) else g.clone()
            dist.all_reduce(g, group=self.group)
            return g[begin : begin + rows].to(device)
        chunks = torch.zeros((len(self.range_rows), self.most, g.size(1)), dtype=g.dtype, device=device)
        start = 0
        for r, n in enumerate(self.range_rows):
            chunks[r, :n] = g[start : start + n]
            start += n
        out = torch.empty((self.most, g.size(1)), dtype=g.dtype, device=device)
        dist.reduce_scatter_tensor(out, chunks.view(-1, g.size(1)), group=self.group)
        return out[:rows]

    def __call__(self, x_own: torch.Tensor) -> torch.Tensor:
        return _Gather.apply(x_own, self)


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_own, gather: AllGather):
        ctx.gather = gather
        return gather.forward(x_own)

    @staticmethod
    def backward(ctx, grad):
        return ctx.gather.backward(grad), None


class AllGatherBackend:
    """The `allgather` backend: the rank's plan reads every source from the gathered table."""

    gathered = True  # Plan(gathered=True): sources are rows of the whole table
    uses_fetch = False
    by_machine = False
    replicated = False
    starts_nvshmem = False

    @staticmethod
    def start(group, fetch: str, gpus_per_node: int = 1) -> None:
        """Nothing to start: torch.distributed moves the rows."""

    def __init__(self, dist_plan, graph):
        self.exchange = AllGather(dist_plan.range_rows, dist_plan.group)

    def aggregate(self, x_own: torch.Tensor, rp, config, deterministic: bool) -> torch.Tensor:
        x_all = self.exchange(x_own)
        return rp.aggregate(x_all, x_all.new_empty((0, x_all.size(1))), deterministic)

    def aggregate_extreme(self, x_own: torch.Tensor, rp, config, reduce: str) -> torch.Tensor:
        x_all = self.exchange(x_own)
        return rp.aggregate_extreme(x_all, x_all.new_empty((0, x_all.size(1))), reduce)

    def attend(
        self, table_own: torch.Tensor, a_dst_own: torch.Tensor, rp, config, args: tuple, row_offset: int
    ) -> torch.Tensor:
        t_all = self.exchange(table_own)
        return rp.attend(t_all, t_all.new_empty((0, t_all.size(1))), a_dst_own, *args, row_offset=row_offset)

    def drop(self, config) -> None:
        """Nothing beyond the plan's own schedule."""

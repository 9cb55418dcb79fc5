"""The `allgather` backend, CAGNET's 1D algorithm: every rank gathers every rank's rows each
layer (torch.distributed all_gather: NCCL on GPUs, gloo on the CPU) and aggregates its own rows
from the whole table with the local kernel. Its adjoint reduce-scatters the gradient of the
gathered table: each rank receives the sum, over ranks, of the gradients of its own rows. It
moves every other rank's rows every layer, the simplest full-graph baseline of the seeds."""
from __future__ import annotations

import torch
import torch.distributed as dist


class AllGather:
    """The gathered table of a group whose rank r owns range_rows[r] rows."""

    def __init__(self, range_rows: list[int], group=None):
        self.range_rows, self.group = range_rows, group
        self.rank = dist.get_rank(group)
        self.most = max(range_rows)

    def _staged(self, t: torch.Tensor) -> bool:
        return t.is_cuda and dist.get_backend(self.group) == "gloo"  # gloo moves CUDA rows via the host

    def forward(self, x_own: torch.Tensor) -> torch.Tensor:
        """x_own [own rows, D] -> every rank's rows [N, D], in rank order."""
        device, send = x_own.device, x_own
        if self._staged(send):
            send = send.cpu()
        padded = send.new_zeros((self.most, send.size(1)))  # all_gather wants equal sizes
        padded[:send.size(0)] = send
        parts = [torch.empty_like(padded) for _ in self.range_rows]
        dist.all_gather(parts, padded, group=self.group)
        return torch.cat([p[:n] for p, n in zip(parts, self.range_rows, strict=True)]).to(device)

    def backward(self, grad_all: torch.Tensor) -> torch.Tensor:
        """The adjoint: the sum over ranks of the gradients of this rank's rows (reduce-scatter;
        over gloo, which has none, an all-reduce and this rank's slice)."""
        device, g = grad_all.device, grad_all.contiguous()
        begin = sum(self.range_rows[:self.rank])
        rows = self.range_rows[self.rank]
        if self._staged(g) or dist.get_backend(self.group) == "gloo":
            g = g.cpu().clone() if self._staged(g) else g.clone()
            dist.all_reduce(g, group=self.group)
            return g[begin:begin + rows].to(device)
        chunks = torch.zeros((len(self.range_rows), self.most, g.size(1)), dtype=g.dtype, device=device)
        start = 0
        for r, n in enumerate(self.range_rows):
            chunks[r, :n] = g[start:start + n]
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

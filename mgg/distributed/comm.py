"""The collectives of mgg.distributed, written once: every backend, the trainer and the gathers
use these. gloo (the CPU, or several ranks sharing a GPU) moves host memory, so CUDA tensors are
staged through the host here and nowhere else."""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist


def staged(t: torch.Tensor, group=None) -> bool:
    """Whether t travels through host memory: a CUDA tensor over a gloo group."""
    return t.is_cuda and dist.get_backend(group) == "gloo"


def all_reduce(t: torch.Tensor, group=None) -> None:
    """In-place sum over the group; CUDA tensors travel through host memory under gloo."""
    if staged(t, group):
        host = t.cpu()
        dist.all_reduce(host, group=group)
        t.copy_(host)
    else:
        dist.all_reduce(t, group=group)


def allreduce_grads(model: torch.nn.Module, group=None) -> None:
    """Sums every parameter's gradient over the group."""
    for p in model.parameters():
        if p.grad is not None:
            all_reduce(p.grad, group)


def all_gather_rows(rows: torch.Tensor, sizes: list[int], group=None) -> torch.Tensor:
    """Every rank's rows in rank order, where rank r holds sizes[r] rows (all_gather wants equal
    sizes: each rank's rows are padded to the largest). The result is on rows' device."""
    device, send = rows.device, rows
    if staged(send, group):
        send = send.cpu()
    padded = send.new_zeros((max(sizes), *send.shape[1:]))
    padded[: send.size(0)] = send
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded, group=group)
    return torch.cat([p[:n] for p, n in zip(parts, sizes, strict=True)]).to(device)


def all_to_all_rows(
    send: torch.Tensor, rows: int, out_counts: list, in_counts: list, group=None, async_op: bool = False
):
    """Rows to each peer (grouped in rank order, out_counts of them) -> rows from each peer
    (in_counts), `rows` in all. With async_op, a Pending whose wait() gives them, so work on the
    caller's stream (a kernel) runs while the rows travel."""
    is_staged, device = staged(send, group), send.device
    if is_staged:
        send = send.cpu()
    recv = send.new_empty((rows, send.size(1)))
    work = dist.all_to_all_single(recv, send.contiguous(), in_counts, out_counts, group=group, async_op=async_op)
    pending = Pending(recv, work, device if is_staged else None)
    return pending if async_op else pending.wait()


class Pending:
    """Rows on their way (all_to_all_rows with async_op): wait() gives them, on the sender's device."""

    def __init__(self, rows: torch.Tensor, work=None, device=None):
        self.rows, self.work, self.device = rows, work, device

    def wait(self) -> torch.Tensor:
        if self.work is not None:
            self.work.wait()
            self.work = None
        return self.rows.to(self.device, non_blocking=True) if self.device is not None else self.rows


class Exchange:
    """An all-to-all of numpy arrays of any lengths between the ranks of a group: each rank gives
    one array per rank (empty where it sends nothing), all of one dtype, and gets one from each, in
    rank order. Plans are built on the host from what ranks tell each other with it (the rows a
    peer reads, a source's degree, the transpose's edges). Over NCCL the arrays travel through the
    rank's GPU. Tests put threads behind the same two calls."""

    def __init__(self, group=None):
        self.group = group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)

    def _device(self) -> torch.device:
        if dist.get_backend(self.group) == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def __call__(self, send: list) -> list:
        """send[p]: the array for rank p -> [the array from rank p for each p]."""
        if len(send) != self.world:
            raise ValueError(f"an exchange over {self.world} ranks was given {len(send)} arrays")
        dtype = np.result_type(*[np.asarray(a).dtype for a in send]) if send else np.dtype(np.int64)
        parts = [np.ascontiguousarray(a, dtype).reshape(-1) for a in send]
        dev = self._device()
        out_counts = torch.tensor([p.size for p in parts], dtype=torch.int64, device=dev)
        in_counts = torch.empty_like(out_counts)
        dist.all_to_all_single(in_counts, out_counts, group=self.group)
        ins = in_counts.cpu().tolist()
        flat = torch.from_numpy(np.concatenate(parts) if parts else np.zeros(0, dtype)).to(dev)
        recv = torch.empty(sum(ins), dtype=flat.dtype, device=dev)
        dist.all_to_all_single(recv, flat, ins, out_counts.cpu().tolist(), group=self.group)
        got = recv.cpu().numpy()
        cuts = np.concatenate([[0], np.cumsum(ins)]).astype(np.int64)
        return [got[cuts[p] : cuts[p + 1]] for p in range(self.world)]

    def all_true(self, flag: bool) -> bool:
        """Whether flag holds on every rank."""
        t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=self._device())
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.group)
        return bool(t.item())

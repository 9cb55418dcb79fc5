"""The grid's process groups (torch's DeviceMesh, named dims z, x, y) and the four collectives of
the 3D algorithm as autograd functions, each with its adjoint (plexus-3d-parallel.txt, Algorithms
1 and 2). Every call counts the bytes it moves per rank (ring algorithms: an all-reduce of M bytes
over G ranks moves 2 (G - 1) / G * M, an all-gather or reduce-scatter of M bytes (G - 1) / G * M),
per axis, in `Grid.moved`; mgg.distributed.grid.model predicts the same numbers.

- `sum_over(t, axis)`: all-reduce; the adjoint passes the gradient on (the sum's users are copies).
- `sum_and_share(t, axis)`: all-reduce; the adjoint all-reduces too (the ranks of the axis use the
  sum differently: each with its own slice of W).
- `share(t, axis)`: the identity; the adjoint all-reduces (a copy whose users differ by rank).
- `gather(t, axis, dim, n, reduce_back)`: all-gather along dim (uneven pieces padded); the adjoint
  takes the rank's own piece of the gradient (reduce_back=False: the users are copies) or
  reduce-scatters it (True: the users differ by rank)."""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

from ...errors import MggError
from .comm_sizes import ring_bytes
from .shape import AXES, MESH_DIMS, GridShape
from .shards import bounds


class Grid:
    """This rank's place in a GridShape over the default process group: its coordinates, one
    process group per axis (DeviceMesh), and the bytes moved per axis so far."""

    def __init__(self, shape: GridShape, device_type: Optional[str] = None):
        from torch.distributed.device_mesh import init_device_mesh

        if not dist.is_initialized():
            raise MggError("grid: torch.distributed is not initialised (run under torchrun, or init_process_group)")
        shape.check_world(dist.get_world_size())
        self.shape = shape
        device_type = device_type or ("cuda" if dist.get_backend() == "nccl" else "cpu")
        # where the group's collectives run: NCCL on this rank's GPU; gloo on the CPU, through which
        # CUDA tensors are staged (several ranks sharing a GPU, which NCCL refuses)
        self.comm_device = torch.device("cuda", torch.cuda.current_device()) if device_type == "cuda" else None
        self.mesh = init_device_mesh(device_type, shape.mesh_shape, mesh_dim_names=MESH_DIMS)
        self.rank = dist.get_rank()
        self.coord = shape.coords(self.rank)
        self.group = {a: self.mesh.get_group(a) for a in AXES}
        self.moved = {a: 0 for a in AXES}

    def extent(self, axis: str) -> int:
        return self.shape.extent(axis)

    def reset_counts(self) -> None:
        self.moved = {a: 0 for a in AXES}

    def _count(self, kind: str, nbytes: int, axis: str) -> None:
        """Counts a collective over a buffer of `nbytes` (the whole buffer: see ring_bytes)."""
        self.moved[axis] += ring_bytes(kind, nbytes, self.extent(axis))

    def on_comm(self, t: torch.Tensor) -> torch.Tensor:
        """t where this grid's collectives run (itself if it is there already)."""
        return t.to(self.comm_device or "cpu")

    def all_reduce(self, t: torch.Tensor, axis: str, in_place: bool = False) -> torch.Tensor:
        """The sum of t over the axis: a new tensor, or (in_place) t itself summed (through a copy
        where t is not contiguous or lies elsewhere than the collectives run)."""
        if self.extent(axis) == 1:
            return t if in_place else t.contiguous().clone()
        buf = self.on_comm(t)  # t, or its copy where the collectives run (staged through the CPU)
        if buf is t and not (in_place and t.is_contiguous()):
            buf = t.contiguous().clone()
        buf = buf.contiguous()
        self._count("all_reduce", buf.numel() * buf.element_size(), axis)
        dist.all_reduce(buf, group=self.group[axis])
        if buf is t:
            return t
        return t.copy_(buf) if in_place else buf.to(t.device)

    def all_gather(self, t: torch.Tensor, axis: str, dim: int, n: int) -> torch.Tensor:
        """The pieces of a dimension of n items cut by `bounds`, this rank's t one of them, joined."""
        parts = self.extent(axis)
        if parts == 1:
            return t
        size = bounds(n, parts)[1]  # piece i starts at i * size (torch.chunk's cuts): only the last is short
        moved = self.on_comm(t).movedim(dim, 0).contiguous()
        if moved.size(0) != size:
            padded = moved.new_zeros((size, *moved.shape[1:]))
            padded[: moved.size(0)] = moved
            moved = padded
        flat = moved.new_empty((size * parts, *moved.shape[1:]))
        self._count("all_gather", flat.numel() * flat.element_size(), axis)
        group = self.group[axis]
        if flat.device.type == "cpu":
            # gloo's all-gather stages its result through a second table of the result's size: each
            # piece broadcast into its place instead (each rank receives the same bytes)
            flat[self.coord[axis] * size : (self.coord[axis] + 1) * size] = moved
            for i in range(parts):
                dist.broadcast(flat[i * size : (i + 1) * size], dist.get_global_rank(group, i), group=group)
        else:
            dist.all_gather_single(flat, moved, group=group)
        # the pieces lie at their places already, the padding after the last: no second table, and
        # no view of it either (the caller may write it in place: layer 0's dropout)
        flat = flat.resize_((n, *flat.shape[1:]))
        return (flat if dim == 0 else flat.movedim(0, dim).contiguous()).to(t.device)

    def reduce_scatter(self, t: torch.Tensor, axis: str, dim: int) -> torch.Tensor:
        """The sum over the axis of t, cut along dim by `bounds`; this rank's piece."""
        parts = self.extent(axis)
        if parts == 1:
            return t
        n = t.size(dim)
        cuts = bounds(n, parts)
        size = cuts[1] - cuts[0]
        moved = self.on_comm(t).movedim(dim, 0)
        padded = moved.new_zeros((size * parts, *moved.shape[1:]))
        for i in range(parts):
            padded[i * size : i * size + cuts[i + 1] - cuts[i]] = moved[cuts[i] : cuts[i + 1]]
        out = padded.new_empty((size, *moved.shape[1:]))
        self._count("reduce_scatter", padded.numel() * padded.element_size(), axis)
        dist.reduce_scatter_single(out, padded, group=self.group[axis])
        i = self.coord[axis]
        return out[: cuts[i + 1] - cuts[i]].movedim(0, dim).contiguous().to(t.device)

    def piece(self, t: torch.Tensor, axis: str, dim: int) -> torch.Tensor:
        """This rank's piece of t along dim (no communication)."""
        b = bounds(t.size(dim), self.extent(axis))
        i = self.coord[axis]
        return t.narrow(dim, b[i], b[i + 1] - b[i])


class _SumOver(torch.autograd.Function):
    """Sums t in place (its producers keep their inputs, not their outputs: one table less at the
    peak); the gradient is never summed in place (it may have other users)."""

    @staticmethod
    def forward(ctx, t, grid, axis, share_back):
        ctx.grid, ctx.axis, ctx.share_back = grid, axis, share_back
        ctx.mark_dirty(t)
        return grid.all_reduce(t, axis, in_place=True)

    @staticmethod
    def backward(ctx, g):
        return (ctx.grid.all_reduce(g, ctx.axis) if ctx.share_back else g), None, None, None


class _Share(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, grid, axis, grad_owned):
        ctx.grid, ctx.axis, ctx.grad_owned = grid, axis, grad_owned
        return t.view_as(t)

    @staticmethod
    def backward(ctx, g):
        return ctx.grid.all_reduce(g, ctx.axis, in_place=ctx.grad_owned), None, None, None


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t, grid, axis, dim, n, reduce_back):
        ctx.grid, ctx.axis, ctx.dim, ctx.reduce_back = grid, axis, dim, reduce_back
        return grid.all_gather(t, axis, dim, n)

    @staticmethod
    def backward(ctx, g):
        grid, axis, dim = ctx.grid, ctx.axis, ctx.dim
        back = grid.reduce_scatter(g, axis, dim) if ctx.reduce_back else grid.piece(g, axis, dim).contiguous()
        return back, None, None, None, None, None


def sum_over(t: torch.Tensor, grid: Grid, axis: str) -> torch.Tensor:
    return _SumOver.apply(t, grid, axis, False) if grid.extent(axis) > 1 else t


def sum_and_share(t: torch.Tensor, grid: Grid, axis: str) -> torch.Tensor:
    return _SumOver.apply(t, grid, axis, True) if grid.extent(axis) > 1 else t


def share(t: torch.Tensor, grid: Grid, axis: str, grad_owned: bool = False) -> torch.Tensor:
    """grad_owned: the gradient reaching the adjoint is a new table nothing else reads (the caller
    knows its users' adjoints), summed in place: no copy of it."""
    return _Share.apply(t, grid, axis, grad_owned) if grid.extent(axis) > 1 else t


def gather(t: torch.Tensor, grid: Grid, axis: str, dim: int, n: int, reduce_back: bool) -> torch.Tensor:
    return _Gather.apply(t, grid, axis, dim, n, reduce_back) if grid.extent(axis) > 1 else t

"""The 1.5D backends (mgg.distributed.onefive: P / c blocks of rows, each replicated on the c ranks of
a process row; rank P(i, j) multiplies its block's rows by the blocks of its column's chunk):

- `sa-1.5d` (sparsity-aware-communication.txt, Algorithm 2): the rows of the chunk's blocks that block
  i reads, exactly, over the process column: the `halo` backend's exchange on the column's graph;
- `cagnet-1.5d` (cagnet-reducing-communication.txt, section IV-B, sparsity-oblivious): each block of
  the chunk whole, broadcast from its owner down the process column.

Then the c partial products of block i are summed over the process row (an all-reduce), so every
replica holds the block's output. Autograd: the sum's adjoint hands each replica the output's
gradient; the input rows' gradient, which only the replica of the block's own chunk column has (the
column whose chunk holds block i), is broadcast from it over the row; the exchange's adjoint returns
rows' gradients to their owners (halo), the broadcasts' reduce them to their roots (cagnet). Weight
gradients are then the same on a block's replicas: the caller sums them over the process column
(DistGraph.reduce_group), not the world. The bytes of every collective are counted per direction."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ...errors import MggError
from ..grid.comm_sizes import ring_bytes
from ..onefive.layout import Layout
from .halo import Halo, HaloExchange, new_traffic

# the layers a 1.5D backend runs: sums of its blocks' partial products (GAT's softmax and max/min do not add up)
RUNS_ON = "halo, node-halo, allgather, nvshmem or node-nvshmem"


@dataclass
class Replicas:
    """What a 1.5D DistGraph's plans share: the layout, the process row and column groups (Plexus's
    GridShape(P / c, c, 1): 'y' the rows, 'x' the columns) and the bytes moved, per direction and kind
    (recv, send: the column's exchange or broadcasts; row: the row's all-reduce or broadcast)."""

    layout: Layout
    row: object
    column: object
    traffic: dict = field(default_factory=new_traffic)

    def reset(self) -> None:
        for d in self.traffic.values():
            for k in d:
                d[k] = 0


class _RowSum(torch.autograd.Function):
    """The block's output: the c replicas' partial products summed over the process row. Backward:
    every replica's partial gets the output's gradient (the identity)."""

    @staticmethod
    def forward(ctx, partial, replicas: Replicas):
        out = partial.clone()
        if replicas.layout.c > 1:
            replicas.traffic["forward"]["row"] += ring_bytes(
                "all_reduce", out.numel() * out.element_size(), replicas.layout.c
            )
            _on_comm(out, lambda t: dist.all_reduce(t, group=replicas.row))
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _RowShare(torch.autograd.Function):
    """The block's input rows, used by every replica. Backward: only the replica of the block's chunk
    column has their gradient (the other columns read none of the block's rows), which it
    broadcasts over the row."""

    @staticmethod
    def forward(ctx, x, replicas: Replicas):
        ctx.replicas = replicas
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        r = ctx.replicas
        grad = grad.contiguous().clone()
        if r.layout.c > 1:
            root = r.layout.rank_of(r.layout.block, r.layout.column_of(r.layout.block))
            r.traffic["backward"]["row"] += ring_bytes("broadcast", grad.numel() * grad.element_size(), r.layout.c)
            _on_comm(grad, lambda t: dist.broadcast(t, src=root, group=r.row))
        return grad, None


def _on_comm(t: torch.Tensor, collective) -> None:
    """Runs collective(t) in place, through the host where the group is gloo and t on a GPU."""
    if t.is_cuda and dist.get_backend() == "gloo":
        host = t.cpu()
        collective(host)
        t.copy_(host)
    else:
        collective(t)


class OneFive(Halo):
    """What both 1.5D backends share: the row sum and share around the column's product, and the
    layers they cannot run."""

    replicated = True  # DistGraph cuts P / c blocks, replicated c times (DistGraph(replication=c))

    def __init__(self, dist_plan, graph):
        self.dist_plan, self.replicas = dist_plan, dist_plan.replicas
        self.traffic = self.replicas.traffic
        self._ids: dict = {}

    def aggregate(self, x_own: torch.Tensor, rp, config, deterministic: bool) -> torch.Tensor:
        x = _RowShare.apply(x_own, self.replicas)
        return _RowSum.apply(self.column_product(x, rp, deterministic), self.replicas)

    def aggregate_extreme(self, x_own, rp, config, reduce: str):
        raise MggError(f"the {self.dist_plan.backend} backend sums its blocks' products; {reduce} runs on {RUNS_ON}")

    def attend(self, table_own, a_dst_own, rp, config, args: tuple, row_offset: int):
        raise MggError(
            f"the {self.dist_plan.backend} backend sums its blocks' products; GAT's attention (a softmax over "
            f"every neighbour) runs on {RUNS_ON}"
        )


class SparsityAware15D(OneFive):
    """sa-1.5d: the rows of the chunk's blocks that block i reads, over the process column."""

    def __init__(self, dist_plan, graph):
        super().__init__(dist_plan, graph)
        self.exchange = HaloExchange(dist_plan.plan.shard(dist_plan.rank), dist_plan.group, self.replicas.traffic)

    def column_product(self, x: torch.Tensor, rp, deterministic: bool) -> torch.Tensor:
        return rp.aggregate(x, self.exchange(x), deterministic)


class Cagnet15D(OneFive):
    """cagnet-1.5d: every block of the chunk, whole, broadcast from its owner down the process column
    (the DistPlan reads its sources from the chunk's table: Plan(gathered=(first row, end row)))."""

    @staticmethod
    def window(layout: Layout, bounds) -> tuple:
        """The rows of the chunk's blocks: the table the rank's plan reads its sources from."""
        k0, k1 = layout.chunk
        return int(bounds[k0]), int(bounds[k1])

    def column_product(self, x: torch.Tensor, rp, deterministic: bool) -> torch.Tensor:
        table = _ChunkBroadcast.apply(x, self)
        return rp.aggregate(table, table.new_empty((0, table.size(1))), deterministic)


class _ChunkBroadcast(torch.autograd.Function):
    """The chunk's table: block k's rows from P(k, j), for each block k of column j's chunk (the rank's
    own x where k is its block). Backward: each block's gradient reduced to its root."""

    @staticmethod
    def forward(ctx, x, backend: Cagnet15D):
        r, bounds = backend.replicas, backend.dist_plan.plan.bounds
        lay = r.layout
        ctx.backend = backend
        pieces = []
        for k in range(*lay.chunk):
            rows = int(bounds[k + 1] - bounds[k])
            piece = x.detach().clone() if k == lay.block else x.new_empty((rows, x.size(1)))
            nbytes = rows * x.size(1) * x.element_size()
            if lay.blocks > 1:
                r.traffic["forward"]["send"] += ring_bytes("broadcast", nbytes, lay.blocks)
                r.traffic["forward"]["recv"] += 0 if k == lay.block else nbytes
                _on_comm(piece, lambda t, k=k: dist.broadcast(t, src=lay.rank_of(k, lay.column), group=r.column))
            pieces.append(piece)
        return torch.cat(pieces) if pieces else x.new_empty((0, x.size(1)))

    @staticmethod
    def backward(ctx, grad):
        backend = ctx.backend
        r, bounds = backend.replicas, backend.dist_plan.plan.bounds
        lay = r.layout
        k0, _ = lay.chunk
        own = int(bounds[lay.block + 1] - bounds[lay.block])
        out = grad.new_zeros((own, grad.size(1)))
        for k in range(*lay.chunk):
            a, b = int(bounds[k] - bounds[k0]), int(bounds[k + 1] - bounds[k0])
            piece = grad[a:b].contiguous().clone()
            nbytes = piece.numel() * piece.element_size()
            if lay.blocks > 1:
                r.traffic["backward"]["send"] += 0 if k == lay.block else nbytes
                r.traffic["backward"]["recv"] += ring_bytes("reduce", nbytes, lay.blocks)
                _on_comm(piece, lambda t, k=k: dist.reduce(t, dst=lay.rank_of(k, lay.column), group=r.column))
            if k == lay.block:
                out = piece
        return out, None

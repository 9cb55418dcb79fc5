"""The halo exchange of the `halo` backend: each rank receives exactly the peer rows its plan
reads (sparsity-aware all-to-all), in the order of its halo list. Differentiable: the adjoint
sends each halo row's gradient back to its owner, which adds it to the row it sent."""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from ...plan import RankShard
from ..comm import all_to_all_rows


def new_traffic() -> dict:
    """Bytes a rank moved, per direction (forward, backward) and kind (recv, send; row: a 1.5D
    backend's row collective)."""
    return {d: {"recv": 0, "send": 0, "row": 0} for d in ("forward", "backward")}


class HaloExchange:
    """Built once per rank partition (a collective: every rank builds its own at the same time).
    The bytes it sends and receives are counted in `traffic` (new_traffic's)."""

    def __init__(self, part: RankShard, group=None, traffic=None):
        self.group = group
        self.traffic = traffic if traffic is not None else new_traffic()
        world = part.num_ranks
        self.recv_counts = np.bincount(part.halo_pe, minlength=world).tolist()
        # tell each owner which of its rows we need (global ids), learn which rows peers need
        req_counts = torch.tensor(self.recv_counts, dtype=torch.int64)
        send_counts = torch.empty_like(req_counts)
        dist.all_to_all_single(send_counts, req_counts, group=group)
        self.send_counts = send_counts.tolist()
        requested = torch.empty(sum(self.send_counts), dtype=torch.int64)
        dist.all_to_all_single(
            requested, torch.from_numpy(part.halo_nodes.copy()), self.send_counts, self.recv_counts, group=group
        )
        self.send_index = requested - part.row_begin  # rows of ours, as offsets into our range
        if self.send_index.numel() and (int(self.send_index.min()) < 0 or int(self.send_index.max()) >= part.num_rows):
            raise RuntimeError(
                "mgg.distributed: a peer requested rows outside this rank's range "
                "(ranks built plans from different graphs?)"
            )
        self.num_halo = part.num_halo
        self._devices: dict = {}

    def _index(self, device) -> torch.Tensor:
        key = str(device)
        if key not in self._devices:
            self._devices[key] = self.send_index.to(device)
        return self._devices[key]

    def _count(self, direction: str, sent: int, received: int, row_bytes: int) -> None:
        self.traffic[direction]["send"] += sent * row_bytes
        self.traffic[direction]["recv"] += received * row_bytes

    def forward(self, x_own: torch.Tensor) -> torch.Tensor:
        """x_own [own rows, D] -> the halo rows [num_halo, D] from their owners."""
        send = x_own.index_select(0, self._index(x_own.device))
        self._count("forward", send.size(0), self.num_halo, x_own.size(1) * x_own.element_size())
        return all_to_all_rows(send, self.num_halo, self.send_counts, self.recv_counts, self.group)

    def backward(self, grad_halo: torch.Tensor, rows: int) -> torch.Tensor:
        """The adjoint: each halo row's gradient goes back to its owner, which adds the gradients
        of the rows it sent, peer by peer in rank order (each peer's rows are distinct, so the
        result does not depend on scheduling)."""
        self._count(
            "backward", grad_halo.size(0), int(self.send_index.numel()), grad_halo.size(1) * grad_halo.element_size()
        )
        back = all_to_all_rows(grad_halo, int(self.send_index.numel()), self.recv_counts, self.send_counts, self.group)
        grad = grad_halo.new_zeros((rows, grad_halo.size(1)))
        add_blocks(grad, self._index(grad.device), back, self.send_counts)
        return grad

    def __call__(self, x_own: torch.Tensor) -> torch.Tensor:
        return _Exchange.apply(x_own, self)


def add_blocks(out: torch.Tensor, index: torch.Tensor, rows: torch.Tensor, counts: list) -> None:
    """out[index] += rows, one sender's block after another (counts[p] rows from peer p, distinct
    within a block), so the sums do not depend on scheduling."""
    start = 0
    for n in counts:
        if n:
            out.index_add_(0, index[start : start + n], rows[start : start + n])
        start += n


class _Exchange(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_own, exchange: HaloExchange):
        ctx.exchange, ctx.rows = exchange, x_own.size(0)
        return exchange.forward(x_own)

    @staticmethod
    def backward(ctx, grad):
        return ctx.exchange.backward(grad.contiguous(), ctx.rows), None


class Halo:
    """The `halo` backend: the rank's plan reads [own rows | halo rows]; the exchange brings the
    halo rows before the op runs."""

    gathered = False  # the plan's remote rows are a halo list
    uses_fetch = False  # no fetch policy: the rows arrive before the op
    by_machine = False
    starts_nvshmem = False
    replicated = False

    @staticmethod
    def start(group, fetch: str, gpus_per_node: int = 1) -> None:
        """Nothing to start: torch.distributed moves the rows."""

    def __init__(self, dist_plan, graph):
        self.dist_plan = dist_plan
        self.exchange = HaloExchange(dist_plan.plan.shard(dist_plan.rank), dist_plan.group)
        self.traffic = self.exchange.traffic
        self._ids: dict = {}

    def aggregate(self, x_own: torch.Tensor, rp, config, deterministic: bool) -> torch.Tensor:
        return rp.aggregate(x_own, self.exchange(x_own), deterministic)

    def aggregate_extreme(self, x_own: torch.Tensor, rp, config, reduce: str) -> torch.Tensor:
        return rp.aggregate_extreme(x_own, self.exchange(x_own), reduce)

    def attend(
        self, table_own: torch.Tensor, a_dst_own: torch.Tensor, rp, config, args: tuple, row_offset: int
    ) -> torch.Tensor:
        return rp.attend(
            table_own,
            self.exchange(table_own),
            a_dst_own,
            *args,
            ids=self._attention_ids(table_own.device),
            row_offset=row_offset,
        )

    def _attention_ids(self, device) -> torch.Tensor:
        """Global ids of [own rows | halo rows] (the source table of the attention)."""
        key = str(device)
        if key not in self._ids:
            ids = self.dist_plan.plan.shard(self.dist_plan.rank).source_ids()
            self._ids[key] = torch.from_numpy(ids).to(device)
        return self._ids[key]

    def drop(self, config) -> None:
        """Nothing beyond the plan's own schedule."""

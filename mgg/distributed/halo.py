"""The halo exchange of the `halo` backend: each rank receives exactly the peer rows its plan
reads (sparsity-aware all-to-all), in the order of its halo list."""
from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from ..plan import RankPartition


class HaloExchange:
    """Built once per rank partition (a collective: every rank builds its own at the same time)."""

    def __init__(self, part: RankPartition, group=None):
        self.group = group
        world = part.num_ranks
        owners = part.halo_owner().numpy()
        self.recv_counts = np.bincount(owners, minlength=world).tolist()
        # tell each owner which of its rows we need (global ids), learn which rows peers need
        req_counts = torch.tensor(self.recv_counts, dtype=torch.int64)
        send_counts = torch.empty_like(req_counts)
        dist.all_to_all_single(send_counts, req_counts, group=group)
        self.send_counts = send_counts.tolist()
        requested = torch.empty(sum(self.send_counts), dtype=torch.int64)
        dist.all_to_all_single(requested, part.halo_nodes.clone(), self.send_counts, self.recv_counts, group=group)
        self.send_index = requested - part.row_begin  # rows of ours, as offsets into our range
        if self.send_index.numel() and (int(self.send_index.min()) < 0 or int(self.send_index.max()) >= part.num_rows):
            raise RuntimeError("mgg.distributed: a peer requested rows outside this rank's range "
                               "(ranks built plans from different graphs?)")
        self.num_halo = part.halo_nodes.numel()

    def __call__(self, x_own: torch.Tensor) -> torch.Tensor:
        """x_own [own rows, D] -> the halo rows [num_halo, D] from their owners. Over gloo
        (several ranks sharing a GPU, or the CPU), CUDA rows travel through host memory."""
        send = x_own.index_select(0, self.send_index.to(x_own.device)).contiguous()
        staged = x_own.is_cuda and dist.get_backend(self.group) == "gloo"
        if staged:
            send = send.cpu()
        recv = send.new_empty((self.num_halo, x_own.size(1)))
        dist.all_to_all_single(recv, send, self.recv_counts, self.send_counts, group=self.group)
        return recv.to(x_own.device, non_blocking=True) if staged else recv

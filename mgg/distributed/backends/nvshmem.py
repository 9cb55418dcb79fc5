"""The `nvshmem` backend (MGG's path): embeddings in NVSHMEM symmetric memory, the fused kernel
reads peers' rows in place by NVSHMEM get or peer loads. The NVSHMEM runtime and the differentiable
steps are mgg.distributed.nvshmem; this is the backend's face."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ... import ops
from ...errors import MggError
from ...plan import Plan
from ...runtime.coordination import GroupCoordinator
from ...runtime.remote_reads import AUTO, choose_remote_reads, estimate_ms
from .. import nvshmem
from ..part_graph import is_part, tell_readers


class Nvshmem:
    gathered = False
    uses_fetch = True  # the kernel reads peers' rows through a fetch policy (mgg._C.FETCH)
    by_machine = False
    replicated = False
    starts_nvshmem = True  # needs a CUDA GPU and nvshmem4py

    @staticmethod
    def check_fetch(fetch: str) -> None:
        """Raises MggError unless `fetch` is a policy for symmetric device tables."""
        ops.fetch_code(fetch)
        if fetch == "uva":
            raise MggError(
                "fetch 'uva' reads pinned host tables within one process (python -m bench fetch); "
                "the nvshmem backend's tables are symmetric device memory"
            )

    @staticmethod
    def start(group, fetch: str, gpus_per_node: int = 1) -> None:
        """Checks the fetch policy and starts NVSHMEM over the group (once per process)."""
        Nvshmem.check_fetch(fetch)
        nvshmem.init(group)

    def __init__(self, dist_plan, graph):
        self.dist_plan = dist_plan
        # the fused kernel's adjoint reads peers' gradients through the transposed graph's plan
        self.plan_t = dist_plan.plan if graph.symmetric else Plan(graph.transpose(), bounds=dist_plan.plan.bounds)
        if is_part(graph):  # a plan of this rank's rows alone learns what the once mode reads of it
            tell_readers(dist_plan.plan, dist_plan.rank, graph.exchange)
        self.remote_choice: dict = {}  # remote_reads='auto': (D, dtype, config) -> (mode, {mode: ms})

    def aggregate_extreme(self, x_own: torch.Tensor, rp, config, reduce: str) -> torch.Tensor:
        raise MggError(
            f"the nvshmem backend has no {reduce} aggregation in mgg (its kernels read peers' rows in place "
            "for sums only); use backend 'halo' or 'allgather'"
        )

    def aggregate(self, x_own: torch.Tensor, rp, config, deterministic: bool) -> torch.Tensor:
        d = self.dist_plan
        plan_t = self.plan_t.rank_plan(d.rank, config)
        mode = d.remote_reads
        if mode == AUTO:
            mode = self._choose(x_own, rp, plan_t, config, deterministic)
        return nvshmem.aggregate(x_own, rp, plan_t, d.range_rows, d.fetch, deterministic, mode)

    def _choose(self, x_own, rp, plan_t, config, deterministic) -> str:
        """The remote-read mode of this layer's shape: the modes the cost model keeps measured on
        its first step (every rank reaches it at the same call), then kept."""
        key = (x_own.size(1), x_own.dtype, config)
        if key not in self.remote_choice:
            d = self.dist_plan
            coordinator = GroupCoordinator(d.group) if dist.is_initialized() else None
            rows = x_own.detach()

            def step(mode):
                return nvshmem.aggregate(rows, rp, plan_t, d.range_rows, d.fetch, deterministic, mode)

            estimates = estimate_ms(rp.shard, x_own.size(1), x_own.element_size())
            with torch.no_grad():
                self.remote_choice[key] = choose_remote_reads(step, x_own.device, coordinator, estimates=estimates)
        return self.remote_choice[key][0]

    def attend(
        self, table_own: torch.Tensor, a_dst_own: torch.Tensor, rp, config, args: tuple, row_offset: int
    ) -> torch.Tensor:
        d = self.dist_plan
        plan_t = self.plan_t.rank_plan(d.rank, config)
        if d.remote_reads != "once":  # 'auto' measures aggregations only: the attention reads per edge
            return nvshmem.attend(table_own, a_dst_own, rp, plan_t, d.range_rows, d.fetch, *args)
        p = d.plan
        back = (p.halo_return(d.rank, config), p.halo_counts())
        return nvshmem.attend(table_own, a_dst_own, rp, plan_t, d.range_rows, d.fetch, *args, "once", back)

    def drop(self, config) -> None:
        """The transposed graph's schedule too."""
        if self.plan_t is not self.dist_plan.plan:
            self.plan_t.drop(self.dist_plan.rank, config)

"""The `nvshmem` backend (MGG's path): embeddings in NVSHMEM symmetric memory, the fused kernel
reads peers' rows in place by NVSHMEM get or peer loads. The runtime and the differentiable
steps are mgg.distributed.nvshmem; this is the backend's face."""

from __future__ import annotations

import torch

from ...errors import MggError
from ...ops import check_fetch
from ...plan import Plan
from .. import nvshmem


class Nvshmem:
    gathered = False
    uses_fetch = True  # the kernel reads peers' rows through a fetch policy (mgg._C.FETCH)

    @staticmethod
    def start(group, fetch: str) -> None:
        """Checks the fetch policy and starts NVSHMEM over the group (once per process)."""
        check_fetch(fetch)
        if fetch == "uva":
            raise MggError(
                "fetch 'uva' reads pinned host tables within one process (python -m bench fetch); "
                "the nvshmem backend's tables are symmetric device memory"
            )
        nvshmem.init(group)

    def __init__(self, dist_plan, graph):
        self.dist_plan = dist_plan
        # the fused kernel's adjoint reads peers' gradients through the transposed graph's plan
        self.plan_t = dist_plan.plan if graph.symmetric else Plan(graph.transpose(), bounds=dist_plan.plan.bounds)

    def aggregate_extreme(self, x_own: torch.Tensor, rp, config, reduce: str) -> torch.Tensor:
        raise MggError(
            f"the nvshmem backend has no {reduce} aggregation in mgg (its kernels read peers' rows in place "
            "for sums only); use backend 'halo' or 'allgather'"
        )

    def aggregate(self, x_own: torch.Tensor, rp, config, deterministic: bool) -> torch.Tensor:
        d = self.dist_plan
        return nvshmem.aggregate(x_own, rp, self.plan_t.rank_plan(d.rank, config), d.range_rows, d.fetch, deterministic)

    def attend(
        self, table_own: torch.Tensor, a_dst_own: torch.Tensor, rp, config, args: tuple, row_offset: int
    ) -> torch.Tensor:
        d = self.dist_plan
        return nvshmem.attend(
            table_own, a_dst_own, rp, self.plan_t.rank_plan(d.rank, config), d.range_rows, d.fetch, *args
        )

    def drop(self, config) -> None:
        """The transposed graph's schedule too."""
        if self.plan_t is not self.dist_plan.plan:
            self.plan_t.drop(self.dist_plan.rank, config)

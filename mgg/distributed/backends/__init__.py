"""How a rank gets the peers' rows its plan reads: one class per backend, behind one small
protocol, so DistPlan and DistGraph name none of them (a new backend is a module here and an
entry in BACKENDS). A backend class has:

- `gathered`: whether its Plan reads every source from one gathered table (Plan(gathered=True));
- `uses_fetch`: whether a fetch policy (mgg._C.FETCH) chooses how the kernel reads peers' rows;
- `by_machine`: whether the ranks form machines of `gpus_per_node` (the graph split between
  machines first, mgg.partitioning.nodes);
- `starts_nvshmem`: whether it runs MGG's kernel over NVSHMEM (a CUDA GPU and nvshmem4py needed);
- `replicated`: whether the ranks form P / c blocks of c replicas (the 1.5D backends: DistGraph's
  `replication`);
- `start(group, fetch, gpus_per_node)`: checks and process-wide start-up, before any plan (DistGraph);
- `Backend(dist_plan, graph)`: what one DistPlan needs (an exchange, a transposed plan, ...);
- `aggregate(x_own, rank_plan, config, deterministic)`,
  `aggregate_extreme(x_own, rank_plan, config, reduce)` (max/min; nvshmem refuses it) and
  `attend(table_own, a_dst_own, rank_plan, config, (heads, slope, dropout, seed), row_offset)`:
  this rank's output rows, differentiable (the op's autograd plus the adjoint of the exchange);
- `drop(config)`: forgets what it built for a config beyond the plan's schedule (the tuner)."""

from .allgather import AllGatherBackend
from .halo import Halo
from .node_halo import NodeHalo
from .node_nvshmem import NodeNvshmem
from .nvshmem import Nvshmem
from .onefive import Cagnet15D, SparsityAware15D

BACKENDS = {
    "halo": Halo,
    "nvshmem": Nvshmem,
    "allgather": AllGatherBackend,
    "node-halo": NodeHalo,
    "node-nvshmem": NodeNvshmem,
    "sa-1.5d": SparsityAware15D,
    "cagnet-1.5d": Cagnet15D,
}

__all__ = ["BACKENDS"]

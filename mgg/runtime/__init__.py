"""mgg's runtime (MGG §6): what tunes the kernels' configuration (ps, dist, wpb) across training
iterations. The device's resources and the config grid (limits), the GPUs' published numbers
(hardware), the cost model (eq. 2-3, cost) and the kernels' performance model (kernel_model), the
cross-iteration search (search) over the steps it tunes (targets), how ranks agree (coordination),
the online tuner inside a layer (online), its config cache (config_cache), the `mgg tune` command
(cli), the node order a plan runs in (ordering: Config(order="auto")) and the order-aware L2 model's
input (locality). NVSHMEM's own runtime is mgg.distributed.nvshmem's (ARCHITECTURE.md's glossary)."""

from .config_cache import ConfigCache
from .cost import CostModel, LatencyModel, RankShape
from .limits import DeviceLimits, feasible, grid, resources
from .search import MggSearch

__all__ = [
    "ConfigCache",
    "CostModel",
    "DeviceLimits",
    "LatencyModel",
    "MggSearch",
    "RankShape",
    "feasible",
    "grid",
    "resources",
]

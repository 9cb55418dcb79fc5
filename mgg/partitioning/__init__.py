"""Which node goes to which rank: the node -> rank map (assignment, `Partition`; MGG's range split,
the default, is mgg.plan.ranges) -> the methods that compute one (methods) -> their disk cache
(cache) -> `partition()` (compute). What a split costs in communication is mgg.plan.stats."""

from .assignment import Partition, range_partition
from .cache import PartitionCache
from .compute import check, partition
from .methods import CACHED, METHODS

__all__ = [
    "CACHED",
    "METHODS",
    "Partition",
    "PartitionCache",
    "check",
    "partition",
    "range_partition",
]

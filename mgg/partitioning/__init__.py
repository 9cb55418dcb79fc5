"""Which node goes to which rank: MGG's range split (ranges) -> the node -> rank map (assignment,
`Partition`) -> the methods that compute one (methods) -> their disk cache (cache) -> `partition()`
(compute); what a split costs in communication (stats)."""

from .assignment import Partition, range_partition
from .cache import PartitionCache
from .compute import check, partition
from .methods import CACHED, METHODS
from .ranges import split_ranges
from .stats import partition_stats

__all__ = [
    "CACHED",
    "METHODS",
    "Partition",
    "PartitionCache",
    "check",
    "partition",
    "partition_stats",
    "range_partition",
    "split_ranges",
]

"""The MGG plan, built on the host (MGG §4, §5.1), and the arguments the mgg ops receive, in the
order the layers depend on each other:

- config.py: `Config` (ps, dist, wpb, interleave, order) within the kernels' ranges, ORDERS;
- ranges.py: MGG Algorithm 1 (`split_ranges`), the ranks' default node ranges; stats.py: what
  ranges cost in communication (`partition_stats`);
- shard.py: `RankShard`, one rank's share of a graph ("partition" names the node -> rank map,
  mgg.Partition, and MGG's neighbor partitions only): a local and a remote CSR with MGG's address
  translation, and the transposed step the backward runs; built once per rank, its device copies
  once per device and shared by every config;
- schedule.py: `Schedule`, the warp-range schedule of one step under one config
  (csrc/core/schedule.h: the only per-config state, O(warps)), and the step layout
  (mgg._C.STEP_FIELDS, STEP_PARAMS);
- rank_plan.py: `RankPlan`, a shard under a config: `op_args` (the ops' `plan` and `params`
  lists) and the rank's steps through mgg.ops (aggregate, aggregate_peers, ..., attend);
- graph_plan.py: `Plan`, every rank of one graph (shards built once, rank plans on demand in a
  bounded cache), and the `Aggregation` protocol the layers call.

Limits and layouts (config ranges, fields) come from the extension, which defines them once."""

from .config import AUTO, DIST_RANGE, ORDERS, PS_RANGE, WPB_RANGE, Config
from .graph_plan import Aggregation, Plan
from .ranges import split_ranges
from .rank_plan import REMOTE_READS, PartStep, RankPlan, check_remote_reads
from .schedule import (
    ABSENT_PARAMS,
    ABSENT_STEP,
    FIXUP_FIELDS,
    RANGE_FIELDS,
    STEP_FIELDS,
    STEP_PARAMS,
    Schedule,
    schedule_step,
)
from .shard import Csr, GatheredShard, RankShard
from .stats import partition_stats

__all__ = [
    "ABSENT_PARAMS",
    "ABSENT_STEP",
    "AUTO",
    "Aggregation",
    "Config",
    "Csr",
    "DIST_RANGE",
    "FIXUP_FIELDS",
    "GatheredShard",
    "ORDERS",
    "PS_RANGE",
    "PartStep",
    "Plan",
    "RANGE_FIELDS",
    "REMOTE_READS",
    "RankPlan",
    "RankShard",
    "STEP_FIELDS",
    "STEP_PARAMS",
    "Schedule",
    "WPB_RANGE",
    "check_remote_reads",
    "partition_stats",
    "schedule_step",
    "split_ranges",
]

"""The import paths of mgg 0.1.0 that the package layout moved (ARCHITECTURE.md), kept for one
release: `import mgg.io`, `from mgg.partition import METHODS` and the like still work, and each
name taken through an old path warns (DeprecationWarning) with its new home. No file stands at an
old path (the moved files keep their history); the alias modules are made here when mgg is
imported, and they import the new homes only when a name is taken."""

from __future__ import annotations

import importlib
import sys
import types
import warnings

# old module -> its new homes, searched in order for each name
MOVED = {
    "mgg.io": ("mgg.data.formats", "mgg.data.resolve"),
    "mgg.datasets": ("mgg.data.datasets", "mgg.data.resolve", "mgg.data.bundled"),
    "mgg.synthetic": ("mgg.data.synthetic", "mgg.data.stats", "mgg.data.arrays"),
    "mgg.partition": ("mgg.partitioning.assignment", "mgg.partitioning.methods", "mgg.partitioning.compute"),
    "mgg.partition_cache": ("mgg.partitioning.cache",),
    "mgg.partition_stats": ("mgg.plan.stats",),
    "mgg.partitioners": ("mgg.partitioning.methods",),
    "mgg.distributed.halo": ("mgg.distributed.backends.halo",),
    "mgg.distributed.allgather": ("mgg.distributed.backends.allgather",),
    "mgg.runtime.model": ("mgg.tuning.limits",),
    "mgg.runtime.cache": ("mgg.tuning.config_cache",),
    "mgg.runtime": ("mgg.tuning",),  # the tuner's package: "runtime" is NVSHMEM's (ARCHITECTURE.md's glossary)
    "mgg.runtime.cli": ("mgg.tuning.cli",),
    "mgg.runtime.config_cache": ("mgg.tuning.config_cache",),
    "mgg.runtime.coordination": ("mgg.tuning.coordination",),
    "mgg.runtime.cost": ("mgg.tuning.cost",),
    "mgg.runtime.kernel_model": ("mgg.tuning.kernel_model",),
    "mgg.runtime.limits": ("mgg.tuning.limits",),
    "mgg.runtime.online": ("mgg.tuning.online",),
    "mgg.runtime.remote_reads": ("mgg.tuning.remote_reads",),
    "mgg.runtime.report": ("mgg.tuning.report",),
    "mgg.runtime.search": ("mgg.tuning.search",),
    "mgg.runtime.targets": ("mgg.tuning.targets",),
    "mgg.runtime.timing": ("mgg.tuning.timing",),
    "mgg.nn.graph_cache": ("mgg.nn.graph_input",),
    "mgg.nn.plans": ("mgg.nn.graph_input",),
    "mgg.nn.conv": ("mgg.nn.gcn_conv", "mgg.nn.gin_conv", "mgg.nn.aggregating", "mgg.nn.linear"),
    "mgg.partitioning.ranges": ("mgg.plan.ranges",),
    "mgg.partitioning.stats": ("mgg.plan.stats",),
    "mgg.steps": (),  # its functions became RankPlan's methods (STEPS) and its names went to NAMES' homes
    "mgg.embedding_plan": ("mgg.embedding.plan", "mgg.embedding.rows"),
    "mgg.nn.embedding": ("mgg.embedding.bags", "mgg.embedding.rows"),
    "mgg.distributed.embedding": ("mgg.embedding.exchange", "mgg.embedding.rows"),
    "mgg.distributed.embedding_nvshmem": ("mgg.embedding.nvshmem",),
    "mgg.dlrm": ("mgg.embedding.dlrm",),
    "mgg.train": ("mgg.training.loop",),
    "mgg.distributed.trainer": ("mgg.training.torchrun", "mgg.distributed.comm"),
}
# names that also changed: old module, old name -> new name
RENAMED = {
    ("mgg.io", "_lines"): "text_lines",
    ("mgg.datasets", "_lines"): "text_lines",
    ("mgg.partition", "_from_parts"): "from_parts",
    ("mgg.partition", "_compute"): "compute",
    ("mgg.nn.conv", "_Aggregating"): "Aggregating",
}


# names that moved out of a module that stays (or became a method): old module, name -> new module, name
NAMES = {
    ("mgg.ops", "aggregate"): ("mgg.functional", "aggregate"),  # mgg.ops.aggregate is now the op's wrapper
    ("mgg.ops", "attend"): ("mgg.functional", "attend"),  # likewise
    ("mgg.ops", "make_plan"): ("mgg.functional", "make_plan"),
    ("mgg.ops", "aggregate_edges"): ("mgg.functional", "aggregate_edges"),
    ("mgg.ops", "attention_graph"): ("mgg.functional", "attention_graph"),
    ("mgg.ops", "REDUCTIONS"): ("mgg.functional", "REDUCTIONS"),
    ("mgg.steps", "FETCH"): ("mgg.ops", "FETCH"),
    ("mgg.steps", "EXTREMES"): ("mgg.ops", "EXTREMES"),
    ("mgg.steps", "check_extreme"): ("mgg.ops", "check_extreme"),
    ("mgg.steps", "attention_table"): ("mgg.ops", "attention_table"),
    ("mgg.steps", "_acc_dtype"): ("mgg.ops", "acc_dtype"),
    ("mgg.steps", "REMOTE_READS"): ("mgg.plan", "REMOTE_READS"),
    ("mgg.steps", "check_remote_reads"): ("mgg.plan", "check_remote_reads"),
    ("mgg.partitioning", "split_ranges"): ("mgg.plan", "split_ranges"),
    ("mgg.partitioning", "partition_stats"): ("mgg.plan", "partition_stats"),
    ("mgg.nn", "ShardedEmbeddingBag"): ("mgg.embedding", "ShardedEmbeddingBag"),
    ("mgg.nn", "ShardedEmbeddingBagCollection"): ("mgg.embedding", "ShardedEmbeddingBagCollection"),
    ("mgg.plan", "RankPartition"): ("mgg.plan", "RankShard"),
    ("mgg.plan", "GatheredPartition"): ("mgg.plan", "GatheredShard"),
}


def _check_fetch(fetch: str) -> None:
    importlib.import_module("mgg.ops").fetch_code(fetch)


# mgg.steps' functions of a rank's step, now RankPlan's methods: name -> (the method, an adapter taking
# the old arguments, the plan among them)
STEPS = {
    "run_step": (
        "RankPlan.aggregate",
        lambda x, x_remote, plan, deterministic=False: plan.aggregate(x, x_remote, deterministic),
    ),
    "run_extreme": (
        "RankPlan.aggregate_extreme",
        lambda x, x_remote, plan, reduce: plan.aggregate_extreme(x, x_remote, reduce),
    ),
    "run_peers": (
        "RankPlan.aggregate_peers",
        lambda x, peers, my_pe, plan, fetch="direct", deterministic=False: plan.aggregate_peers(
            x, peers, my_pe, fetch, deterministic
        ),
    ),
    "gather_halo": (
        "RankPlan.gather_halo",
        lambda x, peers, my_pe, plan, fetch="direct", deterministic=False: plan.gather_halo(
            x, peers, my_pe, fetch, deterministic
        ),
    ),
    "run_peers_once": (
        "RankPlan.aggregate_peers_once",
        lambda x, peers, my_pe, plan, fetch="direct", deterministic=False: plan.aggregate_peers_once(
            x, peers, my_pe, fetch, deterministic
        ),
    ),
    "run_attend": (
        "RankPlan.attend",
        lambda table, table_remote, a_dst, plan, heads, negative_slope, dropout, seed, ids=None, row_offset=0: (
            plan.attend(table, table_remote, a_dst, heads, negative_slope, dropout, seed, ids, row_offset)
        ),
    ),
    "check_fetch": ("mgg.ops.fetch_code", _check_fetch),
}


def moved_from(old: str, name: str):
    """What mgg 0.1 had as `old`.`name`, from its new home (NAMES, STEPS; mgg.ops gave mgg.steps'
    names too), with a warning; AttributeError for a name that never was."""
    if name.startswith("__"):
        raise AttributeError(f"module {old!r} has no attribute {name!r}")
    steps = STEPS.get(name) if old in ("mgg.steps", "mgg.ops") else None
    if steps is not None:
        method, adapter = steps
        warnings.warn(
            f"{old}.{name} moved to mgg.plan.{method}; the old path goes in the next release",
            DeprecationWarning,
            stacklevel=3,
        )
        return adapter
    home = NAMES.get((old, name)) or (NAMES.get(("mgg.steps", name)) if old == "mgg.ops" else None)
    if home is not None:
        warnings.warn(
            f"{old}.{name} moved to {home[0]}.{home[1]}; the old path goes in the next release",
            DeprecationWarning,
            stacklevel=3,
        )
        return getattr(importlib.import_module(home[0]), home[1])
    raise AttributeError(f"module {old!r} has no attribute {name!r}")


def _alias(old: str, homes: tuple[str, ...]) -> types.ModuleType:
    module = types.ModuleType(old, f"Deprecated: moved to {', '.join(homes)}; this alias goes in the next release.")

    def __getattr__(name: str):
        if not name.startswith("__"):
            new = RENAMED.get((old, name), name)
            for home in homes:
                found = importlib.import_module(home)
                if hasattr(found, new):
                    warnings.warn(
                        f"{old}.{name} moved to {home}.{new}; the old path goes in the next release",
                        DeprecationWarning,
                        stacklevel=2,
                    )
                    return getattr(found, new)
        return moved_from(old, name)

    module.__getattr__ = __getattr__
    return module


def install() -> None:
    """Puts the alias modules in sys.modules (before mgg binds `mgg.partition` to the function, so
    that a later `import mgg.partition` finds the alias and leaves the function in place)."""
    for old, homes in MOVED.items():
        sys.modules.setdefault(old, _alias(old, homes))


def module_attribute(name: str):
    """What `mgg.<name>` gives for an old module name (mgg's own __getattr__), with a warning."""
    old = f"mgg.{name}"
    if old not in MOVED:
        raise AttributeError(f"module 'mgg' has no attribute {name!r}")
    warnings.warn(
        f"{old} moved to {MOVED[old][0]}; the old path goes in the next release", DeprecationWarning, stacklevel=3
    )
    return sys.modules[old]

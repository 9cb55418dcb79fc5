"""The import paths of 0.1.0 that the package layout moved still work for one release, and each
name taken through one warns with its new home."""

import importlib
import subprocess
import sys

import pytest
import torch

import mgg
from mgg import data, functional, ops, partitioning
from mgg import plan as plan_package
from mgg.data import stats, synthetic
from mgg.partitioning import methods
from mgg.plan import ranges as plan_ranges
from mgg.plan import stats as plan_stats


@pytest.mark.parametrize(
    "old, name, new",
    [
        ("mgg.io", "load_graph", data.load_graph),
        ("mgg.io", "NodeDataset", data.NodeDataset),
        ("mgg.datasets", "resolve", data.resolve),
        ("mgg.datasets", "bundled_planetoid_dir", data.bundled_planetoid_dir),
        ("mgg.synthetic", "rmat", synthetic.rmat),
        ("mgg.synthetic", "degree_stats", stats.degree_stats),
        ("mgg.partition", "METHODS", partitioning.METHODS),
        ("mgg.partition", "Partition", partitioning.Partition),
        ("mgg.partition_cache", "PartitionCache", partitioning.PartitionCache),
        ("mgg.partition_stats", "partition_stats", plan_stats.partition_stats),
        ("mgg.partitioning", "split_ranges", plan_ranges.split_ranges),
        ("mgg.partitioning.ranges", "split_ranges", plan_ranges.split_ranges),
        ("mgg.partitioning.stats", "partition_stats", plan_stats.partition_stats),
        ("mgg.ops", "make_plan", functional.make_plan),
        ("mgg.ops", "aggregate_edges", functional.aggregate_edges),
        ("mgg.ops", "attention_graph", functional.attention_graph),
        ("mgg.steps", "FETCH", ops.FETCH),
        ("mgg.steps", "EXTREMES", ops.EXTREMES),
        ("mgg.steps", "attention_table", ops.attention_table),
        ("mgg.steps", "REMOTE_READS", plan_package.REMOTE_READS),
        ("mgg.partitioners", "metis_parts", methods.metis_parts),
    ],
)
def test_old_paths_give_the_same_objects_with_a_warning(old, name, new):
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=f"{old}.{name} moved to"):
        assert getattr(module, name) is new


@pytest.mark.parametrize(
    "old, name, new_module, new_name",
    [
        ("mgg.embedding_plan", "BatchStep", "mgg.embedding.plan", "BatchStep"),
        ("mgg.nn.embedding", "ShardedEmbeddingBag", "mgg.embedding.bags", "ShardedEmbeddingBag"),
        ("mgg.nn", "ShardedEmbeddingBagCollection", "mgg.embedding", "ShardedEmbeddingBagCollection"),
        ("mgg.dlrm", "DLRM", "mgg.embedding.dlrm", "DLRM"),
        ("mgg.train", "train", "mgg.training.loop", "train"),
        ("mgg.nn.plans", "cached_plan", "mgg.nn.graph_input", "cached_plan"),
        ("mgg.nn.graph_cache", "cached_plan", "mgg.nn.graph_input", "cached_plan"),
        ("mgg.nn.conv", "GCNConv", "mgg.nn.gcn_conv", "GCNConv"),
        ("mgg.nn.conv", "GINConv", "mgg.nn.gin_conv", "GINConv"),
        ("mgg.nn.conv", "split_input", "mgg.nn.aggregating", "split_input"),
        ("mgg.nn.conv", "_Aggregating", "mgg.nn.aggregating", "Aggregating"),
        ("mgg.nn.conv", "linear", "mgg.nn.linear", "linear"),
        ("mgg.runtime", "MggSearch", "mgg.tuning", "MggSearch"),
        ("mgg.runtime.search", "MggSearch", "mgg.tuning.search", "MggSearch"),
        ("mgg.runtime.kernel_model", "Gpu", "mgg.tuning.kernel_model", "Gpu"),
    ],
)
def test_moved_wings_give_the_same_objects_with_a_warning(old, name, new_module, new_name):
    new = getattr(importlib.import_module(new_module), new_name)
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=f"{old}.{name} moved to"):
        assert getattr(module, name) is new


def test_partition_stays_the_function():
    import mgg.partition  # noqa: F401  (the alias module: it must not replace the function)

    assert callable(mgg.partition) and mgg.partition is partitioning.partition
    with pytest.warns(DeprecationWarning, match="mgg.io moved to"):
        assert mgg.io.__name__ == "mgg.io"


def test_importing_mgg_warns_nothing():
    r = subprocess.run(
        [sys.executable, "-W", "error", "-c", "import mgg, mgg.nn, mgg.distributed, mgg.tuning"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr


def test_renamed_modules_and_names():
    from mgg import plan as plan_module
    from mgg.distributed.backends import halo
    from mgg.tuning import limits

    for old, name, new in (
        ("mgg.runtime.model", "grid", limits.grid),
        ("mgg.distributed.halo", "HaloExchange", halo.HaloExchange),
    ):
        with pytest.warns(DeprecationWarning, match=f"{old}.{name} moved to"):
            assert getattr(__import__(old, fromlist=[name]), name) is new
    with pytest.warns(DeprecationWarning, match="RankShard"):
        assert plan_module.RankPartition is plan_module.RankShard
    p = mgg.Plan(mgg.Graph.from_edges([0, 1], [1, 0], 2), 2)
    with pytest.warns(DeprecationWarning, match="Plan.shard"):
        assert p.partition(1) is p.shard(1)
    with pytest.warns(DeprecationWarning, match="RankPlan.shard"):
        assert p.rank_plan(1).partition is p.shard(1)


def test_the_steps_of_a_rank_are_its_plans_methods_now():
    """mgg.steps' functions (also taken through mgg.ops) run the RankPlan's methods, with a warning;
    mgg.ops.aggregate and attend of mgg 0.1, called the old way, run mgg.functional's."""
    g = mgg.Graph.from_edges([0, 1, 2, 2], [1, 0, 0, 1], 3)
    plan = mgg.Plan(g, 2)
    x = torch.arange(12.0).reshape(3, 4)
    own = [x[: int(plan.bounds[1])], x[int(plan.bounds[1]) :]]
    rp = plan.rank_plan(0)
    for old in ("mgg.steps", "mgg.ops"):
        module = __import__(old, fromlist=["run_peers"])
        with pytest.warns(DeprecationWarning, match=f"{old}.run_peers moved to mgg.plan.RankPlan.aggregate_peers"):
            got = module.run_peers(own[0], own, 0, rp, "direct")
        assert torch.equal(got, rp.aggregate_peers(own[0], own, 0, "direct"))
    steps = __import__("mgg.steps", fromlist=["run_step"])
    with pytest.warns(DeprecationWarning, match="mgg.steps.run_step moved to mgg.plan.RankPlan.aggregate"):
        assert torch.equal(steps.run_step(x, x.new_empty((0, 4)), mgg.Plan(g).rank_plan(0)), mgg.aggregate(x, g))
    with pytest.warns(DeprecationWarning, match="mgg.ops.aggregate moved to mgg.functional.aggregate"):
        assert torch.equal(ops.aggregate(x, g), mgg.aggregate(x, g))
    with pytest.raises(AttributeError):
        ops.no_such_name  # noqa: B018

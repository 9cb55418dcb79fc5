"""The import paths of 0.1.0 that the package layout moved still work for one release, and each
name taken through one warns with its new home."""

import subprocess
import sys

import pytest

import mgg
from mgg import data, partitioning
from mgg.data import stats, synthetic
from mgg.partitioning import methods


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
        ("mgg.partition_stats", "partition_stats", partitioning.partition_stats),
        ("mgg.partitioners", "metis_parts", methods.metis_parts),
    ],
)
def test_old_paths_give_the_same_objects_with_a_warning(old, name, new):
    module = __import__(old, fromlist=[name])
    with pytest.warns(DeprecationWarning, match=f"{old}.{name} moved to"):
        assert getattr(module, name) is new


def test_partition_stays_the_function():
    import mgg.partition  # noqa: F401  (the alias module: it must not replace the function)

    assert callable(mgg.partition) and mgg.partition is partitioning.partition
    with pytest.warns(DeprecationWarning, match="mgg.io moved to"):
        assert mgg.io.__name__ == "mgg.io"


def test_importing_mgg_warns_nothing():
    r = subprocess.run(
        [sys.executable, "-W", "error", "-c", "import mgg, mgg.nn, mgg.distributed, mgg.runtime"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr


def test_renamed_modules_and_names():
    from mgg import plan as plan_module
    from mgg.distributed.backends import halo
    from mgg.runtime import limits

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

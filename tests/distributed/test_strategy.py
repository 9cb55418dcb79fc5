"""One model for every strategy (mgg.distributed.strategy, mgg train --backend auto): the ranking's
shape; the bytes the model gives each rank equal those counted at the collectives of a training
step, on CPU processes, for every strategy it ranks (bench/workers/strategy_bytes.py); `--backend auto`
says its choice and the runner-up in one line, and refuses in one line where the job spans machines
without the network's rate; python -m bench strategies runs."""

import csv
import json
import os
import subprocess
import sys

import pytest

from mgg import MggError
from mgg.distributed.strategy import Strategy, aggregation_widths, rank_strategies
from mgg.runtime.cluster_model import Cluster
from mgg.testing import random_graph
from tests.distributed.test_distributed import ROOT, TIMEOUT, worker_env

WORKER = os.path.join(ROOT, "bench", "workers", "strategy_bytes.py")


def test_the_ranking_holds_every_strategy_fastest_first():
    g = random_graph(600, 8000, seed=3, skew=0.6)
    ranked = rank_strategies(g, Cluster(2, 4, 450.0, 50.0), [32, 16, 5], "gcn", "range")
    names = [str(p.strategy) for p in ranked]
    assert "halo" in names and "node-halo" in names
    for c in (2, 4, 8):
        assert f"sa-1.5d c={c}" in names and f"cagnet-1.5d c={c}" in names
    assert any(n.startswith("grid ") for n in names)
    mids = [p.mid_s for p in ranked]
    assert mids == sorted(mids) and all(0 < p.low_s <= p.high_s for p in ranked)
    # one machine: no node-level halo; GAT's layers are not ranked on the grid or 1.5D
    one = rank_strategies(g, Cluster(1, 4, 450.0, 50.0), [32, 16, 5], "gcn", "range")
    assert "node-halo" not in [str(p.strategy) for p in one]
    with pytest.raises(MggError, match="positive rates"):
        rank_strategies(g, Cluster(1, 4, 0.0, 50.0), [32, 16, 5])


def test_strategy_names_and_options():
    assert str(Strategy("sa-1.5d", 4)) == "sa-1.5d c=4" and Strategy("sa-1.5d", 4).train_args()[-2:] == [
        "--replication",
        "4",
    ]
    assert Strategy("grid", grid="2x2x1").train_args() == ["--backend", "grid", "--grid", "2x2x1"]
    assert aggregation_widths("gcn", [10, 6, 3]) == [6, 3]
    assert aggregation_widths("sage", [10, 6, 3]) == [6, 3] and aggregation_widths("sage", [4, 6, 3]) == [4, 3]
    assert aggregation_widths("gin", [10, 6, 3]) == [10, 6]


def test_the_model_counts_what_the_runs_count(tmp_path):
    """Every strategy ranked for a GCN on Cora over 2 x 2 CPU processes: each rank's bytes (the grid's
    busiest rank's per axis) counted at the collectives of a training step equal the model's."""
    out = tmp_path / "bytes.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=4", "--standalone", WORKER, str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=worker_env())
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads(out.read_text())
    strategies = {row["strategy"] for row in rows}
    assert {"halo", "node-halo", "sa-1.5d c=2", "cagnet-1.5d c=4"} <= strategies
    assert any(s.startswith("grid") for s in strategies)
    for row in rows:
        if isinstance(row["model"], dict):
            for axis, b in row["model"].items():
                assert row["counted"][axis] == pytest.approx(b), row
        else:
            assert row["counted"] == pytest.approx(row["model"]), row


def test_auto_says_its_choice_and_trains(tmp_path):
    train = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=4", "--standalone", "-m", "mgg", "train"]
    args = ["--epochs", "2", "--seeds", "1", "--backend", "auto", "--quiet"]
    r = subprocess.run(train + args, capture_output=True, text=True, timeout=TIMEOUT, env=worker_env())
    assert r.returncode == 0, r.stderr[-3000:]
    first = [ln for ln in r.stdout.splitlines() if ln.startswith("mgg train: backend auto: ")]
    assert len(first) == 1 and "runner-up" in first[0] and "1 machine(s) x 4 GPUs" in first[0]
    assert "test accuracy" in r.stdout


def test_auto_without_the_network_rate_across_machines_is_one_line(monkeypatch):
    from mgg.training.auto import cluster_of_job

    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    with pytest.raises(MggError, match="spans 2 machines; give the network's rate") as e:
        cluster_of_job(450.0, None)
    assert "\n" not in str(e.value)
    assert cluster_of_job(450.0, 50.0).nodes == 2


def test_bench_strategies_smoke(tmp_path):
    from bench import strategies

    assert strategies.main(["--smoke", "--out", str(tmp_path)]) == 0
    (ranking,) = [p for p in tmp_path.glob("strategies-*.csv") if "-onefive" not in p.name and "-refine" not in p.name]
    rows = list(csv.DictReader(open(ranking)))
    assert rows and [int(r["rank"]) for r in rows] == list(range(1, len(rows) + 1))
    onefive = list(csv.DictReader(open(str(ranking).replace(".csv", "-onefive.csv"))))
    assert {r["algorithm"] for r in onefive} >= {"sa-1.5d", "cagnet-1.5d"}
    refine = list(csv.DictReader(open(str(ranking).replace(".csv", "-refine.csv"))))
    refined = [r for r in refine if r["method"].endswith("+vb")]
    assert refined
    for r in refined:  # the floor: the lowest total of its graph and P, over P, against its base's max send
        same = [o for o in refine if (o["graph"], o["P"]) == (r["graph"], r["P"])]
        (base,) = [o for o in same if o["method"] == r["method"][: -len("+vb")]]
        lowest = min(int(o["total_rows"]) for o in same)
        assert float(r["floor_vs_base"]) == round(lowest / int(r["P"]) / int(base["max_send_rows"]), 4)
        assert float(r["floor_vs_base"]) <= float(r["max_send_vs_base"])
    assert list(tmp_path.glob("strategies-*.md")) and list(tmp_path.glob("strategies-*.png"))

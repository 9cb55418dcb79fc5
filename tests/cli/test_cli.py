"""The mgg command: each subcommand runs, bad arguments give one line and a non-zero status."""

import json
import math
import os
import re
import subprocess
import sys

import pytest

CORA_CLASSES = 7


def mgg(*args, check=True, env=None):
    r = subprocess.run(
        [sys.executable, "-m", "mgg", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=None if env is None else dict(os.environ, **env),
    )
    if check:
        assert r.returncode == 0, r.stderr
    return r


def train_accuracy(stdout: str) -> float:
    """The mean test accuracy (%) that `mgg train` printed last (`NAME MODEL: test accuracy M ± S%
    over N seeds`), after checking that each seed's line printed a test and a validation accuracy
    that are percentages (a NaN accuracy, or the -100% of a best epoch never found, fails)."""
    seeds = re.findall(r"^seed \d+: test (\S+)% \(val (\S+)% at epoch", stdout, re.M)
    m = re.findall(r": test accuracy (\S+) ± (\S+)% over (\d+) seeds$", stdout, re.M)
    assert seeds and m and len(seeds) == int(m[-1][2]), stdout
    accs = [float(a) for pair in seeds for a in pair] + [float(m[-1][0])]
    assert all(math.isfinite(a) and 0 <= a <= 100 for a in accs), stdout  # NaN fails here
    return accs[-1]


def assert_above_chance(stdout: str, num_classes: int) -> None:
    """`mgg train` learnt: its mean test accuracy is above chance, 1 / num_classes."""
    acc = train_accuracy(stdout)
    assert acc > 100 / num_classes, f"test accuracy {acc}% is not above chance ({100 / num_classes:.1f}%)\n{stdout}"


def test_info():
    facts = json.loads(mgg("info", "--json").stdout)
    assert facts["torch"] and "extension CUDA kernels" in facts
    assert facts["CPU kernels"].split(",")[0] in ("default", "avx2", "avx512")


@pytest.mark.full  # over 15 s on 2 cores: make test-full runs it
def test_partition_json_and_table(tmp_path):
    out = json.loads(mgg("partition", "rmat:2000:30000", "--ranks", "3", "--json").stdout)
    assert [r["rank"] for r in out["ranks"]] == [0, 1, 2]
    assert sum(r["edges"] for r in out["ranks"]) == 30000
    assert all(r["local_edges"] + r["remote_edges"] == r["edges"] for r in out["ranks"])
    assert "remote_fraction" in mgg("partition", "cora", "--ranks", "2").stdout


def _installed(package):
    try:
        __import__(package)
        return True
    except ImportError:
        return False


@pytest.mark.full  # make test-full (tests/conftest.py)
def test_partition_methods_compared(tmp_path):
    """--method all: one row per method (+vb: those refined); metis and hypergraph (where installed) cut Cora's remote
    edges far below the range split; the second run reads them from the cache."""
    env = {"MGG_PARTITION_CACHE": str(tmp_path)}
    out = json.loads(mgg("partition", "cora", "--ranks", "4", "--method", "all", "--json", env=env).stdout)
    have = [m for m, pkg in (("metis", "pymetis"), ("hypergraph", "mtkahypar")) if _installed(pkg)]
    assert [m["method"] for m in out["methods"]] == ["range", "random", *have, *(f"{m}+vb" for m in have)]
    assert (out["nodes"], out["edges"], out["num_ranks"]) == (2708, 10556, 4)
    for m in out["methods"]:
        t = m["total"]
        assert t["edges"] == 10556 and t["local_edges"] + t["remote_edges"] == 10556
        assert t["remote_edges"] == sum(r["remote_edges"] for r in m["ranks"])
        assert t["halo_rows"] == sum(r["halo_rows"] for r in m["ranks"]) == sum(r["send_rows"] for r in m["ranks"])
        assert t["max_send_peer"] == max(r["max_send_peer"] for r in m["ranks"])
    by = {m["method"]: m["total"] for m in out["methods"]}
    assert by["range"]["remote_fraction"] > 0.6
    for m in have:
        assert by[m]["remote_fraction"] < 0.15 and by[m]["edge_imbalance"] <= 1.10 and not by[m]["cached"]
    text = mgg("partition", "cora", "--ranks", "4", "--method", "all", env=env).stdout
    assert "halo_rows" in text and "max_send_peer" in text and all(m in text for m in by)
    if have:
        text = mgg("partition", "cora", "--ranks", "4", "--method", have[0], env=env).stdout
        assert f"method {have[0]}" in text and "from the cache" in text and "total" in text


def test_partition_one_rank_says_there_is_nothing_to_do():
    r = mgg("partition", "cora", "--ranks", "1", "--method", "hypergraph", "--json")
    assert "nothing to partition" in r.stderr
    assert json.loads(r.stdout)["total"]["remote_edges"] == 0


@pytest.mark.full  # make test-full (tests/conftest.py)
def test_partition_missing_package_is_one_line(tmp_path):
    (tmp_path / "pymetis.py").write_text("raise ImportError('simulated: not installed')\n")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env = {"PYTHONPATH": path, "MGG_PARTITION_CACHE": str(tmp_path / "cache")}
    r = mgg("partition", "cora", "--ranks", "2", "--method", "metis", check=False, env=env)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "mgg partition: error: partition method 'metis' needs the pymetis package: pip install mgg[partition]"
    ]
    r = mgg("partition", "cora", "--ranks", "2", "--method", "all", "--json", env=env)
    assert "skipping metis" in r.stderr and "metis" not in [m["method"] for m in json.loads(r.stdout)["methods"]]


@pytest.mark.parametrize(
    "args, msg",
    [
        (["train", "--partition", "metis"], "--partition applies to distributed training (torchrun"),
        (["partition", "sbm:100:80:4:0.5", "--ranks", "2"], "1 <= BLOCKS <= NODES / 2"),
        (["partition", "missing.txt", "--ranks", "2"], "no such file"),
        (["partition", "rmat:10:50", "--ranks", "20"], "exceed the number of nodes"),
        (["train", "--dataset", "pubmed"], "pubmed: no such file, not a dataset in"),
        (["train", "--dataset", "rmat:100:400"], "rmat:100:400: a graph without node features, labels or split"),
        (["train", "--ps", "64"], "ps must be an integer in [1, 32]"),
    ],
)
def test_errors_are_one_line(args, msg):
    r = mgg(*args, check=False)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and msg in lines[0], r.stderr


def test_train_short_run():
    r = mgg("train", "--epochs", "5", "--seeds", "2", "--quiet")
    assert r.stdout.count("seed ") == 2
    assert_above_chance(r.stdout, CORA_CLASSES)


@pytest.mark.full  # make test-full (tests/conftest.py)
def test_train_on_every_dataset_kind(tmp_path):
    """One resolution for every kind: an OGB directory by name (its split as given), PyG's
    Reddit raw files, a Planetoid set in PyG's layout, an .npz dataset. Their labels are random,
    so nothing can be learnt: the accuracy is only checked to be a finite percentage."""
    import numpy as np

    from tests.data.test_io import write_ogb, write_planetoid, write_reddit_raw

    write_ogb(tmp_path, "ogbn-arxiv")
    write_reddit_raw(tmp_path / "Reddit" / "raw")
    (tmp_path / "CiteSeer" / "raw").mkdir(parents=True)
    write_planetoid(tmp_path / "CiteSeer" / "raw", "citeseer", [542, 540, 541])
    np.savez(
        tmp_path / "toy.npz",
        edge_index=np.array([[0, 1, 2], [1, 2, 0]]),
        x=np.eye(3),
        y=np.array([0, 1, 0]),
        train_mask=np.array([0, 1]),
        val_mask=np.array([2]),
        test_mask=np.array([2]),
    )
    for name in ("ogbn-arxiv", "reddit", "citeseer", "toy.npz", str(tmp_path / "ogbn_arxiv")):
        r = mgg("train", "--data-dir", str(tmp_path), "--dataset", name, "--epochs", "2", "--seeds", "1", "--quiet")
        train_accuracy(r.stdout)


def test_multilabel_training_is_refused(tmp_path):
    from tests.data.test_io import write_ogb

    write_ogb(tmp_path, "ogbn-proteins")
    r = mgg("train", "--data-dir", str(tmp_path), "--dataset", "ogbn-proteins", check=False)
    assert r.returncode == 2 and "112 labels per node (multi-label)" in r.stderr


def test_info_graph_prints_real_statistics():
    r = mgg("info", "rmat-reddit:scale=0.002")
    assert "in-degree Gini" in r.stdout and "rmat-reddit:scale=0.002 (synthetic)" in r.stdout
    out = json.loads(mgg("info", "cora", "--json").stdout)
    assert (out["nodes"], out["edges"], out["symmetric"], out["self_loops"]) == (2708, 10556, True, 0)


def test_info_full_preset_shows_published_column(monkeypatch):
    """The published statistics come with a full-size preset; no graph of that size is made here."""
    from mgg import info
    from mgg.data import synthetic

    monkeypatch.setattr(synthetic, "rmat_undirected", lambda n, e, *a, **k: synthetic.rmat(50, 200))
    facts = info.graph_facts("rmat-products")
    text = info.print_graph_facts(facts)
    assert facts["real"]["avg_degree"] == pytest.approx(50.52, abs=0.01)
    assert "ogbn-products" in text and "unknown (not published)" in text


def test_old_preset_name_notes_on_stderr():
    r = mgg("partition", "products:scale=0.001", "--ranks", "2")
    assert "'products' is rmat-products, a synthetic R-MAT stand-in" in r.stderr


def test_huge_ids_are_one_line_and_relabel_compacts_them(tmp_path):
    f = tmp_path / "ids.txt"
    f.write_text("0 1\n1 3000000000\n")
    r = mgg("partition", str(f), "--ranks", "2", check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "ids.txt:2: 3,000,000,001 nodes, more than the 2,147,483,647 a plan can index" in r.stderr
    out = json.loads(mgg("partition", str(f), "--ranks", "2", "--relabel", "--json").stdout)
    assert (out["nodes"], out["edges"]) == (3, 2)

"""CI smoke test of the harness: every suite that runs without a GPU, on tiny graphs."""
import csv
import subprocess
import sys

from bench.report import COLUMNS


def test_smoke_all_suites(tmp_path):
    r = subprocess.run([sys.executable, "-m", "bench", "all", "--smoke", "--quiet", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    (csv_path,) = tmp_path.glob("*.csv")
    rows = list(csv.DictReader(open(csv_path)))
    assert list(rows[0].keys()) == COLUMNS
    suites = {row["suite"] for row in rows}
    assert suites == {"kernel", "ablation", "scaling", "dist", "e2e", "tune", "load"}
    kernel = [row for row in rows if row["suite"] == "kernel"]
    assert {row["impl"] for row in kernel} >= {"mgg", "torch.sparse", "pyg"}
    assert {row["pass"] for row in kernel} == {"fwd", "bwd"}
    for row in rows:
        assert float(row["p10_ms"]) <= float(row["median_ms"]) <= float(row["p90_ms"])
        assert row["device"] and row["torch"] and row["date"]
    assert {int(row["pes"]) for row in rows if row["suite"] == "scaling"} == {1, 2}
    assert {row["impl"] for row in rows if row["suite"] == "scaling"} == {"mgg-peers-inproc", "mgg-halo-inproc"}
    dist = [row for row in rows if row["suite"] == "dist"]
    assert {(row["impl"], int(row["pes"])) for row in dist} >= {("mgg-halo", 1), ("mgg-halo", 2)}
    assert all(row["rank_edges"].count(";") == int(row["pes"]) - 1 for row in dist)
    load = [row for row in rows if row["suite"] == "load"]
    assert {row["graph"] for row in load} == {"text", "text.gz", "mtx", "npz-edge_index", "npz-edge_index-by-dst",
                                             "npz-scipy-csr"}
    for row in load:  # every format gives the same graph; the figures are filled in
        assert (int(row["nodes"]), int(row["edges"])) == (10_000, 100_000)
        assert float(row["edges_per_s"]) > 0 and float(row["peak_mem_bytes_per_edge"]) > 0
    assert len(list(tmp_path.glob("*.png"))) == 7
    md = next(tmp_path.glob("*.md")).read_text()
    assert "speedup of mgg over each peer" in md and "tuner against the exhaustive grid" in md
    assert "## load: graph files to an mgg Graph" in md


def test_rejects_too_few_repetitions(tmp_path):
    r = subprocess.run([sys.executable, "-m", "bench", "kernel", "--reps", "5", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "at least 20" in r.stderr


def test_mgg_bench_alias(tmp_path):
    r = subprocess.run([sys.executable, "-m", "mgg", "bench", "scaling", "--smoke", "--quiet", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    assert len(list(tmp_path.glob("scaling-*.csv"))) == 1


def test_projection_from_scaling_rows(tmp_path):
    """bench.project fits the in-process scaling runs and brackets an 8-GPU time."""
    r = subprocess.run([sys.executable, "-m", "bench", "scaling", "--graphs", "rmat:3000:40000", "--dims", "16",
                        "--pes", "1", "2", "3", "4", "--quiet", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (csv_path,) = tmp_path.glob("*.csv")
    from bench.project import project
    rows = list(csv.DictReader(open(csv_path)))
    p = project(rows, "rmat:3000:40000", 16, gpus=8, nvlink_gbps=450, eta=0.7)
    assert p["measured_pes"] == [1, 2, 3, 4]
    assert 0 < p["overlap_ms"] <= p["no_overlap_ms"]
    assert 0.8 < p["remote_fraction"] < 1.0  # R-MAT over 8 contiguous ranges: mostly remote
    out = subprocess.run([sys.executable, "-m", "bench.project", str(csv_path), "--graph", "rmat:3000:40000",
                          "--dim", "16"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "8 GPUs, full overlap" in out.stdout, out.stderr

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
    assert suites == {"kernel", "ablation", "scaling", "dist", "e2e", "tune"}
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
    assert len(list(tmp_path.glob("*.png"))) == 6
    md = next(tmp_path.glob("*.md")).read_text()
    assert "speedup of mgg over each peer" in md and "tuner against the exhaustive grid" in md


def test_rejects_too_few_repetitions(tmp_path):
    r = subprocess.run([sys.executable, "-m", "bench", "kernel", "--reps", "5", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "at least 20" in r.stderr


def test_mgg_bench_alias(tmp_path):
    r = subprocess.run([sys.executable, "-m", "mgg", "bench", "scaling", "--smoke", "--quiet", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    assert len(list(tmp_path.glob("scaling-*.csv"))) == 1

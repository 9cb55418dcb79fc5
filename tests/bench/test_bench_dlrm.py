"""The dlrm bench suite in its CI size: both implementations measured on 2 ranks for both pooling
factors (checked before timing), the per-batch plan's build time, bytes moved, the plot."""

import csv
import subprocess
import sys

import pytest

from bench.report import COLUMNS


@pytest.mark.full  # make test-full (tests/conftest.py)
def test_dlrm_suite_smoke(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "bench", "dlrm", "--smoke", "--quiet", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    (csv_path,) = tmp_path.glob("*.csv")
    rows = list(csv.DictReader(open(csv_path)))
    assert list(rows[0].keys()) == COLUMNS
    got = {(row["impl"], row["pass"], row["case"].split("/")[2], int(row["pes"])) for row in rows}
    assert got == {
        (impl, p, pool, 2)
        for pool in ("pool1", "pool8")
        for impl, p in (
            ("mgg-halo", "fwd"),
            ("mgg-halo", "fwd+bwd"),
            ("alltoall-rw", "fwd"),
            ("alltoall-rw", "fwd+bwd"),
            ("mgg-plan", "plan"),
        )
    }
    for row in rows:
        assert row["suite"] == "dlrm" and int(row["edges"]) > 0
        assert 0 < float(row["p10_ms"]) <= float(row["median_ms"]) <= float(row["p90_ms"])
        if row["impl"] != "mgg-plan":
            assert float(row["traffic_mb"]) > 0 and row["rank_traffic_mb"].count(";") == 1
    one_hot = {row["impl"]: float(row["traffic_mb"]) for row in rows if row["pass"] == "fwd" and "pool1" in row["case"]}
    assert one_hot["mgg-halo"] < one_hot["alltoall-rw"]  # distinct rows once vs indices + every bag back
    assert list(tmp_path.glob("*-dlrm.png"))

"""The mgg command: each subcommand runs, bad arguments give one line and a non-zero status."""
import json
import subprocess
import sys

import pytest


def mgg(*args, check=True):
    r = subprocess.run([sys.executable, "-m", "mgg", *args], capture_output=True, text=True, timeout=600)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def test_info():
    facts = json.loads(mgg("info", "--json").stdout)
    assert facts["torch"] and "extension CUDA kernels" in facts


def test_partition_json_and_table(tmp_path):
    out = json.loads(mgg("partition", "rmat:2000:30000", "--ranks", "3", "--json").stdout)
    assert [r["rank"] for r in out["ranks"]] == [0, 1, 2]
    assert sum(r["edges"] for r in out["ranks"]) == 30000
    assert all(r["local_edges"] + r["remote_edges"] == r["edges"] for r in out["ranks"])
    assert "remote_fraction" in mgg("partition", "cora", "--ranks", "2").stdout


@pytest.mark.parametrize("args, msg", [
    (["partition", "missing.txt", "--ranks", "2"], "no such file"),
    (["partition", "rmat:10:50", "--ranks", "20"], "exceed the number of nodes"),
    (["train", "--dataset", "pubmed"], "no Planetoid dataset 'pubmed'"),
    (["train", "--ps", "64"], "ps must be an integer in [1, 32]"),
])
def test_errors_are_one_line(args, msg):
    r = mgg(*args, check=False)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and msg in lines[0], r.stderr


def test_train_short_run():
    r = mgg("train", "--epochs", "5", "--seeds", "2", "--quiet")
    assert "test accuracy" in r.stdout and r.stdout.count("seed ") == 2

"""CI smoke test of the harness: every suite that runs without a GPU, on tiny graphs."""

import csv
import dataclasses
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import mgg
from bench.report import COLUMNS
from bench.suites.tta import minibatch_impl
from simt import emulator


@pytest.mark.full  # make test-full (tests/conftest.py)
def test_smoke_all_suites(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "bench", "all", "--smoke", "--quiet", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    device = mgg.default_device()
    assert r.stdout.splitlines()[0] == f"python -m bench: device {device.device.type} ({device.why})"
    (csv_path,) = tmp_path.glob("*.csv")
    rows = list(csv.DictReader(open(csv_path)))
    assert list(rows[0].keys()) == COLUMNS
    suites = {row["suite"] for row in rows}
    assert suites == {"kernel", "ablation", "scaling", "dist", "e2e", "tune", "load", "fetch", "tta", "dlrm"}
    kernel = [row for row in rows if row["suite"] == "kernel"]
    assert {row["impl"] for row in kernel} >= {"mgg", "torch.sparse", "pyg"}
    assert {row["pass"] for row in kernel} == {"fwd", "bwd"}
    for row in rows:
        assert float(row["p10_ms"]) <= float(row["median_ms"]) <= float(row["p90_ms"])
        assert row["device"] and row["torch"] and row["date"]
    assert {int(row["pes"]) for row in rows if row["suite"] == "scaling"} == {1, 2}
    assert {row["impl"] for row in rows if row["suite"] == "scaling"} == {
        "mgg-peers-inproc",
        "mgg-halo-inproc",
        "mgg-peers-inproc-tuned",
        "mgg-halo-inproc-tuned",
    }
    tune = [row for row in rows if row["suite"] == "tune"]
    assert {(row["impl"], int(row["pes"])) for row in tune} == {
        ("mgg-tuner", 1),
        ("mgg-tuner-inproc", 2),
        ("grid", 1),
        ("grid", 2),
    }
    dist = [row for row in rows if row["suite"] == "dist"]
    failed = r.stderr[r.stderr.find("dist suite:") :][:6000] if "dist suite:" in r.stderr else ""
    assert {(row["impl"], int(row["pes"])) for row in dist} >= {("mgg-halo", 1), ("mgg-halo", 2)}, failed
    assert all(row["rank_edges"].count(";") == int(row["pes"]) - 1 for row in dist)
    load = [row for row in rows if row["suite"] == "load" and row["pass"] == "load"]
    assert {row["graph"] for row in load} == {
        "text",
        "text.gz",
        "mtx",
        "npz-edge_index",
        "npz-edge_index-by-dst",
        "npz-scipy-csr",
    }
    (plan,) = [row for row in rows if row["suite"] == "load" and row["pass"] == "plan"]
    assert (plan["graph"], int(plan["pes"]), int(plan["edges"])) == ("rmat:1500:15000", 8, 15000)
    assert float(plan["median_ms"]) > 0 and float(plan["peak_mem_mb"]) > 0
    assert float(plan["p10_ms"]) < float(plan["p90_ms"])  # a spread of several builds, not one timing repeated
    for row in load:  # every format gives the same graph; the figures are filled in
        assert (int(row["nodes"]), int(row["edges"])) == (10_000, 100_000)
        assert float(row["edges_per_s"]) > 0 and float(row["peak_mem_bytes_per_edge"]) > 0
    fetch = {(row["impl"], int(row["pes"])): row for row in rows if row["suite"] == "fetch"}
    assert set(fetch) == {(f"fetch-{m}", p) for m in ("direct", "halo", "allgather") for p in (1, 2)}
    assert float(fetch[("fetch-halo", 1)]["traffic_mb"]) == 0 and float(fetch[("fetch-halo", 2)]["traffic_mb"]) > 0
    assert fetch[("fetch-direct", 2)]["rank_ms"].count(";") == 1  # every rank's time
    tta = {row["impl"]: row for row in rows if row["suite"] == "tta"}
    assert set(tta) == {"mgg", "pyg", minibatch_impl()}
    for row in tta.values():  # GCN on Cora to 0.6 validation accuracy within the 40-epoch limit
        assert (row["graph"], row["case"], row["pass"], row["target_acc"]) == ("cora", "cora/gcn/seed0", "train", "0.6")
        assert row["reached"] == "True" and 0 < int(row["epochs"]) <= 40
        curve = [tuple(map(float, p.split(":"))) for p in row["val_curve"].split(";")]
        assert len(curve) == int(row["epochs"]) and curve[-1][1] >= 0.6 > max(a for _, a in curve[:-1])
        assert float(row["time_to_target_s"]) == pytest.approx(curve[-1][0], abs=1e-3)
        assert float(row["time_to_target_s"]) > 0
        assert float(row["best_val_acc"]) == pytest.approx(curve[-1][1], abs=1e-4)
        assert float(row["peak_mem_mb"]) > 0 and float(row["median_ms"]) > 0
    assert len(list(tmp_path.glob("*.png"))) == len(suites)  # one plot per suite
    md = next(tmp_path.glob("*.md")).read_text()
    assert "speedup of mgg over each peer" in md and "tuner against the exhaustive grid" in md
    assert "## load: graph files to an mgg Graph" in md and "## load: the plan of a graph" in md
    assert "## tta: time to the target validation accuracy" in md
    assert "read from peers MB (computed) |" in md and "computed from the plan" in md
    assert "## fetch: one kernel" in md and "fetch rmat:1500:15000 D=16 P=2 uva (needs a GPU)" in md


def test_sanitize_case_checks_every_result_on_the_cpu():
    """bench.sanitize_case (compute-sanitizer's case on a GPU) runs its checks on the CPU executors:
    aggregation, aggregate_peers, attention forward and backward (a check holds the three gradients),
    attend_peers, each compared."""
    r = subprocess.run(
        [sys.executable, "-m", "bench.sanitize_case", "--device", "cpu"], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == "sanitize case: 96 results checked, 0 wrong", (
        r.stdout[-3000:] + r.stderr[-3000:]
    )


@pytest.mark.full  # make test-full (tests/conftest.py)
def test_scaling_and_dist_with_a_partition(tmp_path):
    """--partition: the plans (in process) and the ranks (under torchrun) own a relabelled graph,
    and the impl names say by which method."""
    env = dict(os.environ, MGG_PARTITION_CACHE=str(tmp_path / "partitions"))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "scaling",
            "dist",
            "--smoke",
            "--quiet",
            "--partition",
            "random",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    (csv_path,) = tmp_path.glob("*.csv")
    rows = list(csv.DictReader(open(csv_path)))
    assert {row["impl"] for row in rows} == {
        "mgg-peers-inproc[random]",
        "mgg-halo-inproc[random]",
        "mgg-halo[random]",
        "mgg-peers-inproc-tuned[random]",
        "mgg-halo-inproc-tuned[random]",
    }
    two = [row for row in rows if int(row["pes"]) == 2]
    assert two and all(row["rank_edges"].count(";") == 1 for row in two)


@pytest.mark.full  # make test-full (tests/conftest.py)
def test_partition_compare_writes_csv_and_markdown(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.partition_compare",
            "--graphs",
            "cora",
            "--ranks",
            "2",
            "--methods",
            "range",
            "random",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    (csv_path,) = tmp_path.glob("partition-*.csv")
    rows = list(csv.DictReader(open(csv_path)))
    assert [(row["method"], row["status"], row["edges"]) for row in rows] == [
        ("range", "ok", "10556"),
        ("random", "ok", "10556"),
    ]
    assert float(rows[0]["remote_fraction"]) > 0.3 and int(rows[0]["halo_rows"]) > 0
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.partition_compare",
            "--graphs",
            "cora",
            "--ranks",
            "3",
            "--methods",
            "range",
            "--append",
            str(csv_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    md = csv_path.with_suffix(".md").read_text()
    assert md.count("| cora |") == 3 and "| cora | 3 | range |" in md


def test_rejects_too_few_repetitions(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "bench", "kernel", "--reps", "5", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "at least 20" in r.stderr


@pytest.mark.full  # over 15 s on 2 cores: make test-full runs it
def test_mgg_bench_alias(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "mgg", "bench", "scaling", "--smoke", "--quiet", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    assert len(list(tmp_path.glob("scaling-*.csv"))) == 1


@pytest.mark.full  # over 15 s on 2 cores: make test-full runs it
def test_projection_from_scaling_rows(tmp_path):
    """bench.project fits the in-process scaling runs and brackets an 8-GPU time."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "scaling",
            "--graphs",
            "rmat:3000:40000",
            "--dims",
            "16",
            "--pes",
            "1",
            "2",
            "3",
            "4",
            "--quiet",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (csv_path,) = tmp_path.glob("*.csv")
    from bench.project import project

    rows = list(csv.DictReader(open(csv_path)))
    p = project(rows, "rmat:3000:40000", 16, gpus=8, nvlink_gbps=450, eta=0.7)
    assert p["measured_pes"] == [1, 2, 3, 4]
    assert 0 < p["overlap_ms"] <= p["no_overlap_ms"]
    assert 0.8 < p["remote_fraction"] < 1.0  # R-MAT over 8 contiguous ranges: mostly remote
    out = subprocess.run(
        [sys.executable, "-m", "bench.project", str(csv_path), "--graph", "rmat:3000:40000", "--dim", "16"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and "8 GPUs, full overlap" in out.stdout, out.stderr
    assert f"| 1 PE on {rows[0]['device']} (measured) |" in out.stdout  # the device that measured it
    assert ("Measured on a CPU" in out.stdout) == rows[0]["device"].startswith("cpu")


def test_projection_fit_never_answers_a_negative_cost():
    """Timings where more remote edges took less time: an unconstrained least-squares fit answers
    a negative c_remote, and then the full-overlap bound exceeds the no-overlap one (seen in CI on
    a noisy CPU). The fit is non-negative, so the bounds stay ordered."""
    from bench.project import fit

    def row(ranks, ms):
        return {"rank_edges": ";".join(f"{i}:{loc}/{rem}" for i, (loc, rem) in enumerate(ranks)), "median_ms": ms}

    rows = [
        row([(1000, 0)], 1.05),
        row([(400, 600), (400, 600)], 0.85),
        row([(200, 800)] * 3, 0.63),
        row([(100, 900)] * 4, 0.42),
    ]
    a = np.array([[1, 1000, 0], [2, 800, 1200], [3, 600, 2400], [4, 400, 3600]], float)
    unconstrained = np.linalg.lstsq(a, np.array([1.05, 0.85, 0.63, 0.42]) * 1e-3, rcond=None)[0]
    assert unconstrained.min() < 0  # the case is the one that broke the bounds
    t0, c_local, c_remote = fit(rows)
    assert min(t0, c_local, c_remote) >= 0 and c_local > 0
    pred = [t0 * r + c_local * loc + c_remote * rem for r, loc, rem in a]
    assert max(abs(p - m * 1e-3) for p, m in zip(pred, [1.05, 0.85, 0.63, 0.42], strict=True)) < 0.5e-3  # still a fit


def _bench(tmp_path, *args, env=None):
    import os

    e = dict(os.environ, MGG_GRAPH_CACHE=str(tmp_path / "graphs"), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "bench", *args, "--quiet", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env=e,
    )


def test_budget_stops_starting_cases_and_says_what_it_skipped(monkeypatch, tmp_path):
    from bench import report, suites
    from bench.budget import Budget

    monkeypatch.setenv("MGG_GRAPH_CACHE", str(tmp_path))
    now = {"t": 0.0}
    opt = suites.Options(
        device=torch.device("cpu"),
        graphs=["rmat:2000:20000", "rmat:3000:30000"],
        dims=[16, 32],
        impls=["mgg"],
        warmup=1,
        progress=False,
        budget=Budget(10.0, clock=lambda: now["t"]),
    )
    rows = []
    for row in suites.kernel(opt):
        rows.append(row)
        now["t"] = 9.999 if len(rows) == 2 else now["t"]  # 1 ms left: less than the first case took
    first = "rmat:2000:20000/d16"
    assert [(row["case"], row["pass"]) for row in rows] == [(first, "fwd"), (first, "bwd")]
    md = report.summary(rows, 1.0, opt.budget.skipped)
    assert "skipped: the time budget ran out, or the case cannot run here" in md
    for case in ("rmat:2000:20000 D=32 mgg", "rmat:3000:30000 D=16 mgg", "rmat:3000:30000 D=32 mgg"):
        assert f"- kernel {case}" in md


def test_rows_are_on_disk_as_soon_as_they_are_measured(tmp_path):
    """A run cut off (a device call's time limit) keeps every row it finished."""
    import os
    import signal
    import time

    e = dict(os.environ, MGG_GRAPH_CACHE=str(tmp_path / "graphs"))
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench",
            "kernel",
            "--graphs",
            "rmat:4000:60000",
            "--dims",
            "8",
            "16",
            "32",
            "64",
            "128",
            "256",
            "--impls",
            "mgg",
            "pyg",
            "--quiet",
            "--out",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=e,
    )
    deadline = time.monotonic() + 300
    rows = []
    while time.monotonic() < deadline and len(rows) < 2:
        time.sleep(0.5)
        paths = list(tmp_path.glob("*.csv"))
        rows = list(csv.DictReader(open(paths[0]))) if paths else []
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=60)
    assert len(rows) >= 2 and all(float(r["median_ms"]) > 0 for r in rows)
    assert not list(tmp_path.glob("*.md"))  # it was cut off before the summary


def test_graphs_are_made_once_and_cached_on_disk(tmp_path, monkeypatch):
    import numpy as np

    from bench import cache

    monkeypatch.setenv("MGG_GRAPH_CACHE", str(tmp_path))
    monkeypatch.setattr(cache, "_GRAPHS", {})
    g, _ = cache.graph("rmat:3000:40000")
    (path,) = tmp_path.glob("*.npz")
    assert cache.graph("rmat:3000:40000")[0] is g  # this process: from memory
    monkeypatch.setattr(cache, "_GRAPHS", {})  # a later process: from disk, equal
    h, _ = cache.graph("rmat:3000:40000")
    assert h is not g and np.array_equal(h.rowptr.numpy(), g.rowptr.numpy()) and np.array_equal(h.col, g.col)
    path.write_bytes(b"not an npz")  # a corrupt file is ignored and replaced
    monkeypatch.setattr(cache, "_GRAPHS", {})
    k, _ = cache.graph("rmat:3000:40000")
    assert np.array_equal(k.col, g.col) and path.stat().st_size > 1000


def test_plans_are_shared_across_dims_and_tune_evicts(monkeypatch, tmp_path):
    from bench import cache, suites
    from bench.budget import Budget

    monkeypatch.setenv("MGG_GRAPH_CACHE", str(tmp_path))
    monkeypatch.setattr(cache, "_PLANS", {})
    opt = suites.Options(
        device=torch.device("cpu"),
        graphs=["rmat:800:6000"],
        dims=[8, 16, 24],
        impls=["mgg"],
        reps=20,
        warmup=1,
        progress=False,
        tune_budget=5,
        budget=Budget(None),
    )
    rows = list(suites.kernel(opt))
    assert len(rows) == 6 and len(cache._PLANS) == 1
    (plan,) = [p for _, p in cache._PLANS.values()]
    assert len(plan._plans) == 1  # one rank plan (one config) served the three dims
    rows = list(suites.tune(opt))
    assert any(r["impl"] == "grid" for r in rows)
    for _, p in cache._PLANS.values():
        assert len(p._plans) <= 2  # the best so far and at most one other schedule stay


def test_kernel_suite_times_mgg_at_the_tuned_config_too(monkeypatch, tmp_path):
    """With kernel_tuned, the kernel suite tunes mgg per (graph, dim), checks the tuned config's
    result and times it as impl mgg-tuned with the chosen config; the summary compares both mgg
    rows with the competitors, never mgg with its own tuned variant."""
    from bench import cache, report, suites
    from bench.budget import Budget
    from mgg.runtime.limits import PS_STEPS

    monkeypatch.setenv("MGG_GRAPH_CACHE", str(tmp_path))
    monkeypatch.setattr(cache, "_PLANS", {})
    opt = suites.Options(
        device=torch.device("cpu"),
        graphs=["rmat:800:6000"],
        dims=[16],
        impls=["mgg", "torch.sparse"],
        reps=20,
        warmup=1,
        progress=False,
        tune_budget=3,
        kernel_tuned=True,
        budget=Budget(None),
    )
    rows = list(suites.kernel(opt))
    assert not opt.wrong
    tuned = [r for r in rows if r["impl"] == "mgg-tuned"]
    assert [r["pass"] for r in tuned] == ["fwd", "bwd"]
    assert all(int(r["ps"]) in PS_STEPS or int(r["ps"]) == 0 for r in tuned)
    sp = report.speedups(rows, "kernel", "mgg")
    assert set(sp) == {"torch.sparse"}  # mgg-tuned is not one of mgg's competitors
    assert set(report.speedups(rows, "kernel", "mgg-tuned")) == {"torch.sparse"}
    assert not [r for r in suites.kernel(dataclasses.replace(opt, kernel_tuned=False)) if r["impl"] == "mgg-tuned"]


def test_a_peer_without_a_kernel_for_the_dtype_is_left_out_not_a_crash(monkeypatch, tmp_path):
    """torch.sparse has no CSR x dense kernel for bf16 on the CPU: the kernel suite times mgg and
    leaves that peer out instead of ending on NotImplementedError."""
    from bench import suites
    from bench.budget import Budget
    from bench.competitors import sparse_mm_supports

    monkeypatch.setenv("MGG_GRAPH_CACHE", str(tmp_path))
    cpu = torch.device("cpu")
    assert sparse_mm_supports(torch.float32, cpu) and not sparse_mm_supports(torch.bfloat16, cpu)
    opt = suites.Options(
        device=cpu,
        graphs=["rmat:800:6000"],
        dims=[16],
        dtype=torch.bfloat16,
        impls=["mgg", "torch.sparse"],
        reps=20,
        warmup=1,
        progress=False,
        budget=Budget(None),
    )
    rows = list(suites.kernel(opt))
    assert {(r["impl"], r["pass"]) for r in rows} == {("mgg", "fwd"), ("mgg", "bwd")} and not opt.wrong


def test_tune_summary_states_what_the_default_config_costs():
    """The tune table gives, beside the tuner's gap, the default config's time against the grid's
    best (the H200's kernel suite ran at the default; this is what it cost)."""
    from bench import report
    from mgg import Config

    def row(impl, c, ms):
        r = dict.fromkeys(COLUMNS, "")
        r.update(suite="tune", case="g/d64/p1", graph="g", dim=64, pes=1, impl=impl, median_ms=ms)
        r.update({"pass": "fwd", "ps": c[0], "dist": c[1], "wpb": c[2], "prep_s": 0.0})
        return r

    default = Config().as_tuple()[:3]
    grid = {(1, 1, 1): 8.0, default: 6.0, (32, 8, 4): 2.0}
    rows = [row("grid", c, ms) for c, ms in grid.items()] + [row("mgg-tuner", (32, 8, 4), 2.1)]
    md = report.summary(rows, 1.0)
    line = next(x for x in md.splitlines() if x.startswith("| g | 64 | 1 |"))
    assert line.endswith("| 75.0% | 3.00x the best |"), line  # gain over (1,1,1), then the default's cost


def _one_edge_dropped(g, row):
    """g without the first edge of `row`."""
    from mgg import Graph

    keep = torch.ones(g.num_edges, dtype=torch.bool)
    keep[int(g.rowptr[row])] = False
    return Graph.from_edges(g.col[keep], g.rows()[keep], g.num_nodes, None if g.weight is None else g.weight[keep])


def test_a_wrong_result_is_refused_not_timed(monkeypatch, tmp_path):
    """The kernel suite compares each implementation's forward and backward with the float64
    reference before timing it: one that drops an edge of the hub row is said to be wrong, never
    timed, and the summary lists it."""
    from bench import competitors, report, suites

    monkeypatch.setenv("MGG_GRAPH_CACHE", str(tmp_path))

    def drops_an_edge(g, x, **_):
        return competitors.prepare_torch_sparse(_one_edge_dropped(g, int(torch.argmax(g.degree()))), x)

    monkeypatch.setitem(competitors.IMPLEMENTATIONS, "drops-an-edge", drops_an_edge)
    opt = suites.Options(
        device=torch.device("cpu"),
        graphs=["rmat:800:6000"],
        dims=[16],
        impls=["mgg", "torch.sparse", "pyg", "drops-an-edge"],
        warmup=1,
        progress=False,
    )
    rows = list(suites.kernel(opt))
    assert {(r["impl"], r["pass"]) for r in rows} == {
        (i, p) for i in ("mgg", "torch.sparse", "pyg") for p in ("fwd", "bwd")
    }
    (wrong,) = opt.wrong
    assert wrong.startswith("kernel rmat:800:6000 D=16 drops-an-edge: forward: out[")
    md = report.summary(rows, 1.0, (), opt.wrong)
    assert "## WRONG RESULTS" in md and f"- {wrong}" in md


def test_check_samples_hub_rows_of_a_large_graph():
    """On a graph larger than the sample, bench.competitors.check compares the hub rows and a random
    sample: a right result passes, one edge dropped from the hub row fails and is named by its row."""
    from bench import competitors
    from mgg.testing import dense_reference, random_graph

    g = random_graph(20000, 60000, seed=7, weighted=True, skew=0.5)
    x = torch.randn(20000, 8)
    assert g.num_nodes > competitors.HUBS + competitors.SAMPLE
    right = dense_reference(g, x).float()
    competitors.check(right, g, x)
    right[1, 1] = float("nan")  # a NaN anywhere, sampled or not, is refused
    with pytest.raises(AssertionError, match="1 non-finite entries"):
        competitors.check(right, g, x)
    hub = int(torch.argmax(g.degree()))
    with pytest.raises(AssertionError, match=rf"that is out\[{hub}, "):
        competitors.check(dense_reference(_one_edge_dropped(g, hub), x).float(), g, x)


def test_tta_target_must_be_model_equals_accuracy(tmp_path):
    r = _bench(tmp_path, "tta", "--tta-target", "gcn:0.7")
    assert r.returncode != 0 and "--tta-target takes MODEL=ACCURACY pairs" in r.stderr


def test_accuracy_script_writes_a_row_per_seed_and_the_table(tmp_path):
    """bench.accuracy trains each model with mgg's and PyG's layers through mgg.training.loop."""
    pytest.importorskip("torch_geometric")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.accuracy",
            "--models",
            "gcn",
            "sage",
            "--seeds",
            "2",
            "--epochs",
            "2",
            "--quiet",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = tmp_path.glob("accuracy-cora-*.csv")
    rows = list(csv.DictReader(open(path)))
    assert [(row["model"], row["layers"], row["seed"]) for row in rows] == [
        (m, impl, s) for m in ("gcn", "sage") for impl in ("mgg", "pyg") for s in ("0", "1")
    ]
    assert all(0 < float(row["test_acc"]) <= 1 and row["epochs"] == "2" for row in rows)
    md = next(tmp_path.glob("accuracy-cora-*.md")).read_text()
    assert "| gcn | " in md and "| sage | " in md and "mgg - PyG" in md


PTXAS_LOG = os.path.join(os.path.dirname(__file__), "data", "ptxas-peers-sm90.log")  # excerpt of a real log


def test_resources_reads_ptxas_and_refuses_any_spill():
    """bench.resources: kernels (not NVSHMEM's device functions) with their registers and spills,
    named without nvcc's internal-linkage prefix; --check fails on any spill."""
    from bench.resources import key, parse_ptxas, spills

    rows = parse_ptxas(open(PTXAS_LOG).read())
    assert [key(r) for r in rows] == [
        "aggregate_blocks_blockget_kernel<float>@sm_90",
        "aggregate_fixup_kernel<__half>@sm_90",
    ]
    get, fixup = rows
    assert (
        get["launch__registers_per_thread"],
        get["spill_store_bytes"],
        get["spill_load_bytes"],
        get["stack_frame_bytes"],
        get["launch__shared_mem_per_block_static"],
        get["barriers"],
    ) == (128, 92, 108, 48, 384, 1)
    assert (fixup["launch__registers_per_thread"], fixup["spill_store_bytes"], fixup["barriers"]) == (32, 0, 0)
    (v,) = spills(rows)  # the get kernel's, not the fixup's
    assert key(get) in v and "92 bytes of spill stores, 108 of loads" in v
    assert spills([fixup]) == []
    assert spills([dict(fixup, spill_load_bytes=4)]) != []  # a load alone is a spill too
    ci = open(os.path.join(os.path.dirname(__file__), "..", "..", ".ci", "run")).read()
    assert "bench.resources" in ci and "--check" in ci


def test_resources_bounds_the_registers_of_every_range_kernel():
    """--check's register rule: an aggregation range kernel over 64 registers on sm_90 fails,
    whatever its source but the proxy path's NVSHMEM gets (bounded at half the threads); other
    kernels and archs are free."""
    from bench.resources import register_violations

    def row(kernel, regs, arch="90"):
        return {"kernel": kernel, "arch": arch, "launch__registers_per_thread": regs, "source": "peers.cu"}

    copy = "aggregate_ranges_kernel<__half, 1, true, TableFetch, PeerCopyFetch<1>, false>"
    table = "aggregate_ranges_kernel<float, 2, false, TableFetch, TableFetch, false>"
    proxy = "aggregate_ranges_kernel<__nv_bfloat16, 1, true, TableFetch, NvshmemGetFetch<1>, true>"
    assert register_violations([row(copy, 64), row(table, 64), row(proxy, 64)]) == []
    (v,) = register_violations([row(copy, 65)])
    assert copy in v and "65 registers, 64 allowed" in v
    assert len(register_violations([row(table, 72)])) == 1
    assert register_violations([row(proxy, 104)]) == []
    assert register_violations([row(copy, 128, arch="80")]) == []
    assert register_violations([row("aggregate_extreme_kernel<float, TableFetch, TableFetch>", 88)]) == []


@pytest.mark.skipif(emulator.available() is not None, reason=str(emulator.available()))
def test_counters_report_of_the_emulated_kernels(tmp_path):
    """bench.counters on a small graph: one CSV row per case and memory class with Nsight
    Compute's metric names, the ratios consistent with the raw counts, the range kernel's traffic
    by class (one range-record load per warp, the index stream's lanes mostly active, 16-byte row
    loads by lane groups, no atomics, a chain of a few loads, the plan's carry), a markdown table
    with --before's table beside it (an earlier run in the blocks kernel's columns) and a plot;
    --ncu-metrics names the metrics the GPU stage collects (bench/gpu_verify.sh)."""
    from bench import counters

    before = tmp_path / "before.csv"  # the blocks kernel's columns, one case
    old = dict(graph="rmat:300:2400", dim="16", dtype="float32", source="table", ranks="2", edges="2400")
    with open(before, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*old, "class", counters.NCU["requests"], "active_lanes_pct",
                                          "shared_requests_partial_sums"])  # fmt: skip
        w.writeheader()
        for cls, req, lanes in [("global", 1200, 75.0), ("rows", 300, 90.0), ("edges", 900, 44.9), ("landed", 0, "")]:
            w.writerow(dict(old, **{"class": cls, counters.NCU["requests"]: req, "active_lanes_pct": lanes},
                            shared_requests_partial_sums=240))  # fmt: skip
    assert counters.main(["--graphs", "rmat:300:2400", "--dims", "16", "64", "--dtypes", "float32",
                          "--sources", "table", "get-warp", "copy-warp", "--out", str(tmp_path),
                          "--before", str(before)]) == 0  # fmt: skip
    (path,) = tmp_path.glob("counters-2*.csv")
    rows = list(csv.DictReader(open(path)))
    assert len(rows) == 2 * 3 * len(counters.CLASSES)
    req, sec = counters.NCU["requests"], counters.NCU["sectors"]
    by = {(r["dim"], r["source"], r["class"]): r for r in rows}
    for r in rows:
        cls = {c: by[(r["dim"], r["source"], c)] for c in counters.CLASSES}
        if r["class"] != "landed":
            assert float(r["sectors_per_request"]) == pytest.approx(int(r[sec]) / int(r[req]), abs=1e-3)
            assert float(r["requests_per_edge"]) == pytest.approx(int(r[req]) / int(r["edges"]), abs=1e-4)
        if r["class"] == "global":  # the classes of global loads add up
            assert int(r[req]) == sum(int(cls[c][req]) for c in ("rows", "index", "row_ends", "ranges"))
        if r["class"] == "rows":  # 16-byte loads by lane groups in every kernel, gets and copies included
            assert float(r["requests_per_128_bytes"]) < (2.0 if r["dim"] == "16" else 1.0)
            assert float(r["active_lanes_pct"]) > 50.0
            if r["source"] == "copy-warp":  # 16-byte copies of whole rows: within 5% of the bytes asked
                assert float(r["bytes_in_sectors_over_requested"]) <= 1.05
        if r["class"] == "ranges":  # one load of a warp's two records, 10 lanes
            assert int(r[req]) == int(r["warps"]) and float(r["active_lanes_pct"]) == pytest.approx(100 * 10 / 32, 0.01)
        if r["class"] == "index" and r["source"] == "table":  # windows of 32 edges, mostly full
            assert float(r["active_lanes_pct"]) > 80.0
        if r["class"] == "landed":
            lands = r["source"] in ("get-warp", "copy-warp")  # gets and copies land rows in shared memory
            assert (int(r[req]) > 0) == lands
        # NVSHMEM gets only over the proxy: within a node the kernels copy and call none
        assert (int(r["get_calls"]) > 0) == (r["source"] == "get-warp")
        assert int(r["atomics"]) == int(r["shared_atomic_requests"]) == 0
        assert 3 <= float(r["chain_mean"]) <= int(r["chain_max"]) <= 13
        assert int(r["carry_bytes"]) == int(r["carry_slots"]) * int(r["dim"]) * 4
    md = next(tmp_path.glob("counters-2*.md")).read_text()
    assert "Before: before.csv" in md and "| rmat:300:2400 | 16 | float32 | table | 0.500 / " in md
    assert list(tmp_path.glob("counters-2*.png"))
    gpu = open(os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu_verify.sh")).read()
    assert "bench.counters --ncu-metrics" in gpu


@pytest.mark.skipif(emulator.available() is not None, reason=str(emulator.available()))
def test_remote_reads_counts_and_models_both_modes(tmp_path):
    """python -m bench.remote_reads on a tiny graph: the counted rows (emulated kernels, results
    checked first) give the per-edge mode its remote edges' bytes and the once mode exactly the
    unique remote rows' bytes; the model rows exist for every D and mode; CSV, markdown, plot."""
    from bench import remote_reads

    args = ["--graphs", "rmat:300:4000", "--ranks", "2", "--sources", "direct", "--out", str(tmp_path)]
    assert remote_reads.main(args + ["--model-graphs", "rmat:1500:15000", "--model-dims", "16", "64"]) == 0
    (csv_path,) = tmp_path.glob("remote-reads-*.csv")
    rows = list(csv.DictReader(open(csv_path)))
    counted = {r["mode"]: r for r in rows if r["part"] == "counted"}
    assert float(counted["once"]["peer_over_unique"]) == 1.0
    edge = counted["per-edge"]
    assert int(edge["peer_bytes"]) == int(edge["remote_edges"]) * 32 * 4 > int(edge["unique_bytes"])
    model = [(int(r["dim"]), r["mode"]) for r in rows if r["part"] == "model"]
    assert sorted(model) == [(16, "once"), (16, "per-edge"), (64, "once"), (64, "per-edge")]
    assert (tmp_path / csv_path.name.replace(".csv", ".md")).exists()
    assert (tmp_path / csv_path.name.replace(".csv", ".png")).exists()


def test_order_bench_writes_every_order_and_refuses_a_wrong_result(tmp_path, monkeypatch):
    """python -m bench order on tiny graphs: the issue's columns, a row per graph, D and order, the
    user's order at 1x, the report written again from its CSV; an order whose result is wrong
    stops the run before anything is timed."""
    from bench import order
    from mgg.partitioning.order import OrderedPlan

    assert order.main(["--smoke", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("order-*.csv")
    rows = list(csv.DictReader(open(path)))
    need = {
        "graph",
        "D",
        "order",
        "cpu_ms",
        "torch_sparse_ms",
        "predicted_dram_bytes",
        "predicted_ms_low",
        "predicted_ms_high",
        "order_s",
    }
    assert need <= set(rows[0])
    graphs, dims = order.SMOKE["graphs"], order.SMOKE["dims"]
    assert {(r["graph"], int(r["D"])) for r in rows} == {(g, d) for g in graphs for d in dims}
    for r in rows:
        assert float(r["predicted_ms_low"]) <= float(r["predicted_ms_high"])
        if r["order"] == "user":
            assert float(r["cpu_speedup"]) == 1.0 and float(r["dram_ratio"]) == 1.0 and r["auto"] == ""
        else:
            assert r["auto"] in ("on", "off")
    assert (tmp_path / path.name.replace(".csv", ".png")).is_file()
    md = path.with_suffix(".md").read_text()
    assert "What order='auto' keeps" in md and "Why an order can or cannot" in md
    assert order.main(["--report", str(path), "--reps", "2"]) == 0
    monkeypatch.setattr(OrderedPlan, "_out", lambda self, t: t)  # the output left in the planned order
    with pytest.raises(AssertionError, match="out\\["):
        order.main(["--smoke", "--out", str(tmp_path / "wrong"), "--orders", "rcm"])


def test_model_bench_predicts_each_order_with_the_order_aware_model(tmp_path, capsys, monkeypatch):
    """python -m bench model on a shuffled community graph without measured rows (the default
    command, orders and degree check included): both ends take kernel_model.CALIBRATIONS; a row per
    order, dtype and D, each the range kernel's prediction from the reuse distances of that order's
    own plan (recomputed here); the order-blind rows as without orders; --orders needs the generated
    graphs, and --degrees analytic alone runs none."""
    from bench import cache, model
    from mgg import Plan
    from mgg.partitioning.order import OrderedPlan, node_order
    from mgg.runtime import kernel_model as km
    from mgg.runtime import locality

    monkeypatch.setenv("MGG_GRAPH_CACHE", str(tmp_path / "graphs"))
    spec = "sbm:60000:60:16:0.9"  # x at D = 256 (fp32): 61 MB, over the H200's L2
    args = ["--graphs", spec, "--dims", "16", "256", "--no-tuned", "--no-loo"]
    assert model.main(args + ["--out", str(tmp_path / "all")]) == 0
    (path,) = (tmp_path / "all").glob("model-*.csv")
    rows = list(csv.DictReader(open(path)))
    blind = [r for r in rows if r["order"] == ""]
    ordered = {(r["order"], r["dtype"], int(r["D"])): r for r in rows if r["order"]}
    assert {(r["kernel"], r["dtype"], int(r["D"])) for r in blind} == {
        ("current", t, d) for t in ("float32", "bfloat16") for d in (16, 256)
    }
    orders = [o for o in model.TIMED_ORDERS if o != "metis" or importlib.util.find_spec("pymetis")]
    assert set(ordered) == {(o, t, d) for o in orders for t in ("float32", "bfloat16") for d in (16, 256)}
    for r in rows:
        assert float(r["predicted_ms_low"]) <= float(r["predicted_ms_high"])
        assert int(r["predicted_dram_bytes_low"]) <= int(r["predicted_dram_bytes_high"])
    g, _ = cache.graph(spec)
    band = km.band(km.H200)
    for name, plan in (("user", Plan(g)), ("rcm", OrderedPlan(g, node_order(g, "rcm")))):
        profile = locality.plan_profile(plan, model.CURRENT)
        stats = km.RangeStats.of(plan.graph.rowptr.numpy(), None, model.CURRENT)
        for dtype, elem in (("float32", 4), ("bfloat16", 2)):
            for dim in (16, 256):
                preds = [
                    km.predict_range(stats, dim, elem, km.CALIBRATIONS[e], band[e], sources=profile)
                    for e in ("optimistic", "pessimistic")
                ]
                r = ordered[(name, dtype, dim)]
                dram = sorted(int(p.dram_bytes) for p in preds)
                assert [int(r["predicted_dram_bytes_low"]), int(r["predicted_dram_bytes_high"])] == dram
                ms = sorted(round(p.seconds * 1e3, 3) for p in preds)
                assert [float(r["predicted_ms_low"]), float(r["predicted_ms_high"])] == ms
    assert (
        ordered[("rcm", "float32", 256)]["predicted_dram_bytes_high"]
        != ordered[("user", "float32", 256)]["predicted_dram_bytes_high"]
    )
    md = path.with_suffix(".md").read_text()
    assert "per node order" in md and "No measured rows of these graphs" in md and "Degree sources" not in md
    assert model.main(args + ["--orders", "--out", str(tmp_path / "none")]) == 0
    (alone,) = (tmp_path / "none").glob("model-*.csv")
    assert list(csv.DictReader(open(alone))) == blind
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        model.main(["--graphs", "rmat-reddit", "--degrees", "analytic", "--orders", "rcm"])
    assert e.value.code == 2 and "--degrees generated" in capsys.readouterr().err
    monkeypatch.setattr(model, "run", lambda a: (_ for _ in ()).throw(RuntimeError(f"orders {a.orders}")))
    with pytest.raises(RuntimeError, match=r"orders \[\]"):
        model.main(["--graphs", "rmat-reddit", "--degrees", "analytic"])


def test_cpu_bench_writes_its_columns_and_refuses_a_wrong_result(tmp_path, monkeypatch):
    """python -m bench cpu on tiny graphs: the issue's columns, a row per graph, D, dtype and thread
    count, ratios that are the times' own, the report written again from its CSV; a competitor whose
    result is wrong is left out and said so, and a wrong mgg stops the run before anything is timed."""
    from bench import cpu

    assert cpu.main(["--smoke", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("cpu-*.csv")
    rows = list(csv.DictReader(open(path)))
    need = {"graph", "D", "dtype", "threads", "mgg_ms", "torch_sparse_ms", "pyg_scatter_ms", "triad_gbps", "isa"}
    assert need <= set(rows[0])
    smoke = cpu.SMOKE
    want = {
        (g, d, t, th) for g in smoke["graphs"] for d in smoke["dims"] for t in ("float32", "bfloat16") for th in (1, 2)
    }
    assert {(r["graph"], int(r["D"]), r["dtype"], int(r["threads"])) for r in rows} == want
    for r in rows:
        assert r["isa"] == mgg._C.cpu_kernels()
        if r["torch_sparse_ms"]:
            ratio = float(r["torch_sparse_ms"]) / float(r["mgg_ms"])
            assert abs(float(r["speedup_vs_torch_sparse"]) - ratio) <= 0.01 * ratio + 1e-3
        else:
            assert r["dtype"] == "bfloat16"  # MKL's CSR product has no bf16 kernel
    md = path.with_suffix(".md").read_text()
    assert "## Targets" in md and (tmp_path / path.name.replace(".csv", ".png")).is_file()
    assert cpu.main(["--report", str(path)]) == 0
    from torch_geometric import utils

    monkeypatch.setattr(utils, "scatter", lambda src, index, dim, size, reduce: torch.zeros(size, src.size(1)))
    assert cpu.main(["--smoke", "--out", str(tmp_path / "wrong"), "--dtypes", "float32", "--threads", "1"]) == 0
    (md,) = (tmp_path / "wrong").glob("cpu-*.md")
    assert "Left out as wrong" in md.read_text() and "pyg_scatter on" in md.read_text()
    monkeypatch.setattr(mgg, "aggregate", lambda x, plan: torch.zeros_like(x))
    with pytest.raises(AssertionError):
        cpu.main(["--smoke", "--out", str(tmp_path / "wrong-mgg"), "--dtypes", "float32", "--threads", "1"])


def test_nodes_bench_counts_what_the_routes_count(tmp_path):
    """python -m bench nodes on a tiny graph: the issue's columns, a row per machine count and D,
    bytes that are the plan's (row, machine) and (row, rank) pairs counted by brute force, the flat
    halo never below the node-level one, and a band for each backend's epoch."""
    import numpy as np

    from bench import cache, nodes
    from mgg.distributed.grid.model import GraphStats, Network, rank_grids
    from mgg.partitioning.nodes import node_partition
    from mgg.plan import Plan

    assert nodes.main(["--smoke", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("nodes-*.csv")
    rows = list(csv.DictReader(open(path)))
    assert {"graph", "nodes", "gpus_per_node", "D", "flat_halo_bytes", "node_halo_bytes"} <= set(rows[0])
    assert [(int(r["nodes"]), int(r["D"])) for r in rows] == [
        (n, d) for n in nodes.SMOKE["nodes"] for d in nodes.SMOKE["dims"]
    ]
    g, _ = cache.graph(nodes.SMOKE["graphs"][0], None)
    gpn = nodes.SMOKE["gpus_per_node"]
    for r in rows:
        part = node_partition(g, int(r["nodes"]), gpn, "range")
        plan = Plan(part.relabel(g), bounds=part.bounds)
        owner = np.searchsorted(plan.bounds, np.arange(g.num_nodes), side="right") - 1
        pairs, flat = set(), 0
        for rank in range(plan.num_ranks):
            h = plan.halo_nodes(rank)
            away = h[owner[h] // gpn != rank // gpn]
            pairs |= {(int(v), rank // gpn) for v in away}
            flat += away.size
        row_bytes = int(r["D"]) * 4
        assert int(r["node_halo_bytes"]) == len(pairs) * row_bytes
        assert int(r["flat_halo_bytes"]) == flat * row_bytes >= int(r["node_halo_bytes"])
        for b in ("flat", "node", "node_nvshmem", "grid"):
            assert 0 < float(r[f"{b}_ms_low"]) <= float(r[f"{b}_ms_high"])
        # node-nvshmem: the same exchanges, hidden behind the aggregation at the low end only
        assert float(r["node_nvshmem_ms_low"]) < float(r["node_ms_low"])
        assert float(r["node_nvshmem_ms_high"]) == float(r["node_ms_high"])
        # the grid backend's row: the best grid of the ranks by the grid model, on the graph's statistics
        d = int(r["D"])
        stats = GraphStats(r["graph"], g.num_nodes, g.num_edges + g.num_nodes, (d, d, d))
        best = rank_grids(int(r["nodes"]) * gpn, stats, Network(gpn, float(r["intra_gbps"]), float(r["inter_gbps"])))
        assert r["grid"] == str(best[0].shape)
    assert (tmp_path / path.name.replace(".csv", ".md")).exists() and (
        tmp_path / path.name.replace(".csv", ".png")
    ).exists()


def test_grid_bench_ranks_every_grid(tmp_path):
    """python -m bench grid on a small description: the issue's columns, every factorisation once,
    ranks from 1 in the model's order, the band's ends in order, the bytes of the model's busiest
    rank; a malformed graph is one line."""
    from bench import grid
    from mgg.distributed.grid import GridShape, factorizations
    from mgg.distributed.grid.model import Network, rank_bytes

    assert grid.main(["--smoke", "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("grid-*.csv")
    rows = list(csv.DictReader(open(path)))
    want = {"graph", "gpus", "gpus_per_node", "grid", "rank", "predicted_ms_low", "predicted_ms_high"}
    assert want | {"bytes_x", "bytes_y", "bytes_z", "memory_gb", "fits"} <= set(rows[0])
    assert sorted(r["grid"] for r in rows) == sorted(str(s) for s in factorizations(grid.SMOKE["gpus"]))
    assert [int(r["rank"]) for r in rows] == list(range(1, len(rows) + 1))
    mids = [(float(r["predicted_ms_low"]) + float(r["predicted_ms_high"])) / 2 for r in rows]
    assert mids == sorted(mids) and all(float(r["predicted_ms_low"]) <= float(r["predicted_ms_high"]) for r in rows)
    stats = grid.graph_stats(grid.SMOKE["graph"])
    for r in rows:
        per_rank = rank_bytes(GridShape.parse(r["grid"]), stats.nodes, stats.dims, 4)
        assert [int(r[f"bytes_{a}"]) for a in "xyz"] == [int(per_rank[a].max()) for a in "xyz"]
    assert Network(4, 300, 100).axis_bytes_per_s(GridShape(1, 8, 1), "y") == 100e9 / 1
    with pytest.raises(SystemExit):
        grid.main(["--graph", "1000:abc", "--out", str(tmp_path)])


def test_grid_bench_measures_every_grid_on_processes(tmp_path):
    """python -m bench scaling --backend grid (bench grid --measure) on two processes: every grid's
    measured step time, and the bytes it moved per axis, counted at the collectives, equal to the
    model's busiest rank's for a training step (no gradient of the input); a graph that cannot run
    here is one line."""
    from bench import grid
    from bench.cli import main as bench_main
    from mgg.distributed.grid import GridShape, factorizations
    from mgg.distributed.grid.model import rank_bytes

    spec, dims = "rmat:300:1500", [8, 4, 3]
    # `bench scaling --backend grid` is --measure at each rank count
    argv = ["scaling", "--backend", "grid", "--pes", "2", "--graphs", spec, "--dims", "8,4,3", "--reps", "1"]
    assert bench_main([*argv, "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("grid-*.csv")
    rows = list(csv.DictReader(open(path)))
    assert sorted(r["grid"] for r in rows) == sorted(str(s) for s in factorizations(2))
    nodes = int(rows[0]["graph_nodes"])
    assert nodes == 300
    for r in rows:
        want = rank_bytes(GridShape.parse(r["grid"]), nodes, dims, 4)
        assert [int(r[f"measured_bytes_{a}"]) for a in "xyz"] == [int(want[a].max()) for a in "xyz"]
        assert sum(int(r[f"measured_bytes_{a}"]) for a in "xyz") > 0 and float(r["measured_ms"]) > 0
    assert "CPU step ms (measured)" in (tmp_path / path.name.replace(".csv", ".md")).read_text()
    for bad in (["--measure", "--gpus", "2"], ["--measure", "--gpus", "2", "--graph", spec, "--dims", "8"]):
        with pytest.raises(SystemExit):
            grid.main([*bad, "--out", str(tmp_path)])

"""Prepared datasets over ranks: each rank reads only its part (mgg.distributed.read_part, the grid's
PreparedBlocks) and builds, from its own rows and what the other ranks tell it, the plans a rank
holding the whole graph builds under the same partition, bit for bit: halo, allgather, node-halo and
grid at 1, 2 and 4 CPU processes (gloo), and under two torchrun agents, each agent's ranks reading
only their parts (counted in bytes). PartGraph's normalisations against mgg.Graph's, with threads as
ranks. `mgg train` over a prepared directory against the dataset in memory; bad directories end every
rank with one line (tests/workers/prepared_worker.py)."""

import os
import pickle
import re
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

from mgg.data import NodeDataset
from mgg.distributed.part_graph import PartGraph
from mgg.graph import Graph
from mgg.partitioning.prepare import prepare
from mgg.testing import random_graph
from tests.distributed.test_distributed import ROOT, TIMEOUT, worker_env
from tests.distributed.test_node_nvshmem import ThreadExchange

WORKER = os.path.join(ROOT, "tests", "workers", "prepared_worker.py")
RUNS = {  # the runs of each rank count, one launch each
    1: "halo,node-halo:1,grid:1x1x1",
    2: "halo,allgather,node-halo:1,grid:1x2x1",
    4: "halo,node-halo:2,grid:2x2x1,grid:1x2x2",
}


def _dataset() -> NodeDataset:
    """A directed, weighted graph with hub rows, 7 classes (the worker's), count features (bag of words:
    a grid rank's row sums over its columns, added over the grid, are then the whole rows' exactly)."""
    g = random_graph(600, 6000, seed=13, skew=0.6, weighted=True)
    rng = np.random.default_rng(2)
    n = g.num_nodes
    return NodeDataset(
        "directed",
        g,
        torch.from_numpy(rng.integers(0, 4, (n, 12)).astype(np.float32)),
        torch.from_numpy(rng.integers(0, 7, n)),
        *(torch.from_numpy(rng.random(n) < p) for p in (0.3, 0.2, 0.5)),
    )


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    out = tmp_path_factory.mktemp("prepared") / "directed"
    prepare(_dataset(), out, 4, "random", seed=1)
    return out


def _torchrun(nproc: int, args: list, **kw) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--standalone", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=worker_env(kw.get("env")))


@pytest.fixture(scope="module")
def launched(prepared, tmp_path_factory):
    """Rank count -> every rank's results of RUNS[count], one launch each (on first use)."""
    done = {}

    def get(nproc: int) -> list:
        if nproc not in done:
            out = tmp_path_factory.mktemp(f"ranks{nproc}") / "out.pkl"
            r = _torchrun(nproc, [WORKER, str(prepared), str(out), "--runs", RUNS[nproc]])
            assert r.returncode == 0, r.stderr[-3000:]
            done[nproc] = pickle.load(open(out, "rb"))
        return done[nproc]

    return get


def _equal(a, b) -> bool:
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, Graph):
        return all(_equal(getattr(a, f), getattr(b, f)) for f in ("rowptr", "col", "weight"))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return a == b


def assert_row_run(r: dict) -> None:
    """A row-partitioned backend's rank: the plans, the step's logits and every gradient, and the
    gathered logits those of a rank holding the whole graph, bit for bit; its parts' bytes read, no more."""
    assert r["plans"] and _equal(r["plans"], r["full_plans"])
    assert _equal(r["got"][:3], r["want"][:3]) and r["ids_equal"]
    assert _equal(r["gathered"], r["gathered_full"])
    assert 0 < r["bytes_read"] <= r["part_bytes"]


def assert_grid_run(r: dict) -> None:
    """A grid rank: its blocks read alone, normalised over the grid, the whole graph's blocks at the
    same cuts; logits and every gradient equal, bit for bit."""
    part, whole = r["part"], r["whole"]
    assert _equal(part["shards"], whole["shards"])
    for k in ("logits", "x_grad", "grads"):
        assert _equal(part[k], whole[k]), k
    assert part["read"] > 0


@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_ranks_reading_their_parts_plan_and_compute_as_ranks_holding_everything(launched, nproc):
    ranks = launched(nproc)
    for spec in RUNS[nproc].split(","):
        for r in ranks:
            (assert_grid_run if spec.startswith("grid") else assert_row_run)(r[spec])
    for r in ranks:  # P = 4 parts: rank r of W reads parts [r * 4 / W, (r + 1) * 4 / W)
        assert r["halo"]["parts"] == list(range(r["rank"] * 4 // nproc, (r["rank"] + 1) * 4 // nproc))


def _two_agents(args: list, tag: str) -> list:
    """Two torchrun agents of two ranks each (c10d on the loopback, gloo), as two machines launch them."""
    env = worker_env({"GLOO_SOCKET_IFNAME": "lo"})
    port = 28400 + os.getpid() % 900
    agent = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        f"{tag}-{os.getpid()}",
        *args,
    ]
    agents = [
        subprocess.Popen(agent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)
    ]
    outs = [a.communicate(timeout=TIMEOUT) for a in agents]
    for a, (_, err) in zip(agents, outs, strict=True):
        assert a.returncode == 0, err[-3000:]
    return outs


@pytest.mark.full  # two agents: make test-full (tests/conftest.py)
def test_two_agents_each_read_only_their_own_parts(prepared, tmp_path):
    """Two torchrun agents (two "machines"): every rank equals a rank holding the whole graph, and
    reads its parts' files only, which are the parts of its own agent's ranks."""
    out = tmp_path / "out.pkl"
    _two_agents([WORKER, str(prepared), str(out), "--runs", "halo,node-halo:2,grid:2x2x1"], "prepared")
    ranks = pickle.load(open(out, "rb"))
    for r in ranks:
        assert_row_run(r["halo"])
        assert_row_run(r["node-halo:2"])
        assert_grid_run(r["grid:2x2x1"])
    by_agent = {}
    for r in ranks:
        by_agent.setdefault(r["agent"], set()).update(r["halo"]["parts"])
    assert sorted(map(sorted, by_agent.values())) == [[0, 1], [2, 3]]


# ---- mgg train over a prepared directory -----------------------------------------------------------
def _summary(stdout: str) -> list:
    return re.findall(r"seed \d+: test ([0-9.]+)% \(val ([0-9.]+)% at epoch (\d+)\)", stdout)


def test_training_a_prepared_directory_is_training_the_dataset(tmp_path):
    """`mgg train --dataset DIR` under torchrun (each rank its part) reaches what the dataset in memory
    reaches under the same partition, epoch by epoch (the accuracies of every epoch, rank 0's)."""
    prepare("cora", tmp_path / "cora2", 2, "random")
    train = ["-m", "mgg", "train", "--epochs", "8", "--seeds", "1", "--dropout", "0", "--deterministic"]
    a = _torchrun(2, [*train, "--dataset", str(tmp_path / "cora2")])
    b = _torchrun(2, [*train, "--dataset", "cora", "--partition", "random"])
    for r in (a, b):
        assert r.returncode == 0, r.stderr[-3000:]
    assert "2 ranks, backend halo, partition random" in a.stdout
    curve = lambda r: list(dict.fromkeys(re.findall(r"test=([0-9.]+), val=([0-9.]+)", r.stderr)))  # noqa: E731
    assert _summary(a.stdout) == _summary(b.stdout) and curve(a) == curve(b) and curve(a)


@pytest.mark.full  # over 15 s on 2 cores: make test-full runs it
def test_a_bad_directory_ends_every_rank_with_one_line(prepared, tmp_path):
    """A rank count that does not divide the parts, and a damaged file that one rank alone reads: every
    rank ends (none waits for another), the job's exit status is not 0, and the line names the file."""
    r = _torchrun(3, ["-m", "mgg", "train", "--dataset", str(prepared), "--epochs", "1", "--seeds", "1"])
    assert r.returncode != 0 and "prepared for 4 parts, which 3 ranks cannot share" in r.stderr
    damaged = tmp_path / "damaged"
    prepare(_dataset(), damaged, 4, "random", seed=1)
    with open(damaged / "parts" / "00003" / "col.npy", "r+b") as f:
        f.seek(300)
        f.write(b"\x07")
    r = _torchrun(2, ["-m", "mgg", "train", "--dataset", str(damaged), "--epochs", "1", "--seeds", "1"])
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if "changed since it was prepared" in ln]
    # every rank raises it (torchrun ends the others once the first has left, so one may be cut short)
    assert lines and all(ln.startswith("mgg train: error: rank 1: ") and "00003/col.npy" in ln for ln in lines)


# ---- PartGraph against Graph, threads as ranks -------------------------------------------------------------
def _parts(graph: Graph, bounds, transform) -> list:
    """transform(PartGraph) on each rank's rows (threads exchanging as ranks): each rank's result."""
    world = len(bounds) - 1
    local = threading.local()
    exchange = ThreadExchange(world, lambda: local.rank)
    out, errors = {}, []

    def main(rank):
        local.rank = rank
        try:
            pg = PartGraph(*graph.row_slice(bounds[rank], bounds[rank + 1]), bounds, rank, exchange, "threads")
            out[rank] = transform(pg)
        except Exception as e:  # surfaced below
            errors.append(e)
            exchange.barrier.abort()

    threads = [threading.Thread(target=main, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return [out[r] for r in range(world)]


def _rows_equal(parts: list, whole: Graph, bounds) -> None:
    rp = whole.rowptr.numpy()
    for r, pg in enumerate(parts):
        lo, hi = bounds[r], bounds[r + 1]
        assert np.array_equal(pg.rowptr.numpy(), rp[lo : hi + 1] - rp[lo])
        assert np.array_equal(pg.col.numpy(), whole.col.numpy()[rp[lo] : rp[hi]])
        if whole.weight is None:
            assert pg.weight is None
        else:
            assert pg.weight.dtype == whole.weight.dtype
            assert torch.equal(pg.weight, whole.weight[rp[lo] : rp[hi]])


TRANSFORMS = {
    "loops-keep": lambda g: g.add_self_loops(1.0, "keep"),
    "loops-add": lambda g: g.add_self_loops(2.0, "add"),
    "loops-replace": lambda g: g.add_self_loops(1.0, "replace"),
    "gcn": lambda g: g.gcn_norm(),
    "gcn-improved-float64": lambda g: g.gcn_norm(True, True, torch.float64),
    "gcn-no-loops": lambda g: g.gcn_norm(False),
    "mean": lambda g: g.mean_norm(),
    "unweighted": lambda g: g.unweighted(),
    "transpose": lambda g: g.transpose(),
    "transpose-gcn": lambda g: g.transpose().gcn_norm(dtype=torch.float64),
}


@pytest.mark.parametrize("name", TRANSFORMS)
@pytest.mark.parametrize("weighted", [False, True])
def test_part_graph_normalises_as_the_whole_graph(name, weighted):
    """Each rank's rows of every normalisation a layer asks for (self-loops each way, GCN's weights
    with a source's degree asked of its rank, the mean, the transpose) equal the whole graph's rows,
    weights bit for bit, on a directed graph with self-loops, duplicate edges and empty ranks' rows."""
    g = random_graph(300, 3000, seed=5, skew=0.6, weighted=weighted)
    src, dst = g.edge_index().numpy()
    loops = np.array([3, 3, 7, 250])
    w = None if g.weight is None else torch.cat([g.weight, torch.tensor([0.5, 1.5, 2.0, 3.0])])
    g = Graph.from_edges(
        np.concatenate([src, loops, [9, 9]]),
        np.concatenate([dst, loops, [4, 4]]),
        300,
        (None if w is None else torch.cat([w, torch.tensor([1.0, 2.0])])),
    )
    bounds = np.array([0, 60, 60, 210, 300])  # rank 1 holds no rows
    transform = TRANSFORMS[name]
    _rows_equal(_parts(g, bounds, transform), transform(g), bounds)


def test_part_graph_knows_whether_the_graph_is_symmetric():
    g = random_graph(200, 2000, seed=3, skew=0.5)
    sym = Graph.from_edges(
        np.concatenate([g.col.numpy(), g.rows().numpy()]), np.concatenate([g.rows().numpy(), g.col.numpy()]), 200
    )
    bounds = np.array([0, 50, 120, 200])
    assert _parts(sym, bounds, lambda p: p.symmetric) == [True] * 3 and sym.symmetric
    assert _parts(g, bounds, lambda p: p.symmetric) == [False] * 3 and not g.symmetric
    before = _parts(sym, bounds, lambda p: (p.col.clone(), p.symmetric, p.col))  # asking changes no array
    assert all(torch.equal(a, c) for a, _, c in before)

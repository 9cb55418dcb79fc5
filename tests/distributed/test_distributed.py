"""Several processes (gloo, CPU) give the logits and gradients of the single-process run, for
every partition method (the ranks own a relabelled graph; tensors go in and come out in the
user's node order); the worker (dist_worker.py) is shared with the GPU tests of the nvshmem
backend (test_nvshmem.py)."""

import os
import pickle
import subprocess
import sys

import pytest
import torch

from mgg.testing import assert_same_formula
from tests.cli.test_cli import CORA_CLASSES, assert_above_chance

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(ROOT, "tests", "workers", "dist_worker.py")
TIMEOUT = float(os.environ.get("MGG_WORKER_TIMEOUT", "600"))  # seconds for one worker run (GPU calls set less)


def _have(package: str) -> bool:
    try:
        __import__(package)
        return True
    except ImportError:
        return False


# metis and hypergraph where their packages are installed (the `test` extra has them)
PARTITIONS = ["range", "random"] + [m for m, pkg in (("metis", "pymetis"), ("hypergraph", "mtkahypar")) if _have(pkg)]


def worker_env(extra=None) -> dict:
    """The workers import mgg from this checkout whether or not it is installed."""
    path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path, **(extra or {}))


def run_worker(args, nproc=None, env=None):
    cmd = (
        [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--standalone"]
        if nproc
        else [sys.executable]
    )
    r = subprocess.run(cmd + [WORKER, *args], capture_output=True, text=True, timeout=TIMEOUT, env=worker_env(env))
    assert r.returncode == 0, r.stderr[-3000:]


def compare(ref_path, dist_path):
    ref, got = pickle.load(open(ref_path, "rb")), pickle.load(open(dist_path, "rb"))
    # float64 (the worker's default on the CPU): sums in another order across ranks change only
    # the last bits, on any CPU; float32 (CUDA, test_nvshmem.py): to about 1e-5 relative
    check = (
        assert_same_formula
        if ref[0].dtype == torch.float64
        else (lambda a, b, msg: torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=msg))
    )
    check(got[0], ref[0], msg="logits")
    check(got[1], ref[1], msg="input gradients")
    for name, g in ref[2].items():
        check(got[2][name], g, msg=f"gradient of {name}")
    return ref, got


def references(tmp_path_factory, *extra):
    """kind -> the path of the single-process result of that worker kind (run with extra
    arguments), each computed once."""
    done = {}

    def get(kind):
        if kind not in done:
            done[kind] = tmp_path_factory.mktemp("reference") / f"{kind}.pkl"
            run_worker([kind, str(done[kind]), "--single", *extra])
        return done[kind]

    return get


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return references(tmp_path_factory)


@pytest.mark.parametrize("partition", PARTITIONS)
@pytest.mark.parametrize("kind", ["cora-gcn", "directed-gin"])
@pytest.mark.parametrize("nproc", [2, 4])
def test_ranks_match_single_process(tmp_path, reference, kind, nproc, partition):
    dist_path = tmp_path / "dist.pkl"
    run_worker(
        [kind, str(dist_path), "--partition", partition],
        nproc,
        env={"MGG_PARTITION_CACHE": str(tmp_path / "partitions")},
    )
    compare(reference(kind), dist_path)


@pytest.mark.parametrize("kind", ["cora-sage", "cora-gat"])
@pytest.mark.parametrize("nproc", [2, 4])
def test_layer_ranks_match_single_process(tmp_path, reference, kind, nproc):
    """SAGE, and GAT with attention dropout 0.5: every rank draws the single process's mask."""
    dist_path = tmp_path / "dist.pkl"
    run_worker([kind, str(dist_path)], nproc)
    compare(reference(kind), dist_path)


@pytest.mark.parametrize("kind", ["directed-sage-max", "directed-sage-min"])
@pytest.mark.parametrize("backend,nproc", [("halo", 2), ("halo", 4), ("allgather", 2)])
def test_max_min_ranks_match_single_process(tmp_path, reference, kind, backend, nproc):
    """SAGE with max and min aggregation (the max/min op over each rank's own and halo rows, or
    the gathered table) on a directed graph with hub rows: logits and gradients of one process."""
    dist_path = tmp_path / "dist.pkl"
    run_worker([kind, str(dist_path), "--backend", backend], nproc)
    compare(reference(kind), dist_path)


@pytest.mark.parametrize("kind", ["cora-gcn", "directed-gin", "cora-sage", "cora-gat"])
@pytest.mark.parametrize("nproc", [2, 4])
def test_allgather_ranks_match_single_process(tmp_path, reference, kind, nproc):
    """The allgather backend (CAGNET 1D), over a partition other than the range split (GAT: the
    range split, where the dropout mask's global ids are the user's)."""
    dist_path = tmp_path / "dist.pkl"
    part = "range" if kind == "cora-gat" else PARTITIONS[-1]
    run_worker(
        [kind, str(dist_path), "--backend", "allgather", "--partition", part],
        nproc,
        env={"MGG_PARTITION_CACHE": str(tmp_path / "partitions")},
    )
    compare(reference(kind), dist_path)


def test_precomputed_partition_matches(tmp_path, reference):
    """DistGraph(partition=an mgg.Partition) computed by the caller (here a seeded one)."""
    dist_path = tmp_path / "dist.pkl"
    run_worker(
        ["directed-gin", str(dist_path), "--partition", PARTITIONS[-1], "--precomputed"],
        2,
        env={"MGG_PARTITION_CACHE": str(tmp_path / "partitions")},
    )
    compare(reference("directed-gin"), dist_path)


def test_partition_error_reaches_every_rank(tmp_path):
    """A method whose package is missing: rank 0's one-line error is raised on every rank (none
    waits for a partition that never comes)."""
    (tmp_path / "pymetis.py").write_text("raise ImportError('simulated: not installed')\n")
    env = worker_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node=2",
            "--standalone",
            "-m",
            "mgg",
            "train",
            "--epochs",
            "2",
            "--seeds",
            "1",
            "--quiet",
            "--partition",
            "metis",
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
    )
    assert r.returncode != 0
    errors = [line for line in r.stderr.splitlines() if line.startswith("mgg train: error:")]
    assert len(errors) == 2, r.stderr[-3000:]
    assert all("'metis' needs the pymetis package: pip install mgg[partition]" in e for e in errors)


@pytest.mark.parametrize("partition", ["range", PARTITIONS[-1]])
def test_torchrun_train_cli(tmp_path, partition):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node=2",
            "--standalone",
            "-m",
            "mgg",
            "train",
            "--epochs",
            "30",
            "--seeds",
            "1",
            "--quiet",
            "--partition",
            partition,
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=worker_env({"MGG_PARTITION_CACHE": str(tmp_path / "partitions")}),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"2 ranks, backend halo, partition {partition}" in r.stdout
    assert_above_chance(r.stdout, CORA_CLASSES)


def test_needs_initialised_group():
    from mgg import MggError
    from mgg.distributed import DistGraph
    from mgg.graph import Graph

    with pytest.raises(MggError, match="not initialised"):
        DistGraph(Graph.from_edges([0], [1], 2))
    with pytest.raises(MggError, match="backend must be one of"):
        DistGraph(Graph.from_edges([0], [1], 2), backend="mpi")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message where no GPU is visible")
def test_nvshmem_backend_without_a_gpu_is_one_clear_error():
    env = worker_env()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node=2",
            "--standalone",
            "-m",
            "mgg",
            "train",
            "--epochs",
            "2",
            "--seeds",
            "1",
            "--quiet",
            "--backend",
            "nvshmem",
            "--device",
            "cuda",
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
    )
    assert r.returncode != 0
    assert "needs a CUDA GPU" in r.stderr or "has no NVSHMEM" in r.stderr or "no CUDA" in r.stderr, r.stderr[-2000:]
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node=2",
            "--standalone",
            "-m",
            "mgg",
            "train",
            "--epochs",
            "2",
            "--seeds",
            "1",
            "--quiet",
            "--backend",
            "nvshmem",
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
    )
    assert r.returncode != 0 and "add --device cuda" in r.stderr, r.stderr[-2000:]


def test_exit_rank_flushes_and_keeps_the_status():
    """A torchrun rank leaves by exit_rank (no gloo teardown): what it printed still arrives, and
    the status is the one asked for. Without a group there is nothing to meet."""
    code = (
        "import sys; from mgg.distributed.process import exit_rank; "
        "print('done', end=''); sys.stderr.write('err'); exit_rank(3)"
    )
    env = {k: v for k, v in worker_env().items() if k != "PYTHONUNBUFFERED"}  # stdout block-buffered
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert (r.returncode, r.stdout, r.stderr) == (3, "done", "err")

"""Several processes (gloo, CPU) give the logits and gradients of the single-process run; the
worker (dist_worker.py) is shared with the GPU tests of the nvshmem backend (test_nvshmem.py)."""
import os
import pickle
import subprocess
import sys

import pytest
import torch

WORKER = os.path.join(os.path.dirname(__file__), "dist_worker.py")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = float(os.environ.get("MGG_WORKER_TIMEOUT", "600"))  # seconds for one worker run (GPU calls set less)


def worker_env(extra=None) -> dict:
    """The workers import mgg from this checkout whether or not it is installed."""
    path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path, **(extra or {}))


def run_worker(args, nproc=None, env=None):
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--standalone"] \
        if nproc else [sys.executable]
    r = subprocess.run(cmd + [WORKER, *args], capture_output=True, text=True, timeout=TIMEOUT, env=worker_env(env))
    assert r.returncode == 0, r.stderr[-3000:]


def compare(ref_path, dist_path):
    ref, got = pickle.load(open(ref_path, "rb")), pickle.load(open(dist_path, "rb"))
    # fp32 sums in a different order across ranks: agreement to 1e-5 relative
    torch.testing.assert_close(got[0], ref[0], rtol=1e-5, atol=1e-6)   # logits
    torch.testing.assert_close(got[1], ref[1], rtol=1e-5, atol=1e-7)   # input gradients
    for name, g in ref[2].items():                                      # weight gradients
        torch.testing.assert_close(got[2][name], g, rtol=1e-4, atol=1e-7)
    return ref, got


@pytest.mark.parametrize("backend", ["halo", "allgather"])
@pytest.mark.parametrize("kind", ["cora-gcn", "directed-gin", "cora-sage"])
@pytest.mark.parametrize("nproc", [2, 4])
def test_ranks_match_single_process(tmp_path, kind, nproc, backend):
    ref_path, dist_path = tmp_path / "ref.pkl", tmp_path / "dist.pkl"
    run_worker([kind, str(ref_path), "--single"])
    run_worker([kind, str(dist_path), "--backend", backend], nproc)
    compare(ref_path, dist_path)


def test_torchrun_train_cli():
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--standalone",
                        "-m", "mgg", "train", "--epochs", "30", "--seeds", "1", "--quiet"],
                       capture_output=True, text=True, timeout=TIMEOUT, env=worker_env())
    assert r.returncode == 0, r.stderr[-3000:]
    assert "2 ranks, backend halo" in r.stdout and "test accuracy" in r.stdout


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
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--standalone",
                        "-m", "mgg", "train", "--epochs", "2", "--seeds", "1", "--quiet", "--backend", "nvshmem",
                        "--device", "cuda"], capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert r.returncode != 0
    assert "needs a CUDA GPU" in r.stderr or "has no NVSHMEM" in r.stderr or "no CUDA" in r.stderr, r.stderr[-2000:]
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--standalone",
                        "-m", "mgg", "train", "--epochs", "2", "--seeds", "1", "--quiet", "--backend", "nvshmem"],
                       capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert r.returncode != 0 and "add --device cuda" in r.stderr, r.stderr[-2000:]

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


@pytest.mark.parametrize("kind", ["cora-gcn", "directed-gin"])
@pytest.mark.parametrize("nproc", [2, 4])
def test_ranks_match_single_process(tmp_path, kind, nproc):
    ref_path, dist_path = tmp_path / "ref.pkl", tmp_path / "dist.pkl"
    run_worker([kind, str(ref_path), "--single"])
    run_worker([kind, str(dist_path)], nproc)
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


class _FakeWorld:
    """P PEs as threads of one process: a 'symmetric heap' holds each allocation once per PE."""

    def __init__(self, pes: int):
        import threading

        self.pes, self.heap, self.lock = pes, [], threading.Lock()
        self.barrier = threading.Barrier(pes, timeout=60)
        self.barriers = [0] * pes


class _FakeLib:
    """The slice of mgg._C.nvshmem that mgg.distributed.nvshmem uses, for one PE of a _FakeWorld."""

    def __init__(self, world: _FakeWorld, pe: int):
        self.world, self.pe, self.allocs = world, pe, 0

    def empty(self, sizes, dtype):
        k, self.allocs = self.allocs, self.allocs + 1
        with self.world.lock:
            while len(self.world.heap) <= k:
                self.world.heap.append([None] * self.world.pes)
            self.world.heap[k][self.pe] = torch.full(sizes, float("nan"), dtype=dtype)
        self.world.barrier.wait()  # symmetric allocation is collective
        return self.world.heap[k][self.pe]

    def peer_tensor(self, t, pe):
        (k,) = [k for k, per_pe in enumerate(self.world.heap) if per_pe[self.pe] is t]
        return self.world.heap[k][pe]

    def my_pe(self):
        return self.pe

    def barrier_all_on_stream(self):
        self.world.barriers[self.pe] += 1
        self.world.barrier.wait()

    def free(self, t):
        pass


def test_nvshmem_protocol_with_threads_as_pes(monkeypatch):
    """The nvshmem backend's Python side on the CPU: P threads stand in for P PEs over a fake
    symmetric heap. Each layer writes its rows into the next of two tables, meets the others at
    the barrier, then reads peers' rows in place (aggregate_peers, direct loads). Four layers of
    one shape reuse the two tables in turn; every layer's result must equal the global one."""
    import threading

    import numpy as np

    from mgg import Config, Plan
    from mgg.distributed import nvshmem
    from mgg.testing import random_graph

    pes, layers = 3, 4
    g = random_graph(200, 3000, seed=12, weighted=True, skew=0.5)
    plan = Plan(g, pes)
    b = plan.bounds
    range_rows = [int(n) for n in np.diff(b)]
    xs = [torch.randn(200, 9, dtype=torch.float64) for _ in range(layers)]
    world, local, results, errors = _FakeWorld(pes), threading.local(), {}, []
    monkeypatch.setattr(nvshmem, "runtime", lambda: local.rt)

    def pe_main(pe):
        try:
            local.rt = nvshmem.Runtime(_FakeLib(world, pe))
            rp = plan.rank_plan(pe, Config(4, 2, 2))
            results[pe] = [nvshmem.aggregate(x[b[pe]:b[pe + 1]], rp, rp, range_rows, "direct", False) for x in xs]
            assert len(local.rt.tables) == 1 and len(next(iter(local.rt.tables.values()))) == 2
        except Exception as e:  # surfaced below
            errors.append(e)
            world.barrier.abort()

    threads = [threading.Thread(target=pe_main, args=(pe,)) for pe in range(pes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert world.barriers == [layers] * pes
    for i, x in enumerate(xs):
        got = torch.cat([results[pe][i] for pe in range(pes)])
        torch.testing.assert_close(got, g.to_torch_sparse(torch.float64) @ x)

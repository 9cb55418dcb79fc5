"""Several processes (gloo, CPU) give the logits and gradients of the single-process run, for
every partition method (the ranks own a relabelled graph; tensors go in and come out in the
user's node order); the worker (dist_worker.py) is shared with the GPU tests of the nvshmem
backend (test_nvshmem.py). One torchrun launch per rank count runs the worker runs of every
selected test, and one process every single-process reference (the `launched` fixture): torch's
start-up in each rank is most of a run's time."""

import json
import os
import pickle
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

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


@dataclass(frozen=True)
class Run:
    """A run of the worker: KIND on `nproc` ranks under torchrun (None: in one process, the reference
    of the runs of that kind) with more arguments after KIND OUT; own_cache: a partition cache of its
    own, so that the partition is computed by this run, never read from another's."""

    kind: str
    nproc: Optional[int] = None
    args: tuple = ()
    own_cache: bool = False


def launch(runs: list, folder: Path, nproc: Optional[int]) -> dict:
    """Runs `runs` (all on `nproc` ranks, or all single) one after the other in one launch of the worker
    (--batch); a run that fails ends its launch, and the runs after it start again in another. Run -> the
    path of its result, or why it has none (the launch's end and its stderr)."""
    cmd = (
        [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--standalone"]
        if nproc
        else [sys.executable]
    )
    out = {run: folder / f"run{i}.pkl" for i, run in enumerate(runs)}
    results, todo = {}, list(runs)
    while todo:
        spec = folder / f"launch{len(results)}.json"
        entries = []
        for run in todo:
            env = {"MGG_PARTITION_CACHE": str(folder / f"partitions{runs.index(run)}")} if run.own_cache else {}
            single = [] if nproc else ["--single"]
            entries.append({"argv": [run.kind, str(out[run]), *single, *run.args], "env": env})
        spec.write_text(json.dumps(entries))
        try:
            r = subprocess.run(
                cmd + [WORKER, "--batch", str(spec)], capture_output=True, text=True, timeout=TIMEOUT, env=worker_env()
            )
            end, err, again = f"exit status {r.returncode}", r.stderr, True
        except subprocess.TimeoutExpired as e:  # the rest would take as long: not started again
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr or ""
            end, again = f"stopped at its time limit of {TIMEOUT:.0f} s", False
        results.update({run: out[run] for run in todo if out[run].exists()})
        left = [run for run in todo if run not in results]
        if left:
            results[left[0]] = f"the launch ended ({end}) while running {left[0]}:\n{err[-3000:]}"
            if not again:
                results.update({run: f"not run: the launch before it ended ({end})" for run in left[1:]})
                left = []
        todo = left[1:]
    return results


def selected_runs(request) -> list:
    """The runs named by this module's selected tests (parameter `run`), and their references."""
    runs = []
    for item in request.session.items:
        run = getattr(item, "callspec", None) and item.callspec.params.get("run")
        if item.module is request.module and isinstance(run, Run):
            runs += [r for r in (run, Run(run.kind)) if r not in runs]
    return runs


@pytest.fixture(scope="module")
def launched(request, tmp_path_factory):
    """Run -> the path of its result. The first ask for a rank count (or for a reference) launches every
    run of that count (every reference) of the selected tests."""
    results = {}

    def get(run: Run) -> Path:
        if run not in results:
            runs = [r for r in selected_runs(request) if r.nproc == run.nproc]
            runs += [] if run in runs else [run]
            results.update(launch(runs, tmp_path_factory.mktemp(f"ranks{run.nproc or 1}"), run.nproc))
        assert isinstance(results[run], Path), results[run]
        return results[run]

    return get


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


def ranks_match(run: Run, launched) -> None:
    compare(launched(Run(run.kind)), launched(run))


@pytest.mark.parametrize(
    "run",
    [
        Run(kind, nproc, ("--partition", partition), own_cache=True)
        for nproc in (2, 4)
        for kind in ("cora-gcn", "directed-gin")
        for partition in PARTITIONS
    ],
    ids=lambda r: f"{r.nproc}-{r.kind}-{r.args[1]}",
)
def test_ranks_match_single_process(launched, run):
    ranks_match(run, launched)


@pytest.mark.parametrize(
    "run",
    [Run(kind, nproc) for nproc in (2, 4) for kind in ("cora-sage", "cora-gat")],
    ids=lambda r: f"{r.nproc}-{r.kind}",
)
def test_layer_ranks_match_single_process(launched, run):
    """SAGE, and GAT with attention dropout 0.5: every rank draws the single process's mask."""
    ranks_match(run, launched)


@pytest.mark.parametrize(
    "run",
    [
        Run(kind, nproc, ("--backend", backend))
        for backend, nproc in (("halo", 2), ("halo", 4), ("allgather", 2))
        for kind in ("directed-sage-max", "directed-sage-min")
    ],
    ids=lambda r: f"{r.args[1]}-{r.nproc}-{r.kind}",
)
def test_max_min_ranks_match_single_process(launched, run):
    """SAGE with max and min aggregation (the max/min op over each rank's own and halo rows, or
    the gathered table) on a directed graph with hub rows: logits and gradients of one process."""
    ranks_match(run, launched)


@pytest.mark.parametrize(
    "run",
    [
        # GAT: the range split, where the dropout mask's global ids are the user's
        Run(kind, nproc, ("--backend", "allgather", "--partition", "range" if kind == "cora-gat" else PARTITIONS[-1]))
        for nproc in (2, 4)
        for kind in ("cora-gcn", "directed-gin", "cora-sage", "cora-gat")
    ],
    ids=lambda r: f"{r.nproc}-{r.kind}",
)
def test_allgather_ranks_match_single_process(launched, run):
    """The allgather backend (CAGNET 1D), over a partition other than the range split."""
    ranks_match(run, launched)


@pytest.mark.parametrize(
    "run",
    [Run("directed-gin", 2, ("--partition", PARTITIONS[-1], "--precomputed"), own_cache=True)],
    ids=lambda r: f"{r.nproc}-{r.kind}",
)
def test_precomputed_partition_matches(launched, run):
    """DistGraph(partition=an mgg.Partition) computed by the caller (here a seeded one)."""
    ranks_match(run, launched)


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

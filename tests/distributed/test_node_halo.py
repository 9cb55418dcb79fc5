"""The node-halo backend (mgg.distributed.backends.node_halo): machines of g ranks on CPU processes
(gloo; the machines named by gpus_per_node within one torchrun launch, or by two torchrun agents).
Every layer gives the logits and gradients of one process; the exchange itself gives the flat halo
exchange's rows and gradients exactly; the bytes counted at the collectives are the routes' distinct
(row, machine) pairs; the routes, computed without processes, cover every halo row once."""

import os
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from mgg import MggError
from mgg.distributed.node_routes import NodeRoutes
from mgg.partitioning.nodes import node_partition
from mgg.plan import Plan
from mgg.testing import random_graph
from tests.distributed.test_distributed import (  # noqa: F401 (launched: the module's fixture)
    PARTITIONS,
    ROOT,
    TIMEOUT,
    Run,
    compare,
    launched,
    ranks_match,
    run_worker,
    worker_env,
)

EXCHANGE_WORKER = os.path.join(ROOT, "tests", "workers", "node_halo_worker.py")
KINDS = ("cora-gcn", "directed-gin", "cora-sage", "cora-gat", "directed-sage-max", "directed-sage-min")


def _runs(nproc: int, g: int) -> list:
    # GAT draws its dropout mask from the relabelled ids: the range split keeps the user's
    return [
        Run(kind, nproc, ("--backend", "node-halo", "--gpus-per-node", str(g), "--partition", part), own_cache=True)
        for kind in KINDS
        for part in (("range",) if kind == "cora-gat" else (PARTITIONS[-1],))
    ]


@pytest.mark.parametrize("run", _runs(4, 2), ids=lambda r: f"2x2-{r.kind}")
def test_two_machines_of_two_match_one_process(launched, run):  # noqa: F811
    ranks_match(run, launched)


@pytest.mark.full  # eight processes on two cores: make test-full (tests/conftest.py)
@pytest.mark.parametrize("run", _runs(8, 4), ids=lambda r: f"2x4-{r.kind}")
def test_two_machines_of_four_match_one_process(launched, run):  # noqa: F811
    ranks_match(run, launched)


@pytest.mark.parametrize(
    "run",
    [Run("cora-gcn", 4, ("--backend", "node-halo", "--gpus-per-node", "2", "--deterministic", "--repeat", "3"))],
    ids=lambda r: "2x2-deterministic",
)
def test_deterministic_bit_identical(launched, run):  # noqa: F811
    """Three runs of forward and backward in deterministic mode: the same bits each time."""
    ranks_match(run, launched)
    assert pickle.load(open(launched(run), "rb"))[3] is True


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="a GPU, which four ranks share (gloo): bench/gpu_verify.sh nodes"
)
def test_two_machines_of_two_on_one_gpu(tmp_path):
    """CUDA tensors through both stages (staged through the host by gloo), against one process."""
    ref, got = tmp_path / "ref.pkl", tmp_path / "got.pkl"
    run_worker(["cora-gcn", str(ref), "--single", "--device", "cuda"])
    run_worker(["cora-gcn", str(got), "--device", "cuda", "--backend", "node-halo", "--gpus-per-node", "2"], nproc=4)
    compare(ref, got)


@pytest.mark.parametrize(
    "nproc,g",
    [(4, 2), pytest.param(6, 3, marks=pytest.mark.full)],  # six processes: make test-full
)
def test_exchange_rows_gradients_and_bytes(tmp_path, nproc, g):
    """The halo rows and their adjoint equal the flat halo exchange's exactly; the inter-node bytes
    counted at the collectives, forward and backward, are the distinct (row, machine) pairs."""
    out = tmp_path / "found.pkl"
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--standalone"]
    r = subprocess.run(
        cmd + [EXCHANGE_WORKER, str(out), "--gpus-per-node", str(g)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=worker_env(),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    found = pickle.load(open(out, "rb"))
    assert found["all_equal"] == [True, True, True]
    assert found["pairs"] > 0 and found["flat_pairs"] > found["pairs"]
    assert found["forward_inter_bytes"] == found["pairs"] * found["row_bytes"]
    assert found["backward_inter_bytes"] == found["pairs"] * found["row_bytes"]
    # node-nvshmem's machine groups (one NVSHMEM job each): rank r's is the g ranks of machine r // g
    assert found["machine_groups"] == [(list(range(r - r % g, r - r % g + g)), g) for r in range(nproc)]


def _brute_pairs(plan: Plan, g: int) -> tuple[int, int]:
    """(distinct (row, machine) pairs, (row, rank) pairs) whose row is owned on another machine."""
    owner = np.searchsorted(plan.bounds, np.arange(plan.graph.num_nodes), side="right") - 1
    node, flat = set(), 0
    for r in range(plan.num_ranks):
        for h in plan.halo_nodes(r):
            if owner[h] // g != r // g:
                node.add((int(h), r // g))
                flat += 1
    return len(node), flat


@pytest.mark.parametrize("machines,g", [(2, 2), (3, 2), (2, 4), (4, 1)])
def test_routes_cover_every_halo_row_once(machines, g):
    """Without processes: each rank's routes deliver exactly its halo rows (simulated here), the
    receivers of a machine get about the same number, and the counts match a brute-force count."""
    graph = random_graph(300, 3000, seed=7, skew=0.6)
    part = node_partition(graph, machines, g, "range")
    plan = Plan(part.relabel(graph), bounds=part.bounds)
    routes = NodeRoutes(plan, g)
    world = machines * g
    ranks = [routes.rank(r) for r in range(world)]
    ids = np.arange(graph.num_nodes)
    node_halo = {}
    for q in range(world):  # stage 1, simulated: each receiver gets its rows from their owners
        parts = []
        for s in range(world):
            start = sum(ranks[s].send1_counts[:q])
            parts.append(
                ids[plan.bounds[s] : plan.bounds[s + 1]][ranks[s].send1_index[start : start + ranks[s].send1_counts[q]]]
            )
        node_halo[q] = np.concatenate(parts)
        assert node_halo[q].size == ranks[q].num_node_halo == sum(ranks[q].recv1_counts)
        assert np.array_equal(node_halo[q], np.sort(node_halo[q]))
    for t in range(world):  # stage 2: each rank gets its halo rows from its machine's providers
        parts = []
        for p in range(world):
            table = np.concatenate([ids[plan.bounds[p] : plan.bounds[p + 1]], node_halo[p]])
            start = sum(ranks[p].send2_counts[:t])
            parts.append(table[ranks[p].send2_index[start : start + ranks[p].send2_counts[t]]])
            if p // g != t // g:
                assert ranks[p].send2_counts[t] == 0  # stage 2 never leaves the machine
        received = np.concatenate(parts)
        assert np.array_equal(received[ranks[t].to_halo], plan.halo_nodes(t))
    for n in range(machines):
        sizes = [ranks[q].num_node_halo for q in range(n * g, (n + 1) * g)]
        assert max(sizes) - min(sizes) <= 1
    assert (routes.inter_node_rows(), routes.flat_inter_node_rows()) == _brute_pairs(plan, g)


def test_node_partition_keeps_machines_together():
    """Each machine's ranks own consecutive ranges inside its part, balanced by nonzeros."""
    graph = random_graph(500, 6000, seed=2, skew=0.5)
    outer = node_partition(graph, 2, 1, "range")
    part = node_partition(graph, 2, 3, "range")
    assert np.array_equal(part.perm, outer.perm) and part.num_ranks == 6
    assert np.array_equal(part.bounds[::3], outer.bounds)
    with pytest.raises(MggError, match="fewer than its 4 ranks"):
        node_partition(random_graph(6, 12, seed=1), 2, 4, "range")
    with pytest.raises(MggError, match="machines of 2 ranks"):
        NodeRoutes(Plan(graph, 3), 2)


@pytest.mark.full  # two agents and one process more: make test-full (tests/conftest.py)
@pytest.mark.parametrize("backend", ["node-halo", "halo"])
def test_two_torchrun_agents_train_as_one_process(backend):
    """`mgg train --backend node-halo` (and the flat halo, the baseline) under two torchrun agents
    of two ranks each (c10d rendezvous on the loopback, gloo): the machine of each rank is the agent
    that launched it, and every epoch's accuracies are the one process's."""
    env = worker_env({"GLOO_SOCKET_IFNAME": "lo"})
    train = ["-m", "mgg", "train", "--epochs", "5", "--seeds", "1", "--dropout", "0", "--deterministic"]
    one = subprocess.run([sys.executable, *train], capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert one.returncode == 0, one.stderr[-3000:]
    port = 29400 + os.getpid() % 500 + (500 if backend == "halo" else 0)
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
        f"{backend}-{os.getpid()}",
        *train,
        "--backend",
        backend,
    ]
    agents = [
        subprocess.Popen(agent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)
    ]
    outs = [a.communicate(timeout=TIMEOUT) for a in agents]
    for a, (_, err) in zip(agents, outs, strict=True):
        assert a.returncode == 0, err[-3000:]
    text = "".join(o for o, _ in outs)
    assert f"4 ranks, backend {backend}" in text, text[-2000:]
    # every epoch's accuracies (rank 0's progress) and those reached, as one process has them
    assert _curve("".join(e for _, e in outs), text) == _curve(one.stderr, one.stdout)


def _curve(progress: str, summary: str) -> tuple:
    # per epoch the accuracies on every node (rank 0's loss is its own nodes' share of the loss)
    losses = list(dict.fromkeys(re.findall(r"test=([0-9.]+), val=([0-9.]+)", progress)))
    reached = re.findall(r"test ([0-9.]+)% \(val ([0-9.]+)% at epoch (\d+)\)", summary)
    assert losses and reached, (progress[-1000:], summary[-1000:])
    return losses, reached

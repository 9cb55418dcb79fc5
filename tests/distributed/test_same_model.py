"""Every strategy trains the same model (issue 67): mgg train's loop over every backend (halo, allgather,
node-halo, sa-1.5d and cagnet-1.5d with c = 2, the grid), launched as one torchrun agent of 4 ranks or
as two agents of 2 (as two machines launch them), follows the one-process run's loss curve over every
training node (within float rounding) and its validation and test accuracy at every epoch, for GCN
and SAGE with their dropout (drawn by node id: the same elements whichever rank holds them). `mgg
train --curve` prints that curve, the loss the whole graph's on every launch (tests/workers/curve_worker.py)."""

import json
import os
import re
import subprocess
import sys

import pytest

from tests.distributed.test_distributed import ROOT, TIMEOUT, worker_env
from tests.distributed.test_prepared import _two_agents

WORKER = os.path.join(ROOT, "tests", "workers", "curve_worker.py")
EPOCHS = "15"
BACKENDS = ["halo", "allgather", "node-halo", "sa-1.5d:2", "cagnet-1.5d:2", "grid"]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "curves.json"
    r = subprocess.run(
        [sys.executable, WORKER, str(out), EPOCHS, "one"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=worker_env(),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(out.read_text())


def assert_same_curves(got: dict, ref: dict) -> None:
    for key, run in got.items():
        want = ref[f"one/{key.split('/')[1]}"]
        assert len(run["curve"]) == len(want["curve"]), key
        for epoch, (a, b) in enumerate(zip(run["curve"], want["curve"], strict=True)):
            assert a[0] == pytest.approx(b[0], rel=1e-5), (key, epoch, a, b)  # the loss: float rounding
            assert (a[1], a[2]) == (b[1], b[2]), (key, epoch, a, b)  # the accuracies: the same nodes right
        assert (run["best"], run["test"]) == (want["best"], want["test"]), key


@pytest.mark.full  # over 15 s on 2 cores: make test-full runs it
def test_one_agent_of_four_ranks_trains_one_process_s_model(one_process, tmp_path):
    out = tmp_path / "curves.json"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node=4",
        "--standalone",
        WORKER,
        str(out),
        EPOCHS,
    ]
    r = subprocess.run(cmd + BACKENDS, capture_output=True, text=True, timeout=TIMEOUT, env=worker_env())
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(out.read_text())
    assert len(got) == 2 * len(BACKENDS)
    assert_same_curves(got, one_process)


@pytest.mark.full  # two agents: make test-full (tests/conftest.py)
def test_two_agents_train_one_process_s_model(one_process, tmp_path):
    out = tmp_path / "curves.json"
    _two_agents([WORKER, str(out), EPOCHS, *BACKENDS], "curves")
    assert_same_curves(json.loads(out.read_text()), one_process)


def _printed(stdout: str) -> list:
    return re.findall(r"epoch (\d+): loss ([0-9.]+), val ([0-9.]+)%, test ([0-9.]+)%", stdout)


@pytest.mark.full  # two agents and one process more: make test-full
def test_the_printed_curve_is_the_whole_graph_s_under_two_agents():
    """`mgg train --backend node-halo --curve` under two agents printed one machine's share of the loss
    (0.778 against 1.946 on Cora); it prints the one process's curve."""
    train = ["-m", "mgg", "train", "--epochs", "5", "--seeds", "1", "--curve", "--quiet"]
    one = subprocess.run([sys.executable, *train], capture_output=True, text=True, timeout=TIMEOUT, env=worker_env())
    assert one.returncode == 0, one.stderr[-3000:]
    outs = _two_agents([*train, "--backend", "node-halo"], "printed")
    text = "".join(o for o, _ in outs)
    assert _printed(text) == _printed(one.stdout) and len(_printed(one.stdout)) == 5

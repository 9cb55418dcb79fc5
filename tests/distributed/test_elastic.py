"""A lost rank costs minutes, not the run (issue 68), with torchrun as a cluster launches it (two
agents on the loopback, c10d rendezvous, gloo): a rank killed (SIGKILL) in the middle of training,
or half-way through writing a checkpoint, is restarted with its group (--max-restarts) and the run
resumes from its last complete checkpoint, on the uninterrupted run's loss curve exactly
(deterministic mode), for halo, node-halo and the grid; a rank stopped (SIGSTOP) is named, with the
epoch, by every other rank within the timeout and a few seconds, and they exit (status 75). The
restarted group forms in a store that holds every earlier launch's keys (mgg.distributed.process):
checked alone with threads below. The failures are injected by tests/workers/elastic_worker.py."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.distributed.test_distributed import ROOT, TIMEOUT, worker_env

WORKER = os.path.join(ROOT, "tests", "workers", "elastic_worker.py")
EPOCHS, EVERY, VICTIM = "12", "3", "3"  # the victim: a rank of the second agent


def _agents(args: list, tag: str, restarts: int, nodes: int = 2, per_node: int = 2, **popen) -> list:
    env = worker_env({"GLOO_SOCKET_IFNAME": "lo"})
    port = 29400 + (os.getpid() + len(tag)) % 500
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--nproc-per-node", str(per_node)]
    cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"{tag}-{os.getpid()}"]
    cmd += ["--max-restarts", str(restarts), WORKER, *args]
    return [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **popen)
        for _ in range(nodes)
    ]


def _finish(agents: list) -> str:
    outs = [a.communicate(timeout=TIMEOUT) for a in agents]
    for a, (_, err) in zip(agents, outs, strict=True):
        assert a.returncode == 0, err[-3000:]
    return "".join(err for _, err in outs)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "curves.json"
    _finish(_agents([str(out), "-", EPOCHS, EVERY, VICTIM, "1", "halo", "node-halo", "grid"], "ref", 0))
    return json.loads(out.read_text())


@pytest.mark.full  # two agents, three restarts: make test-full (tests/conftest.py)
def test_killed_ranks_restart_and_resume_on_the_uninterrupted_curve(uninterrupted, tmp_path):
    """halo: the victim killed before epoch 7 (resumed from epoch 6); node-halo: killed while writing
    its file of epoch 6's checkpoint (resumed from epoch 3: the partial one is passed over); grid:
    killed before epoch 10 (resumed from 9)."""
    out = tmp_path / "curves.json"
    events = ["halo@kill:7", "node-halo@save:6", "grid@kill:10"]
    err = _finish(_agents([str(out), str(tmp_path), EPOCHS, EVERY, VICTIM, "1", *events], "kill", 3))
    assert json.loads(out.read_text()) == uninterrupted
    for backend, epoch in (("halo", 6), ("node-halo", 3), ("grid", 9)):
        assert f"resuming from {tmp_path / backend}/ckpt-000-{epoch:06d} at epoch {epoch} of seed 0" in err
    assert len(re.findall(r"victim rank 3: (kill|save) at", err)) == 3


@pytest.mark.full  # over 15 s on 2 cores: make test-full runs it
def test_a_killed_rank_restarts_and_resumes_on_the_uninterrupted_curve(tmp_path):
    """One agent of two ranks (make test's share): the halo backend, rank 1 killed before epoch 5; the
    restarted group resumes from epoch 3."""
    ref, out = tmp_path / "ref.json", tmp_path / "curves.json"
    _finish(_agents([str(ref), "-", "10", EVERY, "1", "1", "halo"], "one-ref", 0, nodes=1))
    events = ["halo@kill:5"]
    err = _finish(_agents([str(out), str(tmp_path), "10", EVERY, "1", "1", *events], "one", 1, nodes=1))
    assert json.loads(out.read_text()) == json.loads(ref.read_text())
    assert f"resuming from {tmp_path / 'halo'}/ckpt-000-000003 at epoch 3 of seed 0" in err


def test_a_stopped_rank_is_named_by_every_other_rank_within_the_timeout(tmp_path):
    """Three ranks, rank 1 stopped before epoch 4, a timeout of 6 s: ranks 0 and 2 each print the line
    naming rank 1 and the epoch within the timeout and a few seconds, and exit with status 75."""
    timeout_s, grace_s = 6.0, 5.0
    agent = _agents(
        [str(tmp_path / "c.json"), str(tmp_path), "30", "100", "1", str(timeout_s / 60), "halo@stop:4"],
        "stop",
        0,
        nodes=1,
        per_node=3,
        start_new_session=True,
    )[0]
    lines, stopped, victim, seen = {}, None, None, []
    deadline = time.monotonic() + TIMEOUT
    try:
        for line in agent.stderr:
            now = time.monotonic()
            seen.append(line)
            if "victim rank 1: stop" in line:
                stopped, victim = now, int(re.search(r"pid (\d+)", line).group(1))
            m = re.search(r"mgg: rank (\d) at epoch (\d+): waited 6 s for the other ranks: rank 1 did not arrive", line)
            if m:
                lines[int(m.group(1))] = (now, int(m.group(2)), line)
            if len(lines) == 2 or now > deadline:
                break
    finally:
        if victim is not None:
            os.kill(victim, signal.SIGKILL)  # the stopped rank (a session of its own)
        os.killpg(agent.pid, signal.SIGKILL)  # and the agent, which would wait 30 s for it
        agent.communicate(timeout=60)
    assert stopped is not None and sorted(lines) == [0, 2], "".join(seen)[-3000:]
    for rank, (when, epoch, line) in lines.items():
        assert epoch == 4, line
        assert when - stopped <= timeout_s + grace_s + 4.0, (rank, when - stopped)
        assert "ending the job (exit 75)" in line


def test_a_restarted_group_agrees_on_its_own_launch_not_an_earlier_one_s():
    """The keys of an earlier launch (its name, its ranks' answers) are still in the store, and rank 0
    of the new launch comes last: every rank still ends with the new launch's name."""
    from torch.distributed import TCPStore

    from mgg.distributed.process import _agree_on_launch

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    old = _launch(store, 3)  # a whole earlier launch
    names, errors = {}, []

    def rank(r, delay):
        time.sleep(delay)
        try:
            client = TCPStore("127.0.0.1", store.port, is_master=False)
            names[r] = _agree_on_launch(client, r, 3, __import__("datetime").timedelta(seconds=30))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=rank, args=(r, d)) for r, d in ((1, 0.0), (2, 0.1), (0, 1.0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert len(set(names.values())) == 1 and names[0] != old, (names, old)


def _launch(store, world: int) -> str:
    from datetime import timedelta

    from torch.distributed import TCPStore

    from mgg.distributed.process import _agree_on_launch

    names = {}

    def rank(r):
        client = TCPStore("127.0.0.1", store.port, is_master=False)
        names[r] = _agree_on_launch(client, r, world, timedelta(seconds=30))

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(set(names.values())) == 1
    return names[0]

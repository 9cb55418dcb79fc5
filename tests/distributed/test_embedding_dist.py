"""ShardedEmbeddingBag and its collection under torchrun (gloo, CPU): every rank's bags and the
gradient of its rows equal torch.nn.EmbeddingBag's over the whole batch on one process, with the
`halo` backend (mgg) and the `alltoall` baseline (tests/workers/embedding_worker.py does the checks)."""

import json
import os
import subprocess
import sys

import pytest

from tests.distributed.test_distributed import TIMEOUT, worker_env

WORKER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "workers", "embedding_worker.py")


@pytest.mark.parametrize("nproc", [2, 3, 4])
def test_ranks_match_embedding_bag(tmp_path, nproc):
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--standalone", WORKER, str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=worker_env())
    assert r.returncode == 0, r.stderr[-4000:]
    res = json.loads(out.read_text())
    assert res["ok"] and res["world"] == nproc
    assert res["traffic"]["halo"] > 0 and res["traffic"]["alltoall"] > 0  # rows did cross ranks

"""examples/dlrm.py: the small DLRM trains under torchrun with 2 gloo ranks (tables sharded by
ShardedEmbeddingBagCollection, sparse gradients) and its loss falls as with torch.nn.EmbeddingBag
on one process: the same curve, step by step (float64)."""

import json
import os
import subprocess
import sys

import pytest

from tests.distributed.test_distributed import TIMEOUT, worker_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "dlrm.py")
ARGS = ["--steps", "40", "--dtype", "float64"]


def _run(tmp_path, name, cmd):
    out = tmp_path / f"{name}.json"
    r = subprocess.run(
        cmd + [EXAMPLE, *ARGS, "--out", str(out)], capture_output=True, text=True, timeout=TIMEOUT, env=worker_env()
    )
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.mark.full  # over 15 s on 2 cores: make test-full runs it
def test_dlrm_example_loss_falls_as_with_embedding_bag(tmp_path):
    ranks = _run(
        tmp_path, "ranks", [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--standalone"]
    )
    ref = _run(tmp_path, "reference", [sys.executable])
    assert ranks["world"] == 2 and ref["world"] == 1
    a, b = ranks["losses"], ref["losses"]
    assert len(a) == len(b) == 40
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-8  # the same training, up to rounding
    assert sum(a[-5:]) / 5 < 0.85 * sum(a[:5]) / 5  # and it learns

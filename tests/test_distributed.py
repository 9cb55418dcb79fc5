"""Several processes (gloo, CPU) give the logits and gradients of the single-process run."""
import os
import pickle
import subprocess
import sys

import pytest
import torch

WORKER = r'''
import pickle, sys, torch, torch.distributed as dist
sys.path.insert(0, {tests!r})
from conftest import random_graph
import mgg
from mgg.datasets import bundled_planetoid_dir
from mgg.distributed import DistGraph
from mgg.io import load_planetoid
from mgg.nn.models import build

def case(kind):
    if kind == "cora-gcn":
        ds = load_planetoid(bundled_planetoid_dir(), "cora")
        return ds.graph, ds.x[:, :64].contiguous(), "gcn", 16
    g = random_graph(300, 3000, seed=11, skew=0.6)  # directed: the backward needs the transposed plan
    return g, torch.randn(300, 12, generator=torch.Generator().manual_seed(1)), "gin", 8

def run(kind, dg=None):
    g, x, model_kind, hidden = case(kind)
    torch.manual_seed(0)
    model = build(model_kind, x.size(1), 5, hidden, num_layers=2, dropout=0.0)
    if dg is None:
        x_in, graph = x.requires_grad_(), g
    else:
        x_in, graph = dg.local(x).clone().requires_grad_(), dg
    logits = model(x_in, graph)
    y = torch.arange(g.num_nodes) % 5
    y = y if dg is None else dg.local(y)
    loss = torch.nn.functional.cross_entropy(logits, y, reduction="sum") / g.num_nodes
    loss.backward()
    if dg is not None:
        for p in model.parameters():
            dist.all_reduce(p.grad)
    return logits.detach(), x_in.grad, {{n: p.grad for n, p in model.named_parameters()}}

kind, out = sys.argv[1], sys.argv[2]
if len(sys.argv) > 3:  # single process reference
    pickle.dump(run(kind), open(out, "wb"))
else:
    dist.init_process_group("gloo")
    g = case(kind)[0]
    dg = DistGraph(g)
    logits, xgrad, wgrads = run(kind, dg)
    parts = [None] * dg.world
    dist.all_gather_object(parts, (dg.row_begin, logits, xgrad))
    if dg.rank == 0:
        parts.sort(key=lambda p: p[0])
        pickle.dump((torch.cat([p[1] for p in parts]), torch.cat([p[2] for p in parts]), wgrads), open(out, "wb"))
    dist.destroy_process_group()
'''


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    path = tmp_path_factory.mktemp("dist") / "worker.py"
    path.write_text(WORKER.format(tests=os.path.dirname(__file__)))
    return path


def _run(worker, args, nproc=None):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--standalone"] \
        if nproc else [sys.executable]
    r = subprocess.run(cmd + [str(worker), *args], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.parametrize("kind", ["cora-gcn", "directed-gin"])
@pytest.mark.parametrize("nproc", [2, 4])
def test_ranks_match_single_process(worker, tmp_path, kind, nproc):
    ref_path, dist_path = tmp_path / "ref.pkl", tmp_path / "dist.pkl"
    _run(worker, [kind, str(ref_path), "single"])
    _run(worker, [kind, str(dist_path)], nproc)
    ref, got = pickle.load(open(ref_path, "rb")), pickle.load(open(dist_path, "rb"))
    # fp32 sums in a different order across ranks: agreement to 1e-5 relative
    torch.testing.assert_close(got[0], ref[0], rtol=1e-5, atol=1e-6)   # logits
    torch.testing.assert_close(got[1], ref[1], rtol=1e-5, atol=1e-7)   # input gradients
    for name, g in ref[2].items():                                      # weight gradients
        torch.testing.assert_close(got[2][name], g, rtol=1e-4, atol=1e-7)


def test_torchrun_train_cli():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--standalone",
                        "-m", "mgg", "train", "--epochs", "30", "--seeds", "1", "--quiet"],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "2 ranks, backend halo" in r.stdout and "test accuracy" in r.stdout


def test_needs_initialised_group():
    from mgg import MggError
    from mgg.distributed import DistGraph
    from mgg.graph import Graph

    with pytest.raises(MggError, match="not initialised"):
        DistGraph(Graph.from_edges([0], [1], 2))

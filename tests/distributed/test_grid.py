"""Plexus's 3D grid (mgg.distributed.grid) on CPU processes (gloo): for every grid of 4 and of 8
ranks (1D, 2D and 3D shapes; uneven shards, empty ones included), GCN, SAGE and GIN, and 2 and 3
layers, the logits, loss and gradients (input, every weight, bias and root weight) equal one
process's stack of mgg.nn.GCNConv, SAGEConv or GINConv, and the model's bytes per axis those the
run counts; the double permutation balances the shards of a lattice in row-major order; mgg train
--backend grid trains as one process; the shapes' arithmetic."""

import functools
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch

from mgg import MggError
from mgg.distributed.grid import GridShape, Orders, balance, factorizations
from mgg.functional import node_dropout
from mgg.graph import Graph
from mgg.testing import assert_same_formula
from tests.distributed.grid_case import CONVS, DEPTHS, case, one_layer
from tests.distributed.test_distributed import ROOT, TIMEOUT, worker_env

WORKER = os.path.join(ROOT, "tests", "workers", "grid_worker.py")


def reference(kind: str, layers: int, dropout: float = 0.0) -> dict:
    """One process: `kind` layers (relu between) with the case's weights; mean cross entropy; with
    dropout, each layer's input dropped by node id (mgg.functional.node_dropout, GridNet's draw)."""
    graph, x, labels, mask, weights, biases, roots = case(layers)
    made = [one_layer(kind, w, b, r) for w, b, r in zip(weights, biases, roots, strict=True)]
    convs = [m[0] for m in made]
    x = x.clone().requires_grad_(True)
    h = x
    for i, conv in enumerate(convs):
        h = node_dropout(h, torch.arange(h.size(0)), dropout, 0, 0, i) if dropout else h
        h = conv(h, graph)
        if i < len(convs) - 1:
            h = torch.relu(h)
    loss = torch.nn.functional.cross_entropy(h[mask], labels[mask])
    loss.backward()
    return dict(
        logits=h.detach(),
        loss=float(loss.detach()),
        x_grad=x.grad,
        w_grads=[m[1].grad.T for m in made],
        b_grads=[m[2].grad for m in made],
        r_grads=[m[3].grad.T for m in made if m[3] is not None],
    )


@pytest.fixture(scope="module")
def grid_runs(tmp_path_factory):
    """world size -> {(grid, layers): the workers' result}, each world launched once for all its grids."""
    runs = {}

    def get(world: int, *extra) -> dict:
        key = (world, *extra)
        if key not in runs:
            out = tmp_path_factory.mktemp("grid") / f"grid{world}.pkl"
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={world}", "--standalone"]
            r = subprocess.run(
                cmd + [WORKER, str(out), *extra], capture_output=True, text=True, timeout=TIMEOUT, env=worker_env()
            )
            assert r.returncode == 0, r.stderr[-3000:]
            runs[key] = pickle.load(open(out, "rb"))
        return runs[key]

    return get


def check_equal(got: dict, ref: dict) -> None:
    assert got["copies_agree"]
    assert_same_formula(got["logits"], ref["logits"], msg="logits")
    for loss in got["losses"]:
        assert abs(loss - ref["loss"]) <= 1e-10 * abs(ref["loss"]), (loss, ref["loss"])
    assert_same_formula(got["x_grad"], ref["x_grad"], msg="input gradient")
    for i, (g, r) in enumerate(zip(got["w_grads"], ref["w_grads"], strict=True)):
        assert_same_formula(g, r, msg=f"weight {i} gradient")
    for i, (g, r) in enumerate(zip(got["b_grads"], ref["b_grads"], strict=True)):
        assert_same_formula(g, r, msg=f"bias {i} gradient")
    for i, (g, r) in enumerate(zip(got["r_grads"], ref["r_grads"], strict=True)):
        assert_same_formula(g, r, msg=f"root weight {i} gradient")


@pytest.mark.parametrize("layers", DEPTHS)
@pytest.mark.parametrize("conv", CONVS)
@pytest.mark.parametrize("grid", [str(s) for s in factorizations(4)])
def test_every_grid_of_four_equals_one_process(grid_runs, grid, conv, layers):
    check_equal(grid_runs(4)[(grid, conv, layers)], reference(conv, layers))


@pytest.mark.full  # eight processes on two cores: make test-full (tests/conftest.py)
@pytest.mark.parametrize("layers", DEPTHS)
@pytest.mark.parametrize("conv", CONVS)
@pytest.mark.parametrize("grid", [str(s) for s in factorizations(8)])
def test_every_grid_of_eight_equals_one_process(grid_runs, grid, conv, layers):
    check_equal(grid_runs(8)[(grid, conv, layers)], reference(conv, layers))


@pytest.mark.parametrize("grid", ["2x2x1", "1x2x2"])
def test_without_the_permutation_the_same(grid_runs, grid):
    check_equal(grid_runs(4, "--no-permute", "--grids", "2x2x1", "1x2x2")[(grid, "gcn", 3)], reference("gcn", 3))


@pytest.mark.parametrize("grid", ["1x2x2", "1x1x4", "2x1x2"])
def test_dropout_on_grids_of_four_equals_one_process(grid_runs, grid):
    """With dropout (every layer's input, drawn by node), grids whose layer 0 gathers its input rows
    over z (the gathered table dropped in place) equal the one process's draw."""
    runs = grid_runs(4, "--dropout", "0.5", "--grids", "1x2x2", "1x1x4", "2x1x2")
    for conv, layers in (("gcn", 2), ("sage", 3), ("gin", 2)):
        check_equal(runs[(grid, conv, layers)], reference(conv, layers, dropout=0.5))


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="a GPU, which four ranks share (gloo): bench/gpu_verify.sh grid"
)
@pytest.mark.parametrize("grid", ["2x2x1", "1x2x2"])
def test_grids_of_four_on_one_gpu(grid_runs, grid):
    """CUDA tensors (float32, mgg's CUDA kernel as the SpMM, gloo staging through the host) against
    the one-process float64 reference, within float32's rounding of these small sums."""
    runs = grid_runs(4, "--device", "cuda", "--grids", "2x2x1", "1x2x2")
    for conv in CONVS:
        for layers in DEPTHS:
            got, ref = runs[(grid, conv, layers)], reference(conv, layers)
            assert got["logits"].dtype == torch.float32 and got["copies_agree"]
            pairs = [("logits", got["logits"], ref["logits"]), ("input gradient", got["x_grad"], ref["x_grad"])]
            pairs += [
                (f"weight {i}", g, r) for i, (g, r) in enumerate(zip(got["w_grads"], ref["w_grads"], strict=True))
            ]
            pairs += [(f"bias {i}", g, r) for i, (g, r) in enumerate(zip(got["b_grads"], ref["b_grads"], strict=True))]
            pairs += [(f"root {i}", g, r) for i, (g, r) in enumerate(zip(got["r_grads"], ref["r_grads"], strict=True))]
            for what, g, r in pairs:
                scale = float(r.abs().max())
                torch.testing.assert_close(g.double(), r, rtol=1e-4, atol=1e-5 * scale, msg=f"{conv} {layers}: {what}")


def test_factorizations_and_shapes():
    assert len(factorizations(8)) == 10 and len(factorizations(4)) == 6 and len(factorizations(1)) == 1
    assert all(s.size == 8 for s in factorizations(8))
    s = GridShape.parse("4x2x1")
    assert (s.x, s.y, s.z) == (4, 2, 1) and str(s) == "4x2x1"
    g = GridShape(2, 2, 2)  # rank = z * Gx * Gy + x * Gy + y
    assert [g.rank(**g.coords(r)) for r in range(8)] == list(range(8))
    assert g.coords(6) == {"z": 1, "x": 1, "y": 0}
    assert g.groups("y") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert g.inside_node("y", 4) and g.inside_node("x", 4) and not g.inside_node("z", 4)
    assert not GridShape(1, 8, 1).inside_node("y", 4)
    with pytest.raises(MggError, match="GXxGYxGZ"):
        GridShape.parse("4x2")
    with pytest.raises(MggError, match="8 ranks, but the world has 4"):
        GridShape(2, 2, 2).check_world(4)


def lattice(side: int) -> Graph:
    """A side x side 4-neighbour lattice, ids in row-major order (geography)."""
    idx = np.arange(side * side).reshape(side, side)
    src = np.concatenate([idx[:, :-1].ravel(), idx[:, 1:].ravel(), idx[:-1].ravel(), idx[1:].ravel()])
    dst = np.concatenate([idx[:, 1:].ravel(), idx[:, :-1].ravel(), idx[1:].ravel(), idx[:-1].ravel()])
    return Graph.from_edges(torch.from_numpy(src), torch.from_numpy(dst), side * side)


def test_double_permutation_balances_a_lattice():
    """8 x 8 shards of a 256 x 256 lattice in row-major order: badly imbalanced as given (only the
    diagonal blocks hold edges), within 5% of the mean after the double permutation."""
    g = lattice(256)
    plain = balance(g, 8, 8, Orders.make(g.num_nodes, permute=False))
    permuted = balance(g, 8, 8, Orders.make(g.num_nodes, permute=True, seed=0))
    assert plain > 7.0, plain
    assert permuted <= 1.05, permuted


def check_bytes(got: dict, grid: str, conv: str, layers: int) -> None:
    """mgg.distributed.grid.model's bytes per axis equal those the run counted at its collectives."""
    from mgg.distributed.grid.model import rank_bytes

    _, x, _, _, weights, _, _ = case(layers)
    dims = [x.size(1)] + [w.size(1) for w in weights]
    model = rank_bytes(GridShape.parse(grid), x.size(0), dims, x.element_size(), input_grad=True, conv=conv)
    for axis in "xyz":
        assert model[axis].sum() == pytest.approx(got["moved"][axis], rel=1e-12), (axis, got["moved"])
    assert sum(got["moved"].values()) > 0 or grid == "1x1x1"


@pytest.mark.parametrize("grid", [str(s) for s in factorizations(4)])
def test_model_bytes_equal_the_runs_grids_of_four(grid_runs, grid):
    for layers in DEPTHS:
        for conv in CONVS:
            check_bytes(grid_runs(4)[(grid, conv, layers)], grid, conv, layers)


@pytest.mark.full
@pytest.mark.parametrize("grid", [str(s) for s in factorizations(8)])
def test_model_bytes_equal_the_runs_grids_of_eight(grid_runs, grid):
    for layers in DEPTHS:
        for conv in CONVS:
            check_bytes(grid_runs(8)[(grid, conv, layers)], grid, conv, layers)


def test_model_ranks_ogbn_products_as_plexus_figure_5():
    """64 GPUs of 4 per node at Perlmutter's rates (4 x 25 GB/s NICs per node; NVLink 3, 300 GB/s
    one way per GPU): 3D grids ahead of the 2D and 1D ones, a symmetric one first."""
    from mgg.distributed.grid.model import OGBN_PRODUCTS, Network, rank_grids

    ranked = rank_grids(64, OGBN_PRODUCTS, Network(4, 300, 100))
    dims3 = [p for p in ranked if min(p.shape.x, p.shape.y, p.shape.z) > 1]
    assert str(ranked[0].shape) == "4x4x4"
    best_1d = min(i for i, p in enumerate(ranked) if sorted((p.shape.x, p.shape.y, p.shape.z))[:2] == [1, 1])
    assert all(ranked.index(p) < best_1d for p in dims3[:3])


TRAIN = ["-m", "mgg", "train", "--backend", "grid", "--epochs", "4", "--seeds", "1", "--dropout", "0.5"]


def _grid_curve(progress: str, summary: str) -> tuple:
    """Per epoch (loss, val, test) from rank 0's progress bar, and the accuracies reached."""
    import re

    rows = list(dict.fromkeys(re.findall(r"loss=([0-9.]+), test=([0-9.]+), val=([0-9.]+)", progress)))
    reached = re.findall(r"test ([0-9.]+)% \(val ([0-9.]+)% at epoch (\d+)\)", summary)
    assert rows and reached, (progress[-1000:], summary[-1000:])
    return [tuple(float(v) for v in r) for r in rows], reached


def _same_curve(a: tuple, b: tuple) -> None:
    (rows_a, reached_a), (rows_b, reached_b) = a, b
    assert reached_a == reached_b and len(rows_a) == len(rows_b)
    for ra, rb in zip(rows_a, rows_b, strict=True):
        assert ra[1:] == rb[1:] and abs(ra[0] - rb[0]) <= 2e-4, (ra, rb)


@functools.cache
def _one_process_curve(model: str) -> tuple:
    """`mgg train --backend grid --model MODEL` in one process (a 1x1x1 grid), dropout on."""
    cmd = [sys.executable, *TRAIN, "--model", model, "--grid", "1x1x1"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=worker_env())
    assert r.returncode == 0, r.stderr[-3000:]
    assert "1 ranks, backend grid, grid 1x1x1" in r.stdout
    return _grid_curve(r.stderr, r.stdout)


@pytest.fixture(scope="module")
def one_process_curve():
    return _one_process_curve("gcn")


def test_train_cli_on_a_grid_of_four_trains_as_one_process(one_process_curve):
    """torchrun with 4 ranks on a 2x2x1 grid: every epoch's loss and accuracies are the one
    process's (the dropout mask is the same for every grid)."""
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node=4",
        "--standalone",
        *TRAIN,
        "--grid",
        "2x2x1",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT, env=worker_env())
    assert r.returncode == 0, r.stderr[-3000:]
    assert "4 ranks, backend grid, grid 2x2x1 (Y groups inside a node: yes)" in r.stdout
    _same_curve(_grid_curve(r.stderr, r.stdout), one_process_curve)


@pytest.mark.full  # two agents: make test-full (tests/conftest.py)
def test_two_torchrun_agents_train_as_one_process():
    """Two torchrun agents of two ranks each (c10d rendezvous on the loopback, gloo) train GraphSAGE
    (the GCN's 4 ranks are above; SAGE drops only between layers and decays every weight): a 2x2x1
    grid's Y groups are each agent's ranks, and the epochs are the one process's."""
    port = 29900 + os.getpid() % 90
    agent = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2"]
    agent += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"grid-{os.getpid()}"]
    env = worker_env({"GLOO_SOCKET_IFNAME": "lo"})
    agents = [
        subprocess.Popen(
            [*agent, *TRAIN, "--model", "sage", "--grid", "2x2x1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outs = [a.communicate(timeout=TIMEOUT) for a in agents]
    for a, (_, err) in zip(agents, outs, strict=True):
        assert a.returncode == 0, err[-3000:]
    text = "".join(o for o, _ in outs)
    assert "4 ranks, backend grid, grid 2x2x1 (Y groups inside a node: yes)" in text, text[-2000:]
    _same_curve(_grid_curve("".join(e for _, e in outs), text), _one_process_curve("sage"))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "gin"], "mgg train --backend grid trains gcn and sage"),
        (["--grid", "2x2"], "GXxGYxGZ"),
        (["--grid", "2x2x1"], "4 ranks, but the world has 1"),
    ],
)
def test_train_cli_errors_are_one_line(args, message):
    r = subprocess.run(
        [sys.executable, *TRAIN, *args], capture_output=True, text=True, timeout=TIMEOUT, env=worker_env()
    )
    assert r.returncode != 0
    assert message in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]


@pytest.fixture
def one_rank_group(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield None
    dist.destroy_process_group()


@pytest.mark.parametrize("input_dropout", [True, False])
def test_dropout_falls_where_the_model_puts_it(one_rank_group, input_dropout):
    """GCN drops each layer's input; SAGE (input_dropout=False) only between layers: one layer of
    it trains as it evaluates, two do not."""
    from mgg.distributed.grid import Grid, GridNet
    from mgg.testing import random_graph

    g = random_graph(60, 400, seed=5)
    x = torch.randn(60, 8, generator=torch.Generator().manual_seed(1))
    for dims in ([8, 5], [8, 6, 5]):
        net = GridNet(Grid(GridShape(1, 1, 1), "cpu"), g, dims, conv="sage", dropout=0.5, input_dropout=input_dropout)
        x_shard = net.input_shard(x)
        with torch.no_grad():
            trained = net.train()(x_shard)
            evaluated = net.eval()(x_shard)
        dropped = not torch.equal(trained, evaluated)
        assert dropped == (input_dropout or len(dims) > 2), dims


def test_relu_between_layers_zeroes_its_gradient_in_place_only_when_it_may():
    """The ReLU between grid layers (net._ReluOwnedGrad): relu's value and gradient; an owned contiguous
    gradient zeroed where it lies; a broadcast one (a sum's) and a double backward out of place."""
    from mgg.distributed.grid.net import _ReluOwnedGrad

    x = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    g = torch.randn(6, 4, dtype=torch.float64)
    y = _ReluOwnedGrad.apply(x * 1.0)
    assert torch.equal(y, torch.relu(x.detach()))
    seen = g.clone()
    y.backward(seen)
    assert torch.equal(x.grad, g * (x.detach() > 0)) and torch.equal(seen, x.grad)  # written where it lay
    x.grad = None
    _ReluOwnedGrad.apply(x * 1.0).sum().backward()  # an expanded gradient: one element for every place
    assert torch.equal(x.grad, (x.detach() > 0).double())
    assert torch.autograd.gradgradcheck(lambda t: _ReluOwnedGrad.apply(t * 1.0), (x,))

"""The 1.5D backends (sa-1.5d, cagnet-1.5d: mgg.distributed.backends.onefive) on CPU processes (gloo):
for P = 4 (and 8, `full`) ranks and every replication c dividing P, both stage rules, GCN, SAGE and GIN
of 2 and 3 layers over grid_case's directed graph (uneven blocks, empty ones at 8 ranks): the logits,
the loss and the gradients of the input and of every weight equal one process's stack of mgg.nn's
layers (float64); the replicas of a block agree bit for bit and every rank holds the same weight
gradients (reduced over the process column, not the world); the bytes counted at the collectives
are the note's formulas (mgg.distributed.onefive.volume) per rank and direction, and c = 1's
sa-1.5d moves what the halo backend moves. Without processes: the stage rules and the closed forms."""

import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from mgg import MggError
from mgg.distributed.onefive.layout import Layout, check_replication, chunks
from mgg.distributed.onefive.volume import rank_bytes, totals
from mgg.plan.ranges import split_ranges
from mgg.plan.stats import partition_stats, volume_matrix
from mgg.testing import random_graph
from tests.distributed.grid_case import CONVS, DEPTHS
from tests.distributed.test_distributed import ROOT, TIMEOUT, worker_env
from tests.distributed.test_grid import check_equal, reference

WORKER = os.path.join(ROOT, "tests", "workers", "onefive_worker.py")


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """world -> every case of the worker at that many ranks (one launch each)."""
    runs = {}

    def get(world: int) -> dict:
        if world not in runs:
            out = tmp_path_factory.mktemp("onefive") / f"w{world}.pkl"
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={world}", "--standalone"]
            r = subprocess.run(
                cmd + [WORKER, str(out)], capture_output=True, text=True, timeout=TIMEOUT, env=worker_env()
            )
            assert r.returncode == 0, r.stderr[-3000:]
            runs[world] = pickle.load(open(out, "rb"))
        return runs[world]

    return get


def _cases(world: int) -> list:
    return [
        (a, c, rule, conv, layers)
        for a in ("sa-1.5d", "cagnet-1.5d")
        for c in [d for d in range(1, world + 1) if world % d == 0]
        for rule in ("balanced", "cagnet")
        for conv in CONVS
        for layers in DEPTHS
        if rule == "balanced" or (conv == "gcn" and layers == 2)
    ]


def check_case(got: dict) -> None:
    assert got["copies_agree"] and got["same_grads_everywhere"]
    for rank, counted, want in got["bytes"]:
        for direction in ("forward", "backward"):
            for kind in ("recv", "send", "row"):
                assert counted[direction][kind] == pytest.approx(want[direction][kind]), (rank, direction, kind)


@pytest.mark.parametrize("case", _cases(4), ids=lambda c: "-".join(map(str, c)))
def test_four_ranks_equal_one_process(launched, case):
    got = launched(4)[case]
    _, _, _, conv, layers = case
    check_equal(dict(got, losses=[got["loss"]]), reference(conv, layers))
    check_case(got)


@pytest.mark.full  # eight processes on two cores: make test-full (tests/conftest.py)
@pytest.mark.parametrize("case", _cases(8), ids=lambda c: "-".join(map(str, c)))
def test_eight_ranks_equal_one_process(launched, case):
    got = launched(8)[case]
    _, _, _, conv, layers = case
    check_equal(dict(got, losses=[got["loss"]]), reference(conv, layers))
    check_case(got)


@pytest.mark.parametrize("conv", CONVS)
def test_one_replica_moves_what_the_halo_backend_moves(launched, conv):
    """c = 1: sa-1.5d's exchange is the halo backend's, row for row (both counted at the collectives)."""
    runs = launched(4)
    sa, halo = runs[("sa-1.5d", 1, "balanced", conv, 2)], runs[("halo", 1, "balanced", conv, 2)]
    assert [b[1] for b in sa["bytes"]] == [b[1] for b in halo["bytes"]]
    assert all(b[1]["forward"]["recv"] > 0 for b in halo["bytes"])


# ---- without processes ------------------------------------------------------------------------------
@pytest.mark.parametrize("world,c", [(4, 1), (4, 2), (4, 4), (8, 2), (8, 4), (8, 8), (6, 3), (12, 2)])
@pytest.mark.parametrize("rule", ["balanced", "cagnet"])
def test_every_block_is_in_one_chunk(world, c, rule):
    b = world // c
    ch = chunks(b, c, rule)
    covered = [k for first, end in ch for k in range(first, end)]
    assert sorted(covered) == list(range(b))
    if rule == "balanced":
        assert max(e - f for f, e in ch) - min(e - f for f, e in ch) <= 1
    if rule == "cagnet" and c * c > world:  # CAGNET's degenerate case: the last column does every stage
        assert ch[-1] == (0, b) and all(f == e for f, e in ch[:-1])
    lay = Layout(world, c, world - 1, rule)
    assert all(lay.column_of(k) == next(j for j, (f, e) in enumerate(ch) if f <= k < e) for k in range(b))


def test_a_replication_that_does_not_divide_is_refused_in_one_line():
    with pytest.raises(MggError, match=r"replication c=3 must divide the 8 ranks \(one of \[1, 2, 4, 8\]\)"):
        check_replication(8, 3)
    with pytest.raises(MggError, match="stage rule"):
        chunks(4, 2, "round-robin")


@pytest.mark.parametrize("c", [1, 2, 4, 8])
def test_closed_forms(c):
    """Totals of the formulas: sa-1.5d receives the b-way partition's halo rows (km1) and its busiest
    sender sends the b-way partition's largest send volume; cagnet-1.5d receives (b - 1) n rows; the
    row all-reduces move 2 (c - 1) n rows; c = 1 has no row collective."""
    world, f, e = 8, 16, 4
    g = random_graph(400, 5000, seed=4, skew=0.6)
    b = world // c
    bounds = split_ranges(g.rowptr, b)
    volume, _ = volume_matrix(g, bounds)
    sizes = np.diff(bounds)
    ranks, total = partition_stats(g, bounds)
    sa = totals("sa-1.5d", world, c, "balanced", volume, sizes, f, e)
    assert sa["total_recv"] == total["halo_rows"] * f * e
    assert sa["max_send"] == max(r["send_rows"] for r in ranks) * f * e
    assert sa["total_row"] == pytest.approx(2 * (c - 1) * g.num_nodes * f * e)
    cag = totals("cagnet-1.5d", world, c, "balanced", volume, sizes, f, e)
    assert cag["total_recv"] == (b - 1) * g.num_nodes * f * e
    one = rank_bytes("sa-1.5d", Layout(world, c, 0), volume, sizes, f, e)
    assert one["backward"]["recv"] == one["forward"]["send"] and one["backward"]["send"] == one["forward"]["recv"]

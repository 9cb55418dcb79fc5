"""Bipartite message passing over ranks (gloo, CPU, float64): a DistGraph of size (N_src, N_dst)
whose ranks own ranges of sources and of destinations; each rank passes its shard
(local_src(x_src), local_dst(x_dst)) to SAGEConv (mean, max, min), GINConv (add, max) and
GATConv (with x_dst, and (x_src, None) with size) over the halo and allgather backends, with
more sources than destinations and the reverse (ranks owning part of their range's sources or
destinations, or none). The outputs and the gradients of x_src, x_dst and every parameter
(summed over ranks) equal PyG's own layer on the whole graph in one process. One torchrun
launch per rank count runs every case (tests/workers/bipartite_worker.py); wrong inputs are
one-line MggErrors on every rank."""

import os
import pickle
import subprocess
import sys

import pytest

from mgg.testing import assert_same_formula
from tests.distributed.test_distributed import TIMEOUT, worker_env
from tests.workers.bipartite_worker import BACKENDS, LAYERS, SHAPES

WORKER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "workers", "bipartite_worker.py")
RANKS = (2, 4)


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    """nproc -> the worker's result for that many ranks, each launched once."""
    done = {}

    def get(nproc: int) -> dict:
        if nproc not in done:
            out = tmp_path_factory.mktemp("bipartite") / f"{nproc}.pkl"
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--standalone"]
            r = subprocess.run(
                cmd + [WORKER, str(out)], capture_output=True, text=True, timeout=TIMEOUT, env=worker_env()
            )
            assert r.returncode == 0, r.stderr[-3000:]
            done[nproc] = pickle.load(open(out, "rb"))
        return done[nproc]

    return get


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("layer", list(LAYERS))
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("nproc", RANKS)
def test_bipartite_ranks_match_pyg(launches, nproc, backend, layer, shape):
    compared = launches(nproc)["cases"][(backend, layer, shape)]
    assert {"out", "x_src.grad"} <= set(compared)
    assert ("x_dst.grad" in compared) == (layer != "gat-x-none")
    for name, (ours, theirs) in compared.items():
        if theirs is None:  # a parameter PyG's layer does not use here (att_dst without x_dst)
            assert ours is None, name
            continue
        assert ours is not None, name
        assert_same_formula(ours, theirs, msg=f"{layer} {shape} {backend} {nproc} ranks: {name}")


ERRORS = {
    "size-not-a-pair": "size must be a pair of positive ints (N_src, N_dst), got (37,)",
    "size-other-nodes": "held over max(N_src, N_dst) = 38 nodes (Graph.from_edge_index(edge_index, max(size))), got 37",
    "source-past-size": "an edge names source 36, but size has 31 sources",
    "destination-past-size": "an edge names a destination >= 10, but size has 10 destinations",
    "partition-not-range": "a bipartite graph is split by range (partition 'range' or an identity mgg.Partition)",
    "local-of-bipartite": "DistGraph.local: the graph is bipartite (37, 23) (two node sets); use local_src",
    "gather-of-bipartite": "DistGraph.gather: the graph is bipartite (37, 23) (two node sets); use gather_src",
    "local-src-rows": "a per-node tensor has 23 rows but the graph has 37 sources",
    "gather-dst-rows": "rows given but it owns",
    "x-src-shard-rows": "x_src rows and",
    "x-dst-shard-rows": "pass its shards: local_src(x_src), local_dst(x_dst)",
    "size-not-the-graphs": "SAGEConv: size (37, 24) is not the DistGraph's (N_src, N_dst) (37, 23)",
    "square-graph-pair": "the DistGraph is square; a bipartite graph is DistGraph(..., size=(N_src, N_dst))",
    "gat-attention-weights": "GATConv: return_attention_weights needs a [2, E] edge_index or a torch sparse adjacency",
}


def test_bipartite_wrong_inputs_are_one_line_errors(launches):
    """Sizes that do not fit the graph, a relabelling partition, the square graph's local/gather,
    shards of the wrong sizes, another size, and GAT's attention weights: one line each."""
    found = launches(RANKS[0])["errors"]
    assert set(found) == set(ERRORS)
    for what, message in ERRORS.items():
        assert found[what] is not None, f"{what}: nothing was raised"
        assert message in found[what] and "\n" not in found[what], (what, found[what])

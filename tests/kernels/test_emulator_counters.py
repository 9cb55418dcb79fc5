"""The emulator's memory counters (csrc/tests/simt/counters.cpp, kernels/memory.cuh): on graphs
whose traffic can be written down by hand, the aggregation kernels' requests, 32-byte sectors,
active lanes, bytes and warp shuffles are exactly what the access pattern implies (lanes own
columns: one request per edge and 32 columns, a row's bytes in whole sectors at 256-byte
aligned tables; one load of the edge arrays per partition). These are the quantities Nsight
Compute reports (l1tex__t_requests / l1tex__t_sectors of global loads, thread instructions per
warp instruction), so a GPU run can check them."""

import math

import numpy as np
import pytest
import torch

from mgg import Config, Graph, Plan
from mgg.runtime.remote_reads import remote_read_bytes
from tests import emulator
from tests.emulated_ops import aggregate

pytestmark = pytest.mark.skipif(emulator.available() is not None, reason=str(emulator.available()))

ELEM = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2}


def regular_graph(n: int, k: int, seed: int = 0) -> Graph:
    """Every row of in-degree k, sources at random."""
    rng = np.random.default_rng(seed)
    return Graph.from_edges(rng.integers(0, n, n * k), np.repeat(np.arange(n), k), n)


def by_region(counters: dict) -> dict:
    """Loads summed per region (over the sites that read it)."""
    out = {}
    for (_, region), v in counters["loads"].items():
        acc = out.setdefault(region, dict.fromkeys(emulator.LOAD_FIELDS, 0))
        for f in emulator.LOAD_FIELDS:
            acc[f] += v[f]
    return out


def expected_rows(edges: int, dim: int, elem: int) -> dict:
    """A warp reads a source row 32 columns per instruction (lanes own columns): per edge,
    ceil(D / 32) requests, each of its active lanes' bytes in whole sectors."""
    chunks = [min(32, dim - j) for j in range(0, dim, 32)]
    return dict(
        requests=edges * len(chunks),
        sectors=edges * sum(math.ceil(a * elem / 32) for a in chunks),
        active_lanes=edges * dim,
        lane_slots=edges * 32 * len(chunks),
        bytes=edges * dim * elem,
    )


SHAPES = [(torch.float32, 16), (torch.float32, 32), (torch.float32, 72), (torch.float16, 64), (torch.bfloat16, 256)]


@pytest.mark.parametrize("dtype,dim", SHAPES, ids=lambda v: str(v).removeprefix("torch."))
def test_row_and_edge_loads_of_one_rank(tmp_path, dtype, dim):
    """One rank, 64 rows of in-degree 8, ps = 4: rows as expected_rows says (at D = 16 fp32 half
    the lanes idle and a request moves 64 bytes; fp16 at D = 64 moves 64 bytes per request,
    2 bytes per lane); the column ids one request per partition of 4 edges (4 of 32 lanes
    active); three shuffles per edge (column, PE, weight)."""
    g = regular_graph(64, 8)
    x = torch.randn(64, dim).to(dtype)
    aggregate(tmp_path, Plan(g, 1), x, Config(4, 1, 2), counters=True)
    c = emulator.counters_of(tmp_path / "rank0")
    loads = by_region(c)
    assert loads["table"] == expected_rows(g.num_edges, dim, ELEM[dtype])
    parts = g.num_edges // 4
    assert loads["local_col"] == dict(
        requests=parts, sectors=parts, active_lanes=g.num_edges, lane_slots=32 * parts, bytes=4 * g.num_edges
    )
    assert set(loads) == {"table", "local_col"}  # unweighted, one rank: no weights, PEs or remote rows
    assert c["warp_calls"] == {"__shfl_sync": 3 * g.num_edges}


@pytest.mark.parametrize("source", ["table", "direct"])
def test_remote_rows_are_counted_where_they_are_read(tmp_path, source):
    """Two ranks over one weighted graph: every edge's row is read once, from this rank's table
    or, for a remote edge, from the halo table (table source) or the owner's table through a
    peer pointer (direct); the weights are loaded with the column ids."""
    rng = np.random.default_rng(1)
    n, k, dim = 96, 6, 40
    g = Graph.from_edges(rng.integers(0, n, n * k), np.repeat(np.arange(n), k), n, rng.uniform(0.5, 2, n * k))
    plan = Plan(g, 2)
    x = torch.randn(n, dim)
    aggregate(tmp_path, plan, x, Config(8, 2, 2), source, counters=True)
    for r in range(2):
        shard = plan.shard(r)
        loads = by_region(emulator.counters_of(tmp_path / f"rank{r}"))
        local_rows, remote_rows = ("table", "remote_table") if source == "table" else (f"peer{r}", f"peer{1 - r}")
        assert loads[local_rows] == expected_rows(shard.num_local_edges, dim, 4)
        assert loads[remote_rows] == expected_rows(shard.num_remote_edges, dim, 4)
        for part in ("local", "remote"):
            edges = getattr(shard, f"num_{part}_edges")
            assert loads[f"{part}_col"]["active_lanes"] == loads[f"{part}_weight"]["active_lanes"] == edges
        if source == "direct":
            assert loads["remote_pe"]["active_lanes"] == shard.num_remote_edges


def peer_bytes(counters: dict, rank: int, source: str) -> int:
    """The bytes a rank's step read from peers' tables: direct loads from peer regions, or (gets)
    the rows the gets landed in shared memory, each read once from there."""
    loads = by_region(counters)
    if source == "direct":
        return sum(v["bytes"] for k, v in loads.items() if k.startswith("peer") and k != f"peer{rank}")
    return loads.get("shared", {"bytes": 0})["bytes"]


@pytest.mark.parametrize("source", ["direct", "get-warp"])
def test_the_once_mode_reads_each_remote_row_once(tmp_path, source):
    """Issue 34. Three ranks over a graph whose remote sources are each read by several edges:
    MGG's per-edge fetch reads remote_edges rows from peers; the `once` mode's halo gather reads
    each of the rank's halo rows once (its output: exactly those rows), and its aggregation then
    reads them from the local halo table."""
    rng = np.random.default_rng(2)
    n, k, dim = 120, 16, 24
    g = Graph.from_edges(rng.integers(0, n, n * k), np.repeat(np.arange(n), k), n)
    plan, cfg = Plan(g, 3), Config(4, 2, 2)
    x = torch.randn(n, dim)
    completion = "proxy" if source.startswith("get") else "loadstore"
    aggregate(tmp_path / "edge", plan, x, cfg, source, completion, counters=True)
    halo = aggregate(tmp_path / "gather", plan, x, cfg, source, completion, counters=True, halo_gather=True)
    shards = [plan.shard(r) for r in range(3)]
    assert torch.equal(halo, x[torch.from_numpy(np.concatenate([s.halo_nodes for s in shards]))])
    for r, shard in enumerate(shards):
        per_edge = peer_bytes(emulator.counters_of(tmp_path / "edge" / f"rank{r}"), r, source)
        once = peer_bytes(emulator.counters_of(tmp_path / "gather" / f"rank{r}"), r, source)
        assert per_edge == shard.num_remote_edges * dim * 4
        assert once == shard.num_halo * dim * 4
        model = remote_read_bytes(shard, dim, 4)  # the tuner's cost model counts the same bytes
        assert (model["per-edge"][0], model["once"][0]) == (per_edge, once)
        assert shard.num_remote_edges > 1.5 * shard.num_halo  # the graph makes the difference visible

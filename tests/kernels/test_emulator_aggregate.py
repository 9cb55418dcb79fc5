"""The aggregation kernels' own CUDA source (csrc/kernels/) run by the SIMT emulator on the CPU
(simt/emulator.py): the range kernel and its fixup with every source (halo table, peer
pointers, NVSHMEM get at thread, warp and block scope, completed over loads/stores or by a
proxy), fp32/fp16/bf16, P = 1, 2, 4 from real mgg.Plan objects, against the float64 reference
(mgg.testing.assert_matches_reference), and bit for bit from one warp schedule to another (every
aggregation is deterministic). MGG_EMU_FULL=1 widens the matrices."""

import itertools

import numpy as np
import pytest
import torch

from mgg import Config, Graph, Plan
from mgg.testing import CONFIGS, assert_exact_reference, assert_matches_reference, exact_inputs, random_graph
from simt import emulator
from simt.emulated_ops import SOURCES, aggregate

pytestmark = pytest.mark.skipif(emulator.available() is not None, reason=str(emulator.available()))

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
MODES = [(s, "loadstore") for s in SOURCES] + [(s, "proxy") for s in SOURCES if s.startswith("get")]


def features(n: int, dim: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, dim, generator=torch.Generator().manual_seed(seed)).to(dtype)


def hub_graph(n: int = 400, seed: int = 0) -> Graph:
    """Rows 0 and 1 of degree 3000 and 1200 (cut across blocks), rows n-20.. empty, the rest of
    degree 0-12, weighted; sources from everywhere, so every rank has remote edges."""
    rng = np.random.default_rng(seed)
    dst = np.concatenate([np.zeros(3000, np.int64), np.ones(1200, np.int64), rng.integers(2, n - 20, 2500)])
    src = rng.integers(0, n, dst.size)
    return Graph.from_edges(src, dst, n, rng.uniform(0.1, 2.0, dst.size).astype(np.float32))


def local_first_graph(n: int = 300, seed: int = 0) -> Graph:
    """Rank 0 of two (rows [0, n/2)) reads only its own rows: a rank with no remote edges."""
    rng = np.random.default_rng(seed)
    h = n // 2
    dst = np.concatenate([rng.integers(0, h, 1500), rng.integers(h, n, 1500)])
    src = np.concatenate([rng.integers(0, h, 1500), rng.integers(0, n, 1500)])
    return Graph.from_edges(src, dst, n)


def check(tmp_path, g, x, ranks, config, source="table", completion="loadstore", seeds=(1, 2)):
    """Every rank's step equals the float64 reference, and bit for bit the same under each
    scheduling seed (the emulator's order of the warps and of their lanes)."""
    plan = Plan(g, ranks)
    runs = [aggregate(tmp_path / f"seed{seed}", plan, x, config, source, completion, seed=seed) for seed in seeds]
    assert_matches_reference(runs[0], g, x)
    for other in runs[1:]:
        assert torch.equal(other, runs[0])


@pytest.mark.parametrize("ranks", [1, 2, 4])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("source,completion", MODES)
def test_every_source_dtype_and_rank_count(tmp_path, source, completion, dtype, ranks):
    g = random_graph(240, 2400, seed=ranks, weighted=True, skew=0.6)
    check(tmp_path, g, features(240, 40, dtype), ranks, Config(4, 2, 4), source, completion)


SHAPES = {  # name -> (graph, dim, ranks, config)
    "hub-rows-fixup": (hub_graph, 33, 2, Config(8, 2, 2)),
    "hub-rows-ps0": (hub_graph, 31, 2, Config(0, 1, 4)),
    "no-remote-rank": (local_first_graph, 33, 2, Config(4, 2, 4)),
    "dim1": (lambda: random_graph(200, 1500, seed=3, skew=0.5), 1, 2, Config(4, 1, 2)),
    "dim130-contiguous": (lambda: random_graph(200, 1500, seed=4), 130, 2, Config(8, 4, 4, interleave=False)),
    "dim300": (lambda: random_graph(200, 1500, seed=5, weighted=True), 300, 4, Config(2, 3, 3)),
    "dim2100-wide-blocks": (lambda: random_graph(150, 600, seed=6, skew=0.4), 2100, 2, Config(32, 16, 16)),
    "tuner-min": (lambda: random_graph(200, 1500, seed=7, skew=0.7), 33, 2, Config(1, 1, 1)),
    "tuner-max": (lambda: random_graph(300, 6000, seed=8, skew=0.7), 33, 2, Config(32, 16, 16)),
}


@pytest.mark.parametrize(
    "source,completion",
    [
        ("table", "loadstore"),
        ("direct", "loadstore"),
        ("get-thread", "proxy"),
        ("get-warp", "proxy"),
        ("get-block", "proxy"),
        # every PE reachable by loads: the asynchronous copies of fetch.cuh's PeerCopyFetch
        ("get-thread", "loadstore"),
        ("get-warp", "loadstore"),
        ("get-block", "loadstore"),
    ],
)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_shapes_that_break_kernels(tmp_path, shape, source, completion):
    make, dim, ranks, config = SHAPES[shape]
    g = make()
    dtype = torch.bfloat16 if dim == 2100 else torch.float32
    x = features(g.num_nodes, dim, dtype)
    check(tmp_path, g, x, ranks, config, source, completion)


@pytest.mark.parametrize(
    "source,completion",
    [("direct", "loadstore"), ("get-thread", "loadstore"), ("get-warp", "loadstore"), ("get-block", "loadstore")]
    + [("get-warp", "proxy")],
)
def test_peer_tables_off_the_16_byte_grid(tmp_path, source, completion):
    """Every PE's table 4 bytes into its symmetric heap, as a tensor sliced from a larger one
    (fp32 at D = 32, so only the tables' start is off the 16-byte grid): direct loads read
    columns 32 apart, and the copies within a node go an element at a time (16-byte copies would
    be misaligned, which the emulator reports); the kernel equals the reference."""
    g = random_graph(200, 1500, seed=11, skew=0.5)
    x = features(200, 32, torch.float32)
    out = aggregate(tmp_path, Plan(g, 2), x, Config(4, 2, 4), source, completion, table_offset=1)
    assert_matches_reference(out, g, x)


@pytest.mark.parametrize("source,completion", MODES)
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "ps{}-dist{}-wpb{}".format(*c.as_tuple()))
def test_every_kernel_test_config_exactly(tmp_path, config, source, completion):
    """The configs every kernel test runs (mgg.testing.CONFIGS) on an exact case with hub rows
    cut across blocks and empty rows: the result is A @ x bit for bit, so a dropped, doubled or
    moved edge shows whatever the row's degree."""
    g, x = exact_inputs(hub_graph(seed=12), 24, torch.bfloat16, seed=12)
    assert_exact_reference(aggregate(tmp_path, Plan(g, 2), x, config, source, completion), g, x)


def test_wide_rows_narrow_the_column_tile(tmp_path):
    """wpb 16 with 2 x 32 landing rows of fp32 at D 2100: shared memory narrows the pass below 256
    columns, so the launcher raises the shared-memory limit (> 48 KB) and the grid has many
    column passes; the kernel still writes every column once."""
    g = random_graph(120, 700, seed=9, skew=0.3)
    x = features(120, 2100, torch.float32)
    plan = Plan(g, 2)
    aggregate(tmp_path, plan, x, Config(32, 16, 16), "get-warp", "proxy")
    launch = emulator.launch_of(tmp_path / "rank0")
    assert launch["tile"] < 256 and launch["blocks_y"] == -(-2100 // launch["tile"]) and launch["smem"] > 48 * 1024
    assert_matches_reference(aggregate(tmp_path, plan, x, Config(32, 16, 16), "get-warp", "proxy"), g, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_halo_and_peers_agree_and_large_blocks_tile_columns(tmp_path, dtype):
    """tests/kernels/test_cuda.py's first case on the emulator: wpb = 16 at D = 2100 (9 column
    passes) over 2 ranks; the halo table and peer pointers both equal the reference and agree bit
    for bit (the same ranges summed in the same order, whatever the source)."""
    g = random_graph(300, 3000, seed=8, skew=0.5)
    x = features(300, 2100, dtype)
    plan = Plan(g, 2)
    halo = aggregate(tmp_path / "halo", plan, x, Config(32, 16, 16), "table", "loadstore", seed=3)
    peers = aggregate(tmp_path / "peers", plan, x, Config(32, 16, 16), "direct", "loadstore", seed=5)
    assert_matches_reference(halo, g, x)
    assert_matches_reference(peers, g, x)
    assert torch.equal(halo, peers)


def _warp_calls(trace_file) -> dict:
    """(block, warp) -> the sites of its completed warp calls, in the order the emulator ran them."""
    calls: dict = {}
    for line in trace_file.read_text().splitlines():
        block, warp, site = line.split(" ", 2)
        calls.setdefault((block, warp), []).append(site)
    return calls


@pytest.mark.parametrize("source", ["get-warp", "get-block"])
def test_contiguous_mapping_fetches_only_what_it_reads_next(tmp_path, source):
    """interleave=False (MGG's ablation): no fetch is in flight while a warp reads anything else,
    each chunk of remote rows being fetched when the warp reaches it. The trace of a warp's calls
    shows it: between a get and the wait that completes it (complete()'s __syncwarp in
    nvshmem_fetch.cuh) the warp makes no call of the aggregation (aggregate_kernel.cuh: its edge
    shuffles), where the interleaved mapping makes some (local rows and the previous chunk read
    while the next chunk is in flight)."""
    g = random_graph(200, 3000, seed=11)
    x = features(200, 32, torch.float32)
    plan = Plan(g, 2)
    for interleave in (False, True):
        folder = tmp_path / str(interleave)
        out = aggregate(folder, plan, x, Config(2, 8, 4, interleave=interleave), source, "proxy", trace=True)
        assert_matches_reference(out, g, x)
        overlapped = gets = 0
        for sites in _warp_calls(folder / "rank0" / "trace.txt").values():
            in_flight = False
            for site in sites:
                if site.startswith("nvshmemx_getmem"):
                    in_flight, gets = True, gets + 1
                elif "nvshmem_fetch.cuh" in site and "syncwarp" in site:
                    in_flight = False
                elif in_flight and "aggregate_kernel.cuh" in site:
                    overlapped += 1
        assert gets > 0
        if interleave:
            assert overlapped > 0, "the interleaved mapping should read rows while a fetch is in flight"
        else:
            assert overlapped == 0, f"{overlapped} aggregation calls while a fetch was in flight with interleave off"


@pytest.mark.skipif(not emulator.FULL, reason="MGG_EMU_FULL=1")
@pytest.mark.parametrize("ps,dist,wpb", list(itertools.product([0, 1, 5, 32], [1, 3, 16], [1, 7, 16])))
def test_config_lattice_full(tmp_path, ps, dist, wpb):
    g = hub_graph(300, seed=ps + dist + wpb)
    x = features(300, 45, torch.float16)
    for source, completion in MODES:
        check(tmp_path / source / completion, g, x, 4, Config(ps, dist, wpb), source, completion)


@pytest.mark.parametrize("n_src,n_dst", [(70, 45), (40, 90)], ids=["more-sources", "more-targets"])
@pytest.mark.parametrize("source,completion", [("table", "loadstore"), ("get-warp", "proxy")])
def test_bipartite_layers_plan_through_the_kernels(tmp_path, n_src, n_dst, source, completion):
    """A bipartite input (x_src, x_dst) as SAGEConv/GINConv/GATConv plan it (mgg.nn.graph_input.bipartite_plan:
    the square graph of max(N_src, N_dst) nodes, x_src padded with zero rows) through the
    kernels on 1, 2 and 4 ranks: the first N_dst rows equal the float64 mean of each target's
    sources (torch's index_add over the edges, the outside oracle), targets without sources 0."""
    from mgg.nn.graph_input import bipartite_plan

    gen = torch.Generator().manual_seed(n_src)
    ei = torch.stack(
        [torch.randint(0, n_src, (400,), generator=gen), torch.randint(0, n_dst - 5, (400,), generator=gen)]
    )
    square = bipartite_plan(
        ei, n_src, n_dst, "emu-bipartite", lambda g, dt: g.mean_norm(dt), "source_to_target", torch.float32, "test"
    ).graph
    x_src = features(n_src, 24, torch.float32, seed=1)
    x = torch.cat([x_src, x_src.new_zeros(square.num_nodes - n_src, 24)])
    count = torch.zeros(n_dst, dtype=torch.float64).index_add_(0, ei[1], torch.ones(ei.size(1), dtype=torch.float64))
    oracle = torch.zeros(n_dst, 24, dtype=torch.float64).index_add_(0, ei[1], x_src.double()[ei[0]])
    oracle = oracle / count.clamp(min=1).unsqueeze(1)
    for ranks in (1, 2, 4):
        out = aggregate(tmp_path / str(ranks), Plan(square, ranks), x, Config(4, 2, 4), source, completion)
        assert_matches_reference(out, square, x)
        torch.testing.assert_close(out[:n_dst].double(), oracle, rtol=1e-5, atol=1e-5)
        assert not out[n_dst:].any()  # padding targets have no edges

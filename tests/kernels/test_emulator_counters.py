"""The emulator's memory counters (csrc/tests/simt/counters.cpp, kernels/memory.cuh): on graphs
whose traffic can be written down by hand, the range kernel's global-load requests, 32-byte
sectors, active lanes and bytes per region, its warp shuffles, the loads each warp issues before
its first source row (the chain) and its atomics are exactly what its access pattern implies.
These are the quantities Nsight Compute reports (l1tex__t_requests / l1tex__t_sectors of global
loads, thread instructions per warp instruction), so a GPU run can check them.

The access pattern (kernels/aggregate_kernel.cuh, notes in core/schedule.h), which `walk` below
writes out load by load:
- a warp reads its two range records (warp w and w + 1: 10 int64 fields, lanes 0-9) in one load;
- it streams the column ids (weights, owner PEs) of each part through a window of 32 edges, lane
  i holding edge i of a chunk: chunks 0 and 1 at its start, chunk j + 2 when its edges reach chunk
  j + 1, so each chunk is one load of up to 32 active lanes (landing sources: chunks of the
  landing rows, ps);
- it loads the row ends of each part 32 rows at a time (lane i: rowptr[r + 1 + i]), for the rows
  it ends;
- it reads a source row in 16-byte pieces, a lane group of g lanes per row (g: the pass's 16-byte
  runs rounded up to a power of two), so one load instruction reads the rows of 32 / g edges of
  one row's edges within one window chunk (fp32 passes over 128 columns: two 16-byte pieces per
  lane, two instructions); rows off the 16-byte grid are read a column per lane, 32 consecutive
  columns per instruction, edge by edge;
- no shared-memory partial sums and no atomics."""

import math
from collections import Counter
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pytest
import torch

from mgg import Config, Graph, Plan
from mgg.plan import STEP_FIELDS, STEP_PARAMS
from mgg.runtime.remote_reads import remote_read_bytes
from mgg.testing import assert_matches_reference
from simt import emulator
from simt.emulated_ops import aggregate, aggregate_extreme

pytestmark = pytest.mark.skipif(emulator.available() is not None, reason=str(emulator.available()))

ELEM = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2}
ROW_REGIONS = ("table", "remote_table", "peer")  # the source tables (region names start so)


def regular_sources(n: int, k: int) -> np.ndarray:
    """The source row of each edge of regular_graph(n, k), row by row: row r reads rows r + t n / k
    (mod n), t < k, so no two edges of a row read the same or adjacent rows (the rows a warp
    instruction reads share no sector)."""
    return np.array([(r + t * (n // k)) % n for r in range(n) for t in range(k)])


def regular_graph(n: int, k: int) -> Graph:
    """Every row of in-degree k (regular_sources)."""
    return Graph.from_edges(regular_sources(n, k), np.repeat(np.arange(n), k), n)


def by_region(counters: dict) -> dict:
    """Loads summed per region (over the sites that read it)."""
    out = {}
    for (_, region), v in counters["loads"].items():
        acc = out.setdefault(region, dict.fromkeys(emulator.LOAD_FIELDS, 0))
        for f in emulator.LOAD_FIELDS:
            acc[f] += v[f]
    return out


# ---- the kernel's loads, written out -------------------------------------------------------------


@dataclass(frozen=True)
class Lanes:
    """How the range kernel's lanes read source rows: LaneCols (kernels/aggregate_kernel.cuh),
    range_kernel and vector_rows (kernels/launch.cuh), a pass of choose_tile's widest columns
    (core/launch_shape.h; the tests' launches have shared memory to spare)."""

    dim: int
    elem: int
    offset: int = 0  # bytes from the table's array to its first row

    @property
    def vec(self) -> bool:  # every row on the 16-byte grid: 16-byte pieces
        return (self.dim * self.elem) % 16 == 0 and self.offset % 16 == 0

    @property
    def tile(self) -> int:  # columns of a pass
        return 32 * min(8, -(-self.dim // 32))

    @property
    def kvec(self) -> int:  # columns of a 16-byte piece
        return 16 // self.elem

    @property
    def pieces(self) -> int:  # 16-byte pieces per lane (V): fp32 passes over 128 columns take 2
        return 2 if self.elem == 4 and self.tile > 128 else 1

    @property
    def per_lane(self) -> int:  # columns a lane owns (kPer)
        return self.pieces * self.kvec

    def group(self, width: int) -> int:
        """Lanes per row: the pass's runs of per_lane columns rounded up to a power of two, with
        16-byte pieces and at most 16 runs; otherwise the warp."""
        runs = -(-width // self.per_lane)
        return 1 << (runs - 1).bit_length() if self.vec and runs <= 16 else 32

    def passes(self):
        """(first column, width) of each pass (grid.y)."""
        return [(d0, min(self.tile, self.dim - d0)) for d0 in range(0, self.dim, self.tile)]


def step_of(plan: Plan, rank: int, config: Config, peers: bool = False) -> tuple[dict, dict]:
    """The forward step of `rank` as the emulated op gets it: its arrays (numpy; None where
    absent) and its parameters."""
    arrays, params = plan.rank_plan(rank, config).op_args("cpu", peers=peers, transposed=False)
    step = {
        name: None if a is None else a.numpy() for name, a in zip(STEP_FIELDS, arrays[: len(STEP_FIELDS)], strict=True)
    }
    return step, dict(zip(STEP_PARAMS, params[: len(STEP_PARAMS)], strict=True))


@dataclass
class Source:
    """Where a step's rows are read from: (region, row) of a part's edge, by column id and PE.
    landing: remote rows fetched into shared memory (get and copy sources), in chunks of
    `landing_rows`; their fetch is a row access whose loads `walk` does not write out."""

    local: str  # region of this rank's table
    remote: Optional[str] = None  # region of the halo table (table source); None: each PE's, peerN
    reads_pe: bool = False  # the remote window holds owner PEs (every source but the table)
    landing_rows: int = 0

    def row(self, part: str, col: int, pe: int) -> str:
        if part == "local":
            return self.local
        return self.remote if self.remote is not None else f"peer{pe}"


class Walk:
    """The range kernel's walk of one rank's step (aggregate_range), written out: each warp's
    global loads in program order, per pass (grid.y) and warp, and the warp calls. An event is
    (region, [(address in the region, bytes) of each active lane]), or ("fetch", None) where a
    landing source starts fetching a chunk of remote rows (a row access whose own loads or gets
    the walk leaves out)."""

    def __init__(self, step: dict, lanes: Lanes, src: Source, interleave: bool = True):
        self.step, self.lanes, self.src, self.interleave = step, lanes, src, interleave
        self.parts = ["local"] + (["remote"] if step["remote_rowptr"] is not None else [])
        self.has_pe = {"local": False, "remote": src.reads_pe}
        self.chunk = {"local": 32, "remote": src.landing_rows or 32}  # edges of a window chunk
        self.calls = Counter()  # __shfl_sync, __shfl_down_sync, __syncwarp
        self.warps = [self.warp(w, d0, width) for d0, width in lanes.passes() for w in range(len(step["ranges"]) - 1)]

    def warp(self, w: int, d0: int, width: int) -> list:
        ranges, lanes = self.step["ranges"], self.lanes
        self.d0, self.width, self.g = d0, width, lanes.group(width)
        row0, row1, tail = int(ranges[w][0]), int(ranges[w + 1][0]), int(ranges[w][4])
        self.origin = {p: int(ranges[w][1 + i]) for i, p in enumerate(self.parts)}
        self.size = {p: int(ranges[w + 1][1 + i]) - self.origin[p] for i, p in enumerate(self.parts)}
        self.ev = [("ranges", [(8 * (5 * w + f), 8) for f in range(10)])]  # records w and w + 1
        self.calls.update({"__shfl_sync": 4, "__syncwarp": 1})
        for p in self.parts:  # chunks 0 and 1 of each window
            self.window(p, 0)
            self.window(p, self.chunk[p])
        landing = self.src.landing_rows > 0 and "remote" in self.parts
        if landing and self.interleave and self.size["remote"] > 0:
            self.ev.append(("fetch", None))  # chunk 0 in flight while the local edges are read
        pos = dict.fromkeys(self.parts, 0)  # offsets in the streams
        landed = -1  # the remote chunk last waited for
        for r in range(row0, row1 + (tail >= 0)):  # row1 only for the warp's piece of it
            ends_row = r < row1
            if ends_row and (r - row0) % 32 == 0:  # the row ends of 32 rows
                for p in self.parts:
                    self.ev.append((f"{p}_rowptr", [(8 * i, 8) for i in range(r + 1, min(r + 32, row1) + 1)]))
                self.calls["__syncwarp"] += 2
            for p in self.parts:
                end = int(self.step[f"{p}_rowptr"][r + 1]) - self.origin[p] if ends_row else self.size[p]
                e, n = pos[p], self.chunk[p]
                while e < end:
                    if p == "remote" and landing:  # landed rows, read from shared memory
                        j = e // n
                        if j > 0 and e % n == 0:
                            self.window(p, (j + 1) * n)
                        if landed != j:
                            landed = j
                            if not self.interleave or (j + 1) * n < self.size[p]:
                                self.ev.append(("fetch", None))  # this chunk, or (interleave) the next
                        e += min(end - e, n - e % n)
                        continue
                    k = min(end - e, n - e % n)
                    self.rows(p, e, k)
                    e += k
                    if e % n == 0:
                        self.window(p, e + n)
                pos[p] = max(pos[p], end)
            if lanes.vec:  # the lane groups' sums added into group 0's
                self.calls["__shfl_down_sync"] += int(math.log2(32 // self.g)) * lanes.per_lane
        return self.ev

    def window(self, p: str, at: int) -> None:
        """The window chunk of part p's edges [at, at + chunk): column ids, weights, PEs."""
        n = min(self.chunk[p], self.size[p] - at)
        if n <= 0:
            return  # no lane active: not issued
        edges = range(self.origin[p] + at, self.origin[p] + at + n)
        fields = ["col"] + (["weight"] if self.step[f"{p}_weight"] is not None else []) + (["pe"] * self.has_pe[p])
        self.ev += [(f"{p}_{f}", [(4 * e, 4) for e in edges]) for f in fields]

    def rows(self, p: str, first: int, n: int) -> None:
        """The row loads of part p's edges [first, first + n) (within one window chunk)."""
        lanes = self.lanes
        edges = [self.origin[p] + first + i for i in range(n)]
        shuffled = 1 + self.has_pe[p] + (self.step[f"{p}_weight"] is not None)  # column, PE, weight
        per = 32 // self.g if lanes.vec else 1  # edges per instruction
        if lanes.vec:  # kRowsInFlight / V edges per lane group at a time, all loads before any add
            in_flight = 4 // lanes.pieces
            self.calls["__shfl_sync"] += -(-n // (per * in_flight)) * in_flight * shuffled
        else:
            self.calls["__shfl_sync"] += n * shuffled
        for t in range(0, n, per):
            for v in range(lanes.pieces if lanes.vec else lanes.per_lane):
                region, lane_loads = None, []
                for e in edges[t : t + per]:
                    c, q = int(self.step[f"{p}_col"][e]), int(self.step["remote_pe"][e]) if self.has_pe[p] else 0
                    region = self.src.row(p, c, q)
                    base = lanes.offset + (c * lanes.dim + self.d0) * lanes.elem
                    if lanes.vec:  # lane `slot` of a group: 16 bytes from column slot * per_lane + v * kvec
                        cols = [slot * lanes.per_lane + v * lanes.kvec for slot in range(self.g)]
                        lane_loads += [(base + d * lanes.elem, 16) for d in cols if d < self.width]
                    else:  # lane l: column l + 32 v
                        cols = range(32 * v, 32 * v + 32)
                        lane_loads += [(base + d * lanes.elem, lanes.elem) for d in cols if d < self.width]
                if lane_loads:
                    self.ev.append((region, lane_loads))


def walk(step: dict, lanes: Lanes, src: Source, interleave: bool = True) -> tuple[list, Counter]:
    """Walk's warps and warp calls."""
    w = Walk(step, lanes, src, interleave)
    return w.warps, w.calls


def tally(warps: list) -> dict:
    """The loads of `walk`'s warps per region, as the emulator counts them (32-byte sectors)."""
    out = {}
    for ev in warps:
        for region, lane_loads in ev:
            if region == "fetch":
                continue
            c = out.setdefault(region, dict.fromkeys(emulator.LOAD_FIELDS, 0))
            sectors = {s for a, b in lane_loads for s in range(a // 32, (a + b - 1) // 32 + 1)}
            c["requests"] += 1
            c["sectors"] += len(sectors)
            c["active_lanes"] += len(lane_loads)
            c["lane_slots"] += 32
            c["bytes"] += sum(b for _, b in lane_loads)
    return out


def chains(warps: list) -> dict:
    """Per warp the loads it issues before its first row access (a load of a source table or a
    fetch into the landing buffer), as the emulator's chain counter sums them."""
    out = dict(warps=0, loads=0, most=0, without_rows=0)
    for ev in warps:
        first = next(
            (i for i, (region, _) in enumerate(ev) if region == "fetch" or region.startswith(ROW_REGIONS)), None
        )
        if first is None:
            out["without_rows"] += 1
            continue
        out["warps"] += 1
        out["loads"] += first
        out["most"] = max(out["most"], first)
    return out


def without_shared_atomics(counters: dict) -> bool:
    return not any(op == "atom" for _, op in counters["shared"])


# ---- one rank: rows, the index stream, row ends, range records, shuffles, the chain --------------

SHAPES = [
    (torch.float32, 16),  # groups of 4 lanes: 8 edges a request
    (torch.float32, 32),
    (torch.float32, 72),  # 18 runs: the warp per row, 18 lanes active
    (torch.float32, 256),  # two 16-byte pieces per lane
    (torch.float16, 64),
    (torch.bfloat16, 256),
    (torch.float32, 33),  # rows of 132 bytes: a column per lane
    (torch.bfloat16, 36),  # rows of 72 bytes: a column per lane
]


@pytest.mark.parametrize("dtype,dim", SHAPES, ids=lambda v: str(v).removeprefix("torch."))
def test_every_load_of_one_rank(tmp_path, dtype, dim):
    """One rank, 64 rows of in-degree 8 (9 items a row), warps of 40 items (ps 8, dist 5): warps
    start and end inside rows (split rows, carry pieces) and rows cross the 32-edge chunks of the
    window. Every region's requests, sectors, active lanes and bytes, the warp calls and the chain
    are walk's: one load of the range records per warp (10 lanes, 80 bytes), one column-id load per
    32 edges of a warp (its chunks), one row-end load per warp (it ends at most 32 rows), rows in
    16-byte pieces by lane groups (or a column per lane off the 16-byte grid); the chain of a warp
    is its range records, its first two window chunks and its row ends: 4 loads."""
    g = regular_graph(64, 8)
    x = torch.randn(64, dim).to(dtype)
    cfg = Config(8, 5, 2)
    out = aggregate(tmp_path, Plan(g, 1), x, cfg, counters=True)
    assert_matches_reference(out, g, x)
    c = emulator.counters_of(tmp_path / "rank0")
    step, _ = step_of(Plan(g, 1), 0, cfg)
    warps, calls = walk(step, Lanes(dim, ELEM[dtype]), Source("table"))
    assert by_region(c) == tally(warps)
    assert set(by_region(c)) == {"table", "local_col", "local_rowptr", "ranges"}  # one rank, unweighted
    assert c["warp_calls"] == dict(+calls)  # the calls made (Counter + drops zeros)
    # by hand: 576 items in 15 warps; the last one's 16 items hold under 32 edges, so one window
    # chunk: its chain is 3 loads, every other warp's 4
    assert c["chain"] == chains(warps) == dict(warps=15, loads=14 * 4 + 3, most=4, without_rows=0)
    assert c["atomics"] == {} and without_shared_atomics(c)
    loads = by_region(c)
    assert (loads["ranges"]["requests"], loads["ranges"]["active_lanes"], loads["ranges"]["bytes"]) == (15, 150, 1200)
    assert loads["local_rowptr"]["requests"] == 15  # no warp ends more than 32 rows
    assert loads["local_col"]["active_lanes"] == g.num_edges  # each column id loaded once


def test_the_max_kernel_shuffles_only_the_column_of_a_table_row(tmp_path):
    """aggregate_extreme_kernel on tables (this rank's and the halo's): one shuffle per edge, the
    column; a table source reads no PE, so none is shuffled (it was one more per edge)."""
    g = regular_graph(64, 8)
    plan = Plan(g, 2)
    aggregate_extreme(tmp_path, plan, torch.randn(64, 40), Config(4, 1, 2), "max", counters=True)
    for r in range(2):
        shard = plan.shard(r)
        c = emulator.counters_of(tmp_path / f"rank{r}")
        assert c["warp_calls"] == {"__shfl_sync": shard.num_local_edges + shard.num_remote_edges}


def shared_sites(pattern: str) -> set:
    """The sites (file:line) of kernels/aggregate_kernel.cuh whose line holds `pattern`."""
    lines = (emulator.CSRC / "kernels" / "aggregate_kernel.cuh").read_text().splitlines()
    return {f"kernels/aggregate_kernel.cuh:{i + 1}" for i, line in enumerate(lines) if pattern in line}


def test_row_ends_in_shared_memory_are_conflict_free(tmp_path):
    """The row ends a warp stages in shared memory (RowEnds): each row-end load's lanes store
    their entries, 32 words side by side (one wavefront), and every row ended reads its entry,
    all 32 lanes the same word (a broadcast: one wavefront). No other shared access on a table
    source; nothing conflicts."""
    g = regular_graph(64, 8)
    cfg = Config(8, 5, 2)
    aggregate(tmp_path, Plan(g, 1), torch.randn(64, 32), cfg, counters=True)
    c = emulator.counters_of(tmp_path / "rank0")
    rowptr = by_region(c)["local_rowptr"]
    stores = {k: v for k, v in c["shared"].items() if k[1] == "st"}
    loads = {k: v for k, v in c["shared"].items() if k[1] == "ld"}
    assert {s for s, _ in c["shared"]} <= shared_sites("MGG_SHARED_STORE(ends") | shared_sites("MGG_SHARED_LOAD(ends")
    assert rowptr["requests"] == 15  # one row-end load per warp: none ends more than 32 rows
    st = dict(requests=rowptr["requests"], wavefronts=rowptr["requests"], active_lanes=rowptr["active_lanes"])
    assert sum(map(Counter, stores.values()), Counter()) == Counter(st)
    assert sum(map(Counter, loads.values()), Counter()) == Counter(requests=64, wavefronts=64, active_lanes=32 * 64)


@pytest.mark.parametrize("source", ["table", "direct"])
def test_remote_rows_are_counted_where_they_are_read(tmp_path, source):
    """Two ranks over one weighted graph, warps of 128 items: every region is walk's, each edge's
    row read once from this rank's table or, for a remote edge, from the halo table (table source)
    or the owner's table through a peer pointer (direct). A warp streams both parts' column ids and
    weights (and, direct, the owners' PEs) and loads both parts' row ends: with more than 32 edges
    of each part, its chain is 1 + 2 x 2 + 2 x 2 (+ 2 PEs) + 2 = 11 loads (13)."""
    rng = np.random.default_rng(1)
    n, k, dim = 96, 6, 128  # 32 runs of 16 bytes: one row per request
    g = Graph.from_edges(rng.integers(0, n, n * k), np.repeat(np.arange(n), k), n, rng.uniform(0.5, 2, n * k))
    plan, cfg = Plan(g, 2), Config(8, 16, 2)
    x = torch.randn(n, dim)
    out = aggregate(tmp_path, plan, x, cfg, source, counters=True)
    assert_matches_reference(out, g, x)
    for r in range(2):
        step, _ = step_of(plan, r, cfg, peers=source != "table")
        src = Source("table", "remote_table") if source == "table" else Source(f"peer{r}", reads_pe=True)
        warps, calls = walk(step, Lanes(dim, 4), src)
        c = emulator.counters_of(tmp_path / f"rank{r}")
        assert by_region(c) == tally(warps)
        assert c["warp_calls"] == dict(+calls)
        assert c["chain"] == chains(warps)
        assert c["chain"]["most"] == (11 if source == "table" else 13)
        shard = plan.shard(r)
        rows = tally(warps)
        local_rows, remote_rows = ("table", "remote_table") if source == "table" else (f"peer{r}", f"peer{1 - r}")
        assert rows[local_rows]["bytes"] == shard.num_local_edges * dim * 4
        assert rows[remote_rows]["bytes"] == shard.num_remote_edges * dim * 4


@pytest.mark.parametrize("offset", [1, 4], ids=["4-bytes", "16-bytes"])
def test_a_table_off_the_16_byte_grid_is_read_with_scalar_loads(tmp_path, offset):
    """fp32 D = 64 rows of a table that starts `offset` elements into its array (a sliced
    tensor), warps of 4 whole rows (36 items): 4 bytes in, no row is 16-byte aligned, so the
    launch reads a column per lane (columns 32 apart: 2 requests per edge, 32 lanes active);
    16 bytes in, 16-byte pieces (lane groups of 16: two edges of a row per request, 0.5 per edge);
    both equal the reference."""
    g = regular_graph(64, 8)
    x = torch.randn(64, 64)
    cfg = Config(9, 4, 2)
    out = aggregate(tmp_path, Plan(g, 1), x, cfg, counters=True, table_offset=offset)
    assert_matches_reference(out, g, x)
    loads = by_region(emulator.counters_of(tmp_path / "rank0"))
    step, _ = step_of(Plan(g, 1), 0, cfg)
    warps, _ = walk(step, Lanes(64, 4, offset=4 * offset), Source("table"))
    assert loads == tally(warps)
    assert loads["table"]["requests"] == g.num_edges * (2 if offset == 1 else 0.5)
    assert loads["table"]["active_lanes"] == g.num_edges * (64 if offset == 1 else 16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [16, 32, 64, 128, 256])
def test_requests_per_128_bytes_and_active_lanes_meet_issue_31_targets(tmp_path, dtype, dim):
    """Issue 31's first two items: with 16-byte loads a request moves up to 512 bytes of rows,
    a row's own (D >= 128 fp32, D >= 256 bf16) or, for shorter rows, those of 32 / group edges
    of one row at once. Rows of 16 edges and warps of 4 whole rows (68 items: 2 window chunks
    of 2 rows each) make every request full: 0.25 requests per 128 bytes and every lane active,
    at every dtype; the column ids too, 32 edges per request."""
    g = regular_graph(64, 16)
    x = torch.randn(64, dim).to(dtype)
    cfg = Config(17, 4, 2)
    aggregate(tmp_path, Plan(g, 1), x, cfg, counters=True)
    loads = by_region(emulator.counters_of(tmp_path / "rank0"))
    step, _ = step_of(Plan(g, 1), 0, cfg)
    warps, _ = walk(step, Lanes(dim, ELEM[dtype]), Source("table"))
    assert loads == tally(warps)
    rows = loads["table"]
    assert rows["bytes"] == g.num_edges * dim * ELEM[dtype]
    assert rows["requests"] * 128 / rows["bytes"] == 0.25
    assert rows["active_lanes"] == rows["lane_slots"]
    assert loads["local_col"] == dict(
        requests=g.num_edges // 32, sectors=g.num_edges // 8, active_lanes=g.num_edges, lane_slots=g.num_edges,
        bytes=4 * g.num_edges,
    )  # fmt: skip


def skewed_graph(n: int, seed: int) -> Graph:
    """A graph of n rows with a third of them empty, most of degree 1-4 and one hub of 3 n edges:
    short rows, empty ones and a row across several warps, as a power-law graph has."""
    rng = np.random.default_rng(seed)
    deg = rng.integers(1, 5, n) * (rng.random(n) > 0.33)
    deg[n // 3] = 3 * n
    dst = np.repeat(np.arange(n), deg)
    return Graph.from_edges(rng.integers(0, n, dst.size), dst, n, rng.uniform(0.5, 2, dst.size))


def test_schedule_and_index_stream_per_edge(tmp_path):
    """Two ranks of a skewed weighted graph under the default config (warps of 512 items): walk's
    loads exactly, that is per warp one request for its two range records and one for each 32 rows
    it ends per part (the schedule: about 4 requests per 512 items), and one request per 32 edges
    of each part's column ids and weights, lanes active but in each warp's last chunk of a part
    (the index stream: over 90% of lanes active; the blocks kernel's was 45%). The hub row spans
    several warps: warps that hold no row end of it load no row ends for it."""
    g = skewed_graph(600, 4)
    plan = Plan(g, 2)
    x = torch.randn(600, 32)
    out = aggregate(tmp_path, plan, x, Config(), counters=True)
    assert_matches_reference(out, g, x)
    for r in range(2):
        step, _ = step_of(plan, r, Config())
        warps, calls = walk(step, Lanes(32, 4), Source("table", "remote_table"))
        c = emulator.counters_of(tmp_path / f"rank{r}")
        loads = by_region(c)
        assert loads == tally(warps) and c["chain"] == chains(warps) and c["warp_calls"] == dict(+calls)
        num_warps = len(step["ranges"]) - 1
        assert loads["ranges"]["requests"] == num_warps
        index = [loads[f"{p}_{f}"] for p in ("local", "remote") for f in ("col", "weight")]
        assert sum(v["active_lanes"] for v in index) > 0.9 * sum(v["lane_slots"] for v in index)
        assert sum(v["active_lanes"] for v in index) == 2 * (step["local_col"].size + step["remote_col"].size)
        assert c["atomics"] == {} and without_shared_atomics(c)


@pytest.mark.parametrize("source,completion", [("get-warp", "proxy"), ("get-thread", "loadstore")], ids=str)
@pytest.mark.parametrize("interleave", [True, False], ids=["interleave", "no-interleave"])
def test_landing_sources_stream_chunks_of_ps_edges(tmp_path, source, completion, interleave):
    """Remote rows fetched into the landing buffers (NVSHMEM gets over the proxy; asynchronous
    copies where every PE is reachable by loads): the remote window moves in chunks of the landing
    rows (ps = 8), one request of at most 8 active lanes per chunk of column ids, weights and PEs;
    the rest as walk says. A warp's first row access is the fetch of its first remote chunk, right
    after the windows' first loads with interleave on (chain: records + the windows' chunks), or a
    local row when interleave is off."""
    rng = np.random.default_rng(5)
    n, k, dim = 80, 6, 24
    g = Graph.from_edges(rng.integers(0, n, n * k), np.repeat(np.arange(n), k), n, rng.uniform(0.5, 2, n * k))
    plan, cfg = Plan(g, 2), Config(8, 12, 2, interleave)
    x = torch.randn(n, dim)
    out = aggregate(tmp_path, plan, x, cfg, source, completion, counters=True)
    assert_matches_reference(out, g, x)
    for r in range(2):
        step, params = step_of(plan, r, cfg, peers=True)
        assert params["landing_rows"] == 8
        warps, _ = walk(step, Lanes(dim, 4), Source(f"peer{r}", reads_pe=True, landing_rows=8), interleave)
        c = emulator.counters_of(tmp_path / f"rank{r}")
        rows = f"peer{r}", f"peer{1 - r}"
        assert {k: v for k, v in by_region(c).items() if k not in rows} == {
            k: v for k, v in tally(warps).items() if k not in rows
        }
        assert c["chain"] == chains(warps)
        remote_index = by_region(c)["remote_col"]
        assert remote_index["active_lanes"] == step["remote_col"].size <= 8 * remote_index["requests"]
        if completion == "loadstore":  # copies: each remote edge's row copied once, 16 bytes a lane
            assert by_region(c)[f"peer{1 - r}"]["bytes"] == step["remote_col"].size * dim * 4


def peer_bytes(counters: dict, rank: int, source: str) -> int:
    """The bytes a rank's step read from peers' tables: direct loads from peer regions, or (gets)
    the bytes the gets moved into the landing buffers."""
    if source == "direct":
        return sum(v["bytes"] for k, v in by_region(counters).items() if k.startswith("peer") and k != f"peer{rank}")
    return sum(v["bytes"] for v in counters["gets"].values())


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


def landed_reads(counters: dict) -> dict:
    """The shared-memory loads of landed rows: every shared load but the row ends'."""
    out = Counter()
    for (site, op), v in counters["shared"].items():
        if op == "ld" and site not in shared_sites("MGG_SHARED_LOAD(ends"):
            out.update(v)
    return dict(out)


@pytest.mark.parametrize(
    "source,scope", [("get-thread", "thread"), ("get-warp", "warp"), ("get-block", "warp")], ids=lambda v: v
)
@pytest.mark.parametrize("deterministic", [False, True], ids=["", "deterministic"])
@pytest.mark.parametrize("dtype,dim", [(torch.float32, 21), (torch.bfloat16, 42)], ids=["fp32-21", "bf16-42"])
def test_gets_are_counted_per_call(tmp_path, source, scope, deterministic, dtype, dim):
    """The NVSHMEM gets' own traffic (csrc/tests/simt/nvshmem.cpp) on the proxy path: a rank's
    per-edge step issues one get per remote edge, of the row's 84 bytes, posted by the warp that
    reads it at the source's scope (get-block at warp scope: the range kernel's warps share no
    barrier), the deterministic mode the same kernel; the sectors of their sources are the rows' in
    the owner's table (row o spans bytes [84 o, 84 o + 84): 3 or 4 sectors). The landed rows are
    then read from shared memory once each: rows of 84 bytes are off the 16-byte grid, so a column
    per lane, the row's D columns."""
    rng = np.random.default_rng(3)
    n, k = 90, 8
    g = Graph.from_edges(rng.integers(0, n, n * k), np.repeat(np.arange(n), k), n)
    plan = Plan(g, 3)
    x = torch.randn(n, dim).to(dtype)
    row = dim * ELEM[dtype]
    out = aggregate(tmp_path, plan, x, Config(4, 2, 2), source, "proxy", deterministic, counters=True)
    assert_matches_reference(out, g, x)
    for r in range(3):
        shard = plan.shard(r)
        c = emulator.counters_of(tmp_path / f"rank{r}")
        assert set(c["gets"]) == {scope}
        got = c["gets"][scope]
        assert got["calls"] == shard.num_remote_edges
        assert got["bytes"] == shard.num_remote_edges * row
        sectors = [(o * row + row - 1) // 32 - (o * row) // 32 + 1 for o in shard.remote_offset.tolist()]
        assert got["sectors"] == sum(sectors) and set(sectors) == {3, 4}
        assert landed_reads(c)["active_lanes"] == shard.num_remote_edges * dim


@pytest.mark.parametrize(
    "dtype,dim,source,completion",
    [
        (torch.float32, 64, "table", "loadstore"),
        (torch.bfloat16, 128, "direct", "loadstore"),
        (torch.float32, 16, "get-warp", "proxy"),
        (torch.bfloat16, 256, "get-thread", "loadstore"),  # asynchronous copies
    ],
    ids=lambda v: str(v).removeprefix("torch."),
)
def test_no_atomics_anywhere(tmp_path, dtype, dim, source, completion):
    """The range kernel and the fixups sum in registers and write each row once: no atomic of any
    thread in any memory (simt.h counts every atomicAdd, atomicMax, atomicExch) and no shared
    atomic site, on a graph with split rows (a hub across warps), at every source; the blocks
    kernel took one shared atomic request per 16 to 32 edges."""
    g = skewed_graph(300, 6)
    plan, cfg = Plan(g, 2), Config(8, 8, 2)
    x = torch.randn(300, dim).to(dtype)
    out = aggregate(tmp_path, plan, x, cfg, source, completion, counters=True)
    assert_matches_reference(out, g, x)
    for r in range(2):
        c = emulator.counters_of(tmp_path / f"rank{r}")
        assert plan.rank_plan(r, cfg).schedule.num_slots > 0  # split rows: carry pieces and fixups ran
        assert c["atomics"] == {} and without_shared_atomics(c)


# ---- shared memory: bank wavefronts -------------------------------------------------------------


def bank_wavefronts(words_per_lane: list, atomic: bool) -> int:
    """The wavefronts of one shared-memory warp instruction, 32 banks of 4-byte words (bank =
    word mod 32), from the words each active lane touches: per bank its distinct words (every
    lane's word for an atomic, whose lanes on one word serialise), the most of any bank."""
    words = [w for lane in words_per_lane for w in lane]
    if not atomic:
        words = set(words)
    per_bank = [0] * 32
    for w in words:
        per_bank[w % 32] += 1
    return max(per_bank) if words else 0


def shared_patterns() -> dict:
    """simt_selftest shared-banks (csrc/tests/simt/selftest.cpp): {(op, stride, active):
    (requests, wavefronts, active_lanes)} of 2 warps whose lanes below `active` access float
    lane * stride of shared memory (ld4: a 16-byte vector there)."""
    import subprocess

    r = subprocess.run(
        [str(emulator.build("simt_selftest")), "shared-banks"],
        capture_output=True,
        text=True,
        env=emulator.ENV,
        timeout=300,
    )
    assert r.returncode == 0 and "PASS shared-banks" in r.stdout, r.stdout + r.stderr
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("shared "):
            _, op, stride, active, *numbers = line.split()
            out[(op, int(stride), int(active))] = tuple(map(int, numbers))
    return out


def test_shared_bank_wavefronts_of_known_patterns():
    """The emulator's shared-memory counters (MGG_SHARED_*, csrc/tests/simt/counters.cpp) on
    patterns whose wavefronts are known: 32 lanes at stride 1 word take 1 wavefront, stride 2
    take 2, stride 32 (one bank) 32; every lane on the same word is 1 for a load or store (a
    broadcast) but 32 for an atomic (serialised); 16-byte vectors of consecutive lanes take 4;
    inactive lanes take no bank, and a warp with none issues no request. Every pattern agrees with
    bank_wavefronts."""
    got = shared_patterns()
    one_warp = {k: (v[0] // 2, v[1] // 2, v[2] // 2) for k, v in got.items()}  # 2 warps, the same pattern
    assert one_warp[("ld", 1, 32)] == (1, 1, 32)
    assert one_warp[("ld", 2, 32)][1] == 2
    assert one_warp[("st", 4, 32)][1] == 4
    assert one_warp[("ld", 32, 32)][1] == 32
    assert one_warp[("atom", 32, 32)][1] == 32
    assert one_warp[("ld", 0, 32)][1] == one_warp[("st", 0, 32)][1] == 1
    assert one_warp[("atom", 0, 32)][1] == 32
    assert one_warp[("atom", 0, 16)][1] == 16
    assert one_warp[("atom", 1, 32)][1] == 1
    assert one_warp[("ld4", 4, 32)][1] == 4
    assert one_warp[("ld", 2, 16)][1] == 1  # 16 lanes at stride 2: 16 distinct banks
    assert all(v == (0, 0, 0) for (_, _, active), v in got.items() if active == 0)
    assert len(got) == 4 * 6 * 3 - 3 * 3  # every pattern ran (ld4 from stride 4 on)
    for (op, stride, active), (requests, wavefronts, lanes) in got.items():
        width = 4 if op == "ld4" else 1
        words = [range(lane * stride, lane * stride + width) for lane in range(active)]
        assert requests == (2 if active else 0) and lanes == 2 * active, (op, stride, active)
        assert wavefronts == 2 * bank_wavefronts(words, op == "atom"), (op, stride, active)

"""Performance model of the aggregation kernels (issue 43, item 4): one forward aggregation's time
from the plan's statistics, the compiled kernel's rows in flight and occupancy, and the GPU's
constants. numpy only: the harness (bench/model.py) and the tuner import it to rank configs
before they measure.

    T = max(latency bound, bandwidth bound, issue bound) + fixup pass + launches

- Latency bound (Little's law). Every warp walks a dependent chain: a prologue (the old block
  kernel: a fixed chain F per schedule block; the new range kernel: its range records, its
  rowptr window and its first col/weight chunk, one dependent round each), then its row rounds,
  then its row ends. A row round is the K row loads per lane that a lane issues before the first
  FMA that reads one of them; it lasts as long as its slowest row: an L2 hit if every row it
  touches hits, a DRAM round otherwise. Rounds never span two row segments (a row's local or
  remote edges within one warp). The resident warps (registers -> warps per SM) run such chains
  side by side, and a block holds its SM slot until its longest warp ends:
  T_lat = max(sum over blocks of the longest chain / (blocks per SM x SMs), the longest chain).
- Bandwidth bound. The streamed bytes to and from DRAM (indices, weights, plan, output, carries)
  at the GPU's sequential rate (its measured device-to-device copy), the gathered rows that miss
  in L2 at the rate of random gathers of their size, and every byte through L2 at the L2's rate.
  Which gathered rows hit in L2: Che's approximation of an LRU cache (`SourceRows`: rows drawn in
  proportion to how many edges name them, blind to their order), or the reuse distances of the
  rows in the order the kernel visits them (`ReuseProfile`, mgg.runtime.locality: order-aware);
  the streamed bytes pass through once and take their share of the cache.
- Issue bound: SASS instructions per warp row-load step over the SMs' issue rate.

Two kernels are modelled: `OLD_BLOCK_KERNEL`, the block-schedule kernel the H200 timed on
2026-11-26 (f026238: blocks of <= 2 wpb rows and <= wpb dist partitions of ps edges, one
partition run per warp, rows cut across blocks summed through fp32 scratch by a fixup kernel),
and `RANGE_KERNEL`, the nnz-balanced warp ranges of issue 43 (../notes/kernel_design.md: ranges
of ps x dist items, split rows through fp32 carries and a fixup kernel). Their statistics come
from the step's row pointers (`BlockStats.of`, `RangeStats.of`), exactly.

The free parameters (`Calibration`: the old kernel's chain F, the loaded latency of an L2 round
and of a DRAM round) are fitted on the old kernel's H200 times only (`calibrate`); the range
kernel's prediction follows from them and its own statistics, not from any target. The H100 is
modelled by its own constants with the same latencies (same GH100 die, clocks and L2).

Three constants are not published for GH100: the L2's read rate, the HBM efficiency of random
row gathers and the L2 capacity a row shared by every SM can count on. `band` gives the GPU at
both ends of what others measured (hardware.py names each figure and its source): optimistic
(the A100 whitepaper's L2 rate, the copy rate for every gather, the whole 50 MB) and pessimistic
(the lowest published L2 rate, the published gather efficiencies by granule, one 25 MB
partition); the model is calibrated at each end and predicts a band, not a point.

A model, not a measurement: where the GPU disagrees, the GPU wins and the model is corrected."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterable, Optional, Sequence

import numpy as np

if __package__:
    from . import hardware
else:  # loaded as a file on its own, numpy only (the review's scripts): hardware.py is beside it
    import importlib.util as _util
    import sys as _sys
    from pathlib import Path as _Path

    _spec = _util.spec_from_file_location("_mgg_hardware", _Path(__file__).with_name("hardware.py"))
    hardware = _sys.modules[_spec.name] = _util.module_from_spec(_spec)  # (dataclasses look it up there)
    _spec.loader.exec_module(hardware)

# csrc/core/limits.h's kWarp, kVecBytes and kMaxTile (this module needs numpy only, so it cannot ask
# mgg._C; tests/runtime/test_kernel_model.py holds them equal)
WARP = 32
VECTOR_BYTES = 16  # one LDG.E.128 per lane
PASS_COLUMNS = 256  # columns one pass covers (grid.y = ceil(D / 256)), both kernels
SECTOR_BYTES = 32  # the memory system's access granularity
SCHEDULERS_PER_SM = 4  # warp instructions issued per SM per clock (sm_90)
LAUNCH_S = 4e-6  # one kernel launch back to back on a stream (assumed; negligible at these sizes)


@dataclass(frozen=True)
class Gpu:
    """The constants of one GPU."""

    name: str
    sms: int
    clock_hz: float  # boost clock
    hbm_bytes_per_s: float  # datasheet peak
    dram_bytes_per_s: float  # achievable: a device-to-device copy's rate
    l2_bytes: int
    l2_bytes_per_s: float  # L2 -> SM rate for hits
    regs_per_sm: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    shfl_cycles: int = 30  # latency of one warp shuffle in a dependent chain (assumed)
    # HBM efficiency of random gathers: ((granule bytes, share of hbm_bytes_per_s), ...) rising in
    # bytes, interpolated in log(bytes); empty: gathers at the sequential rate (dram_bytes_per_s)
    gather_efficiency: tuple = ()

    def gather_bytes_per_s(self, row: int) -> float:
        """DRAM rate of random gathers of `row`-byte rows: at most the sequential rate."""
        if not self.gather_efficiency:
            return self.dram_bytes_per_s
        size, share = (np.array(v, np.float64) for v in zip(*self.gather_efficiency, strict=True))
        eff = float(np.interp(math.log2(max(row, 1)), np.log2(size), share))
        return min(eff * self.hbm_bytes_per_s, self.dram_bytes_per_s)


_H200_COPY = 4.2053e12  # bench/results/gpu-20261126-*/call2-kernel.log: "device copy bandwidth 4205.3 GB/s"


def _gpu(spec: hardware.GpuSpec, dram_bytes_per_s: float) -> Gpu:
    return Gpu(
        name=spec.name,
        sms=spec.sms,
        clock_hz=spec.boost_clock_hz,
        hbm_bytes_per_s=spec.hbm_bytes_per_s,
        dram_bytes_per_s=dram_bytes_per_s,
        l2_bytes=spec.l2_bytes,
        l2_bytes_per_s=hardware.A100_L2_BYTES_PER_CLOCK * spec.boost_clock_hz,
        regs_per_sm=spec.regs_per_sm,
        max_warps_per_sm=spec.max_warps_per_sm,
        max_blocks_per_sm=spec.max_blocks_per_sm,
    )


H200 = _gpu(hardware.H200, _H200_COPY)
# H100 SXM5: its copy rate is not measured: assumed the H200's measured share of its peak (87.6%).
H100_SXM = _gpu(hardware.H100_SXM, hardware.H100_SXM.hbm_bytes_per_s * _H200_COPY / hardware.H200.hbm_bytes_per_s)
GPUS = {"h200": H200, "h100": H100_SXM}

# The constants the band moves, each from its optimistic value (the GPUs above) to its pessimistic
# one (the lowest published figure: hardware.py)
BAND_CONSTANTS = {
    "l2_rate": "L2 read rate",
    "gather": "HBM efficiency of random row gathers",
    "l2_capacity": "L2 capacity for shared rows",
}


def pessimistic(gpu: Gpu, constants: Iterable[str] = tuple(BAND_CONSTANTS)) -> Gpu:
    """`gpu` with the named constants (BAND_CONSTANTS) at the lowest published figures."""
    changes: dict = {}
    for c in constants:
        if c == "l2_rate":
            changes["l2_bytes_per_s"] = min(m.value for m in hardware.L2_READ_MEASURED)
        elif c == "gather":
            shares = tuple(m.value for m in hardware.GATHER_EFFICIENCY_MEASURED)
            changes["gather_efficiency"] = tuple(zip(hardware.GATHER_GRANULES, shares, strict=True))
        elif c == "l2_capacity":
            changes["l2_bytes"] = int(min(gpu.l2_bytes, hardware.L2_NEAR_PARTITION.value))
        else:
            raise ValueError(f"band constants are {tuple(BAND_CONSTANTS)}, got {c!r}")
    return replace(gpu, **changes)


def band(gpu: Gpu) -> dict:
    """The GPU at both ends of the band: {'optimistic': gpu, 'pessimistic': every constant at its
    lowest published figure}."""
    return {"optimistic": gpu, "pessimistic": pessimistic(gpu)}


def gpu_named(name: str) -> Gpu:
    """The constants of a GPU by its name (torch's device name): an H200's, else an H100's (the
    same die; other GPUs are not modelled and get the H100's, which ranks configs alike)."""
    return H200 if "h200" in name.lower() else H100_SXM


@dataclass(frozen=True)
class Kernel:
    """What the compiled kernel does, read from its SASS and ptxas."""

    name: str
    rows_in_flight: int  # K: independent 16-byte row loads per lane issued before the first FMA
    regs: int  # registers per thread (ptxas) -> resident warps per SM
    instr_per_step: int  # SASS instructions per warp row-load step (issue bound)


# f026238 on sm_90: 94 registers (5 CTAs of 4 warps), one row in flight per lane (its two 16-B runs
# paired at D = 256), about 32 instructions per unrolled gather copy (kernel_review/REPORT.md 1.4, 1.6).
OLD_BLOCK_KERNEL = Kernel("block", rows_in_flight=1, regs=94, instr_per_step=32)
# issue 43's target: K = 4, <= 64 registers (32 warps per SM), <= 15 instructions per edge step.
# regs: kernels/aggregate_kernel.cuh's kBlockRegisters on sm_90, which CI holds (bench/resources.py reads it here)
# rows_in_flight: limits.h's kRowsInFlight (held equal by the tests)
RANGE_KERNEL = Kernel("range", rows_in_flight=4, regs=64, instr_per_step=15)


@dataclass(frozen=True)
class Calibration:
    """The model's free parameters, fitted on the old kernel's H200 times (calibrate)."""

    chain_s: float  # F: the old kernel's fixed dependent chain per schedule block
    l2_round_s: float  # loaded latency of a row round whose rows all hit in L2
    dram_round_s: float  # loaded latency of a round with a row (or a plan/index record) from DRAM


# `python -m bench model`'s fit on the generated presets (bench/results/model-20261202-*.md): what the
# tuner ranks configs with until a GPU run of the range kernel recalibrates it
H200_CALIBRATION = Calibration(chain_s=3.170e-6, l2_round_s=0.292e-6, dram_round_s=0.517e-6)
# the same fit at both ends of the band (band(): the optimistic constants give H200_CALIBRATION)
CALIBRATIONS = {
    "optimistic": H200_CALIBRATION,
    "pessimistic": Calibration(chain_s=3.198e-6, l2_round_s=0.187e-6, dram_round_s=0.507e-6),
}


# -- geometry ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaneShape:
    """How a pass of D columns maps onto a warp: a lane group of `group` lanes reads one row,
    each lane `vectors` 16-byte loads of it; `edges_per_load` rows per warp load instruction."""

    group: int
    vectors: int
    passes: int
    pass_columns: int

    @property
    def edges_per_load(self) -> int:
        return WARP // self.group

    def edges_per_round(self, rows_in_flight: int) -> int:
        """Rows a warp has in flight in one round: K loads per lane, `vectors` of them per row."""
        return self.edges_per_load * max(1, rows_in_flight // self.vectors)


def lane_shape(dim: int, elem: int) -> LaneShape:
    """The lane groups of one pass (kernel_design.md: fp32 D=16: 4 lanes, D=64: 16, D>=128: 32;
    bf16 D=64: 8, D=128: 16, D=256: 32)."""
    passes = max(1, -(-dim // PASS_COLUMNS))
    cols = -(-dim // passes)
    lanes = -(-cols * elem // VECTOR_BYTES)
    group = min(WARP, 1 << (lanes - 1).bit_length())
    return LaneShape(group, -(-lanes // group), passes, cols)


def row_bytes(columns: int, elem: int) -> int:
    """Bytes a row read moves: whole 32-byte sectors."""
    return -(-columns * elem // SECTOR_BYTES) * SECTOR_BYTES


def resident_warps(kernel: Kernel, wpb: int, gpu: Gpu) -> int:
    """Warps per SM: whole blocks of wpb warps within the register file (allocated per warp in
    units of 256), the warp slots and the block slots."""
    per_warp = -(-kernel.regs * WARP // 256) * 256
    by_regs = gpu.regs_per_sm // per_warp
    blocks = min(by_regs // wpb, gpu.max_warps_per_sm // wpb, gpu.max_blocks_per_sm)
    return max(1, blocks) * wpb


def _config(config) -> tuple[int, int, int]:
    """(ps, dist, wpb) of a Config or a tuple."""
    if hasattr(config, "ps"):
        return int(config.ps), int(config.dist), int(config.wpb)
    ps, dist, wpb = config[:3]
    return int(ps), int(dist), int(wpb)


def _parts(rowptr: Optional[np.ndarray], rows: int) -> np.ndarray:
    if rowptr is None:
        return np.zeros(rows, np.int64)
    deg = np.diff(np.asarray(rowptr, np.int64))
    if deg.size != rows or (deg < 0).any():
        raise ValueError("row pointers: both parts need rows + 1 nondecreasing entries")
    return deg


# -- the new kernel's statistics ----------------------------------------------------------------


@dataclass(frozen=True)
class RangeStats:
    """The range kernel's schedule of one step at a config, from its row pointers.

    Items: per output row, its local edges, its remote edges, one end item; warp w takes items
    [w W, (w + 1) W), W = ps x dist (ps = 0: warp w takes rows [w dist, (w + 1) dist)).
    `segment_warp`, `segment_edges`: the pieces of each nonempty (row, part) inside one warp."""

    ps: int
    dist: int
    wpb: int
    rows: int
    local_edges: int
    remote_edges: int
    warps: int
    split_rows: int  # rows cut by a warp boundary (their end item counts)
    carry_pieces: int  # one fp32 carry row per warp a split row touches
    rows_per_warp: np.ndarray  # rows each warp touches (rowptr windows of 32)
    row_ends_per_warp: np.ndarray  # end items each warp holds (row reductions and stores)
    remote_warps: int  # warps with remote edges (one more dependent chunk round)
    segment_warp: np.ndarray
    segment_edges: np.ndarray

    @property
    def items(self) -> int:
        return self.rows + self.local_edges + self.remote_edges

    @property
    def blocks(self) -> int:
        return -(-self.warps // self.wpb)

    @staticmethod
    def of(local_rowptr: np.ndarray, remote_rowptr: Optional[np.ndarray], config) -> "RangeStats":
        """The statistics of a step (local and remote CSR row pointers, remote may be None)."""
        ps, dist, wpb = _config(config)
        lp = np.asarray(local_rowptr, np.int64)
        rows = lp.size - 1
        dl, dr = _parts(lp, rows), _parts(remote_rowptr, rows)
        lo = np.zeros(rows + 1, np.int64)
        np.cumsum(dl, out=lo[1:])
        ro = np.zeros(rows + 1, np.int64)
        np.cumsum(dr, out=ro[1:])
        start = np.arange(rows + 1, dtype=np.int64) + lo + ro  # first item of each row
        items = int(start[-1])
        part_begin = np.concatenate([start[:-1], start[:-1] + dl])
        part_len = np.concatenate([dl, dr])
        keep = part_len > 0
        part_begin, part_len = part_begin[keep], part_len[keep]
        common = dict(ps=ps, dist=dist, wpb=wpb, rows=rows, local_edges=int(lo[-1]), remote_edges=int(ro[-1]))
        remote = np.arange(part_len.size) >= int(keep[:rows].sum())  # the parts kept: local ones first
        if ps == 0:  # whole rows per warp: no split rows
            row_warp = np.arange(rows, dtype=np.int64) // dist
            warps = -(-rows // dist)
            seg_warp = np.concatenate([row_warp, row_warp])[keep]
            per_warp = np.bincount(row_warp, minlength=warps)
            return RangeStats(
                **common,
                warps=warps,
                split_rows=0,
                carry_pieces=0,
                rows_per_warp=per_warp,
                row_ends_per_warp=per_warp,
                remote_warps=int(np.unique(seg_warp[remote]).size),
                segment_warp=seg_warp,
                segment_edges=part_len,
            )
        width = ps * dist
        warps = -(-items // width)
        # each part cut at warp boundaries
        first = part_begin // width
        count = (part_begin + part_len - 1) // width - first + 1
        seg_warp = np.repeat(first, count) + _ranks(count)
        seg_lo = np.maximum(np.repeat(part_begin, count), seg_warp * width)
        seg_hi = np.minimum(np.repeat(part_begin + part_len, count), (seg_warp + 1) * width)
        # each row over the warps it touches (its edges and its end item)
        row_first = start[:-1] // width
        row_last = (start[1:] - 1) // width
        row_count = row_last - row_first + 1
        split = row_count > 1
        return RangeStats(
            **common,
            warps=warps,
            split_rows=int(split.sum()),
            carry_pieces=int(row_count[split].sum()),
            rows_per_warp=np.bincount(np.repeat(row_first, row_count) + _ranks(row_count), minlength=warps),
            row_ends_per_warp=np.bincount(row_last, minlength=warps),
            remote_warps=int(np.unique(seg_warp[np.repeat(remote, count)]).size),
            segment_warp=seg_warp,
            segment_edges=seg_hi - seg_lo,
        )


def _ranks(count: np.ndarray) -> np.ndarray:
    """0, 1, ..., c - 1 for each c of count, concatenated."""
    ends = np.cumsum(count)
    return np.arange(int(ends[-1]) if ends.size else 0, dtype=np.int64) - np.repeat(ends - count, count)


# -- the old kernel's statistics ----------------------------------------------------------------


@dataclass(frozen=True)
class BlockStats:
    """The old kernel's block schedule of one step (core/block_schedule.h at f026238), from its row
    pointers: per block its warps' partition work, the scratch slots of rows cut across blocks."""

    ps: int
    dist: int
    wpb: int
    rows: int
    edges: int
    blocks: int
    heavy_rows: int  # rows cut across blocks (a fixup each)
    slots: int  # fp32 scratch rows
    part_block: np.ndarray  # per partition (local then remote, in schedule order): its block
    part_warp: np.ndarray  # the warp of its block that walks it
    part_edges: np.ndarray

    @staticmethod
    def of(local_rowptr: np.ndarray, remote_rowptr: Optional[np.ndarray], config) -> "BlockStats":
        """The schedule of a step (local and remote CSR row pointers, remote may be None): rows
        packed greedily into blocks of <= 2 wpb rows and <= wpb dist partitions per part; a row
        with more partitions is cut evenly over the fewest blocks that hold it, a scratch slot each."""
        ps, dist, wpb = _config(config)
        lp = np.asarray(local_rowptr, np.int64)
        rows = lp.size - 1
        dl, dr = _parts(lp, rows), _parts(remote_rowptr, rows)
        part_cap, row_cap = wpb * dist, 2 * wpb

        def num_parts(d):
            return -(-d // ps) if ps else (d > 0).astype(np.int64)

        nl, nr = num_parts(dl), num_parts(dr)
        lb, qb, heavy, slots = [], [], 0, 0  # per block: its first local and remote partition
        lc = rc = row0 = l0 = r0 = 0  # the partition cursors; the open block's first row and partitions
        nl_, nr_ = nl.tolist(), nr.tolist()
        for row in range(rows):
            a, b = nl_[row], nr_[row]
            if a > part_cap or b > part_cap:  # a heavy row: its own blocks and a fixup
                if row > row0:
                    lb.append(l0)
                    qb.append(r0)
                k = max(-(-a // part_cap), -(-b // part_cap))
                lb += [lc + j * a // k for j in range(k)]
                qb += [rc + j * b // k for j in range(k)]
                heavy += 1
                slots += k
                lc += a
                rc += b
                row0, l0, r0 = row + 1, lc, rc
                continue
            if row - row0 + 1 > row_cap or lc - l0 + a > part_cap or rc - r0 + b > part_cap:
                if row > row0:
                    lb.append(l0)
                    qb.append(r0)
                row0, l0, r0 = row, lc, rc
            lc += a
            rc += b
        if rows > row0:
            lb.append(l0)
            qb.append(r0)
        blocks = len(lb)

        def sizes(d, n):  # edges of every partition, in row order
            total = int(n.sum())
            if ps == 0:
                return d[d > 0]
            e = np.full(total, ps, np.int64)
            ends = np.cumsum(n)[n > 0] - 1
            e[ends] = d[n > 0] - (n[n > 0] - 1) * ps
            return e

        def owner(begins, total):  # block and warp of each partition
            begins = np.asarray(begins, np.int64)
            idx = np.arange(total, dtype=np.int64)
            blk = np.searchsorted(begins, idx, side="right") - 1
            return blk, (idx - begins[blk]) // dist

        el, er = sizes(dl, nl), sizes(dr, nr)
        bl, wl = owner(lb, el.size)
        br, wr = owner(qb, er.size)
        return BlockStats(
            ps=ps,
            dist=dist,
            wpb=wpb,
            rows=rows,
            edges=int(dl.sum() + dr.sum()),
            blocks=blocks,
            heavy_rows=heavy,
            slots=slots,
            part_block=np.concatenate([bl, br]),
            part_warp=np.concatenate([wl, wr]),
            part_edges=np.concatenate([el, er]),
        )


# -- L2 hits --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceRows:
    """How often the edges name each source row, as the distinct counts and how many rows have
    each (what the L2 hit model needs, computed once per step)."""

    counts: np.ndarray  # distinct nonzero counts
    rows: np.ndarray  # rows with each count

    @staticmethod
    def of(source_counts: np.ndarray) -> "SourceRows":
        """From the edges naming each row (np.bincount of the column ids; for a symmetric graph
        the degrees)."""
        c = np.asarray(source_counts, np.int64)
        counts, rows = np.unique(c[c > 0], return_counts=True)
        return SourceRows(counts, rows)

    @staticmethod
    def uniform(rows: int, edges: int) -> "SourceRows":
        """Every row named equally often (when nothing else is known)."""
        return SourceRows(np.array([max(1, edges // max(rows, 1))]), np.array([max(rows, 1)]))

    @property
    def edges(self) -> int:
        return int((self.counts * self.rows).sum())

    def hit_rate(self, row: int, stream_bytes_per_edge: float, l2_bytes: float) -> float:
        """Share of the gathers of `row`-byte rows that hit (l2_hit_rate: Che's approximation)."""
        return l2_hit_rate(self, row, stream_bytes_per_edge, l2_bytes)


# reuse distances are binned exactly below EXACT_BELOW, then in BINS_PER_OCTAVE bins per octave
EXACT_BELOW = 64
BINS_PER_OCTAVE = 32


def distance_bin(v: np.ndarray) -> np.ndarray:
    """The bin of each count v >= 0 (exact below EXACT_BELOW, 1/BINS_PER_OCTAVE of an octave above)."""
    v = np.asarray(v, np.int64)
    out = v.copy()
    big = v >= EXACT_BELOW
    if big.any():
        shift = np.floor(np.log2(v[big])).astype(np.int64) - int(math.log2(BINS_PER_OCTAVE))
        base = int(math.log2(EXACT_BELOW)) - int(math.log2(BINS_PER_OCTAVE))
        out[big] = EXACT_BELOW + (shift - base) * BINS_PER_OCTAVE + ((v[big] >> shift) - BINS_PER_OCTAVE)
    return out


def bin_value(b: np.ndarray) -> np.ndarray:
    """The count a bin stands for: itself below EXACT_BELOW, the middle of its range above."""
    b = np.asarray(b, np.int64)
    base = int(math.log2(EXACT_BELOW)) - int(math.log2(BINS_PER_OCTAVE))
    shift = base + (b - EXACT_BELOW) // BINS_PER_OCTAVE
    lower = (BINS_PER_OCTAVE + (b - EXACT_BELOW) % BINS_PER_OCTAVE) << np.maximum(shift, 0)
    width = np.left_shift(1, np.maximum(shift, 0))
    return np.where(b < EXACT_BELOW, b, lower + (width - 1) / 2.0)


@dataclass(frozen=True)
class ReuseProfile:
    """Where each row gather falls in an LRU stack, in the order the kernel visits the rows
    (mgg.runtime.locality builds it from the plan and an order): per gather of a row gathered
    before, the distinct other rows gathered since its last gather and the gathers between,
    binned (distance_bin) into a 2-D histogram; a row's first gather always misses. Order-aware,
    where SourceRows (Che's approximation) sees only how often each row is gathered."""

    counts: np.ndarray  # int64 [distinct bins, gap bins]
    first: int  # gathers of a row for the first time
    gathers: int

    @staticmethod
    def of(distinct: np.ndarray, gap: np.ndarray) -> "ReuseProfile":
        """From per-gather distances (mgg._C.reuse_distances: -1 for a first gather)."""
        distinct, gap = np.asarray(distinct, np.int64), np.asarray(gap, np.int64)
        again = distinct >= 0
        d, g = distance_bin(distinct[again]), distance_bin(gap[again])
        shape = (int(d.max(initial=-1)) + 1, int(g.max(initial=-1)) + 1)
        counts = np.bincount(d * shape[1] + g, minlength=shape[0] * shape[1]).reshape(shape)
        return ReuseProfile(counts, int(distinct.size - again.sum()), int(distinct.size))

    def hit_rate(self, row: int, stream_bytes_per_edge: float, l2_bytes: float) -> float:
        """Share of the gathers that hit in an LRU cache of l2_bytes where every gather of a
        `row`-byte row comes with stream_bytes_per_edge bytes read or written once: a row is still
        there if it, the distinct rows gathered since and the stream since fit."""
        if self.gathers == 0:
            return 0.0
        d = bin_value(np.arange(self.counts.shape[0]))[:, None]
        g = bin_value(np.arange(self.counts.shape[1]))[None, :]
        fits = (d + 1) * row + (g + 1) * stream_bytes_per_edge <= l2_bytes
        return float(self.counts[fits].sum()) / self.gathers


def l2_hit_rate(sources: SourceRows, row: int, stream_bytes_per_edge: float, l2_bytes: float) -> float:
    """Share of row gathers that hit in an LRU cache of l2_bytes (Che's approximation): row j is
    named by c_j edges; each gather of `row` bytes comes with stream_bytes_per_edge bytes read or
    written once. The characteristic time t (in edges) solves
    sum_j row (1 - exp(-p_j t)) + stream t = l2_bytes, p_j = c_j / edges, and a gather of row j
    hits with probability 1 - exp(-p_j t). A row's first gather always misses."""
    edges = sources.edges
    if edges == 0:
        return 0.0
    p = sources.counts / edges

    def occupancy(t):
        return float((sources.rows * -np.expm1(-p * t)).sum()) * row + stream_bytes_per_edge * t

    if stream_bytes_per_edge == 0 and sources.rows.sum() * row <= l2_bytes:
        return float(1.0 - sources.rows.sum() / edges)  # every row stays
    lo, hi = 0.0, 1.0
    while occupancy(hi) < l2_bytes:
        hi *= 2
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if occupancy(mid) < l2_bytes else (lo, mid)
    hit = float((sources.rows * sources.counts * -np.expm1(-p * lo)).sum()) / edges
    return float(min(hit, 1.0 - sources.rows.sum() / edges))


def _round_latency(hit: float, n: np.ndarray, cal: Calibration) -> np.ndarray:
    """Latency of rounds touching n rows: an L2 round if all n hit (independent draws)."""
    all_hit = hit ** np.asarray(n, np.float64)
    return all_hit * cal.l2_round_s + (1.0 - all_hit) * cal.dram_round_s


def _segment_latency(edges: np.ndarray, per_round: int, hit: float, cal: Calibration) -> np.ndarray:
    """Row rounds of segments of `edges` edges: full rounds of per_round rows, then the rest."""
    full, rest = np.divmod(np.asarray(edges, np.int64), per_round)
    return full * _round_latency(hit, per_round, cal)[()] + np.where(rest > 0, _round_latency(hit, rest, cal), 0.0)


# -- predictions ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    """One aggregation's predicted time (seconds) and what it is made of."""

    seconds: float
    latency_s: float
    bandwidth_s: float
    issue_s: float
    fixup_s: float
    dram_bytes: float
    l2_bytes: float
    hit: float  # share of row gathers that hit in L2
    warps_per_sm: int

    @property
    def bound(self) -> str:
        """Which bound sets the main kernel's time."""
        return max((self.latency_s, "latency"), (self.bandwidth_s, "bandwidth"), (self.issue_s, "issue"))[1]


def bandwidth_s(stream_bytes: float, gathered_bytes: float, row: int, l2_bytes: float, gpu: Gpu) -> float:
    """The bandwidth bound: the streamed DRAM bytes at the sequential rate plus the gathered rows
    that miss in L2 (`row` bytes each) at the gather rate, or all bytes at the L2 rate."""
    dram = stream_bytes / gpu.dram_bytes_per_s + gathered_bytes / gpu.gather_bytes_per_s(row)
    return max(dram, l2_bytes / gpu.l2_bytes_per_s)


def _issue_s(steps: float, kernel: Kernel, gpu: Gpu) -> float:
    return steps * kernel.instr_per_step / (gpu.sms * SCHEDULERS_PER_SM * gpu.clock_hz)


def _hit(sources, rows: int, row: int, stream: float, edges: int, gpu: Gpu) -> float:
    """L2 hits of the row gathers: sources a SourceRows (Che) or a ReuseProfile (the visiting
    order's reuse distances); None: every row named equally often."""
    if not edges:
        return 1.0
    return (sources or SourceRows.uniform(rows, edges)).hit_rate(row, stream / edges, gpu.l2_bytes)


def range_bytes(stats: RangeStats, dim: int, elem: int, weighted: bool = True, peer_sources: bool = False) -> tuple:
    """(streamed bytes, gathered row bytes) of one pass of the range kernel (kernel_design.md):
    per edge its column id, weight (and PE); per row its rowptr per part and its output row (a
    split row's by the fixup); per warp 80 B of range records; per carry piece an fp32 row written
    (the fixup's reads are its own pass)."""
    shape = lane_shape(dim, elem)
    edges = stats.local_edges + stats.remote_edges
    parts = 1 + (stats.remote_edges > 0)
    stream = (
        edges * (4 + 4 * weighted + 4 * peer_sources)
        + stats.rows * 8 * parts
        + (stats.rows - stats.split_rows) * row_bytes(shape.pass_columns, elem)
        + stats.warps * 80
        + stats.carry_pieces * shape.pass_columns * 4
    )
    return float(stream), float(edges * row_bytes(shape.pass_columns, elem))


def predict_range(
    stats: RangeStats,
    dim: int,
    elem: int,
    cal: Calibration,
    gpu: Gpu = H200,
    kernel: Kernel = RANGE_KERNEL,
    sources=None,
    weighted: bool = True,
    peer_sources: bool = False,
) -> Prediction:
    """The range kernel's time for one step at D = dim, `elem` bytes per stored element.

    Args:
        stats: the step's RangeStats at a config.
        dim, elem: feature width and storage bytes (fp32 4, bf16/fp16 2; sums are fp32).
        cal: the calibrated latencies.
        gpu, kernel: the GPU's constants and the compiled kernel's facts.
        sources: the L2 hits' model: a SourceRows (how often each source row is gathered, Che's
            approximation) or a ReuseProfile (the visiting order's reuse distances); None: all
            rows alike. Remote rows are gathered like local ones (one device; NVLink is not
            modelled).
        weighted, peer_sources: a weight (a PE) per edge in the sparse stream.

    Returns:
        The Prediction."""
    shape = lane_shape(dim, elem)
    per_round = shape.edges_per_round(kernel.rows_in_flight)
    row = row_bytes(shape.pass_columns, elem)
    edges = stats.local_edges + stats.remote_edges
    stream, gathered = range_bytes(stats, dim, elem, weighted, peer_sources)
    hit = _hit(sources, stats.rows, row, stream, edges, gpu)
    dram = shape.passes * (stream + (1 - hit) * gathered)
    through_l2 = shape.passes * (stream + gathered)
    bw = bandwidth_s(shape.passes * stream, shape.passes * (1 - hit) * gathered, row, through_l2, gpu)
    # each warp's chain: range records, rowptr window, first col/weight chunk (one more for a
    # remote stream), its row rounds, a rowptr window per further 32 rows, a reduction per row end
    chain = np.full(stats.warps, 3 * cal.dram_round_s)
    rounds = _segment_latency(stats.segment_edges, per_round, hit, cal)
    chain += np.bincount(stats.segment_warp, weights=rounds, minlength=stats.warps)
    chain += np.maximum(0, -(-stats.rows_per_warp // WARP) - 1) * cal.dram_round_s
    chain += stats.row_ends_per_warp * math.log2(shape.edges_per_load) * gpu.shfl_cycles / gpu.clock_hz
    warps_sm = resident_warps(kernel, stats.wpb, gpu)
    latency = _blocks_in_waves(chain, stats.wpb, warps_sm // stats.wpb, gpu)
    latency = shape.passes * (latency + stats.remote_warps * cal.dram_round_s / (warps_sm * gpu.sms))
    steps = shape.passes * shape.vectors * float((-(-stats.segment_edges // shape.edges_per_load)).sum())
    fixup = 0.0
    if stats.split_rows:  # one warp per split row: its pieces read side by side, the row written
        fix_bytes = shape.passes * (stats.carry_pieces * shape.pass_columns * 4 + stats.split_rows * row)
        fix_lat = shape.passes * stats.split_rows * 2 * cal.dram_round_s / (warps_sm * gpu.sms)
        fixup = max(fix_bytes / gpu.dram_bytes_per_s, fix_lat) + LAUNCH_S
    issue = _issue_s(steps, kernel, gpu)
    return Prediction(
        max(latency, bw, issue) + fixup + LAUNCH_S, latency, bw, issue, fixup, dram, through_l2, hit, warps_sm
    )


def _blocks_in_waves(chain: np.ndarray, wpb: int, blocks_per_sm: int, gpu: Gpu) -> float:
    """Time of blocks of wpb consecutive warps, blocks_per_sm resident per SM: their longest
    chains summed over the resident blocks, at least the longest chain."""
    longest = np.pad(chain, (0, -chain.size % wpb)).reshape(-1, wpb).max(axis=1)
    return max(float(longest.sum()) / (blocks_per_sm * gpu.sms), float(longest.max(initial=0.0)))


def block_bytes(stats: BlockStats, dim: int, elem: int) -> tuple:
    """(streamed bytes, gathered row bytes) of one pass of the old kernel: column ids and weights,
    72-byte schedule rows, rowptr, the output (a heavy row's by the fixup), fp32 scratch rows
    written (the fixup's reads are its own pass)."""
    cols = lane_shape(dim, elem).pass_columns
    stream = (
        stats.edges * 8
        + stats.blocks * 72
        + (stats.rows + 1) * 8
        + (stats.rows - stats.heavy_rows) * row_bytes(cols, elem)
        + stats.slots * cols * 4
    )
    return float(stream), float(stats.edges * row_bytes(cols, elem))


def block_chains(stats: BlockStats, dim: int, elem: int, hit: float, cal: Calibration) -> tuple:
    """The busiest warp of every block of the old kernel, whose chain is
    F + a_l2 x l2_round_s + a_dram x dram_round_s (the busiest at cal's latencies).

    Returns:
        (a_l2, a_dram): per block, its busiest warp's rounds weighted by their chance to be L2
        rounds and DRAM rounds."""
    per_round = lane_shape(dim, elem).edges_per_round(OLD_BLOCK_KERNEL.rows_in_flight)
    full, rest = np.divmod(stats.part_edges, per_round)
    a_l2 = full * hit**per_round + np.where(rest > 0, hit ** rest.astype(np.float64), 0.0)
    a_dram = full + (rest > 0) - a_l2
    key = stats.part_block * stats.wpb + stats.part_warp
    size = stats.blocks * stats.wpb
    l2 = np.bincount(key, weights=a_l2, minlength=size).reshape(stats.blocks, stats.wpb)
    dram = np.bincount(key, weights=a_dram, minlength=size).reshape(stats.blocks, stats.wpb)
    pick = np.argmax(l2 * cal.l2_round_s + dram * cal.dram_round_s, axis=1)
    blocks = np.arange(stats.blocks)
    return l2[blocks, pick], dram[blocks, pick]


@dataclass(frozen=True)
class _BlockTerms:
    """What predict_block needs that does not depend on the calibration."""

    hit: float
    dram: float
    through_l2: float
    bandwidth: float
    issue: float
    fix_bytes: float
    fix_rounds: float  # dependent DRAM rounds of the fixup kernel, summed over its CTAs
    blocks_sm: int
    passes: int


def _block_terms(stats, dim, elem, gpu, kernel, sources) -> _BlockTerms:
    shape = lane_shape(dim, elem)
    row = row_bytes(shape.pass_columns, elem)
    stream, gathered = block_bytes(stats, dim, elem)
    hit = _hit(sources, stats.rows, row, stream, stats.edges, gpu)
    steps = shape.passes * float((-(-stats.part_edges // shape.edges_per_load)).sum())
    through_l2 = shape.passes * (stream + gathered)
    return _BlockTerms(
        hit=hit,
        dram=shape.passes * (stream + (1 - hit) * gathered),
        through_l2=through_l2,
        bandwidth=bandwidth_s(shape.passes * stream, shape.passes * (1 - hit) * gathered, row, through_l2, gpu),
        issue=_issue_s(steps, kernel, gpu),
        fix_bytes=shape.passes * (stats.slots * shape.pass_columns * 4 + stats.heavy_rows * row),
        fix_rounds=shape.passes * (stats.heavy_rows + stats.slots / 16),  # 16 slot loads in flight per thread
        blocks_sm=resident_warps(kernel, stats.wpb, gpu) // stats.wpb,
        passes=shape.passes,
    )


def predict_block(
    stats: BlockStats,
    dim: int,
    elem: int,
    cal: Calibration,
    gpu: Gpu = H200,
    kernel: Kernel = OLD_BLOCK_KERNEL,
    sources=None,
) -> Prediction:
    """The old block kernel's time for one step: blocks in waves of (CTAs per SM x SMs), each the
    chain F plus its busiest warp's rounds (the review's T = waves x (F + rounds x L)); then the
    fixup kernel (a CTA per heavy row summing its scratch slots). Arguments as predict_range."""
    t = _block_terms(stats, dim, elem, gpu, kernel, sources)
    return _block_prediction(stats, dim, elem, cal, gpu, t)


def _block_prediction(stats, dim, elem, cal, gpu, t: _BlockTerms) -> Prediction:
    a_l2, a_dram = block_chains(stats, dim, elem, t.hit, cal)
    per_block = cal.chain_s + a_l2 * cal.l2_round_s + a_dram * cal.dram_round_s
    latency = t.passes * max(float(per_block.sum()) / (t.blocks_sm * gpu.sms), float(per_block.max(initial=0.0)))
    fixup = _block_fixup_s(stats, t, cal, gpu)
    bw = t.bandwidth
    return Prediction(
        max(latency, bw, t.issue) + fixup + LAUNCH_S,
        latency,
        bw,
        t.issue,
        fixup,
        t.dram,
        t.through_l2,
        t.hit,
        t.blocks_sm * stats.wpb,
    )


def _block_fixup_s(stats: BlockStats, t: _BlockTerms, cal: Calibration, gpu: Gpu) -> float:
    """The old fixup kernel: a CTA per heavy row (8 resident per SM) sums its scratch slots."""
    if not stats.slots:
        return 0.0
    return max(t.fix_bytes / gpu.dram_bytes_per_s, t.fix_rounds * cal.dram_round_s / (8 * gpu.sms)) + LAUNCH_S


# -- calibration ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    """One measured time of the old kernel: its step's statistics and the measurement."""

    stats: BlockStats
    dim: int
    elem: int
    seconds: float
    sources: Optional[SourceRows] = None  # how often each source row is gathered


def calibrate(points: Sequence[Measured], gpu: Gpu = H200, start: Optional[Calibration] = None) -> Calibration:
    """The latencies that fit the old kernel's measured times best (least squares of the relative
    errors). The latency bound is linear in (F, L2 round, DRAM round) once each block's busiest
    warp is chosen, so: choose at the current latencies, solve, repeat until it settles. Assumes
    the measured times are latency-bound (check each Prediction.bound after)."""
    cal = start or Calibration(3e-6, 0.3e-6, 0.6e-6)
    terms = [_block_terms(p.stats, p.dim, p.elem, gpu, OLD_BLOCK_KERNEL, p.sources) for p in points]
    for _ in range(20):
        rows, target = [], []
        for p, t in zip(points, terms, strict=True):
            a_l2, a_dram = block_chains(p.stats, p.dim, p.elem, t.hit, cal)
            waves = t.passes / (t.blocks_sm * gpu.sms)
            rows.append([p.stats.blocks * waves, a_l2.sum() * waves, a_dram.sum() * waves])
            target.append(p.seconds - LAUNCH_S - _block_fixup_s(p.stats, t, cal, gpu))  # small: at the last latencies
        a, y = np.array(rows), np.array(target)
        w = 1.0 / np.array([p.seconds for p in points])
        x, *_ = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)
        new = Calibration(*map(float, x))
        if np.allclose(x, [cal.chain_s, cal.l2_round_s, cal.dram_round_s], rtol=1e-6, atol=0):
            return new
        cal = new
    return cal


def relative_errors(points: Sequence[Measured], cal: Calibration, gpu: Gpu = H200) -> np.ndarray:
    """predicted / measured - 1 for each point."""
    return np.array(
        [predict_block(p.stats, p.dim, p.elem, cal, gpu, sources=p.sources).seconds / p.seconds - 1 for p in points]
    )


def leave_one_out_errors(points: Sequence[Measured], gpu: Gpu = H200) -> np.ndarray:
    """Each point predicted by the calibration fitted on the others: the model's out-of-sample error."""
    out = []
    for i, p in enumerate(points):
        cal = calibrate([q for j, q in enumerate(points) if j != i], gpu)
        out.append(relative_errors([p], cal, gpu)[0])
    return np.array(out)


# -- ranking configs ------------------------------------------------------------------------------


def rank_configs(
    local_rowptr: np.ndarray,
    remote_rowptr: Optional[np.ndarray],
    dim: int,
    elem: int,
    configs: Iterable,
    cal: Calibration,
    gpu: Gpu = H200,
    kernel: Kernel = RANGE_KERNEL,
    sources=None,
    schedules: Optional[dict] = None,
) -> list:
    """The configs by the range kernel's predicted time, fastest first (what the tuner measures
    first). configs: Config objects or (ps, dist, wpb) tuples. The schedule depends on the items
    per warp (ps x dist; ps = 0: dist rows) and wpb only, so each is predicted once; `schedules`
    (a dict) keeps the RangeStats across calls on the same step (other dims and dtypes).

    Returns:
        [(config, Prediction)], sorted by predicted seconds (ties: the order given)."""
    schedules = {} if schedules is None else schedules
    predicted: dict = {}
    out = []
    for c in configs:
        ps, dist, wpb = _config(c)
        key = (0, dist) if ps == 0 else (1, ps * dist)
        if key not in schedules:
            schedules[key] = RangeStats.of(local_rowptr, remote_rowptr, (ps, dist, wpb))
        if (key, wpb) not in predicted:
            stats = replace(schedules[key], ps=ps, dist=dist, wpb=wpb)
            predicted[(key, wpb)] = predict_range(stats, dim, elem, cal, gpu, kernel, sources)
        out.append((c, predicted[(key, wpb)]))
    return sorted(out, key=lambda t: t[1].seconds)


# -- degrees without the graph ------------------------------------------------------------------


def analytic_degrees(nodes: int, edges: int, abcd: Sequence[float], uniform: float, seed: int = 0) -> np.ndarray:
    """Degrees of an undirected R-MAT stand-in (mgg.data.synthetic's presets) without generating
    it (the perf review's model, kernel_review/model/degrees.py): expected draws per node from the
    R-MAT marginals plus the uniform share, distinct partners capped as N (1 - exp(-lam / N)),
    Poisson noise, rescaled to the edge count, scrambled like the generator's ids."""
    a, b, c, d = abcd
    levels = int(np.ceil(np.log2(nodes)))
    ones = np.zeros(nodes, np.int64)
    x = np.arange(nodes, dtype=np.int64)
    for i in range(levels):
        ones += (x >> i) & 1
    p1 = (c + d) / (a + b + c + d)  # P(a bit of an endpoint is 1); b = c makes both endpoints alike
    logp = (levels - ones) * np.log(1 - p1) + ones * np.log(p1)
    p = np.exp(logp - logp.max())
    p /= p.sum()
    lam = edges * ((1 - uniform) * p + uniform / nodes)
    lam = (nodes - 1) * -np.expm1(-lam / (nodes - 1))
    rng = np.random.default_rng(seed)
    deg = rng.poisson(lam)
    deg = np.round(deg * (edges / deg.sum())).astype(np.int64)
    rng.shuffle(deg)
    return deg

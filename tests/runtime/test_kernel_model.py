"""The kernels' performance model (mgg/runtime/kernel_model.py): the plan statistics of both kernels
on hand-made row pointers, the lane geometry of kernel_design.md, monotonicity where it must hold,
and the calibration against the committed H200 times of the old kernel."""

import csv
import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mgg.runtime import kernel_model as km

ROOT = Path(__file__).resolve().parents[2]
CAL = km.Calibration(chain_s=3.2e-6, l2_round_s=0.3e-6, dram_round_s=0.53e-6)


def rowptr(degrees, start=0):
    return np.concatenate([[start], start + np.cumsum(degrees)]).astype(np.int64)


def test_ranges_cut_rows_at_warp_boundaries():
    # items: row 0 = 3 edges + end (0-3), row 1 = end (4), row 2 = 5 edges + end (5-10), row 3 = 1 + end (11-12)
    s = km.RangeStats.of(rowptr([3, 0, 5, 1]), None, (2, 2, 4))  # W = 4: warps [0,4) [4,8) [8,12) [12,13)
    assert (s.items, s.warps, s.blocks) == (13, 4, 1)
    assert (s.split_rows, s.carry_pieces) == (2, 4)  # row 2 over warps 1-2, row 3's end item in warp 3
    assert s.segment_warp.tolist() == [0, 1, 2, 2]
    assert s.segment_edges.tolist() == [3, 3, 2, 1]
    assert s.rows_per_warp.tolist() == [1, 2, 2, 1]
    assert s.row_ends_per_warp.tolist() == [1, 1, 1, 1]
    assert s.remote_warps == 0


def test_a_hub_row_spans_warps_one_carry_piece_each():
    s = km.RangeStats.of(rowptr([20]), None, (3, 1, 2))  # 21 items, W = 3: exactly 7 warps
    assert (s.warps, s.blocks, s.split_rows, s.carry_pieces) == (7, 4, 1, 7)
    assert s.segment_edges.tolist() == [3, 3, 3, 3, 3, 3, 2]
    assert s.segment_warp.tolist() == list(range(7))
    assert s.row_ends_per_warp.tolist() == [0] * 6 + [1]
    assert s.rows_per_warp.tolist() == [1] * 7


def test_ranges_walk_local_then_remote_edges_of_each_row():
    # row 0: local item 0, remote 1-2, end 3; row 1: local 4-5, end 6; W = 3
    s = km.RangeStats.of(rowptr([1, 2], start=7), rowptr([2, 0]), (3, 1, 1))
    assert (s.local_edges, s.remote_edges, s.warps) == (3, 2, 3)
    assert (s.split_rows, s.carry_pieces) == (2, 4)
    assert sorted(zip(s.segment_warp.tolist(), s.segment_edges.tolist(), strict=True)) == [(0, 1), (0, 2), (1, 2)]
    assert s.remote_warps == 1


def test_ps_zero_gives_whole_rows_to_a_warp():
    s = km.RangeStats.of(rowptr([3, 0, 5, 1, 7]), None, (0, 2, 4))
    assert (s.warps, s.split_rows, s.carry_pieces) == (3, 0, 0)
    assert s.segment_warp.tolist() == [0, 1, 1, 2]
    assert s.segment_edges.tolist() == [3, 5, 1, 7]
    assert s.rows_per_warp.tolist() == [2, 2, 1]


def test_the_old_block_schedule_cuts_heavy_rows_into_scratch_slots():
    # ps 16, dist 1, wpb 2: at most 2 partitions and 4 rows a block; row 2 (40 edges, 3 partitions) is heavy
    b = km.BlockStats.of(rowptr([3, 0, 40, 5]), None, (16, 1, 2))
    assert (b.blocks, b.heavy_rows, b.slots, b.edges) == (4, 1, 2, 48)
    assert b.part_edges.tolist() == [3, 16, 16, 8, 5]
    assert b.part_block.tolist() == [0, 1, 2, 2, 3]
    assert b.part_warp.tolist() == [0, 0, 0, 1, 0]


def test_the_old_block_schedule_packs_light_rows_up_to_its_caps():
    b = km.BlockStats.of(rowptr([1] * 9), None, (16, 4, 1))  # row cap 2, partition cap 4
    assert (b.blocks, b.slots) == (5, 0)
    assert b.part_block.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4]
    assert b.part_warp.tolist() == [0] * 9  # dist 4: one warp walks a block's partitions


@pytest.mark.parametrize(
    "dim, elem, group, vectors, passes, per_round",
    [
        (16, 4, 4, 1, 1, 32),
        (64, 4, 16, 1, 1, 8),
        (128, 4, 32, 1, 1, 4),
        (256, 4, 32, 2, 1, 2),  # fp32 D = 256: 2 edges x 2 vectors
        (512, 4, 32, 2, 2, 2),
        (64, 2, 8, 1, 1, 16),
        (128, 2, 16, 1, 1, 8),
        (256, 2, 32, 1, 1, 4),
    ],
)
def test_lane_groups_follow_the_kernel_design(dim, elem, group, vectors, passes, per_round):
    shape = km.lane_shape(dim, elem)
    assert (shape.group, shape.vectors, shape.passes) == (group, vectors, passes)
    assert shape.edges_per_round(km.RANGE_KERNEL.rows_in_flight) == per_round
    assert shape.edges_per_round(km.OLD_BLOCK_KERNEL.rows_in_flight) == 32 // group  # the old pairs at D=256


def test_registers_give_the_resident_warps():
    assert km.resident_warps(km.OLD_BLOCK_KERNEL, 4, km.H200) == 20  # 94 registers: 5 CTAs of 4 warps
    assert km.resident_warps(km.RANGE_KERNEL, 4, km.H200) == 32
    assert km.resident_warps(km.RANGE_KERNEL, 1, km.H200) == 32


def _skewed(rows=3000, seed=1):
    rng = np.random.default_rng(seed)
    deg = np.minimum(rng.zipf(1.8, rows), 2000)
    return deg, km.SourceRows.of(deg)


def test_more_bytes_are_never_faster():
    """Wider rows from 64 columns up (below, narrower lane groups add reduction steps to a warp's
    chain, which the model charges), the graph twice over, more bytes per edge, slower memory:
    never faster. (Adding edges to short rows may be: a warp's range then holds fewer rows, and
    the model charges a dependent round per row segment.)"""
    deg, src = _skewed(rows=100_000)
    s = km.RangeStats.of(rowptr(deg), None, (16, 32, 4))
    b = km.BlockStats.of(rowptr(deg), None, (16, 1, 4))
    for predict, stats in ((km.predict_range, s), (km.predict_block, b)):
        for elem in (2, 4):
            t = [predict(stats, d, elem, CAL, km.H200, sources=src).seconds for d in (64, 128, 256, 512, 1024)]
            assert t == sorted(t), (predict.__name__, elem, t)
    twice = km.RangeStats.of(rowptr(np.concatenate([deg, deg])), None, (16, 32, 4))  # the rows twice over
    for d in (16, 128):
        base = km.predict_range(s, d, 4, CAL, sources=src).seconds
        assert km.predict_range(twice, d, 4, CAL, sources=src).seconds >= base
        assert km.predict_range(s, d, 4, CAL, sources=src, weighted=True, peer_sources=True).seconds >= base
        assert km.predict_range(s, d, 4, CAL, sources=src, weighted=False).seconds <= base
    slower = km.Calibration(CAL.chain_s, CAL.l2_round_s * 2, CAL.dram_round_s * 2)
    assert (
        km.predict_range(s, 64, 4, slower, sources=src).seconds >= km.predict_range(s, 64, 4, CAL, sources=src).seconds
    )
    assert (
        km.predict_block(b, 64, 4, slower, sources=src).seconds >= km.predict_block(b, 64, 4, CAL, sources=src).seconds
    )
    h100 = km.predict_range(s, 256, 4, CAL, km.H100_SXM, sources=src).seconds
    assert h100 > km.predict_range(s, 256, 4, CAL, km.H200, sources=src).seconds  # bandwidth-bound there


def test_l2_hits_fall_with_more_bytes_and_rise_with_a_larger_cache():
    _, src = _skewed(rows=200_000)
    hits = [km.l2_hit_rate(src, row, 8, 2**20) for row in (32, 64, 256, 1024)]
    assert hits == sorted(hits, reverse=True) and 0 < hits[-1] < hits[0] < 1
    assert km.l2_hit_rate(src, 64, 64, 2**20) < km.l2_hit_rate(src, 64, 8, 2**20)
    assert km.l2_hit_rate(src, 64, 8, 2**22) > km.l2_hit_rate(src, 64, 8, 2**20)
    everything = km.SourceRows.of(np.full(100, 10))
    assert km.l2_hit_rate(everything, 64, 0, 2**20) == pytest.approx(0.9)  # each row's first gather misses


def test_configs_are_ranked_by_predicted_time():
    deg, src = _skewed()
    configs = [(16, 32, 4), (32, 16, 4), (1, 1, 1), (0, 8, 2), (32, 64, 1)]
    ranked = km.rank_configs(rowptr(deg), None, 64, 4, configs, CAL, sources=src)
    times = [p.seconds for _, p in ranked]
    assert times == sorted(times) and sorted(c for c, _ in ranked) == sorted(configs)
    same = dict(ranked)
    assert same[(16, 32, 4)].seconds == same[(32, 16, 4)].seconds  # 512 items per warp either way
    one = km.predict_range(km.RangeStats.of(rowptr(deg), None, (1, 1, 1)), 64, 4, CAL, sources=src)
    assert same[(1, 1, 1)].seconds == one.seconds


def _measured_rows():
    path = sorted(ROOT.glob("bench/results/gpu-20261126-*/kernel-*.csv"))[-1]
    with open(path) as f:
        return [r for r in csv.DictReader(f) if r["impl"] == "mgg" and r["pass"] == "fwd"]


def _committed_model():
    path = sorted(ROOT.glob("bench/results/model-*.csv"))[-1]
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if not r.get("order")]  # the order-blind rows
        return {(r["graph"], int(r["D"]), r["dtype"], r["kernel"]): r for r in rows}


@pytest.mark.full  # make test-full (tests/conftest.py)
def test_the_calibration_reproduces_the_measured_old_kernel():
    """Calibrated on the committed H200 rows (the presets' analytic degrees: seconds, not minutes),
    every row within the issue's 15%; the fit agrees with the committed calibration (made on the
    generated graphs) and with the committed predictions."""
    from mgg.data.synthetic import PRESETS

    points, keys = [], []
    for spec in ("rmat-reddit", "rmat-products"):
        p = PRESETS[spec]
        deg = km.analytic_degrees(p.nodes, p.edges, p.abcd, p.uniform)
        stats = km.BlockStats.of(rowptr(deg), None, (16, 1, 4))
        for r in _measured_rows():
            if r["graph"] == spec:
                points.append(km.Measured(stats, int(r["dim"]), 4, float(r["median_ms"]) * 1e-3, km.SourceRows.of(deg)))
                keys.append((spec, int(r["dim"])))
    assert len(points) == 8
    model = _committed_model()
    for end, gpu in km.band(km.H200).items():  # the model's own check, at both ends of the band
        cal = km.calibrate(points, gpu)
        errors = km.relative_errors(points, cal, gpu)
        assert np.abs(errors).max() <= 0.15, (end, errors)
        committed = km.CALIBRATIONS[end]
        for fitted, kept in zip(
            (cal.chain_s, cal.l2_round_s, cal.dram_round_s),
            (committed.chain_s, committed.l2_round_s, committed.dram_round_s),
            strict=True,
        ):
            # analytic degrees here, generated ones for the committed fit; at the pessimistic end the L2
            # round hangs on the few L2-bound rounds of the old kernel (0.207 against 0.187 us)
            assert fitted == pytest.approx(kept, rel=0.05 if end == "optimistic" else 0.15), end
        for (spec, dim), p in zip(keys, points, strict=True):
            row = model[(spec, dim, "float32", "h200-20261126")]
            assert float(row["measured_ms"]) == pytest.approx(p.seconds * 1e3, rel=1e-3)
            predicted = km.predict_block(p.stats, dim, 4, committed, gpu, sources=p.sources).seconds * 1e3
            band = (float(row["predicted_ms_low"]), float(row["predicted_ms_high"]))
            assert any(predicted == pytest.approx(b, rel=0.05) for b in band), (end, predicted, band)
            assert all(abs(b / float(row["measured_ms"]) - 1) <= 0.15 for b in band)


def test_the_band_runs_from_the_optimistic_to_the_lowest_published_constants():
    """band(): the optimistic end is the GPU as modelled before (every gather at the copy rate);
    the pessimistic end takes the lowest published figure of each constant (hardware.py), and at the
    same latencies it never predicts the range kernel faster."""
    from mgg.runtime import hardware

    band = km.band(km.H200)
    opt, pes = band["optimistic"], band["pessimistic"]
    assert opt == km.H200 and opt.gather_bytes_per_s(64) == opt.dram_bytes_per_s
    assert pes.l2_bytes_per_s == min(m.value for m in hardware.L2_READ_MEASURED) < opt.l2_bytes_per_s
    assert pes.l2_bytes == hardware.L2_NEAR_PARTITION.value < opt.l2_bytes
    rates = [pes.gather_bytes_per_s(r) for r in (32, 64, 128, 256, 512, 1024, 4096)]
    assert rates == sorted(rates) and rates[0] == pytest.approx(0.31 * pes.hbm_bytes_per_s)
    assert rates[3] == pytest.approx(0.69 * pes.hbm_bytes_per_s) and max(rates) <= pes.dram_bytes_per_s
    with pytest.raises(ValueError, match="band constants"):
        km.pessimistic(km.H200, ["l3_rate"])
    deg = np.random.default_rng(0).zipf(1.8, 20000).clip(max=3000)
    stats = km.RangeStats.of(rowptr(deg), None, (16, 32, 4))
    for dim in (16, 64, 256):
        one = {e: km.predict_range(stats, dim, 4, CAL, g, sources=km.SourceRows.of(deg)) for e, g in band.items()}
        assert one["pessimistic"].seconds >= one["optimistic"].seconds
        for c in km.BAND_CONSTANTS:  # each constant alone lies between the ends
            alone = km.predict_range(stats, dim, 4, CAL, km.pessimistic(km.H200, [c]), sources=km.SourceRows.of(deg))
            assert one["optimistic"].seconds <= alone.seconds <= one["pessimistic"].seconds


def test_the_module_needs_numpy_only():
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('km', {str(ROOT / 'mgg/runtime/kernel_model.py')!r})\n"
        "m = sys.modules['km'] = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "assert 'torch' not in sys.modules and 'mgg' not in sys.modules, sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert importlib.util.find_spec("numpy")


def test_the_kernel_constants_are_the_kernels():
    """kernel_model's copies of csrc/core/limits.h (it cannot import mgg._C): the warp, a pass's
    columns and the rows in flight; its GPUs are mgg/runtime/hardware.py's."""
    from mgg import _C
    from mgg.runtime import hardware

    assert km.WARP == _C.limits["warp"] and km.PASS_COLUMNS == _C.limits["max_tile"]
    assert km.RANGE_KERNEL.rows_in_flight == _C.limits["rows_in_flight"]
    assert (km.H200.sms, km.H200.hbm_bytes_per_s) == (hardware.H200.sms, hardware.H200.hbm_bytes_per_s)
    assert km.H100_SXM.hbm_bytes_per_s == hardware.H100_SXM.hbm_bytes_per_s


def test_python_m_bench_model_is_a_subcommand(capsys):
    from bench import cli

    with pytest.raises(SystemExit) as e:
        cli.main(["model", "--help"])
    assert e.value.code == 0 and "python -m bench model" in capsys.readouterr().out

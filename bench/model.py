"""The aggregation kernels' performance model against the one GPU run, as a band (issues 43, 50).

    python -m bench model [--measured CSV] [--graphs rmat-reddit rmat-products] [--dims 16 64 128 256]
                          [--orders [user rcm degree metis]] [--degrees generated|analytic] [--no-tuned]
                          [--no-loo] [--out DIR]

mgg.runtime.kernel_model rests on three constants NVIDIA does not publish for GH100: the L2's read
rate, the HBM efficiency of random row gathers and the L2 capacity a row every SM reads can count
on. The model is run at both ends of what others measured (kernel_model.band; hardware.py names
each figure's source): `low` with the optimistic constants (the A100 whitepaper's L2 rate, the
copy rate for every gather, the whole 50 MB), `high` with the lowest published ones. At each end
it is calibrated on the H200's times of the old block kernel (the `mgg` forward rows of
bench/results/gpu-20261126-*/kernel-*.csv, fp32) and then predicts, from each graph's row pointers:
- `h200-20261126`: the old kernel at the config it ran (measured_ms beside the band): the model's
  own check;
- `current`: the range kernel of issue 43 at its default config;
- `current-tuned`: the range kernel at the config the model ranks first on the config lattice.
Each against cuSPARSE's measured forward time (torch.sparse, fp32, H200; bf16 storage is compared
with cuSPARSE fp32). Predicted, never measured: where the GPU disagrees, the GPU wins.

These rows take the L2's hit rate from Che's approximation, which sees how often each row is read
but not when (order ``, the order-blind model). With `--orders` (default: user rcm degree metis
on the generated graphs, none with `--degrees analytic`; `--orders` alone: none) the range kernel
is predicted again per node order with the order-aware model (issue 51): the reuse distances of
the source rows in the order the kernel's resident warps gather them (mgg.runtime.locality), on
the graph relabelled in that order (`user`: the user's ids),
DRAM bytes and time at both ends. METIS beyond mgg.runtime.ordering.METIS_MAX_EDGES is left out.
Each order costs minutes on the full-size stand-ins (the reuse distances of 115-124M gathers: 2-4
minutes on a 2-core CPU); `--orders` with no order skips them.
Graphs without measured rows of the old kernel use kernel_model.CALIBRATIONS at both ends (and,
outside the presets, have no analytic degree model to check against).

Writes model-<date>.csv (graph, D, dtype, kernel, order, measured_ms, predicted_ms_low,
predicted_ms_high, predicted_dram_bytes_low, predicted_dram_bytes_high, cusparse_ms,
predicted_speedup_low, predicted_speedup_high, moves_most, moves_most_pct), model-<date>.md (the
band, the constants and their sources, the calibration at both ends and its errors, the published
kernels' speedups, the issue's targets at both ends, the H100, the orders) and model-<date>.png."""

from __future__ import annotations

import argparse
import csv
import datetime
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mgg.plan import ORDERS
from mgg.runtime import hardware, locality
from mgg.runtime import kernel_model as km

from .order import ORDERS as TIMED_ORDERS
from .order import ordered_plans
from .report import geomean, write_csv

ROOT = Path(__file__).resolve().parent.parent
MEASURED = "bench/results/gpu-20261126-*/kernel-*.csv"
MEASURED_KERNEL = "h200-20261126"
CURRENT = (16, 32, 4)  # mgg.Config()'s default
MIN_RANGE_ITEMS = 64  # lattice configs with fewer items per warp are not ranked (their warp arrays get large)
ELEM = {"float32": 4, "bfloat16": 2}
ENDS = ("low", "high")  # the band's ends: predicted time with the optimistic and the pessimistic constants
COLUMNS = [
    "graph",
    "D",
    "dtype",
    "kernel",
    "order",
    "measured_ms",
    "predicted_ms_low",
    "predicted_ms_high",
    "predicted_dram_bytes_low",
    "predicted_dram_bytes_high",
    "cusparse_ms",
    "predicted_speedup_low",
    "predicted_speedup_high",
    "moves_most",
    "moves_most_pct",
]
# issue 43's targets for the current kernel, against cuSPARSE fp32
FP32_EVERY, FP32_GEOMEAN, BF16_FROM_D, BF16_EVERY = 1.0, 1.3, 64, 1.8
CHECK_TOLERANCE = 0.15  # the model's check: the old kernel's measured times within 15% at both ends
# what the newest published SpMM kernels report over cuSPARSE (their papers' own GPUs and precisions)
PUBLISHED_KERNELS = (
    ("RoDe (PPoPP'24)", "about 1.1x", "fp32"),
    ("Acc-SpMM (PPoPP'25)", "1.58x mean on H100 (abstract; 1.91x on A800)", "tensor cores"),
    ("FlashSparse (PPoPP'25)", "1.5-1.9x", "fp16, tensor cores"),
    ("Libra (2025)", "1.73x over RoDe", "tensor and CUDA cores"),
)


@dataclass
class Graph:
    """What the model needs of a graph: its row pointers and how often each row is gathered."""

    name: str
    rowptr: np.ndarray
    sources: km.SourceRows
    source: str  # generated or analytic
    seconds: float
    graph: object = None  # the mgg Graph (generated row pointers only): the orders relabel it


def load_measured(path: Path) -> dict:
    """{(graph, D, pass): {impl: row}} of the GPU run's kernel suite (fp32)."""
    out: dict = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["suite"] == "kernel" and r["dtype"] == "float32":
                out.setdefault((r["graph"], int(r["dim"]), r["pass"]), {})[r["impl"]] = r
    return out


def graph_of(spec: str, degrees: str) -> Graph:
    """The graph's row pointers: generated (bench.cache, kept on disk) or the analytic degree model."""
    t0 = time.perf_counter()
    if degrees == "generated":
        from bench import cache

        g, _ = cache.graph(spec)
        counts = np.bincount(g.col.numpy(), minlength=g.num_nodes)
        return Graph(spec, g.rowptr.numpy(), km.SourceRows.of(counts), degrees, time.perf_counter() - t0, g)
    from mgg.data.synthetic import PRESETS

    p = PRESETS[spec]
    deg = km.analytic_degrees(p.nodes, p.edges, p.abcd, p.uniform)
    rowptr = np.concatenate([[0], np.cumsum(deg)])
    # symmetric: a row is gathered once per edge of its own
    return Graph(spec, rowptr, km.SourceRows.of(deg), degrees, time.perf_counter() - t0)


def lattice() -> list:
    """The range kernel's config lattice (ps 1-32, dist 1-1024, wpb 1-16, powers of two), configs of
    at least MIN_RANGE_ITEMS items per warp."""
    powers = [1 << i for i in range(11)]
    return [
        (ps, dist, wpb) for ps in powers[:6] for dist in powers for wpb in powers[:5] if ps * dist >= MIN_RANGE_ITEMS
    ]


def _us(cal: km.Calibration) -> str:
    return ", ".join(f"{v * 1e6:.3f} µs" for v in (cal.chain_s, cal.l2_round_s, cal.dram_round_s))


def _ms(s: float) -> float:
    return round(s * 1e3, 3)


@dataclass
class End:
    """The model at one set of constants: the GPU, its calibration, the old kernel's predictions."""

    gpu: km.Gpu
    cal: km.Calibration
    old_pred: dict  # (graph, D) -> Prediction
    errors: np.ndarray
    loo: object = None


def _calibrated(points, keys, gpu: km.Gpu, loo: bool, fixed: km.Calibration) -> End:
    """The model at `gpu`'s constants, calibrated on the measured points (none: `fixed`)."""
    if not points:
        return End(gpu, fixed, {}, np.zeros(0))
    cal = km.calibrate(points, gpu)
    old = {
        k: km.predict_block(p.stats, p.dim, p.elem, cal, gpu, sources=p.sources)
        for k, p in zip(keys, points, strict=True)
    }
    errors = np.array([old[k].seconds / p.seconds - 1 for k, p in zip(keys, points, strict=True)])
    return End(gpu, cal, old, errors, km.leave_one_out_errors(points, gpu) if loo else None)


def run(args) -> tuple[list, dict]:
    path = Path(args.measured) if args.measured else sorted(ROOT.glob(MEASURED))[-1]
    measured = load_measured(path)
    base = km.GPUS[args.gpu]
    info: dict = dict(measured_path=path.relative_to(ROOT) if path.is_relative_to(ROOT) else path, gpu=base)
    graphs = {}
    for spec in args.graphs:
        print(f"[graph] {spec} ({args.degrees})", flush=True)
        graphs[spec] = graph_of(spec, args.degrees)
    old_stats, points, keys = {}, [], []
    for (spec, dim, pass_), impls in sorted(measured.items()):
        if spec in graphs and pass_ == "fwd" and "mgg" in impls:
            r = impls["mgg"]
            cfg = (int(r["ps"]), int(r["dist"]), int(r["wpb"]))
            if (spec, cfg) not in old_stats:
                old_stats[(spec, cfg)] = km.BlockStats.of(graphs[spec].rowptr, None, cfg)
            points.append(
                km.Measured(old_stats[(spec, cfg)], dim, 4, float(r["median_ms"]) * 1e-3, graphs[spec].sources)
            )
            keys.append((spec, dim))
    print(f"[calibrate] {len(points)} measured rows of the old kernel, at both ends of the band", flush=True)
    if not points:
        print("[calibrate] none of these graphs: kernel_model.CALIBRATIONS at both ends", flush=True)
    band, fixed = km.band(base), km.CALIBRATIONS
    ends = {"low": _calibrated(points, keys, band["optimistic"], args.loo, fixed["optimistic"])}
    ends["high"] = _calibrated(points, keys, band["pessimistic"], args.loo, fixed["pessimistic"])
    one_at_a_time = {
        c: _calibrated(points, keys, km.pessimistic(base, [c]), False, fixed["optimistic"]) for c in km.BAND_CONSTANTS
    }
    for e, name in (("low", "optimistic"), ("high", "pessimistic")):
        fit, kept = ends[e].cal, fixed[name]
        if not np.allclose(
            [fit.chain_s, fit.l2_round_s, fit.dram_round_s],
            [kept.chain_s, kept.l2_round_s, kept.dram_round_s],
            rtol=0.01,
            atol=0,
        ):
            print(f"note: the {name} fit ({_us(fit)}) differs from kernel_model.CALIBRATIONS[{name!r}] by over 1%")
    info.update(points=points, keys=keys, ends=ends, one_at_a_time=one_at_a_time, graphs=graphs)
    rows, detail = [], {}
    for spec, g in graphs.items():
        current = km.RangeStats.of(g.rowptr, None, CURRENT)
        schedules: dict = {}
        info.setdefault("range_stats", {})[spec] = current
        for dtype in ("float32", "bfloat16"):
            for dim in args.dims:
                cusp_row = measured.get((spec, dim, "fwd"), {}).get("torch.sparse")
                cusp = float(cusp_row["median_ms"]) if cusp_row else float("nan")
                if dtype == "float32" and (spec, dim) in ends["low"].old_pred:
                    mgg = float(measured[(spec, dim, "fwd")]["mgg"]["median_ms"])
                    preds = {e: ends[e].old_pred[(spec, dim)] for e in ENDS}
                    moved = {c: v.old_pred[(spec, dim)] for c, v in one_at_a_time.items()}
                    rows.append(_row(spec, dim, dtype, MEASURED_KERNEL, mgg, preds, moved, cusp))
                    detail[(spec, dim, dtype, MEASURED_KERNEL)] = (None, preds)

                at = dict(dim=dim, elem=ELEM[dtype], sources=g.sources)
                preds = {e: km.predict_range(current, cal=ends[e].cal, gpu=ends[e].gpu, **at) for e in ENDS}
                moved = {c: km.predict_range(current, cal=v.cal, gpu=v.gpu, **at) for c, v in one_at_a_time.items()}
                rows.append(_row(spec, dim, dtype, "current", None, preds, moved, cusp))
                detail[(spec, dim, dtype, "current")] = (CURRENT, preds)
                if args.tuned:
                    print(f"[rank] {spec} D={dim} {dtype}", flush=True)
                    tuned, configs = {}, {}
                    for e in ENDS:
                        configs[e], tuned[e] = km.rank_configs(
                            g.rowptr,
                            None,
                            dim,
                            ELEM[dtype],
                            lattice(),
                            ends[e].cal,
                            ends[e].gpu,
                            sources=g.sources,
                            schedules=schedules,
                        )[0]
                    rows.append(_row(spec, dim, dtype, "current-tuned", None, tuned, {}, cusp))
                    detail[(spec, dim, dtype, "current-tuned")] = (configs, tuned)
    info["detail"] = detail
    info["order_rows"] = order_rows(graphs, args, ends, one_at_a_time, measured, info) if args.orders else []
    return rows, info


def order_rows(graphs: dict, args, ends: dict, one_at_a_time: dict, measured: dict, info: dict) -> list:
    """The range kernel at its default config per node order, from the order-aware L2 model: each
    order's plan (bench.order.ordered_plans), the reuse distances of its gathers in the kernel's
    visiting order on the modelled GPU, both ends of the band. cuSPARSE's time is the measured one
    in the user's order."""
    rows, skipped, waves = [], [], {}
    for spec, g in graphs.items():
        print(f"[orders] {spec}", flush=True)
        for name, (plan, _, _) in ordered_plans(g.graph, spec, args.orders, skipped).items():
            t0 = time.perf_counter()
            pg = plan.graph
            profile = locality.plan_profile(plan, CURRENT, ends["low"].gpu)
            resident = locality.resident_warps(CURRENT, ends["low"].gpu)
            waves[(spec, name)] = locality.wave_rows(pg.rowptr.numpy(), pg.col.numpy(), CURRENT, resident)
            stats = km.RangeStats.of(pg.rowptr.numpy(), None, CURRENT)
            print(f"  {name}: reuse distances ({time.perf_counter() - t0:.1f} s)", flush=True)
            for dtype in ("float32", "bfloat16"):
                for dim in args.dims:
                    cusp_row = measured.get((spec, dim, "fwd"), {}).get("torch.sparse")
                    cusp = float(cusp_row["median_ms"]) if cusp_row else float("nan")
                    at = dict(dim=dim, elem=ELEM[dtype], sources=profile)
                    preds = {e: km.predict_range(stats, cal=ends[e].cal, gpu=ends[e].gpu, **at) for e in ENDS}
                    moved = {c: km.predict_range(stats, cal=v.cal, gpu=v.gpu, **at) for c, v in one_at_a_time.items()}
                    rows.append(_row(spec, dim, dtype, "current", None, preds, moved, cusp, order=name))
                    info["detail"][(spec, dim, dtype, "current", name)] = (CURRENT, preds)
    info["order_skipped"], info["wave_rows"] = skipped, waves
    return rows


def _row(spec, dim, dtype, kernel, measured_ms, preds: dict, moved: dict, cusparse_ms, order: str = "") -> dict:
    """One row of the table. The band's ends are the two predictions' lower and higher times (each
    end is calibrated anew, so the pessimistic constants can give a lower time where the fit's
    latencies fall, as for the latency-bound old kernel)."""
    low, high = sorted((_ms(preds["low"].seconds), _ms(preds["high"].seconds)))
    has_cusp = cusparse_ms == cusparse_ms
    base = preds["low"].seconds
    most = max(moved.items(), key=lambda kv: kv[1].seconds, default=None)
    if most is not None and most[1].seconds <= base:
        most = None  # no constant alone raises the time
    return dict(
        graph=spec,
        D=dim,
        dtype=dtype,
        kernel=kernel,
        order=order,
        measured_ms="" if measured_ms is None else round(measured_ms, 3),
        predicted_ms_low=low,
        predicted_ms_high=high,
        predicted_dram_bytes_low=int(min(p.dram_bytes for p in preds.values())),
        predicted_dram_bytes_high=int(max(p.dram_bytes for p in preds.values())),
        cusparse_ms=round(cusparse_ms, 3) if has_cusp else "",
        predicted_speedup_low=round(cusparse_ms / high, 3) if has_cusp else "",
        predicted_speedup_high=round(cusparse_ms / low, 3) if has_cusp else "",
        moves_most="" if most is None else most[0],
        moves_most_pct="" if most is None else round((most[1].seconds / base - 1) * 100, 1),
    )


def targets(rows: list, kernel: str, end: str) -> list[tuple[str, bool, str]]:
    """The issue's targets for one kernel's predicted rows at one end of the band (`low`: the
    speedups with the pessimistic constants, `high`: with the optimistic ones)."""
    col = f"predicted_speedup_{end}"
    fp32 = [float(r[col]) for r in rows if r["kernel"] == kernel and r["dtype"] == "float32" and r[col] != ""]
    bf16 = [
        float(r[col])
        for r in rows
        if r["kernel"] == kernel and r["dtype"] == "bfloat16" and r["D"] >= BF16_FROM_D and r[col] != ""
    ]
    gm = geomean(fp32)
    return [
        (
            f"fp32 >= {FP32_EVERY}x cuSPARSE at every point",
            bool(fp32) and min(fp32) >= FP32_EVERY,
            f"min {min(fp32):.2f}x" if fp32 else "no rows",
        ),
        (f"fp32 >= {FP32_GEOMEAN}x geomean", gm >= FP32_GEOMEAN, f"{gm:.2f}x"),
        (
            f"bf16 >= {BF16_EVERY}x cuSPARSE fp32 at D >= {BF16_FROM_D}",
            bool(bf16) and min(bf16) >= BF16_EVERY,
            f"min {min(bf16):.2f}x" if bf16 else "no rows",
        ),
    ]


def speedup_band(rows: list, kernel: str = "current", dtype: str = "float32") -> dict:
    """The band of one kernel's speedups over its rows: lowest and geometric mean at both ends."""
    mine = [r for r in rows if r["kernel"] == kernel and r["dtype"] == dtype and r["cusparse_ms"] != ""]
    if not mine:
        return dict.fromkeys(("min_low", "min_high", "geomean_low", "geomean_high", "max_low", "max_high"), math.nan)
    lo = [float(r["predicted_speedup_low"]) for r in mine]
    hi = [float(r["predicted_speedup_high"]) for r in mine]
    return dict(
        min_low=min(lo),
        min_high=min(hi),
        geomean_low=geomean(lo),
        geomean_high=geomean(hi),
        max_low=max(lo),
        max_high=max(hi),
    )


def cusparse_roofline(g: Graph, dim: int, gpu: km.Gpu) -> tuple[float, float]:
    """(bytes, seconds): what cuSPARSE (CSR, fp32) must move at least (every edge's column id,
    value and row, the rowptr, the output) and the model's bandwidth bound for it (same L2 hits)."""
    rows, edges, row = g.rowptr.size - 1, int(g.rowptr[-1]), km.row_bytes(dim, 4)
    stream = float(edges * 8 + (rows + 1) * 8 + rows * row)
    gathered = float(edges * row)
    hit = g.sources.hit_rate(row, stream / max(edges, 1), gpu.l2_bytes)
    return stream + gathered, km.bandwidth_s(stream, (1 - hit) * gathered, row, stream + gathered, gpu)


def constants_table(base: km.Gpu) -> list:
    """The band's constants: both ends, and every published figure with its source."""
    hi = km.pessimistic(base)
    out = [
        "",
        "## The constants the band moves (published figures; none is NVIDIA's for GH100)",
        "",
        "| constant | optimistic (low time) | pessimistic (high time) |",
        "| --- | --- | --- |",
        f"| {km.BAND_CONSTANTS['l2_rate']} | {base.l2_bytes_per_s / 1e12:.1f} TB/s (A100 whitepaper, "
        f"{hardware.A100_L2_BYTES_PER_CLOCK} B/clk x {base.clock_hz / 1e9:.2f} GHz) | "
        f"{hi.l2_bytes_per_s / 1e12:.1f} TB/s (the lowest published: an H100 PCIe, 114 SMs at <= 1.755 GHz; "
        "scaled to 132 SMs at 1.98 GHz it would be about 5 TB/s) |",
        f"| {km.BAND_CONSTANTS['gather']} | the measured copy rate, {base.dram_bytes_per_s / 1e12:.2f} TB/s, at any "
        f"row size | "
        + ", ".join(f"{r} B: {hi.gather_bytes_per_s(r) / 1e12:.2f} TB/s" for r in (64, 256, 1024))
        + " (the published efficiencies, interpolated in log(bytes)) |",
        f"| {km.BAND_CONSTANTS['l2_capacity']} | {base.l2_bytes / 2**20:.0f} MB (the whole L2) | "
        f"{hi.l2_bytes / 2**20:.0f} MB (one partition) |",
        "",
        "| published figure | value | what | source |",
        "| --- | --- | --- | --- |",
    ]
    for m in hardware.L2_READ_MEASURED:
        out.append(f"| L2 read rate | {m.value / 1e12:.2f} TB/s | {m.what} | {m.source} |")
    for m in hardware.GATHER_EFFICIENCY_MEASURED:
        out.append(f"| gather efficiency | {m.value:.0%} of HBM peak | {m.what} | {m.source} |")
    m = hardware.L2_NEAR_PARTITION
    out.append(f"| L2 capacity | {m.value / 2**20:.0f} MB | {m.what} | {m.source} |")
    return out


def markdown(rows: list, info: dict, args) -> str:
    ends, gpu = info["ends"], info["gpu"]
    band = speedup_band(rows)
    calibrated = (
        f"the model calibrated at each end on the old block kernel's {len(info['points'])} forward times measured on "
        f"the H200 (`{info['measured_path']}`, fp32)"
        if info["points"]
        else "both ends at kernel_model.CALIBRATIONS' latencies (the measured file has no rows of these graphs)"
    )
    if band["min_low"] == band["min_low"]:
        headline = (
            f"**The range kernel, fp32, predicted: {band['min_low']:.2f}-{band['max_high']:.2f}x cuSPARSE; geometric "
            f"mean {band['geomean_low']:.2f}-{band['geomean_high']:.2f}x (pessimistic-optimistic). Never measured.** "
        )
    else:
        headline = "**No cuSPARSE time was measured for these graphs: predicted times only, never measured.** "
    out = [
        f"# Kernel performance model — predicted, never measured — {gpu.name}",
        "",
        f"A band, not a point: each row is predicted with the optimistic constants (`low` ms) and with the lowest "
        f"published ones (`high` ms), {calibrated}. Row pointers: {args.degrees}. `current` is the range kernel "
        f"at its default config {CURRENT}; "
        f"`current-tuned` at the config the model ranks first at each end (lattice: ps 1-32, dist 1-1024, wpb "
        f"1-16, powers of two, >= {MIN_RANGE_ITEMS} items per warp). cuSPARSE is the measured H200 forward time "
        "in fp32 (bf16 rows compare with it too). `moves most`: the constant that, alone at its pessimistic "
        "value, raises the predicted time most, and by how much.",
        "",
        headline
        + "Published kernels over cuSPARSE: "
        + "; ".join(f"{n} {v} ({p})" for n, v, p in PUBLISHED_KERNELS)
        + ".",
        "",
        "| graph | D | dtype | kernel | measured ms | predicted ms (low-high) | cuSPARSE ms | predicted speedup | "
        "bound (low / high) | L2 hits (low / high) | moves most |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        cfg, preds = info["detail"][(r["graph"], r["D"], r["dtype"], r["kernel"])]
        name = r["kernel"]
        if r["kernel"] == "current-tuned":
            name += " " + " / ".join(str(tuple(cfg[e])) for e in ENDS)
        speed = f"{r['predicted_speedup_low']}-{r['predicted_speedup_high']}x" if r["cusparse_ms"] != "" else ""
        moves = f"{r['moves_most']} (+{r['moves_most_pct']}%)" if r["moves_most"] else ""
        out.append(
            f"| {r['graph']} | {r['D']} | {r['dtype']} | {name} | {r['measured_ms']} | {r['predicted_ms_low']}-"
            f"{r['predicted_ms_high']} | {r['cusparse_ms']} | {speed} | {preds['low'].bound} / {preds['high'].bound} | "
            f"{preds['low'].hit:.2f} / {preds['high'].hit:.2f} | {moves} |"
        )
    out += constants_table(gpu)
    out += ["", "## The model's own check: the old kernel's measured times at both ends", ""]
    if not info["points"]:
        out.append(
            "- No measured rows of these graphs: the check did not run, and both ends take kernel_model.CALIBRATIONS' "
            f"latencies (optimistic {_us(ends['low'].cal)}; pessimistic {_us(ends['high'].cal)})."
        )
    for e in ENDS if info["points"] else ():
        end = ends[e]
        errs = end.errors
        ok = np.abs(errs).max() <= CHECK_TOLERANCE
        out.append(
            f"- `{e}` ({'optimistic' if e == 'low' else 'pessimistic'} constants): latencies F, L2 round, DRAM round "
            f"= {_us(end.cal)}; error on the {len(errs)} measured rows: max |error| {np.abs(errs).max() * 100:.1f}% "
            f"({', '.join(f'{x * 100:+.1f}%' for x in errs)}): "
            + ("**within** " if ok else "**outside** ")
            + f"{CHECK_TOLERANCE:.0%}."
        )
        if end.loo is not None:
            out.append(f"  Leave one out: max |error| {np.abs(end.loo).max() * 100:.1f}%.")
    bounds = {e: sum(p.bound == "latency" for p in ends[e].old_pred.values()) for e in ENDS}
    out += (
        []
        if not info["points"]
        else [
            f"- The old kernel is latency-bound in {bounds['low']} of {len(info['points'])} rows at the optimistic end "
            f"and {bounds['high']} at the pessimistic end (its bound column): its times pin the latencies, hardly the "
            "bandwidth constants, so the check cannot narrow the band; only a GPU run of the range kernel can."
        ]
    )
    checked = [
        f"| {kernel} | {label} | {t} | {'yes' if ok else 'NO'} | {n} |"
        for kernel in ("current", "current-tuned")
        if any(r["kernel"] == kernel and r["cusparse_ms"] != "" for r in rows)
        for e, label in (("low", "pessimistic"), ("high", "optimistic"))
        for t, ok, n in targets(rows, kernel, e)
    ]
    if checked:
        out += ["", "## The issue's targets in the prediction, at both ends", ""]
        out += ["| kernel | end | target | holds | numbers |", "| --- | --- | --- | --- | --- |", *checked]
    out += sensitivity(rows, info)
    out += h100(rows, info)
    out += orders_section(info)
    out += degree_check(info, args)
    return "\n".join(out) + "\n"


def orders_section(info: dict) -> list:
    """The per-order rows (order_rows): DRAM bytes and time at both ends, against the user's order."""
    mine = info["order_rows"]
    if not mine:
        return []
    out = [
        "",
        "## The range kernel per node order: the order-aware L2 model (predicted, never measured)",
        "",
        "The rows above take the L2's hit rate from Che's approximation, which cannot see the order of the gathers. "
        "Here it comes from the reuse distances of the source rows in the order the kernel's resident warps gather "
        f"them (config {CURRENT}; mgg.runtime.locality), with the graph relabelled in each order (`user`: the user's "
        "ids). `DRAM /`: the user's order's predicted DRAM bytes over this order's, at the optimistic / pessimistic "
        "end. cuSPARSE: measured in the user's order. The order's own cost and the CPU's times: "
        "`python -m bench order`.",
        "",
        "| graph | D | dtype | order | predicted DRAM MB (low / high) | DRAM / | predicted ms (band) | "
        "predicted speedup | L2 hits (low / high) | distinct rows a wave gathers |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    user = {(r["graph"], r["D"], r["dtype"]): r for r in mine if r["order"] == "user"}
    for r in mine:
        preds = info["detail"][(r["graph"], r["D"], r["dtype"], r["kernel"], r["order"])][1]
        u = user.get((r["graph"], r["D"], r["dtype"]))
        ratio = (
            f"{u['predicted_dram_bytes_low'] / max(r['predicted_dram_bytes_low'], 1):.2f} / "
            f"{u['predicted_dram_bytes_high'] / max(r['predicted_dram_bytes_high'], 1):.2f}"
            if u
            else ""
        )
        speed = f"{r['predicted_speedup_low']}-{r['predicted_speedup_high']}x" if r["cusparse_ms"] != "" else ""
        out.append(
            f"| {r['graph']} | {r['D']} | {r['dtype']} | {r['order']} | {r['predicted_dram_bytes_low'] / 1e6:.1f} / "
            f"{r['predicted_dram_bytes_high'] / 1e6:.1f} | {ratio} | {r['predicted_ms_low']}-{r['predicted_ms_high']} "
            f"| {speed} | {preds['low'].hit:.2f} / {preds['high'].hit:.2f} | "
            f"{int(info['wave_rows'][(r['graph'], r['order'])]):,} |"
        )
    if info["order_skipped"]:
        out += ["", "Left out: " + "; ".join(info["order_skipped"]) + "."]
    return out


def sensitivity(rows: list, info: dict) -> list:
    """How far cuSPARSE's measured time is from the model's roofline for its own bytes (optimistic
    constants): where cuSPARSE is near it, the range kernel can win only by moving fewer bytes."""
    gpu = info["ends"]["low"].gpu
    if not any(r["kernel"] == "current" and r["cusparse_ms"] != "" for r in rows):
        return []
    out = [
        "",
        "## cuSPARSE against the roofline of its own bytes",
        "",
        "`if cuSPARSE is at the roofline` caps the speedup at cuSPARSE's compulsory bytes over the range kernel's "
        "(optimistic constants): the range kernel can then win only by moving fewer bytes.",
        "",
        "| graph | D | dtype | cuSPARSE at % of the roofline | predicted speedup (band) | "
        "if cuSPARSE is at the roofline |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if r["kernel"] != "current" or r["cusparse_ms"] == "":
            continue
        cb, roof = cusparse_roofline(info["graphs"][r["graph"]], r["D"], gpu)
        p = info["detail"][(r["graph"], r["D"], r["dtype"], "current")][1]["low"]
        capped = min(float(r["predicted_speedup_high"]), cb / p.l2_bytes)
        out.append(
            f"| {r['graph']} | {r['D']} | {r['dtype']} | {roof * 1e3 / float(r['cusparse_ms']) * 100:.0f}% | "
            f"{r['predicted_speedup_low']}-{r['predicted_speedup_high']}x | {capped:.2f}x |"
        )
    return out


def h100(rows: list, info: dict) -> list:
    """The range kernel on the H100 SXM (its constants at both ends, the H200's latencies there).
    cuSPARSE was not measured there: its H200 time stands in (not bandwidth-bound)."""
    if not any(r["kernel"] == "current" and r["cusparse_ms"] != "" for r in rows):
        return []
    out = [
        "",
        "## H100 SXM (predicted with its own constants; cuSPARSE not measured there: its H200 time stands in)",
        "",
        "| graph | D | dtype | current: H100 predicted ms (low-high) | speedup over cuSPARSE's H200 time |",
        "| --- | --- | --- | --- | --- |",
    ]
    band = km.band(km.H100_SXM)
    for r in rows:
        if r["kernel"] != "current" or r["cusparse_ms"] == "":
            continue
        g = info["graphs"][r["graph"]]
        ms = [
            km.predict_range(
                info["range_stats"][r["graph"]],
                r["D"],
                ELEM[r["dtype"]],
                info["ends"][e].cal,
                band[b],
                sources=g.sources,
            ).seconds
            * 1e3
            for e, b in (("low", "optimistic"), ("high", "pessimistic"))
        ]
        ms.sort()
        cusp = float(r["cusparse_ms"])
        out.append(
            f"| {r['graph']} | {r['D']} | {r['dtype']} | {ms[0]:.3f}-{ms[1]:.3f} | "
            f"{cusp / ms[1]:.2f}-{cusp / ms[0]:.2f}x |"
        )
    return out


def degree_check(info: dict, args) -> list:
    """The plan statistics from the other degree source, beside those used (generated graph against
    the review's analytic degree model), at the optimistic end."""
    from mgg.data.synthetic import PRESETS

    other = "analytic" if args.degrees == "generated" else None
    specs = [spec for spec in info["graphs"] if spec in PRESETS]  # the analytic model knows the presets only
    if other is None or not args.check_degrees or not specs:
        return []
    end = info["ends"]["low"]
    out = [
        "",
        f"## Degree sources: {args.degrees} (used) against {other} (optimistic end)",
        "",
        "| graph | source | rows | edges | max degree | old: blocks | old: scratch slots | range (16, 32, 4): warps | "
        "split rows | carry pieces | old D=128 predicted ms | current fp32 D=128 predicted ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for spec in specs:
        for src in (info["graphs"][spec], graph_of(spec, other)):
            deg = np.diff(src.rowptr)
            b = km.BlockStats.of(src.rowptr, None, (16, 1, 4))
            s = km.RangeStats.of(src.rowptr, None, CURRENT)
            po = km.predict_block(b, 128, 4, end.cal, end.gpu, sources=src.sources)
            pn = km.predict_range(s, 128, 4, end.cal, end.gpu, sources=src.sources)
            out.append(
                f"| {spec} | {src.source} | {deg.size:,} | {int(deg.sum()):,} | {int(deg.max()):,} | {b.blocks:,} | "
                f"{b.slots:,} | {s.warps:,} | {s.split_rows:,} | {s.carry_pieces:,} | {po.seconds * 1e3:.2f} | "
                f"{pn.seconds * 1e3:.2f} |"
            )
    return out


def plot(rows: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = list(dict.fromkeys(r["graph"] for r in rows))
    fig, axes = plt.subplots(1, len(graphs), figsize=(5.5 * len(graphs), 5.2), squeeze=False)
    for ax, g in zip(axes[0], graphs, strict=True):
        old = [r for r in rows if r["graph"] == g and r["kernel"] == MEASURED_KERNEL and r["cusparse_ms"] != ""]
        if old:
            d = [r["D"] for r in old]
            ax.plot(
                d,
                [float(r["cusparse_ms"]) / float(r["measured_ms"]) for r in old],
                "ks",
                label="old kernel, measured (H200)",
            )
            ax.fill_between(
                d,
                [float(r["predicted_speedup_low"]) for r in old],
                [float(r["predicted_speedup_high"]) for r in old],
                color="k",
                alpha=0.15,
                label="old kernel, predicted band",
            )
        for dtype, color in (("float32", "C0"), ("bfloat16", "C1")):
            mine = [r for r in rows if r["graph"] == g and r["kernel"] == "current" and r["dtype"] == dtype]
            mine = [r for r in mine if r["cusparse_ms"] != ""]
            if not mine:
                continue
            d = [r["D"] for r in mine]
            ax.fill_between(
                d,
                [float(r["predicted_speedup_low"]) for r in mine],
                [float(r["predicted_speedup_high"]) for r in mine],
                color=color,
                alpha=0.3,
                label=f"range kernel {dtype}, predicted band",
            )
        ax.axhspan(1.1, 1.9, color="gray", alpha=0.12, label="published SpMM kernels over cuSPARSE (1.1-1.9x)")
        ax.axhline(1.0, color="gray", lw=0.8, ls=":")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.minorticks_off()
        ax.set(xlabel="D", ylabel="cuSPARSE fp32 ms / kernel ms", title=g)
        dims = sorted({r["D"] for r in rows})
        ax.set_xticks(dims, [str(x) for x in dims])
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=7)
    fig.suptitle("aggregation speed against cuSPARSE (H200): predicted bands, never measured, but the black squares")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench model", description=__doc__.split("\n\n")[0])
    ap.add_argument("--measured", default=None, help=f"the GPU run's kernel CSV (default: {MEASURED})")
    ap.add_argument("--graphs", nargs="+", default=["rmat-reddit", "rmat-products"])
    ap.add_argument("--dims", nargs="+", type=int, default=[16, 64, 128, 256])
    ap.add_argument("--gpu", choices=list(km.GPUS), default="h200", help="the GPU of the predicted rows")
    ap.add_argument(
        "--degrees",
        choices=["generated", "analytic"],
        default="generated",
        help="row pointers of the generated graphs (bench's graph cache) or of the analytic degree model",
    )
    ap.add_argument(
        "--orders",
        nargs="*",
        default=None,
        choices=ORDERS,
        help=f"node orders of the order-aware rows (default: {' '.join(TIMED_ORDERS)} with the generated graphs, "
        "none with --degrees analytic; --orders alone: none); they relabel the generated graphs",
    )
    ap.add_argument("--no-tuned", dest="tuned", action="store_false", help="skip the current-tuned rows")
    ap.add_argument("--no-loo", dest="loo", action="store_false", help="skip the leave-one-out errors")
    ap.add_argument(
        "--no-check-degrees",
        dest="check_degrees",
        action="store_false",
        help="skip the generated-against-analytic statistics",
    )
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    if args.orders is None:
        args.orders = list(TIMED_ORDERS) if args.degrees == "generated" else []
    if args.orders and args.degrees != "generated":
        ap.error("--orders relabel the generated graphs: use --degrees generated, or --orders with no order")
    if args.orders and "user" not in args.orders:
        args.orders = ["user", *args.orders]  # the orders' DRAM bytes are read against the user's
    rows, info = run(args)  # predictions only, nothing measured: the files are written once, whole
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"model-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    write_csv(rows + info["order_rows"], Path(f"{stem}.csv"), COLUMNS)
    md = markdown(rows, info, args)
    Path(f"{stem}.md").write_text(md)
    plot(rows, Path(f"{stem}.png"))
    print(md)
    print(f"wrote {stem}.csv, .md, .png")
    return 0

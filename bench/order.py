"""Node orders against the user's (issue 51): measured on the CPU, predicted for the GPU.

    python -m bench order [--graphs rmat-reddit rmat-products sbm:... cora] [--dims 16 64 128 256]
                          [--orders user rcm degree metis] [--reps 5] [--gpu h200] [--out DIR] [--smoke]

For every graph and order: the order's cost (order_s: computing it; plan_s: relabelling the graph),
then per D, with the features in the user's order as a user holds them:
- cpu_ms: mgg's aggregation through the order's plan (mgg.partitioning.order.OrderedPlan: x gathered
  into the order, the output back; both included, permute_ms says what they cost), checked against
  the float64 reference before it is timed; torch_sparse_ms: torch.sparse CSR @ x on the same order's
  matrix and x (the order helps it too, or not); ratios against the user's order in this run;
- predicted: the range kernel on the modelled GPU from the order-aware L2 model (mgg.runtime.locality:
  the reuse distances of the rows in the order the kernel's resident warps gather them), DRAM bytes
  and time at both ends of the band (kernel_model.band, each end with its calibration); Che's hit
  rate (order-blind) beside it;
- auto: what Config(order="auto") keeps on this measurement (mgg.runtime.ordering.verdict).
Graphs: the R-MAT stand-ins (ids scrambled by the generator), stochastic block models (community
structure; the generator places each community's members at random ids, so their order is a
shuffled one) and the files the tests have (Cora). Writes order-<date>.csv, .md and .png."""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import numpy as np
import torch

from mgg import Plan
from mgg.errors import MissingPackageError
from mgg.partitioning.order import METIS_PART_NODES, OrderedPlan, node_order
from mgg.plan import ORDERS as PLAN_ORDERS
from mgg.plan import Config
from mgg.runtime import kernel_model as km
from mgg.runtime import locality, ordering
from mgg.runtime.timing import measure

from . import cache
from .competitors import check
from .env import environment
from .report import CsvLog, geomean, logged_run, write_csv, write_report

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = [
    "graph",
    "D",
    "order",
    "cpu_ms",
    "cpu_speedup",
    "torch_sparse_ms",
    "speedup_vs_torch_sparse",
    "permute_ms",
    "predicted_dram_bytes",
    "predicted_dram_bytes_high",
    "dram_ratio",
    "predicted_ms_low",
    "predicted_ms_high",
    "predicted_hit_low",
    "predicted_hit_high",
    "che_hit",
    "wave_rows",
    "order_s",
    "plan_s",
    "auto",
]
GRAPHS = ["rmat-reddit", "rmat-products", "sbm:2449029:600:50:0.9", "cora"]
SMOKE = dict(graphs=["rmat:3000:30000", "sbm:4000:40:16:0.9", "cora"], dims=[16, 64], reps=2)
ORDERS = [o for o in PLAN_ORDERS if o != "random"]  # the orders worth timing (random: the worst case, known)
ELEM = 4  # fp32
CONFIG = Config()


def calibrations(gpu: km.Gpu) -> dict:
    """The model at both ends of the band: (GPU, calibration) per end (kernel_model.CALIBRATIONS:
    the latencies `python -m bench model` fitted at each end)."""
    band = km.band(gpu)
    return {
        "low": (band["optimistic"], km.CALIBRATIONS["optimistic"]),
        "high": (band["pessimistic"], km.CALIBRATIONS["pessimistic"]),
    }


def ordered_plans(g, spec: str, orders, skipped: list) -> dict:
    """{order: (plan, order_s, plan_s)}: the one-rank plan of `g` in each order (`user`: a Plan of
    the user's ids; any other: an OrderedPlan), the seconds the order and the relabelling took.
    METIS beyond mgg.runtime.ordering.METIS_MAX_EDGES and an order whose package is missing are left
    out, and `skipped` says so."""
    plans = {}
    for name in orders:
        if name == "metis" and g.num_edges > ordering.METIS_MAX_EDGES:
            skipped.append(f"metis on {spec}: {g.num_edges:,} edges, over {ordering.METIS_MAX_EDGES:,}")
            print(f"  metis: skipped ({skipped[-1]})", flush=True)
            continue
        t0 = time.perf_counter()
        try:
            order = node_order(g, name)
        except MissingPackageError as e:  # a method whose package is missing: said, and left out
            skipped.append(f"{name} on {spec}: {e}")
            print(f"  {name}: skipped ({e})", flush=True)
            continue
        t1 = time.perf_counter()
        plan = Plan(g) if name == "user" else OrderedPlan(g, order)
        plans[name] = (plan, order.seconds, time.perf_counter() - t1)
        print(f"  {name}: order {t1 - t0:.2f} s, plan {plans[name][2]:.2f} s", flush=True)
    return plans


def run(args, log: CsvLog) -> list:
    """Every row, each (graph, D)'s written to `log` as it is measured (a run cut off keeps them)."""
    torch.manual_seed(0)
    gpu = km.GPUS[args.gpu]
    ends = calibrations(gpu)
    rows, skipped = [], args.skipped
    for spec in args.graphs:
        g, load_s = cache.normalized(spec, args.data_dir)
        print(f"[graph] {spec}: {g.num_nodes:,} nodes, {g.num_edges:,} edges ({load_s:.1f} s)", flush=True)
        csr = {}
        plans = ordered_plans(g, spec, args.orders, skipped)
        for name, (plan, _, _) in plans.items():
            pg = plan.graph
            csr[name] = torch.sparse_csr_tensor(
                pg.rowptr,
                pg.col,
                pg.weight if pg.weight is not None else torch.ones(pg.num_edges),
                (pg.num_nodes, pg.num_nodes),
            )
        profiles, che = {}, km.SourceRows.of(np.bincount(g.col.numpy(), minlength=g.num_nodes))
        waves = {}
        resident = locality.resident_warps(CONFIG, gpu)
        for name, (plan, _, _) in plans.items():
            t0 = time.perf_counter()
            profiles[name] = locality.plan_profile(plan, CONFIG, gpu)
            waves[name] = locality.wave_rows(plan.graph.rowptr.numpy(), plan.graph.col.numpy(), CONFIG, resident)
            print(
                f"  {name}: reuse distances of {plan.graph.num_edges:,} gathers ({time.perf_counter() - t0:.1f} s)",
                flush=True,
            )
        for dim in args.dims:
            x = torch.randn(g.num_nodes, dim)
            measured = {}
            for name, (plan, order_s, plan_s) in plans.items():
                with torch.no_grad():
                    check(plan.aggregate(x, CONFIG), g, x)  # the result before the time
                    cpu = measure(lambda p=plan, x=x: p.aggregate(x, CONFIG), "cpu", warmup=1, reps=args.reps)
                    if name == "user":
                        perm_ms = 0.0
                        xs = x
                    else:
                        idx = torch.from_numpy(plan.order.perm)
                        inv = torch.from_numpy(plan.order.inverse)
                        perm_ms = measure(
                            lambda i=idx, j=inv, x=x: x.index_select(0, i).index_select(0, j),
                            "cpu",
                            warmup=1,
                            reps=args.reps,
                        ).median_ms
                        xs = x.index_select(0, idx)
                    a = csr[name]
                    sparse = measure(lambda a=a, xs=xs: a @ xs, "cpu", warmup=1, reps=args.reps)
                measured[name] = (cpu.median_ms, sparse.median_ms, perm_ms, order_s, plan_s)
            user_cpu, user_sparse = measured["user"][0], measured["user"][1]
            stats = {}
            for name, (cpu_ms, sparse_ms, perm_ms, order_s, plan_s) in measured.items():
                plan = plans[name][0]
                if id(plan) not in stats:
                    stats[id(plan)] = km.RangeStats.of(plan.graph.rowptr.numpy(), None, CONFIG)
                pred = {
                    e: km.predict_range(stats[id(plan)], dim, ELEM, cal, end_gpu, sources=profiles[name])
                    for e, (end_gpu, cal) in ends.items()
                }
                row_b = km.row_bytes(dim, ELEM)
                stream = km.range_bytes(stats[id(plan)], dim, ELEM)[0]
                che_hit = che.hit_rate(row_b, stream / max(g.num_edges, 1), ends["low"][0].l2_bytes)
                verdict = auto_verdict(name, g.num_nodes, dim, user_cpu, cpu_ms, order_s + plan_s)
                rows.append(
                    dict(
                        graph=spec,
                        D=dim,
                        order=name,
                        cpu_ms=round(cpu_ms, 3),
                        cpu_speedup=round(user_cpu / cpu_ms, 3),
                        torch_sparse_ms=round(sparse_ms, 3),
                        speedup_vs_torch_sparse=round(user_sparse / cpu_ms, 3),
                        permute_ms=round(perm_ms, 3),
                        predicted_dram_bytes=int(pred["low"].dram_bytes),
                        predicted_dram_bytes_high=int(pred["high"].dram_bytes),
                        dram_ratio=None,
                        # the band's ends: each end is calibrated anew, so a latency-bound step can come out
                        # faster with the pessimistic constants; low and high are the two times in order
                        predicted_ms_low=round(min(p.seconds for p in pred.values()) * 1e3, 4),
                        predicted_ms_high=round(max(p.seconds for p in pred.values()) * 1e3, 4),
                        predicted_hit_low=round(pred["low"].hit, 4),
                        predicted_hit_high=round(pred["high"].hit, 4),
                        che_hit=round(che_hit, 4),
                        wave_rows=int(waves[name]),
                        order_s=round(order_s, 3),
                        plan_s=round(plan_s, 3),
                        auto=verdict.split(":")[0],
                    )
                )
            here = [r for r in rows if r["graph"] == spec and r["D"] == dim]
            user_bytes = next(r["predicted_dram_bytes"] for r in here if r["order"] == "user")
            for r in here:
                r["dram_ratio"] = round(user_bytes / max(r["predicted_dram_bytes"], 1), 3)
                log.add(r)
            line = " ".join(
                f"{r['order']} {r['cpu_ms']:.1f} ms ({r['cpu_speedup']:.2f}x, DRAM /{r['dram_ratio']:.2f})"
                for r in here
            )
            print(f"  D={dim}: {line}", flush=True)
    return rows


def markdown(rows: list, args, env: dict) -> str:
    out = [
        "# Node orders: measured on the CPU, predicted for the GPU",
        "",
        f"CPU: {env.get('device', 'cpu')}, torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"{args.reps} timed runs each (median). GPU: {args.gpu}, **predicted** by the order-aware model (reuse "
        "distances of the rows in the kernel's visiting order), a band from the optimistic to the pessimistic "
        "constants (`python -m bench model`); never measured. `cpu x`: the user's order's time over the order's "
        "(mgg, both gathers of x included); `vs torch.sparse`: torch.sparse CSR in the user's order over mgg in "
        "this order; `DRAM /`: the user's order's predicted DRAM bytes over this order's (optimistic end). "
        "`auto`: what Config(order='auto') keeps on these times (more than "
        f"{ordering.MARGIN:.0%} faster, cost paid back within {ordering.PAYBACK_AGGREGATIONS} aggregations).",
        "",
        "| graph | D | order | cpu ms | cpu x | torch.sparse ms (this order) | vs torch.sparse | permute ms | "
        "predicted DRAM MB (low / high) | DRAM / | predicted GPU ms (band) | L2 hits (low / high; Che) | order s | "
        "auto |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        out.append(
            f"| {r['graph']} | {r['D']} | {r['order']} | {r['cpu_ms']} | {r['cpu_speedup']}x | "
            f"{r['torch_sparse_ms']} | {r['speedup_vs_torch_sparse']}x | {r['permute_ms']} | "
            f"{r['predicted_dram_bytes'] / 1e6:.1f} / "
            f"{r['predicted_dram_bytes_high'] / 1e6:.1f} | {r['dram_ratio']} | {r['predicted_ms_low']}-"
            f"{r['predicted_ms_high']} | {r['predicted_hit_low']:.2f} / {r['predicted_hit_high']:.2f}; "
            f"{r['che_hit']:.2f} | {r['order_s'] + r['plan_s']:.2f} | {r['auto']} |"
        )
    out += [
        "",
        "## Why an order can or cannot cut the GPU's DRAM bytes",
        "",
        f"The GPU runs {locality.resident_warps(CONFIG, km.GPUS[args.gpu]):,} warps of the range kernel at once "
        f"(config {CONFIG.as_tuple()}), and they walk their ranges side by side: every warp's j-th row comes before "
        "any warp's (j + 1)-th, so a row two warps of a wave share stays in L2 only if the wave's distinct source rows "
        "(its working set) fit there. An order helps the GPU only as far as it shrinks that set.",
        "",
        "| graph | order | distinct rows a wave gathers | at D = 128, fp32 | L2 (optimistic / pessimistic) |",
        "| --- | --- | --- | --- | --- |",
    ]
    gpu = km.GPUS[args.gpu]
    for spec in dict.fromkeys(r["graph"] for r in rows):
        for r in [r for r in rows if r["graph"] == spec and r["D"] == rows[0]["D"]]:
            wave_mb = r["wave_rows"] * km.row_bytes(128, ELEM) / 2**20
            out.append(
                f"| {spec} | {r['order']} | {r['wave_rows']:,} | {wave_mb:.0f} MB | "
                f"{gpu.l2_bytes / 2**20:.0f} / {km.pessimistic(gpu).l2_bytes / 2**20:.0f} MB |"
            )
    if args.skipped:
        out += [
            "",
            "Left out: " + "; ".join(args.skipped) + f" (METIS's k-way partition into parts of {METIS_PART_NODES:,} "
            "nodes takes minutes beyond mgg.runtime.ordering.METIS_MAX_EDGES: on rmat-products it had not finished "
            "in 20 minutes here).",
        ]
    out += [
        "",
        "## Per graph and order: geometric means over D",
        "",
        "| graph | order | cpu x (geomean) | cpu x at each D | DRAM / at D >= 128 (predicted) | auto on at |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for spec in dict.fromkeys(r["graph"] for r in rows):
        for name in dict.fromkeys(r["order"] for r in rows if r["graph"] == spec):
            mine = [r for r in rows if r["graph"] == spec and r["order"] == name]
            big = [r["dram_ratio"] for r in mine if r["D"] >= 128]
            on = [str(r["D"]) for r in mine if r["auto"] == "on"]
            out.append(
                f"| {spec} | {name} | {geomean([r['cpu_speedup'] for r in mine]):.2f}x | "
                + ", ".join(f"{r['D']}: {r['cpu_speedup']:.2f}x" for r in mine)
                + f" | {', '.join(f'{b:.2f}' for b in big) or '-'} | {', '.join(on) or '-'} |"
            )
    out += [
        "",
        "## What order='auto' keeps: at each D the fastest of its candidates "
        f"({', '.join(ordering.CANDIDATES)}) that passes its rule (else the user's order)",
        "",
        "| graph | kept at each D | cpu x (geomean over D) | predicted DRAM / at D >= 128 |",
        "| --- | --- | --- | --- |",
    ]
    for spec in dict.fromkeys(r["graph"] for r in rows):
        kept = []
        for dim in dict.fromkeys(r["D"] for r in rows if r["graph"] == spec):
            here = [r for r in rows if r["graph"] == spec and r["D"] == dim]
            on = [r for r in here if r["auto"] == "on" and r["order"] in ordering.CANDIDATES]
            kept.append(
                max(on, key=lambda r: r["cpu_speedup"]) if on else next(r for r in here if r["order"] == "user")
            )
        out.append(
            f"| {spec} | "
            + ", ".join(f"{r['D']}: {r['order']} {r['cpu_speedup']:.2f}x" for r in kept)
            + f" | {geomean([r['cpu_speedup'] for r in kept]):.2f}x | "
            + (", ".join(f"{r['dram_ratio']:.2f}" for r in kept if r["D"] >= 128) or "-")
            + " |"
        )
    return "\n".join(out) + "\n"


def auto_verdict(order: str, nodes: int, dim: int, user_ms: float, order_ms: float, cost_s: float) -> str:
    """What Config(order="auto") decides on these measurements (mgg.runtime.ordering's rules)."""
    if order == "user":
        return ""
    fits = ordering.fits_cache(nodes * dim * ELEM, torch.device("cpu"))
    return fits or ordering.verdict(order, user_ms, order_ms, cost_s)


def load_rows(path: Path) -> list:
    """The rows of a run's CSV, typed as run() makes them."""
    ints = {"D", "predicted_dram_bytes", "predicted_dram_bytes_high", "wave_rows"}
    text = {"graph", "order", "auto"}
    with open(path) as f:
        return [
            {k: v if k in text else int(v) if k in ints else float(v) for k, v in r.items()} for r in csv.DictReader(f)
        ]


def plot(rows: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = list(dict.fromkeys(r["graph"] for r in rows))
    fig, axes = plt.subplots(2, len(graphs), figsize=(4.2 * len(graphs), 7), squeeze=False)
    for j, spec in enumerate(graphs):
        for k, name in enumerate(dict.fromkeys(r["order"] for r in rows if r["graph"] == spec)):
            mine = [r for r in rows if r["graph"] == spec and r["order"] == name]
            d = [r["D"] for r in mine]
            axes[0][j].plot(d, [r["cpu_speedup"] for r in mine], marker="o", color=f"C{k}", label=name)
            axes[1][j].plot(d, [r["dram_ratio"] for r in mine], marker="s", color=f"C{k}", label=name)
        for i, what in enumerate(
            ("CPU: user's order ms / order ms (measured)", "GPU: user's DRAM bytes / order's (predicted)")
        ):
            ax = axes[i][j]
            ax.axhline(1.0, color="gray", lw=0.8, ls=":")
            ax.set_xscale("log", base=2)
            ax.set(xlabel="D", ylabel=what, title=spec)
        axes[0][j].legend(fontsize=7)
    fig.suptitle("node orders against the user's order")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench order", description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", nargs="+", default=GRAPHS)
    ap.add_argument("--dims", nargs="+", type=int, default=[16, 64, 128, 256])
    ap.add_argument("--orders", nargs="+", default=ORDERS, choices=PLAN_ORDERS, help="orders besides the user's")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--gpu", choices=list(km.GPUS), default="h200", help="the GPU of the predicted columns")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny graphs, two dims: the harness runs, nothing to cite")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--report", default=None, metavar="CSV", help="write the .md and .png of a run's CSV again")
    args = ap.parse_args(argv)
    if args.smoke:
        for k, v in SMOKE.items():
            setattr(args, k, v)
    if "user" not in args.orders:
        args.orders = ["user", *args.orders]
    args.skipped = []
    if args.data_dir is None:
        from mgg.data import bundled_planetoid_dir

        args.data_dir = bundled_planetoid_dir()
    print("python -m bench order: device cpu (measured); GPU columns predicted", flush=True)
    if args.report:
        rows = load_rows(Path(args.report))
        for r in rows:  # a run before the band's ends were put in order
            r["predicted_ms_low"], r["predicted_ms_high"] = sorted((r["predicted_ms_low"], r["predicted_ms_high"]))
        stem = Path(args.report).with_suffix("")
        seen = list(dict.fromkeys(r["order"] for r in rows))
        have = {(r["graph"], r["order"]) for r in rows}
        graphs = dict.fromkeys(r["graph"] for r in rows)
        args.skipped = [f"{o} on {g}" for g in graphs for o in seen if (g, o) not in have]
        nodes = {spec: cache.graph(spec, args.data_dir)[0].num_nodes for spec in graphs}
        for r in rows:  # auto's column again, by today's rules, from the measured times
            user = next(u for u in rows if (u["graph"], u["D"], u["order"]) == (r["graph"], r["D"], "user"))
            cost = r["order_s"] + r["plan_s"]
            r["auto"] = auto_verdict(r["order"], nodes[r["graph"]], r["D"], user["cpu_ms"], r["cpu_ms"], cost)
            r["auto"] = r["auto"].split(":")[0]
        write_csv(rows, Path(f"{stem}.csv"), COLUMNS)
    else:
        rows, stem = logged_run(args.out, "order", COLUMNS, lambda log: run(args, log))
    write_report(stem, markdown(rows, args, environment(torch.device("cpu"))), rows, plot)
    return 0

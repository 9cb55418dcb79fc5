"""Plexus's 3D grid: every grid of G GPUs ranked by predicted epoch time (mgg.distributed.grid.model:
the bytes per axis of mgg.distributed.grid's GCN at ring rates, the SpMM at both ends of the range
kernel's band, memory per GPU). Nothing here runs on a GPU: every time is predicted.

    python -m bench grid [--gpus 64] [--gpus-per-node 4] [--graph ogbn-products] [--gpu h100]
                         [--intra 300] [--inter 100] [--memory-gb 80] [--out DIR] [--smoke]
    python -m bench grid --measure --gpus 4 --graph SPEC [--dims 64,16,8] [--reps 10]
    python -m bench scaling --backend grid [--pes 2 4 8] [--graphs SPEC] [--dims 64,16,8] [--reps 10]

--graph: ogbn-products (its statistics: OGB's nodes and edges, Plexus's 3-layer GCN of 128 hidden), or
NODES:NONZEROS:D0,D1,...,CLASSES. Defaults: Plexus's Perlmutter (4 A100 per node, 4 x 25 GB/s NICs per
node, NVLink 3 at 300 GB/s one way per GPU). Writes grid-<date>.csv, .md and .png; `grid="auto"` and
`mgg train --grid auto` take the first row of the same ranking.

--measure: --gpus CPU processes under torchrun (gloo, one thread each) train a GCN of --dims on the
graph SPEC (a bench graph: cora, rmat:N:E, ...) on every grid (bench/workers/grid_epoch.py); the
measured step time and the bytes each step moved per axis (the busiest rank's, counted at the
collectives) stand beside the prediction, and the run fails if the counted bytes are not the model's.
`bench scaling --backend grid` is --measure at each rank count of --pes, a report each."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from datetime import datetime
from pathlib import Path

from mgg.distributed.grid.model import OGBN_PRODUCTS, GraphStats, Network, rank_grids
from mgg.errors import MggError

from . import cache
from .report import logged_run, write_report
from .suites.common import torchrun, torchrun_command

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = [
    "graph",
    "gpus",
    "gpus_per_node",
    "grid",
    "rank",
    "predicted_ms_low",
    "predicted_ms_high",
    "bytes_x",
    "bytes_y",
    "bytes_z",
    "memory_gb",
    "fits",
    "measured_ms",
    "measured_bytes_x",
    "measured_bytes_y",
    "measured_bytes_z",
    "intra_gbps",
    "inter_gbps",
    "gpu",
    "graph_nodes",
    "graph_nonzeros",
    "dims",
    "date",
]
SMOKE = dict(gpus=8, gpus_per_node=4, graph="1000:20000:16,8,4")


def graph_stats(spec: str, dims=None) -> GraphStats:
    """ogbn-products, NODES:NONZEROS:D0,...,CLASSES, or (with dims) a bench graph spec, loaded."""
    if dims is not None:  # --measure: a graph that is run here
        g, _ = cache.graph(spec, None)
        return GraphStats(spec, g.num_nodes, g.num_edges + g.num_nodes, tuple(dims))
    if spec == "ogbn-products":
        return OGBN_PRODUCTS
    parts = spec.split(":")
    try:
        nodes, nnz, dims = int(parts[0]), int(parts[1]), tuple(int(d) for d in parts[2].split(","))
    except (IndexError, ValueError):
        raise MggError(
            f"bench grid: --graph is ogbn-products or NODES:NONZEROS:D0,D1,...,CLASSES, got {spec!r}"
        ) from None
    if len(parts) != 3 or len(dims) < 2 or min(nodes, nnz, *dims) < 1:
        raise MggError(f"bench grid: --graph is ogbn-products or NODES:NONZEROS:D0,D1,...,CLASSES, got {spec!r}")
    return GraphStats(spec, nodes, nnz, dims)


def _sig(v: float) -> float:
    """Four significant digits (a tiny graph's epoch is microseconds)."""
    return float(f"{v:.4g}")


def measure(args, stats: GraphStats) -> dict:
    """grid -> (step ms, [bytes x, y, z]) of the torchrun worker (bench/workers/grid_epoch.py)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "grid.json"
        dims = ",".join(str(d) for d in stats.dims)
        print(f"bench grid --measure: every grid of {args.gpus} processes, {args.reps + 2} steps each", flush=True)
        cmd, env = torchrun_command("grid_epoch.py", args.gpus, [args.graph, dims, 2, args.reps, out])
        env["OMP_NUM_THREADS"] = "1"
        r = torchrun(cmd, env, timeout=3600)
        if r.returncode != 0:
            raise MggError(f"bench grid --measure: the workers failed (exit {r.returncode}): {r.stderr[-2000:]}")
        return {row["grid"]: (row["measured_ms"], row["bytes"]) for row in json.loads(out.read_text())}


def run(args, log) -> list:
    stats = graph_stats(args.graph, args.dims if args.measure else None)
    net = Network(args.gpus_per_node, args.intra, args.inter)
    measured = measure(args, stats) if args.measure else {}
    date = datetime.now().strftime("%Y-%m-%d")
    rows = []
    for i, p in enumerate(rank_grids(args.gpus, stats, net, args.gpu, memory_limit=args.memory_gb * 1e9), start=1):
        row = dict(
            graph=stats.name,
            gpus=args.gpus,
            gpus_per_node=args.gpus_per_node,
            grid=str(p.shape),
            rank=i,
            predicted_ms_low=_sig(p.low_s * 1e3),
            predicted_ms_high=_sig(p.high_s * 1e3),
            **{f"bytes_{a}": int(p.bytes_axis[a]) for a in "xyz"},
            memory_gb=round(p.memory / 1e9, 3),
            fits=p.fits,
            intra_gbps=args.intra,
            inter_gbps=args.inter,
            gpu=args.gpu,
            graph_nodes=stats.nodes,
            graph_nonzeros=stats.nonzeros,
            dims="-".join(str(d) for d in stats.dims),
            date=date,
        )
        if measured:
            ms, moved = measured[row["grid"]]
            # the model's bytes are fp32's (elem 4), as the workers' GCN
            if [round(b) for b in moved] != [row[f"bytes_{a}"] for a in "xyz"]:
                raise MggError(
                    f"bench grid --measure: {row['grid']} moved {moved} bytes, the model says "
                    f"{[row[f'bytes_{a}'] for a in 'xyz']}"
                )
            row.update(
                measured_ms=round(ms, 2), **{f"measured_bytes_{a}": round(b) for a, b in zip("xyz", moved, strict=True)}
            )
        log.add(row)
        rows.append(row)
    return rows


def markdown(rows: list, args) -> str:
    r0 = rows[0]
    measured = "measured_ms" in r0
    out = [
        f"# Grids of {r0['gpus']} GPUs ({r0['gpus_per_node']} per node) for {r0['graph']}: GPU epochs predicted",
        "",
        f"{r0['date']}. {r0['graph_nodes']} nodes, {r0['graph_nonzeros']} nonzeros, GCN widths {r0['dims']}, fp32; "
        f"{args.gpu}, {args.intra} GB/s per GPU inside a node, {args.inter} GB/s per node between nodes; "
        f"{args.memory_gb} GB per GPU. Epoch: one forward and backward; communication of every collective at ring "
        "rates plus the SpMM at both ends of the kernel model's band (mgg.distributed.grid.model); never measured on "
        "a GPU. Bytes: the busiest rank's per axis (the model's bytes equal those a CPU run counts: "
        "tests/distributed/test_grid.py).",
    ]
    if measured:
        out += [
            "",
            f"Measured: one training step on {r0['gpus']} CPU processes (gloo, one thread each) of this machine's "
            f"{os.cpu_count()} cores, the "
            f"median of {args.reps} after 2 warm-up steps; the bytes each step moved, counted at the collectives, "
            "equal the model's on every grid (the run checks it).",
        ]
    head = "| rank | grid | epoch ms (band) | MB x | MB y | MB z | GB per GPU | fits |"
    out += ["", head + (" CPU step ms (measured) |" if measured else ""), "| --- " * (9 if measured else 8) + "|"]
    for r in rows:
        out.append(
            f"| {r['rank']} | {r['grid']} | {r['predicted_ms_low']}-{r['predicted_ms_high']} | "
            f"{r['bytes_x'] / 1e6:.1f} | {r['bytes_y'] / 1e6:.1f} | {r['bytes_z'] / 1e6:.1f} | {r['memory_gb']} | "
            f"{'yes' if r['fits'] else 'no'} |" + (f" {r['measured_ms']} |" if measured else "")
        )
    return "\n".join(out) + "\n"


def plot(rows: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6, 0.3 * len(rows)), 4))
    x = range(len(rows))
    lo = [r["predicted_ms_low"] for r in rows]
    hi = [r["predicted_ms_high"] for r in rows]
    colors = [
        "C0"
        if sum(int(v) > 1 for v in r["grid"].split("x")) == 3
        else "C1"
        if sum(int(v) > 1 for v in r["grid"].split("x")) == 2
        else "C2"
        for r in rows
    ]
    # the band as a thick line from its low to its high end, a mark at its middle (seen where they meet)
    ax.vlines(list(x), lo, hi, colors=colors, linewidth=6)
    ax.scatter(list(x), [(a + b) / 2 for a, b in zip(lo, hi, strict=True)], c=colors, marker="s", s=12, zorder=3)
    ax.set_xticks(list(x), [r["grid"] for r in rows], rotation=90, fontsize=7)
    if "measured_ms" in rows[0]:
        twin = ax.twinx()
        twin.plot(list(x), [r["measured_ms"] for r in rows], "ko", label="CPU step, measured")
        twin.set(ylabel="CPU step ms (measured)")
        twin.legend(fontsize=7)
    ax.set(
        ylabel="predicted epoch ms (band)",
        title=f"{rows[0]['graph']} on {rows[0]['gpus']} GPUs: 3D (blue), 2D (orange), 1D (green)",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench grid", description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("--graph", default="ogbn-products")
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--intra", type=float, default=300.0, help="GB/s per GPU inside a node, one way (NVLink 3: 300)")
    ap.add_argument("--inter", type=float, default=100.0, help="GB/s per node between nodes (Perlmutter: 4 x 25)")
    ap.add_argument("--memory-gb", type=float, default=80.0)
    ap.add_argument("--measure", action="store_true", help="also run every grid on --gpus CPU processes (gloo)")
    ap.add_argument(
        "--dims",
        type=lambda s: [int(d) for d in s.split(",")],
        default=[64, 16, 8],
        help="with --measure: the GCN's widths, D0,...,CLASSES",
    )
    ap.add_argument("--reps", type=int, default=10, help="with --measure: timed steps per grid (after 2 warm-up)")
    ap.add_argument("--smoke", action="store_true", help="a tiny graph: the harness runs, nothing to cite")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    if args.smoke:
        for k, v in SMOKE.items():
            setattr(args, k, v)
    try:
        if args.measure and (args.smoke or args.graph == "ogbn-products"):
            raise MggError(
                "bench grid --measure runs the graph here: --graph cora, rmat:NODES:EDGES, ... (a bench graph)"
            )
        graph_stats(args.graph, args.dims if args.measure else None)
        if args.measure and (len(args.dims) < 2 or min(args.dims) < 1 or args.reps < 1):
            raise MggError("bench grid --measure: --dims needs two widths or more, each >= 1, and --reps >= 1")
    except MggError as e:
        ap.error(str(e))
    rows, stem = logged_run(args.out, "grid", COLUMNS, lambda log: run(args, log))
    write_report(stem, markdown(rows, args), rows, plot)
    return 0


def scaling_main(argv=None) -> int:
    """python -m bench scaling --backend grid: `--measure` for each rank count of --pes."""
    ap = argparse.ArgumentParser(prog="python -m bench scaling --backend grid", description=scaling_main.__doc__)
    ap.add_argument("--backend", choices=["grid"], required=True)
    ap.add_argument("--pes", nargs="+", type=int, default=[2, 4, 8], help="CPU processes (ranks) per run")
    ap.add_argument("--graphs", nargs="+", default=["cora"], help="bench graph specs, a run each")
    ap.add_argument("--dims", default="64,16,8", help="the GCN's widths, D0,...,CLASSES")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--gpus-per-node", type=int, default=4, help="for the prediction beside the measurement")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    for spec in args.graphs:
        for pes in args.pes:
            argv_grid = ["--measure", "--gpus", str(pes), "--gpus-per-node", str(args.gpus_per_node)]
            argv_grid += ["--graph", spec, "--dims", args.dims, "--reps", str(args.reps), "--out", args.out]
            main(argv_grid)
    return 0

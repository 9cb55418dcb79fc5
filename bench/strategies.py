"""Every strategy on a described cluster, from the bytes each rank moves (no processes unless
--measure): the one model mgg train --backend auto ranks by (mgg.distributed.strategy), the 1.5D
algorithms' bytes per rank beside the 1D halo's, CAGNET's 1D (allgather) and the best 3D grid, and the
busiest sender's volume of each partitioner, the +vb refinement beside the partition it refines.

    python -m bench strategies [--graphs ...] [--nodes 16] [--gpus-per-node 8] [--intra 450] [--inter 400]
                               [--dims 128 128 47] [--ranks 16 64] [--replications 1 2 4] [--measure] [--smoke]

- ranking: every strategy's predicted epoch (a band) for a GCN of --dims on --nodes x --gpus-per-node
  GPUs at the rates given (H100s: NVLink 450 GB/s one way per GPU, 8 x 400 Gb/s network per machine);
- onefive: per (graph, P in --ranks, c in --replications, partition, algorithm, D) the forward bytes per
  rank of one aggregation (max send, max receive, mean receive), the row all-reduce's, and the ratio of
  the busiest rank's to the 1D halo's, with CAGNET 1D and the best grid at the same P;
- refine: max and total send volume, max/mean, max receive and balance of metis and hypergraph and
  their +vb refinements at each P, on --refine-graphs (real graphs: Cora) and on --graphs (the
  partitions of --refine-bases); beside them METIS with its volume objective (a row of its own, not an
  mgg method), and each refined row's floor: the lowest total of the rows of its graph and P over P,
  against the base's max send (no partition of that total sends less at its busiest: max >= mean);
- --measure: every strategy `auto` ranks for a GCN on Cora, run on CPU processes (gloo, 4 ranks): the
  bytes counted at the collectives against the model's (they must be equal).
Writes strategies-<date>.csv (rankings), onefive-<date>.csv, refine-<date>.csv, a .md and a .png."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mgg.distributed.grid.model import GraphStats, Network, rank_grids
from mgg.distributed.onefive.volume import totals
from mgg.distributed.strategy import rank_strategies
from mgg.partitioning import partition
from mgg.partitioning.assignment import from_parts
from mgg.partitioning.methods import METHODS, REFINED, metis_parts, node_weights
from mgg.partitioning.refine import Volumes, refine
from mgg.plan.stats import partition_stats, volume_matrix
from mgg.runtime.cluster_model import Cluster

from . import cache
from .report import write_csv

ROOT = Path(__file__).resolve().parent.parent
GRAPHS = ["rmat-reddit:scale=0.1", "rmat-products:scale=0.1", "rmat-amazon:scale=0.01"]
SMOKE = dict(
    graphs=["rmat:3000:30000"],
    refine_graphs=[],
    nodes=2,
    gpus_per_node=2,
    ranks=[4],
    replications=[1, 2],
    dims=[16, 16, 7],
)
RANK_COLUMNS = ["graph", "cluster", "rank", "strategy", "low_ms", "high_ms", "network_mb", "nvlink_mb"]
ONEFIVE_COLUMNS = [
    "graph",
    "P",
    "c",
    "partition",
    "algorithm",
    "D",
    "max_send_mb",
    "max_recv_mb",
    "mean_recv_mb",
    "row_allreduce_mb",
    "max_over_halo_1d",
]
REFINE_COLUMNS = [
    "graph",
    "P",
    "method",
    "max_send_rows",
    "total_rows",
    "max_over_mean",
    "max_recv_rows",
    "weight_max_over_mean",
    "max_send_vs_base",
    "total_vs_base",
    "floor_vs_base",
    "seconds",
]
VOLUME_ROW = "metis(volume)"  # METIS_OBJTYPE_VOL: a lower total than the cut's on the stand-ins
ELEM = 4
MB = 1e6


def ranking(graphs: list, args) -> list:
    cluster = Cluster(args.nodes, args.gpus_per_node, args.intra, args.inter, args.gpu)
    rows = []
    for spec, g in graphs:
        t0 = time.perf_counter()
        ranked = rank_strategies(g, cluster, args.dims, "gcn", args.partition)
        print(f"[ranking] {spec}: {len(ranked)} strategies in {time.perf_counter() - t0:.0f} s", flush=True)
        for i, p in enumerate(ranked):
            rows.append(
                dict(
                    graph=spec,
                    cluster=f"{args.nodes}x{args.gpus_per_node}@{args.intra:g},{args.inter:g}",
                    rank=i + 1,
                    strategy=str(p.strategy),
                    low_ms=round(p.low_s * 1e3, 4),
                    high_ms=round(p.high_s * 1e3, 4),
                    network_mb=round(p.network_bytes / MB, 3),
                    nvlink_mb=round(p.nvlink_bytes / MB, 3),
                )
            )
    return rows


def onefive(graphs: list, args) -> list:
    rows = []
    d = args.dims[1]
    for spec, g in graphs:
        for world in args.ranks:
            # the 1D halo and CAGNET 1D at P parts, the reference of each ratio
            p_parts = partition(g, world, args.partition)
            rel = p_parts.relabel(g)
            halo = totals(
                "sa-1.5d", world, 1, "balanced", volume_matrix(rel, p_parts.bounds)[0], np.diff(p_parts.bounds), d, ELEM
            )
            one_d = max(halo["max_recv"], halo["max_send"])
            stats = GraphStats(spec, g.num_nodes, g.num_edges + g.num_nodes, tuple(args.dims))
            best = rank_grids(world, stats, Network(args.gpus_per_node, args.intra, args.inter))[0]
            for c in [c for c in args.replications if world % c == 0]:
                b = world // c
                part = partition(g, b, args.partition)
                rel = part.relabel(g)
                volume, sizes = volume_matrix(rel, part.bounds)[0], np.diff(part.bounds)
                for algorithm in ("sa-1.5d", "cagnet-1.5d"):
                    t = totals(algorithm, world, c, "balanced", volume, sizes, d, ELEM)
                    busiest = max(t["max_recv"], t["max_send"])
                    rows.append(
                        dict(
                            graph=spec,
                            P=world,
                            c=c,
                            partition=args.partition,
                            algorithm=algorithm,
                            D=d,
                            max_send_mb=round(t["max_send"] / MB, 4),
                            max_recv_mb=round(t["max_recv"] / MB, 4),
                            mean_recv_mb=round(t["total_recv"] / world / MB, 4),
                            row_allreduce_mb=round(t["max_row"] / MB, 4),
                            max_over_halo_1d=round(busiest / one_d, 4) if one_d else None,
                        )
                    )
            n = g.num_nodes
            rows.append(
                dict(
                    graph=spec,
                    P=world,
                    c=1,
                    partition="-",
                    algorithm="allgather (CAGNET 1D)",
                    D=d,
                    max_recv_mb=round((n - n / world) * d * ELEM / MB, 4),
                    max_over_halo_1d=round((n - n / world) * d * ELEM / one_d, 4) if one_d else None,
                )
            )
            rows.append(
                dict(
                    graph=spec,
                    P=world,
                    c=0,
                    partition="-",
                    algorithm=f"grid {best.shape} (a step, all layers)",
                    D=d,
                    max_recv_mb=round(sum(best.bytes_axis.values()) / MB, 4),
                )
            )
            print(f"[onefive] {spec} P={world}: done", flush=True)
    return rows


def refine_rows(graphs: list, args) -> list:
    """metis and hypergraph (cached on disk), then each refined (refine.py: what `+vb` runs on it)."""
    rows = []
    real = [(spec, cache.graph(spec, None)[0], ("metis", "hypergraph")) for spec in args.refine_graphs]

    def bases_of(spec: str) -> tuple:
        on = args.hypergraph_on
        return tuple(b for b in args.refine_bases if b != "hypergraph" or on is None or spec in on)

    for spec, g, bases in real + [(spec, g, bases_of(spec)) for spec, g in graphs]:
        w = node_weights(g)
        for world in args.ranks:
            mine, refined_rows = [], []  # refined_rows: (a refined row, its base's max send)
            for name in [m for m in METHODS if m in bases]:
                try:
                    p = partition(g, world, name, cache=True)
                except Exception as e:  # a package missing: the row says so
                    print(f"[refine] {spec} P={world} {name}: {e}", flush=True)
                    continue
                t0 = time.perf_counter()
                refined, _ = refine(g, p.owner, world, w)
                seconds = time.perf_counter() - t0
                base = _refine_row(spec, world, name, g, p, w, p.seconds)
                row = _refine_row(
                    spec, world, name + REFINED, g, from_parts(name + REFINED, refined, world, w, 0, 0), w, seconds
                )
                row["max_send_vs_base"] = round(row["max_send_rows"] / base["max_send_rows"], 4)
                row["total_vs_base"] = round(row["total_rows"] / base["total_rows"], 4)
                refined_rows.append((row, base["max_send_rows"]))
                mine += [base, row]
            if "metis" in bases and mine:
                t0 = time.perf_counter()
                vp = from_parts(VOLUME_ROW, metis_parts(g, world, 0, objective="volume"), world, w, 0, 0)
                mine.append(_refine_row(spec, world, VOLUME_ROW, g, vp, w, time.perf_counter() - t0))
            lowest = min((r["total_rows"] for r in mine), default=0)
            for row, base_max in refined_rows:
                row["floor_vs_base"] = round(lowest / world / base_max, 4)
            for r in mine:
                print(
                    f"[refine] {spec} P={world} {r['method']}: max send {r['max_send_rows']}, "
                    f"total {r['total_rows']}, {r['seconds']} s",
                    flush=True,
                )
            rows += mine
    return rows


def _refine_row(spec: str, world: int, method: str, g, p, w, seconds: float) -> dict:
    """A partition's volumes, counted twice: by Volumes and by mgg.plan.stats (they must agree)."""
    _, total = partition_stats(p.relabel(g), p.bounds)
    vol = Volumes(g, p.owner, world, w)
    assert vol.total == total["halo_rows"] and int(vol.S.max()) == total["max_send_rows"]
    return dict(
        graph=spec,
        P=world,
        method=method,
        max_send_rows=int(vol.S.max()),
        total_rows=vol.total,
        max_over_mean=round(float(vol.S.max() / vol.S.mean()), 4),
        max_recv_rows=int(vol.R.max()),
        weight_max_over_mean=round(float(vol.W.max() / vol.W.mean()), 4),
        seconds=round(seconds, 2),
    )


def measure(args) -> list:
    """Every strategy auto ranks on 4 CPU processes (Cora, GCN 16): counted bytes against the model's."""
    worker = ROOT / "bench" / "workers" / "strategy_bytes.py"
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "bytes.json"
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node=4",
            "--standalone",
            str(worker),
            str(out),
        ]
        env = dict(
            os.environ,
            OMP_NUM_THREADS="1",
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        )
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
        if r.returncode:
            raise RuntimeError(r.stderr[-3000:])
        return json.loads(out.read_text())


def markdown(out: dict, args) -> str:
    lines = [
        "# Every strategy on a described cluster (predicted; the bytes as the runs count them)",
        "",
        f"Cluster: {args.nodes} machines x {args.gpus_per_node} {args.gpu.upper()}s, NVLink {args.intra:g} GB/s "
        f"per GPU, network {args.inter:g} GB/s per machine; GCN of widths {args.dims}; partition {args.partition}. "
        "Every epoch time is predicted from the bytes each rank moves and the kernel model's band; none is measured.",
        "",
        "## Ranking (mgg train --backend auto takes the first)",
        "",
        "| graph | # | strategy | epoch ms (band) | network MB (busiest machine) | NVLink MB (busiest GPU) |",
        "|---|---|---|---|---|---|",
    ]
    for r in out["ranking"]:
        if r["rank"] <= args.top:
            lines.append(
                f"| {r['graph']} | {r['rank']} | {r['strategy']} | {r['low_ms']}-{r['high_ms']} | {r['network_mb']} | "
                f"{r['nvlink_mb']} |"
            )
    lines += [
        "",
        "## 1.5D bytes per rank, one forward aggregation (D = hidden), against the 1D halo's busiest rank",
        "",
        "| graph | P | c | algorithm | max send MB | max recv MB | mean recv MB | row all-reduce MB | busiest / 1D |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in out["onefive"]:
        lines.append(
            f"| {r['graph']} | {r['P']} | {r['c']} | {r['algorithm']} | {r.get('max_send_mb', '')} | "
            f"{r.get('max_recv_mb', '')} | {r.get('mean_recv_mb', '')} | {r.get('row_allreduce_mb', '')} | "
            f"{r.get('max_over_halo_1d', '')} |"
        )
    lines += [
        "",
        "## The busiest sender: metis and hypergraph, and their +vb refinements",
        "",
        f"On --graphs the partitions of {' and '.join(args.refine_bases)}"
        + (f" (hypergraph on {', '.join(args.hypergraph_on)} only)" if args.hypergraph_on else "")
        + "; on the real graphs both. Seconds: the partition's (cached on disk: as first computed), the "
        "refinement's on this run. metis(volume): METIS with its volume objective (not an mgg method). Floor "
        "vs base: the lowest total of the rows of that graph and P, over P, against the base's max send: "
        "no partition of that total has a busiest sender below it (the max is at least the mean), so a "
        "floor above 0.8 says a 20% fall needs a lower total than any of these partitioners found.",
        "",
        "| graph | P | method | max send rows | total rows | max/mean | max recv rows | weight max/mean "
        "| max send vs base | total vs base | floor vs base | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in out["refine"]:
        lines.append(
            f"| {r['graph']} | {r['P']} | {r['method']} | {r['max_send_rows']} | {r['total_rows']} | "
            f"{r['max_over_mean']} | {r['max_recv_rows']} | {r['weight_max_over_mean']} | "
            f"{r.get('max_send_vs_base', '')} | {r.get('total_vs_base', '')} | {r.get('floor_vs_base', '')} | "
            f"{r['seconds']} |"
        )
    if out.get("measured"):
        lines += ["", "## Counted at the collectives (Cora, 4 CPU processes) against the model", ""]
        lines += ["| strategy | rank | counted bytes | model bytes | equal |", "|---|---|---|---|---|"]
        for m in out["measured"]:
            lines.append(
                f"| {m['strategy']} | {m['rank']} | {m['counted']} | {m['model']} | {m['counted'] == m['model']} |"
            )
    return "\n".join(lines) + "\n"


def plot(out: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = list(dict.fromkeys(r["graph"] for r in out["ranking"]))
    fig, axes = plt.subplots(1, len(graphs), figsize=(6 * len(graphs), 4.5), squeeze=False)
    for ax, spec in zip(axes[0], graphs, strict=True):
        rows = [r for r in out["ranking"] if r["graph"] == spec][: args_top(out)]
        y = np.arange(len(rows))
        ax.barh(y, [r["high_ms"] - r["low_ms"] for r in rows], left=[r["low_ms"] for r in rows])
        ax.set_yticks(y, [r["strategy"] for r in rows], fontsize=7)
        ax.invert_yaxis()
        ax.set(xlabel="predicted epoch (ms, band)", title=spec)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def args_top(out: dict) -> int:
    return out.get("top", 12)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench strategies", description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", nargs="+", default=GRAPHS)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--intra", type=float, default=450.0)
    ap.add_argument("--inter", type=float, default=400.0)
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--dims", nargs="+", type=int, default=[128, 128, 47])
    ap.add_argument("--partition", default="random")
    ap.add_argument("--ranks", nargs="+", type=int, default=[16, 64], help="P of the 1.5D and refinement tables")
    ap.add_argument(
        "--refine-graphs", nargs="+", default=["cora"], help="real graphs of the refine table, besides --graphs"
    )
    ap.add_argument(
        "--refine-bases",
        nargs="+",
        default=["metis", "hypergraph"],
        choices=["metis", "hypergraph"],
        help="partitions refined on --graphs (--refine-graphs: both)",
    )
    ap.add_argument(
        "--hypergraph-on",
        nargs="+",
        help="the --graphs whose hypergraph partitions are made (default: every one; Mt-KaHyPar's deterministic "
        "preset took 12 min on rmat-reddit:scale=0.1 at 16 parts on 2 cores)",
    )
    ap.add_argument("--replications", nargs="+", type=int, default=[1, 2, 4])
    ap.add_argument("--top", type=int, default=12, help="strategies shown per graph in the markdown and plot")
    ap.add_argument("--measure", action="store_true", help="counted bytes on CPU processes against the model")
    ap.add_argument("--smoke", action="store_true", help="a tiny graph: the harness runs, nothing to cite")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    if args.smoke:
        for k, v in SMOKE.items():
            setattr(args, k, v)
    graphs = [(spec, cache.graph(spec, None)[0]) for spec in args.graphs]
    out = dict(
        ranking=ranking(graphs, args), onefive=onefive(graphs, args), refine=refine_rows(graphs, args), top=args.top
    )
    if args.measure:
        out["measured"] = measure(args)
    stem = Path(args.out) / f"strategies-{time.strftime('%Y%m%d-%H%M%S')}"
    Path(args.out).mkdir(parents=True, exist_ok=True)
    write_csv(out["ranking"], Path(f"{stem}.csv"), RANK_COLUMNS)
    write_csv(out["onefive"], Path(f"{stem}-onefive.csv"), ONEFIVE_COLUMNS)
    write_csv(out["refine"], Path(f"{stem}-refine.csv"), REFINE_COLUMNS)
    md = markdown(out, args)
    Path(f"{stem}.md").write_text(md)
    plot(out, Path(f"{stem}.png"))
    print(md)
    print(f"wrote {stem}.csv, -onefive.csv, -refine.csv, .md, .png")
    if out.get("measured") and not all(m["counted"] == m["model"] for m in out["measured"]):
        print("python -m bench strategies: the counted bytes differ from the model's", file=sys.stderr)
        return 1
    return 0

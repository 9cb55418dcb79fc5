"""What the aggregation kernels ask of the memory system, counted by the SIMT emulator (issue 31):
per graph, feature width, dtype and remote-row source, the global-memory load requests, the
32-byte sectors they touch, the bytes they ask for, the lanes active per load, the warp
shuffles per edge, and the shared-memory atomics of the blocks kernel's partial sums (commit in
kernels/aggregate_kernel.cuh) with their bank wavefronts, summed over every rank's step.
Machine-independent: no GPU, no timing.

    python -m bench.counters [--graphs rmat-reddit:scale=0.0005 rmat-products:scale=0.0001]
                             [--dims 16 32 64 128 256] [--dtypes float32 bfloat16]
                             [--sources table get-warp copy-warp] [--ranks 2] [--out DIR]
    python -m bench.counters --ncu-metrics   # the Nsight Compute metrics the columns mirror

Writes counters-<date>.csv (one row per case and memory class: `global` is what Nsight Compute
sees as global loads, `rows` the source rows read in place or copied from peers (copy-*),
`edges` the plan's column ids, weights and PEs, `landed` the rows gets or copies put in shared
memory, read from there; the
shuffles, partial-sum and get columns are the case's, the same on each class's row), a markdown
table and a plot. The gets' own traffic is counted per call (get_calls, get_bytes, and the
sectors of their sources over the bytes: what the link carries at sector granularity); how
NVSHMEM splits a get into load instructions is its own and not modelled. The partial sums'
bank-conflict degree is their shared wavefronts per request (1: conflict-free; issue 31 asks at
most 1.1; 2 is the least at D = 16, where 32 lanes add into 16 words). The default graphs keep
Reddit's and products' degree profiles at about 13K edges, so the default run emulates in
minutes. Columns that
Nsight Compute also reports carry its metric names (bench/gpu_verify.sh's `ncu` stage collects
them on a GPU). Needs the repository checkout (the emulator is tests/emulator.py) and g++ with
the CUDA headers.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# emulator field -> the Nsight Compute metric of the same quantity (global loads, per kernel launch)
NCU = {
    "requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "active_lanes": "smsp__sass_thread_inst_executed_op_global_ld_pred_on.sum",
}
# emulator shared-memory op (counters_of's "shared" keys) -> the Nsight Compute metric of its
# extra wavefronts, wavefronts - requests (bank conflicts). A shared fp32 atomicAdd compiles to a
# load and a compare-and-swap loop (LDS + ATOMS.CAST.SPIN at sm_80 and sm_90), whose load
# Nsight Compute counts under op_ld and whose lanes on one word go round the loop again: the
# emulator's atomic wavefronts (each lane's word counted) stand for the loop's. Nsight Compute
# counts every shared access of the kernel; the column bank_conflicts_partial_sums only commit's.
NCU_SHARED = {
    "ld": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "st": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "atom": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
}
# further metrics the GPU stage records beside them (NCU_SHARED's among them)
NCU_EXTRA = [
    "smsp__sass_inst_executed_op_global_ld.sum",
    "launch__registers_per_thread",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "gpu__time_duration.sum",
]
CLASSES = ("global", "rows", "edges", "landed")
COLUMNS = [
    "graph",
    "dim",
    "dtype",
    "source",
    "ranks",
    "edges",
    "class",
    NCU["requests"],
    NCU["sectors"],
    NCU["active_lanes"],
    "bytes_requested",
    "sectors_per_request",
    "bytes_in_sectors_over_requested",
    "requests_per_128_bytes",
    "active_lanes_pct",
    "shuffles_per_edge",
    "shared_requests_partial_sums",
    "shared_wavefronts_partial_sums",
    "bank_conflicts_partial_sums",  # wavefronts - requests: NCU_SHARED["atom"], commit's part
    "wavefronts_per_shared_request_partial_sums",  # the bank-conflict degree
    "get_calls",  # NVSHMEM gets (any scope): calls, the bytes they move, their sources' sectors
    "get_bytes",
    "get_bytes_in_sectors_over_moved",
]
PARTIAL_SUMS_SITE = "kernels/aggregate_kernel.cuh:"  # commit's shared atomics (op "atom")


def region_class(region: str) -> str:
    """rows, edges or landed (a region name of tests/emulated_ops.py's cases)."""
    if region == "shared":
        return "landed"
    if region in ("table", "remote_table") or region.startswith("peer"):
        return "rows"
    return "edges"


def summarize(per_rank: list, edges: int) -> dict:
    """Per class: the counters summed over ranks and regions, and the ratios."""
    sums = {c: dict(requests=0, sectors=0, active_lanes=0, lane_slots=0, bytes=0) for c in CLASSES}
    shuffles = shared_req = wavefronts = 0
    gets = dict(calls=0, bytes=0, sectors=0)  # over every scope
    for counters in per_rank:
        for (_, region), v in counters["loads"].items():
            cls = region_class(region)
            for c in {cls, "global"} if cls != "landed" else {cls}:
                for f, n in v.items():
                    sums[c][f] += n
        shuffles += counters["warp_calls"].get("__shfl_sync", 0)
        for v in counters["gets"].values():
            for f in gets:
                gets[f] += v[f]
        for (site, op), v in counters["shared"].items():
            if site.startswith(PARTIAL_SUMS_SITE) and op == "atom":
                shared_req += v["requests"]
                wavefronts += v["wavefronts"]
    per_case = {
        "shared_requests_partial_sums": shared_req,
        "shared_wavefronts_partial_sums": wavefronts,
        "bank_conflicts_partial_sums": wavefronts - shared_req,
        "wavefronts_per_shared_request_partial_sums": round(wavefronts / shared_req, 3) if shared_req else "",
        "get_calls": gets["calls"],
        "get_bytes": gets["bytes"],
        "get_bytes_in_sectors_over_moved": round(32 * gets["sectors"] / gets["bytes"], 3) if gets["bytes"] else "",
    }
    out = {}
    for c, s in sums.items():
        req, sec, by = s["requests"], s["sectors"], s["bytes"]
        out[c] = {
            NCU["requests"]: req,
            NCU["sectors"]: sec,
            NCU["active_lanes"]: s["active_lanes"],
            "bytes_requested": by,
            "sectors_per_request": round(sec / req, 3) if req else "",
            "bytes_in_sectors_over_requested": round(32 * sec / by, 3) if by else "",
            "requests_per_128_bytes": round(128 * req / by, 3) if by else "",
            "active_lanes_pct": round(100 * s["active_lanes"] / s["lane_slots"], 1) if s["lane_slots"] else "",
            "shuffles_per_edge": round(shuffles / edges, 3) if edges else "",
            **per_case,
        }
    return out


def emulated(source: str) -> tuple[str, str]:
    """The emulated case's (source, completion) of a --sources name: get-* are NVSHMEM gets over
    the proxy (the path across nodes), copy-* the same sources with every PE reachable by loads,
    which the kernels serve with asynchronous copies (kernels/fetch.cuh's PeerCopyFetch)."""
    if source.startswith("copy-"):
        return "get-" + source.removeprefix("copy-"), "loadstore"
    return source, "proxy" if source.startswith("get") else "loadstore"


def measure(spec: str, dim: int, dtype: str, source: str, ranks: int, work: Path) -> list[dict]:
    """One case: the emulated kernels of every rank's step, checked against the float64
    reference before their counters are read."""
    import torch

    from bench import cache
    from mgg import Config
    from mgg.testing import assert_matches_reference
    from tests import emulator
    from tests.emulated_ops import aggregate

    g, _ = cache.graph(spec)  # made once per spec, as the plan (the cases differ in D, dtype, source)
    plan = cache.plan(g, ranks)
    x = torch.randn(g.num_nodes, dim, generator=torch.Generator().manual_seed(0)).to(getattr(torch, dtype))
    kernel_source, completion = emulated(source)
    out = aggregate(work, plan, x, Config(), kernel_source, completion, counters=True)
    assert_matches_reference(out, g, x)
    per_rank = [emulator.counters_of(work / f"rank{r}") for r in range(ranks)]
    base = dict(graph=spec, dim=dim, dtype=dtype, source=source, ranks=ranks, edges=g.num_edges)
    return [dict(base, **{"class": c}, **v) for c, v in summarize(per_rank, g.num_edges).items()]


RATIOS = ("sectors_per_request", "bytes_in_sectors_over_requested", "requests_per_128_bytes", "active_lanes_pct")


def markdown(rows: list[dict]) -> str:
    head = [
        "graph",
        "D",
        "dtype",
        "source",
        "sectors/req (rows)",
        "bytes in sectors / requested (rows)",
        "req per 128 B (rows)",
        "active lanes % (rows)",
        "active lanes % (edges)",
        "shuffles/edge",
        "partial sums: shared req",
        "partial sums: wavefronts/req",
        "gets: calls",
        "gets: bytes in sectors / moved",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by = {(r["graph"], r["dim"], r["dtype"], r["source"], r["class"]): r for r in rows}
    for g, d, t, s, c in by:
        if c != "rows":
            continue
        r, e = by[(g, d, t, s, "rows")], by[(g, d, t, s, "edges")]
        cells = [g, d, t, s] + [r[k] for k in RATIOS] + [e["active_lanes_pct"], r["shuffles_per_edge"]]
        cells += [r["shared_requests_partial_sums"], r["wavefronts_per_shared_request_partial_sums"]]
        cells += [r["get_calls"], r["get_bytes_in_sectors_over_moved"]]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    """Requests per 128 bytes asked for (issue 31's target with 16-byte vector loads: 0.3) and
    active lanes, of the source-row loads, against D."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    dims = sorted({int(r["dim"]) for r in rows})
    for g, t, s in sorted({(r["graph"], r["dtype"], r["source"]) for r in rows}):
        mine = [r for r in rows if (r["graph"], r["dtype"], r["source"], r["class"]) == (g, t, s, "rows")]
        pts = sorted(mine, key=lambda r: int(r["dim"]))
        x = [int(r["dim"]) for r in pts]
        axes[0].plot(x, [float(r["requests_per_128_bytes"]) for r in pts], marker="o", label=f"{g} {t} {s}")
        axes[1].plot(x, [float(r["active_lanes_pct"]) for r in pts], marker="o", label=f"{g} {t} {s}")
    axes[0].axhline(0.3, color="gray", linestyle="--", linewidth=1, label="target with 16-byte loads")
    axes[0].set(ylabel="requests per 128 bytes requested", ylim=(0, None))
    axes[0].legend(handles=axes[0].get_lines()[-1:], fontsize=7)
    axes[1].set(ylabel="active lanes per load (%)", ylim=(0, 105))
    for a in axes:
        a.set_xscale("log", base=2)
        a.set_xticks(dims, [str(d) for d in dims])
        a.minorticks_off()
        a.set(xlabel="feature width D", title="source-row loads")
    axes[1].legend(fontsize=7)
    fig.suptitle("mgg aggregation kernels under the SIMT emulator (counts, not times)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.counters", description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", nargs="+", default=["rmat-reddit:scale=0.0005", "rmat-products:scale=0.0001"])
    ap.add_argument("--dims", nargs="+", type=int, default=[16, 32, 64, 128, 256])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], help="float32, float16, bfloat16")
    ap.add_argument(
        "--sources",
        nargs="+",
        default=["table", "get-warp"],
        help="table, direct, get-thread, get-warp, get-block (NVSHMEM gets over the proxy), "
        "copy-thread, copy-warp, copy-block (the same within a node: asynchronous copies)",
    )
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--ncu-metrics", action="store_true", help="print the Nsight Compute metrics and exit")
    args = ap.parse_args(argv)
    if args.ncu_metrics:
        print(",".join(list(NCU.values()) + NCU_EXTRA))
        return 0
    if str(ROOT) not in sys.path:  # tests.emulator, from the checkout
        sys.path.insert(0, str(ROOT))
    rows = []
    cases = [(g, d, t, s) for g in args.graphs for t in args.dtypes for s in args.sources for d in args.dims]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (g, d, t, s) in enumerate(cases):
            print(f"[{i + 1}/{len(cases)}] {g} D={d} {t} {s}", flush=True)
            rows += measure(g, d, t, s, args.ranks, Path(tmp) / str(i))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"counters-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    with open(f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    table = markdown(rows)
    Path(f"{stem}.md").write_text(table + "\n")
    plot(rows, Path(f"{stem}.png"))
    print(table)
    print(f"wrote {stem}.csv, .md, .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the aggregation kernels ask of the memory system, counted by the SIMT emulator (issues 31
and 43): per graph, feature width, dtype and remote-row source, the global-memory load requests,
the 32-byte sectors they touch, the bytes they ask for and the lanes active per load, by class of
memory, and per edge; the loads a warp issues before its first source row (its chain); the warp
shuffles, the atomics (none, by design), the carry rows of split rows and the NVSHMEM gets; summed
over every rank's step. Machine-independent: no GPU, no timing.

    python -m bench.counters [--graphs rmat-reddit:scale=0.0005 rmat-products:scale=0.0001]
                             [--dims 16 32 64 128 256] [--dtypes float32 bfloat16]
                             [--sources table get-warp] [--ranks 2] [--out DIR]
                             [--before counters-OLD.csv]
    python -m bench.counters --ncu-metrics   # the Nsight Compute metrics the columns mirror

The classes of the range kernel's loads (kernels/aggregate_kernel.cuh; regions named by
simt/emulated_ops.py), one CSV row per case and class:
- `rows`: the source rows, read in place in 16-byte pieces by lane groups (or copied from peers
  into the landing buffers, copy-*);
- `index`: the index stream, each part's column ids, weights and (peer sources) owner PEs, a
  window of 32 edges (landing sources: ps edges) per load;
- `row_ends`: the row pointers, 32 rows per load;
- `ranges`: the warp range records, one load of 2 records per warp;
- `global`: all of them (what Nsight Compute sees as global loads);
- `landed`: the rows gets or copies put in shared memory, read from there (shared loads: requests,
  active lanes and wavefronts; no sectors).
The chain of a warp is the loads it issues before its first source-row access (a row load, a
copy or a get; csrc/tests/simt/counters.cpp): the range records, the windows' first chunks and the
first row ends, issued together (one dependent round after the records). The carry columns come
from the plan, not from the counters: each split row's pieces are fp32 rows (carry_slots x D x
4 bytes) that the range kernel writes and aggregate_fixup_kernel reads once more; neither access
is a counted site today, so carry_bytes is that size, the traffic twice it. Atomics are every
thread's atomicAdd / atomicMax / atomicExch in any memory (simt.h counts them), and the shared
atomic requests of MGG_SHARED_ATOMIC sites; the range kernel has none. The gets' own traffic is
counted per call (get_calls, get_bytes, and the sectors of their sources over the bytes: what the
link carries at sector granularity); how NVSHMEM splits a get into load instructions is its own
and not modelled.

Writes counters-<date>.csv, a markdown table (with --before, a second table: the same quantities
of an earlier run beside this run's, such as the blocks kernel's counters-20261126-193110.csv,
whose `edges` class is its index stream: it read its schedule and row pointers without counted
load sites) and a plot. The default
graphs keep Reddit's and products' degree profiles at about 13K edges, so the default run
emulates in minutes. Columns that Nsight Compute also reports carry its metric names
(bench/gpu_verify.sh's `ncu` stage collects them on a GPU). Needs the repository checkout (the
emulator is simt/emulator.py) and g++ with the CUDA headers.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import sys
import tempfile
from pathlib import Path

from .report import CsvLog

ROOT = Path(__file__).resolve().parent.parent
# emulator field -> the Nsight Compute metric of the same quantity (global loads, per kernel launch)
NCU = {
    "requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "active_lanes": "smsp__sass_thread_inst_executed_op_global_ld_pred_on.sum",
}
# further metrics the GPU stage records beside them: global and shared atomics (0 for the range
# kernel), shared-memory bank conflicts (the row ends and landing buffers), the kernel's time
NCU_EXTRA = [
    "smsp__sass_inst_executed_op_global_ld.sum",
    "smsp__sass_inst_executed_op_global_atom.sum",
    "smsp__sass_inst_executed_op_shared_atom.sum",
    "launch__registers_per_thread",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "gpu__time_duration.sum",
]
CLASSES = ("global", "rows", "index", "row_ends", "ranges", "landed")
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
    "requests_per_edge",
    "sectors_per_request",
    "bytes_in_sectors_over_requested",
    "requests_per_128_bytes",
    "active_lanes_pct",
    "shared_wavefronts_per_request",  # landed: the bank-conflict degree of the landed rows' reads
    # per case, the same on each class's row:
    "warps",
    "edges_per_warp",
    "chain_mean",  # loads a warp issues before its first row access, over the warps that read rows
    "chain_max",
    "shuffles_per_edge",
    "shared_atomic_requests",  # MGG_SHARED_ATOMIC sites
    "atomics",  # every thread's atomic operations, any memory
    "atomics_per_edge",
    "split_rows",  # from the plan: rows cut by warp boundaries
    "carry_slots",
    "carry_bytes",  # carry_slots x D x 4: written by the range kernel, read by the fixup
    "get_calls",  # NVSHMEM gets (any scope): calls, the bytes they move, their sources' sectors
    "get_bytes",
    "get_bytes_in_sectors_over_moved",
]
ROW_ENDS_SITE = "MGG_SHARED_LOAD(ends"  # the row ends' shared loads in kernels/aggregate_kernel.cuh


def region_class(region: str) -> str:
    """rows, index, row_ends, ranges, landed (shared memory read through a load site) or other (a
    region name of simt/emulated_ops.py's cases; csrc/tests/simt/counters.cpp's row_region names
    the same source tables)."""
    if region == "shared":
        return "landed"
    if region in ("table", "remote_table") or region.startswith("peer"):
        return "rows"
    if region.endswith(("_col", "_weight", "_pe")):
        return "index"
    if region.endswith("_rowptr"):
        return "row_ends"
    if region in ("ranges", "fixups"):
        return "ranges"
    return "other"


def row_end_sites() -> set:
    """The sites of the row ends' shared loads (the other shared loads read landed rows)."""
    lines = (ROOT / "csrc" / "kernels" / "aggregate_kernel.cuh").read_text().splitlines()
    return {f"kernels/aggregate_kernel.cuh:{i + 1}" for i, line in enumerate(lines) if ROW_ENDS_SITE in line}


def ratio(a, b, digits=3):
    return round(a / b, digits) if b else ""


def summarize(per_rank: list, edges: int, carry: dict) -> dict:
    """Per class: the counters summed over ranks and regions, and the ratios; the case's columns
    (carry: split_rows, carry_slots, carry_bytes of the plan)."""
    sums = {c: dict(requests=0, sectors=0, active_lanes=0, lane_slots=0, bytes=0) for c in CLASSES}
    landed = dict(requests=0, wavefronts=0, active_lanes=0)
    chain = dict(warps=0, loads=0, most=0, without_rows=0)
    shuffles = shared_atomic = atomics = 0
    gets = dict(calls=0, bytes=0, sectors=0)  # over every scope
    ends = row_end_sites()
    for counters in per_rank:
        for (_, region), v in counters["loads"].items():
            cls = region_class(region)
            for c in {cls} if cls == "landed" else {cls, "global"} & set(CLASSES):
                for f, n in v.items():
                    sums[c][f] += n
        for (site, op), v in counters["shared"].items():
            if op == "ld" and site not in ends:
                for f in landed:
                    landed[f] += v[f]
            if op == "atom":
                shared_atomic += v["requests"]
        for f in ("warps", "loads", "without_rows"):
            chain[f] += counters["chain"][f]
        chain["most"] = max(chain["most"], counters["chain"]["most"])
        atomics += sum(counters["atomics"].values())
        shuffles += counters["warp_calls"].get("__shfl_sync", 0)
        for v in counters["gets"].values():
            for f in gets:
                gets[f] += v[f]
    sums["landed"]["requests"] += landed["requests"]
    sums["landed"]["active_lanes"] += landed["active_lanes"]
    sums["landed"]["lane_slots"] += 32 * landed["requests"]
    warps = chain["warps"] + chain["without_rows"]
    per_case = {
        "warps": warps,
        "edges_per_warp": ratio(edges, warps, 1),
        "chain_mean": ratio(chain["loads"], chain["warps"], 2),
        "chain_max": chain["most"],
        "shuffles_per_edge": ratio(shuffles, edges),
        "shared_atomic_requests": shared_atomic,
        "atomics": atomics,
        "atomics_per_edge": ratio(atomics, edges),
        **carry,
        "get_calls": gets["calls"],
        "get_bytes": gets["bytes"],
        "get_bytes_in_sectors_over_moved": ratio(32 * gets["sectors"], gets["bytes"]),
    }
    out = {}
    for c, s in sums.items():
        req, sec, by = s["requests"], s["sectors"], s["bytes"]
        out[c] = {
            NCU["requests"]: req,
            NCU["sectors"]: sec,
            NCU["active_lanes"]: s["active_lanes"],
            "bytes_requested": by,
            "requests_per_edge": ratio(req, edges, 4),
            "sectors_per_request": ratio(sec, req) if by else "",
            "bytes_in_sectors_over_requested": ratio(32 * sec, by),
            "requests_per_128_bytes": ratio(128 * req, by),
            "active_lanes_pct": ratio(100 * s["active_lanes"], s["lane_slots"], 1),
            "shared_wavefronts_per_request": ratio(landed["wavefronts"], landed["requests"]) if c == "landed" else "",
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


def carry_of(plan, ranks: int, dim: int) -> dict:
    """The split rows and carry rows of every rank's step under the default config (the plan's
    schedule: core/schedule.h), and the carry's bytes at `dim` columns (fp32 rows)."""
    from mgg import Config

    split = slots = 0
    for r in range(ranks):
        schedule = plan.rank_plan(r, Config()).schedule
        split += schedule.fixups.size(0)
        slots += schedule.num_slots
    return {"split_rows": split, "carry_slots": slots, "carry_bytes": slots * dim * 4}


def measure(spec: str, dim: int, dtype: str, source: str, ranks: int, work: Path) -> list[dict]:
    """One case: the emulated kernels of every rank's step, checked against the float64
    reference before their counters are read."""
    import torch

    from bench import cache
    from mgg import Config
    from mgg.testing import assert_matches_reference
    from simt import emulator
    from simt.emulated_ops import aggregate

    g, _ = cache.graph(spec)  # made once per spec, as the plan (the cases differ in D, dtype, source)
    plan = cache.plan(g, ranks)
    x = torch.randn(g.num_nodes, dim, generator=torch.Generator().manual_seed(0)).to(getattr(torch, dtype))
    kernel_source, completion = emulated(source)
    out = aggregate(work, plan, x, Config(), kernel_source, completion, counters=True)
    assert_matches_reference(out, g, x)
    per_rank = [emulator.counters_of(work / f"rank{r}") for r in range(ranks)]
    base = dict(graph=spec, dim=dim, dtype=dtype, source=source, ranks=ranks, edges=g.num_edges)
    summary = summarize(per_rank, g.num_edges, carry_of(plan, ranks, dim))
    return [dict(base, **{"class": c}, **v) for c, v in summary.items()]


def markdown(rows: list[dict]) -> str:
    head = [
        "graph",
        "D",
        "dtype",
        "source",
        "req/edge (all)",
        "req/edge (rows)",
        "req per 128 B (rows)",
        "sectors/req (rows)",
        "active lanes % (rows)",
        "req/edge (index)",
        "active lanes % (index)",
        "req/edge (row ends + ranges)",
        "chain mean / max",
        "edges/warp",
        "atomics/edge",
        "carry bytes",
        "shuffles/edge",
        "gets: calls",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    by = {(r["graph"], r["dim"], r["dtype"], r["source"], r["class"]): r for r in rows}
    for g, d, t, s, c in by:
        if c != "global":
            continue
        a, r, i = by[(g, d, t, s, "global")], by[(g, d, t, s, "rows")], by[(g, d, t, s, "index")]
        sched = float(by[(g, d, t, s, "row_ends")]["requests_per_edge"] or 0) + float(
            by[(g, d, t, s, "ranges")]["requests_per_edge"] or 0
        )
        cells = [g, d, t, s, a["requests_per_edge"], r["requests_per_edge"], r["requests_per_128_bytes"]]
        cells += [r["sectors_per_request"], r["active_lanes_pct"], i["requests_per_edge"], i["active_lanes_pct"]]
        cells += [round(sched, 4), f"{a['chain_mean']} / {a['chain_max']}", a["edges_per_warp"]]
        cells += [a["atomics_per_edge"], a["carry_bytes"], a["shuffles_per_edge"], a["get_calls"]]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def _by_case(rows: list[dict]) -> dict:
    """{(graph, D, dtype, source): {class: row}} of a run's CSV rows (or this run's)."""
    out = {}
    for r in rows:
        out.setdefault((r["graph"], str(r["dim"]), r["dtype"], r["source"]), {})[r["class"]] = r
    return out


def _per_edge(classes: dict, names, edges: int) -> float:
    """Load requests per edge of `classes`' rows of the classes `names`."""
    return sum(int(classes[c][NCU["requests"]]) for c in names) / edges


def before_after(rows: list[dict], before: list[dict], name: str) -> str:
    """The same quantities of an earlier run (`before`, its CSV rows) beside this run's, for the
    cases both ran. An earlier run with an `edges` class (the blocks kernel's) counted only its
    index stream there: its schedule and row pointers were read without counted load sites, and
    it counted no chain, no atomics but its shared ones, and no scratch: its cells say so."""
    head = [
        "graph",
        "D",
        "dtype",
        "source",
        "req/edge: before / after",
        "index req/edge: before / after",
        "index active lanes %: before / after",
        "schedule + row-end req/edge: before / after",
        "shared atomic req/edge: before / after",
        "atomics/edge: after",
        "carry bytes: after",
        "chain mean / max: after",
    ]
    lines = [f"Before: {name}; after: this run.", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    old = _by_case(before)
    for case, new in _by_case(rows).items():
        if case not in old:
            continue
        o, a, e = old[case], new["global"], int(new["global"]["edges"])
        index = "edges" if "edges" in o else "index"  # the blocks kernel's name of its index stream
        o_sched = "not counted" if index == "edges" else f"{_per_edge(o, ('row_ends', 'ranges'), e):.4f}"
        o_shared = int(o["global"].get("shared_requests_partial_sums") or o["global"].get("shared_atomic_requests"))
        cells = list(case)
        cells.append(f"{_per_edge(o, ['global'], e):.3f} / {_per_edge(new, ['global'], e):.3f}")
        cells.append(f"{_per_edge(o, [index], e):.4f} / {_per_edge(new, ['index'], e):.4f}")
        cells.append(f"{o[index]['active_lanes_pct']} / {new['index']['active_lanes_pct']}")
        cells.append(f"{o_sched} / {_per_edge(new, ('row_ends', 'ranges'), e):.4f}")
        cells.append(f"{o_shared / e:.4f} / {int(a['shared_atomic_requests']) / e:.4f}")
        cells += [a["atomics_per_edge"], a["carry_bytes"], f"{a['chain_mean']} / {a['chain_max']}"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    """Requests per edge by class and active lanes of the index stream against D."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    dims = sorted({int(r["dim"]) for r in rows})
    for g, t, s in sorted({(r["graph"], r["dtype"], r["source"]) for r in rows}):
        mine = {(int(r["dim"]), r["class"]): r for r in rows if (r["graph"], r["dtype"], r["source"]) == (g, t, s)}
        x = [d for d in dims if (d, "global") in mine]
        axes[0].plot(x, [float(mine[(d, "global")]["requests_per_edge"]) for d in x], marker="o", label=f"{g} {t} {s}")
        axes[1].plot(x, [float(mine[(d, "index")]["active_lanes_pct"]) for d in x], marker="o", label=f"{g} {t} {s}")
    axes[0].set(ylabel="global load requests per edge", title="all global loads", ylim=(0, None))
    axes[1].set(ylabel="active lanes per load (%)", title="index stream (column ids, weights, PEs)", ylim=(0, 105))
    for a in axes:
        a.set_xscale("log", base=2)
        a.set_xticks(dims, [str(d) for d in dims])
        a.minorticks_off()
        a.set(xlabel="feature width D")
    axes[1].legend(fontsize=7)
    fig.suptitle("mgg range kernel under the SIMT emulator (counts, not times)")
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
    ap.add_argument("--before", help="an earlier run's counters CSV, whose quantities the markdown puts beside these")
    ap.add_argument("--ncu-metrics", action="store_true", help="print the Nsight Compute metrics and exit")
    args = ap.parse_args(argv)
    if args.ncu_metrics:
        print(",".join(list(NCU.values()) + NCU_EXTRA))
        return 0
    if str(ROOT) not in sys.path:  # simt.emulator, from the checkout
        sys.path.insert(0, str(ROOT))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"counters-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    log = CsvLog(Path(f"{stem}.csv"), COLUMNS)  # row by row: a run cut off keeps the cases it counted
    cases = [(g, d, t, s) for g in args.graphs for t in args.dtypes for s in args.sources for d in args.dims]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (g, d, t, s) in enumerate(cases):
            print(f"[{i + 1}/{len(cases)}] {g} D={d} {t} {s}", flush=True)
            for row in measure(g, d, t, s, args.ranks, Path(tmp) / str(i)):
                log.add(row)
    log.close()
    rows = log.rows
    table = markdown(rows)
    if args.before:
        with open(args.before, newline="") as f:
            table += "\n\n" + before_after(rows, list(csv.DictReader(f)), Path(args.before).name)
    Path(f"{stem}.md").write_text(table + "\n")
    plot(rows, Path(f"{stem}.png"))
    print(table)
    print(f"wrote {stem}.csv, .md, .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())

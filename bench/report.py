"""Writes a run's CSV, one PNG per suite, and a markdown summary with speedups over each peer."""

from __future__ import annotations

import csv
import math
import os
from collections import defaultdict
from datetime import datetime
from pathlib import Path

COLUMNS = [
    "suite",
    "case",
    "graph",
    "nodes",
    "edges",
    "dim",
    "dtype",
    "impl",
    "pes",
    "ps",
    "dist",
    "wpb",
    "pass",
    "median_ms",
    "p10_ms",
    "p90_ms",
    "gbps",
    "bw_fraction",
    "peak_mem_mb",
    "prep_s",
    "rank_edges",
    "edges_per_s",
    "peak_mem_bytes_per_edge",
    "rank_ms",
    "traffic_mb",
    "rank_traffic_mb",
    "achieved_occupancy",
    "sm_throughput",
    "target_acc",
    "epochs",
    "time_to_target_s",
    "reached",
    "best_val_acc",
    "val_curve",
    "device",
    "torch",
    "cuda",
    "date",
]


class CsvLog:
    """The run's CSV, written row by row as cases are measured (flushed to disk at once), so a
    run cut off keeps every row it finished."""

    def __init__(self, path: Path, columns: list = COLUMNS):
        self.path = Path(path)
        self.rows: list[dict] = []
        self.columns = columns
        self._f = open(self.path, "w", newline="")
        self._w = csv.DictWriter(self._f, columns, extrasaction="ignore")
        self._w.writeheader()
        self._f.flush()

    def add(self, row: dict) -> None:
        self.rows.append(row)
        self._w.writerow({k: row.get(k, "") for k in self.columns})
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def logged_run(out, prefix: str, columns: list, run) -> tuple[list, Path]:
    """A script's measured run: run(log) with a CsvLog at OUT/PREFIX-<date>.csv (rows on disk as
    they are measured); (its rows, the path without suffix, for the .md and .png beside it)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{prefix}-{datetime.now():%Y%m%d-%H%M%S}"
    log = CsvLog(Path(f"{stem}.csv"), columns)
    try:
        return run(log), stem
    finally:
        log.close()


def write_report(stem: Path, md: str, rows: list, plot) -> None:
    """The run's markdown and, with rows, its plot (plot(rows, path)) beside its CSV; prints both."""
    Path(f"{stem}.md").write_text(md)
    if rows:
        plot(rows, Path(f"{stem}.png"))
    print(md)
    print(f"wrote {stem}.csv, .md, .png")


def write_csv(rows: list[dict], path: Path, columns: list = COLUMNS) -> None:
    """A whole run's rows at once: `columns` in order, a column a row lacks left empty."""
    log = CsvLog(path, columns)
    for r in rows:
        log.add(r)
    log.close()


def geomean(xs) -> float:
    """The geometric mean of the positive, finite values (nan if none)."""
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def speedups(rows: list[dict], suite: str, base: str = "mgg") -> dict:
    """competitor -> [(case, pass, competitor_ms / base_ms)] for the suite's cases that have both; the
    competitors are the other implementations, not mgg's own variants (mgg-tuned beside mgg)."""
    by = defaultdict(dict)
    for r in rows:
        if r["suite"] == suite:
            by[(r["case"], r["pass"])][r["impl"]] = float(r["median_ms"])
    out = defaultdict(list)
    for (case, pass_), impls in sorted(by.items()):
        if base in impls:
            for competitor, ms in impls.items():
                if competitor != base and not competitor.startswith("mgg"):
                    out[competitor].append((case, pass_, ms / impls[base]))
    return out


def plot(rows: list[dict], suite: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if suite == "tta":
        from .suites.tta import plot as plot_tta

        return plot_tta(rows, path)
    if suite == "dlrm":
        from .suites.dlrm import plot as plot_dlrm

        return plot_dlrm(rows, path)
    sel = [r for r in rows if r["suite"] == suite]
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(sel) + 2), 4))
    if suite in ("scaling", "dist", "fetch"):
        series = defaultdict(list)
        for r in sel:
            series[(r["graph"], r["dim"], r["impl"])].append((int(r["pes"]), float(r["median_ms"])))
        for (g, d, impl), pts in series.items():
            pts.sort()
            ax.plot([p for p, _ in pts], [t for _, t in pts], marker="o", label=f"{g} D={d} {impl}")
        ax.set_xlabel("PEs")
        ax.set_xticks(sorted({int(r["pes"]) for r in sel}))
    elif suite == "tune":
        series = defaultdict(list)
        grid_best = {}
        for r in sel:
            key = f"{r['graph']} D={r['dim']} P={r.get('pes', 1)}"
            if r["impl"] == "grid":
                grid_best[key] = min(grid_best.get(key, float("inf")), float(r["median_ms"]))
            else:
                series[key].append(float(r["median_ms"]))
        for k, ts in series.items():
            best = [min(ts[: j + 1]) for j in range(len(ts))]
            (line,) = ax.plot(range(1, len(ts) + 1), best, marker="o", label=f"{k}: best so far")
            if k in grid_best:
                ax.axhline(grid_best[k], color=line.get_color(), ls="--", label=f"{k}: grid best")
        ax.set_xlabel("tuning iteration")
    else:
        labels = [f"{r['case']}\n{r['impl']} {r['pass']}" for r in sel]
        impls = list(dict.fromkeys(r["impl"] for r in sel))
        ax.bar(
            range(len(sel)),
            [float(r["median_ms"]) for r in sel],
            color=[f"C{impls.index(r['impl']) % 10}" for r in sel],
            yerr=[
                [float(r["median_ms"]) - float(r["p10_ms"]) for r in sel],
                [float(r["p90_ms"]) - float(r["median_ms"]) for r in sel],
            ],
            capsize=2,
        )
        ax.set_xticks(range(len(sel)), labels, rotation=75, fontsize=6)
    ax.set_ylabel("median ms (p10-p90)")
    dev = sel[0]["device"] if sel else ""
    ax.set_title(f"{suite} — {dev}")
    if suite in ("scaling", "dist", "tune", "fetch"):
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _prep_section(rows: list[dict]) -> list[str]:
    """CPU-side preparation per suite and graph (graphs, plans, device copies: what a bare device
    call spends before it times anything)."""
    total, seen = defaultdict(float), set()
    for r in rows:
        key = (r["suite"], r["case"], r["impl"], r.get("pes"))  # a case's passes share its preparation
        if r.get("prep_s") not in ("", None) and key not in seen:
            seen.add(key)
            total[(r["suite"], r["graph"])] += float(r["prep_s"])
    if not total:
        return []
    out = [
        "## preparation: CPU-side seconds per suite and graph (summed over its cases)",
        "",
        "| suite | graph | prep s |",
        "| --- | --- | --- |",
    ]
    out += [f"| {s} | {g} | {t:.1f} |" for (s, g), t in total.items()]
    return out + [""]


def summary(rows: list[dict], copy_gbps: float, skipped: tuple = (), wrong: tuple = ()) -> str:
    """The run's markdown summary: speedups over each peer, gather bandwidth, ablation, scaling,
    tuner; the cases whose result was wrong (not timed) and those a time budget skipped."""
    tail = (
        ["## WRONG RESULTS: these cases differ from the float64 reference and were not timed", ""]
        + [f"- {c}" for c in wrong]
        + [""]
        if wrong
        else []
    )
    tail += (
        ["## skipped: the time budget ran out, or the case cannot run here", ""] + [f"- {c}" for c in skipped] + [""]
        if skipped
        else []
    )
    if not rows:
        return "\n".join(["no rows", ""] + tail)
    r0 = rows[0]
    timed = [r for r in rows if r.get("median_ms") not in ("", None) and math.isfinite(float(r["median_ms"]))]
    prep = _prep_section(rows)
    rows = timed
    if not rows:  # a prep-only run: only the preparation times
        head = ["# Benchmark summary (preparation only)", "", f"device: {r0.get('device')} · {r0.get('date')}", ""]
        return "\n".join(head + prep + tail)
    lines = [
        "# Benchmark summary",
        "",
        f"device: {r0.get('device')} · torch {r0.get('torch')} · CUDA {r0.get('cuda')} · {r0.get('date')} · "
        f"device copy bandwidth {copy_gbps:.1f} GB/s",
        "",
    ]
    for suite, base in (("kernel", "mgg"), ("kernel", "mgg-tuned"), ("e2e", "mgg")):
        sp = speedups(rows, suite, base)
        if not sp:
            continue
        lines += [
            f"## {suite}: speedup of {base} over each peer (peer time / {base} time; > 1 means {base} is faster)",
            "",
            "| peer | pass | geomean | min | max | cases |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for peer, vals in sorted(sp.items()):
            for pass_ in sorted({p for _, p, _ in vals}):
                v = [s for _, p, s in vals if p == pass_]
                lines.append(f"| {peer} | {pass_} | {geomean(v):.2f}x | {min(v):.2f}x | {max(v):.2f}x | {len(v)} |")
        lines.append("")
    kern = [r for r in rows if r["suite"] == "kernel" and r["impl"].startswith("mgg")]
    if kern:
        lines += [
            "## kernel: mgg achieved gather bandwidth",
            "",
            "| case | impl | config (ps, dist, wpb) | pass | ms | GB/s | of copy bw |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        lines += [
            f"| {r['case']} | {r['impl']} | {r['ps']}, {r['dist']}, {r['wpb']} | {r['pass']} | "
            f"{float(r['median_ms']):.3f} | {float(r['gbps']):.1f} | {float(r['bw_fraction']) * 100:.1f}% |"
            for r in kern
        ]
        lines.append("")
    abl = [r for r in rows if r["suite"] == "ablation"]
    if abl:
        full = {r["case"].rsplit("/", 1)[0]: float(r["median_ms"]) for r in abl if r["case"].endswith("/full")}
        lines += [
            "## ablation: time relative to the full design (> 1: the switch costs time)",
            "",
            "| case | variant | ms | relative |",
            "| --- | --- | --- | --- |",
        ]
        for r in abl:
            base, variant = r["case"].rsplit("/", 1)
            ms = float(r["median_ms"])
            lines.append(f"| {base} | {variant} | {ms:.3f} | {ms / full[base]:.2f} |")
        lines.append("")
    for suite, what in (
        ("scaling", "aggregation, all PEs in one process"),
        ("dist", "training epoch, one process per PE"),
    ):
        sc = [r for r in rows if r["suite"] == suite]
        if sc:
            lines += [
                f"## {suite}: {what}",
                "",
                "| case | impl | PEs | ms | local/remote edges per rank |",
                "| --- | --- | --- | --- | --- |",
            ]
            lines += [
                f"| {r['case']} | {r['impl']} | {r['pes']} | {float(r['median_ms']):.3f} | {r.get('rank_edges', '')} |"
                for r in sc
            ]
            lines.append("")
    fe = [r for r in rows if r["suite"] == "fetch"]
    if fe:
        lines += [
            "## fetch: one kernel, each way of reaching peers' rows (P PEs on one device)",
            "",
            "`read from peers MB` is computed from the plan (the rows each mode must read: every remote "
            "edge's row, the halo rows, or every other rank's rows), not measured.",
            "",
            "| graph | D | PEs | mode | slowest rank ms | per rank ms | read from peers MB (computed) | "
            "occupancy % | SM throughput % |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        lines += [
            f"| {r['graph']} | {r['dim']} | {r['pes']} | {r['impl'].removeprefix('fetch-')} | "
            f"{float(r['median_ms']):.3f} | {r.get('rank_ms', '')} | {r.get('traffic_mb', '')} | "
            f"{r.get('achieved_occupancy', '')} | {r.get('sm_throughput', '')} |"
            for r in fe
        ]
        lines.append("")
    tu = defaultdict(lambda: dict(search=[], grid={}))
    for r in rows:
        if r["suite"] == "tune" and r["median_ms"] == r["median_ms"]:
            c, ms = (int(r["ps"]), int(r["dist"]), int(r["wpb"])), float(r["median_ms"])
            v = tu[(r["graph"], r["dim"], r.get("pes", 1))]
            if r["impl"] == "grid":
                v["grid"][c] = ms
            else:
                v["search"].append((c, ms))
    if tu:
        from mgg import Config

        default = Config().as_tuple()[:3]
        lines += [
            "## tune: the tuner against the exhaustive grid",
            "",
            "The tuner's choice is its fastest measured config; gap and gain take that config's time in the "
            "grid's run (one run for every config); `to 5%`: the first iteration whose config is within 5% "
            f"of the grid's best; `default`: the default config {default} against the grid's best.",
            "",
            "| graph | D | PEs | iterations | to 5% | choice | grid best ms | gap | gain over (1,1,1) | default |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for (g, d, p), v in tu.items():
            s, gr = v["search"], v["grid"]
            if not s or not gr:
                continue
            best = min(gr.values())
            choice, ms = min(s, key=lambda t: t[1])
            at = gr.get(choice, ms)
            first = next((str(i + 1) for i, (c, _) in enumerate(s) if gr.get(c, math.inf) <= 1.05 * best), "-")
            gain = f"{(1 - at / gr[(1, 1, 1)]) * 100:.1f}%" if (1, 1, 1) in gr else "-"
            slow = f"{gr[default] / best:.2f}x the best" if default in gr else "-"
            lines.append(
                f"| {g} | {d} | {p} | {len(s)} | {first} | {choice} | {best:.3f} | "
                f"{(at / best - 1) * 100:.1f}% | {gain} | {slow} |"
            )
        lines.append("")
    ld = [r for r in rows if r["suite"] == "load" and r["pass"] == "load"]
    pl = [r for r in rows if r["suite"] == "load" and r["pass"] == "plan"]
    if pl:
        lines += [
            "## load: the plan of a graph (every rank's forward and transposed step, host side)",
            "",
            "| graph | edges | ranks | s | process peak GB |",
            "| --- | --- | --- | --- | --- |",
        ]
        lines += [
            f"| {r['graph']} | {int(r['edges']):,} | {r['pes']} | {float(r['median_ms']) / 1e3:.2f} | "
            f"{float(r['peak_mem_mb']) / 1024:.2f} |"
            for r in pl
        ]
        lines.append("")
    if ld:
        lines += [
            "## load: graph files to an mgg Graph (CSR), warm page cache",
            "",
            "| format | edges | s | M edges/s | file GB/s | peak bytes/edge |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        lines += [
            f"| {r['graph']} | {int(r['edges']):,} | {float(r['median_ms']) / 1e3:.2f} | "
            f"{float(r['edges_per_s']) / 1e6:.1f} | {float(r['gbps']):.2f} | "
            f"{float(r['peak_mem_bytes_per_edge']):.1f} |"
            for r in ld
        ]
        lines.append("")
    from .suites.dlrm import summary_lines as dlrm_lines
    from .suites.tta import summary_lines

    return "\n".join(lines + summary_lines(rows) + dlrm_lines(rows) + prep + tail)

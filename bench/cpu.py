"""mgg's CPU kernels against what a PyTorch user has on the CPU (issue 58), measured here.

    python -m bench cpu [--graphs ...] [--dims 16 64 128 256 512] [--dtypes float32 bfloat16]
                        [--threads 1 2] [--weights none|gcn] [--reps 3] [--out DIR] [--smoke]

Per graph, D, dtype and thread count (torch.set_num_threads): the sum aggregation out = A @ x by
- mgg: mgg.aggregate over a Plan made once (the CPU row kernels; which copy, `isa`: ATen's choice
  for this CPU);
- torch.sparse: a CSR tensor @ x (MKL's sparse product; absent where torch has no kernel for the
  dtype);
- pyg_scatter: PyG's message passing as its layers run it: gather x[src], scale by the edge weight,
  scatter-add at dst (torch_geometric.utils.scatter); left out where the messages (E x D) would
  take more than --pyg-gb;
- pyg_spmm: torch_sparse's SparseTensor @ x, where torch_sparse is installed.
Each result is checked against the float64 reference (bench.competitors.check) before it is
timed; the median of --reps rounds after one warm-up, each round timing every implementation once
(so a slow spell of a shared machine falls on all alike; one slower than SLOW_S in its first
--slow-reps rounds only), Python's garbage collector off while
they run (as timeit has it). Ratios are taken within the run. Beside them:
the bytes mgg gathers per second (E x D x element size over its time) and this machine's memory
bandwidth by a STREAM triad (a = b + s * c over 3 x --triad-mb, counted as STREAM counts it) with
the same thread count. Writes cpu-<date>.csv (row by row), .md and .png."""

from __future__ import annotations

import argparse
import csv
import gc
import statistics
import time
from pathlib import Path

import torch

import mgg
from mgg import Plan
from mgg.runtime.timing import measure

from . import cache
from .competitors import check, sparse_mm_supports
from .env import environment
from .report import CsvLog, geomean, logged_run, write_csv, write_report

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = [
    "graph",
    "nodes",
    "edges",
    "D",
    "dtype",
    "threads",
    "mgg_ms",
    "torch_sparse_ms",
    "pyg_scatter_ms",
    "pyg_spmm_ms",
    "speedup_vs_torch_sparse",
    "speedup_vs_pyg_scatter",
    "gathered_gbps",
    "triad_gbps",
    "bw_fraction",
    "isa",
    "device",
    "torch",
    "date",
]
# Scaled stand-ins (a full one gathers 115-124M rows a call: minutes per row of the table here), a
# shuffled SBM (communities at random ids) and the one real file the tests have.
GRAPHS = ["rmat-reddit:scale=0.1", "rmat-products:scale=0.1", "sbm:200000:200:40:0.9", "cora"]
SMOKE = dict(graphs=["rmat:3000:30000", "cora"], dims=[16, 33], reps=2, triad_mb=16)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_PLANS: dict = {}  # one Plan per graph, one CSR tensor per (graph, dtype), for every D
_CSR: dict = {}
TARGETS = dict(torch_sparse_min=1.0, torch_sparse_geomean=1.3, pyg_scatter_min=2.0)


def triad_gbps(mb: int, reps: int) -> float:
    """STREAM's triad a = b + s * c on fp32 arrays of `mb` MB each: 3 arrays' bytes per second."""
    n = (mb << 20) // 4
    b, c = torch.rand(n), torch.rand(n)
    a = torch.empty(n)
    t = measure(lambda: torch.add(b, c, alpha=3.0, out=a), "cpu", warmup=2, reps=max(reps, 5))
    return 3 * n * 4 / (t.median_ms * 1e-3) / 1e9


def implementations(g, x: torch.Tensor, pyg_gb: float) -> dict:
    """{name: callable giving A @ x} for every implementation that runs here on x."""
    out = {}
    plan = _PLANS.setdefault(id(g), (g, Plan(g)))[1]  # holding g keeps id(g) unique
    out["mgg"] = lambda: mgg.aggregate(x, plan)
    if sparse_mm_supports(x.dtype, x.device):
        a = _CSR.setdefault((id(g), x.dtype), (g, g.to_torch_sparse(x.dtype)))[1]
        out["torch_sparse"] = lambda: a @ x
    try:
        from torch_geometric.utils import scatter
    except ImportError:
        scatter = None
    if scatter is not None and g.num_edges * x.size(1) * x.element_size() <= pyg_gb * 1e9:
        src, dst = g.col, g.rows()
        w = None if g.weight is None else g.weight.to(x.dtype).unsqueeze(1)
        out["pyg_scatter"] = lambda: scatter(x[src] if w is None else x[src] * w, dst, 0, g.num_nodes, reduce="sum")
    try:
        from torch_sparse import SparseTensor
    except ImportError:
        SparseTensor = None
    if SparseTensor is not None:
        st = SparseTensor(row=g.rows(), col=g.col, value=None if g.weight is None else g.weight.to(x.dtype))
        out["pyg_spmm"] = lambda: st.matmul(x)
    return out


SLOW_S = 1.0  # an implementation whose warm-up takes longer is timed in the first --slow-reps rounds only


def interleaved(impls: dict, reps: int, slow_reps: int) -> dict:
    """{name: median ms}: one warm-up each, then `reps` rounds timing every implementation once
    per round, so that a slow spell of a shared machine falls on all of them alike, each round
    starting one implementation later (the one after a big allocator pays for the pages it
    returned, so none always comes after the same one); one whose
    warm-up took over SLOW_S seconds (PyG's scatter on the big rows: tens of times mgg's) only in
    the first `slow_reps`."""
    samples = {name: [] for name in impls}
    rounds = {}
    for name, fn in impls.items():
        t0 = time.perf_counter()
        fn()
        rounds[name] = reps if time.perf_counter() - t0 <= SLOW_S else min(reps, slow_reps)
    gc.collect()
    gc.disable()  # as timeit does: a collection started by one call's garbage is timed in another's
    try:
        names = list(impls)
        for k in range(reps):
            for name in names[k % len(names) :] + names[: k % len(names)]:  # each follows each alike
                if k >= rounds[name]:
                    continue
                fn = impls[name]
                t0 = time.perf_counter()
                fn()
                samples[name].append((time.perf_counter() - t0) * 1e3)
    finally:
        gc.enable()
    return {name: statistics.median(s) for name, s in samples.items()}


def run(args, log: CsvLog) -> list:
    torch.manual_seed(0)
    rows = []
    env = environment(torch.device("cpu"))
    threads_before = torch.get_num_threads()
    triad = {}
    for t in args.threads:
        torch.set_num_threads(t)
        triad[t] = triad_gbps(args.triad_mb, args.reps)
        print(f"[triad] {t} thread(s): {triad[t]:.1f} GB/s", flush=True)
    try:
        for spec in args.graphs:
            g, load_s = (cache.normalized if args.weights == "gcn" else cache.graph)(spec, args.data_dir)
            print(f"[graph] {spec}: {g.num_nodes:,} nodes, {g.num_edges:,} edges ({load_s:.1f} s)", flush=True)
            for dim in args.dims:
                for dtype_name in args.dtypes:
                    dtype = DTYPES[dtype_name]
                    x = torch.randn(g.num_nodes, dim).to(dtype)
                    impls = implementations(g, x, args.pyg_gb)
                    for name, fn in list(impls.items()):  # the result before the time
                        try:
                            check(fn(), g, x)
                        except AssertionError as e:  # a wrong result is left out, and said so
                            if name == "mgg":
                                raise
                            args.wrong.append(f"{name} on {spec}, D={dim}, {dtype_name}: {str(e)[:160]}")
                            print(f"  {name}: wrong result, left out ({args.wrong[-1]})", flush=True)
                            del impls[name]
                    for t in args.threads:
                        torch.set_num_threads(t)
                        ms = interleaved(impls, args.reps, args.slow_reps)
                        m = ms["mgg"]
                        gathered = g.num_edges * dim * x.element_size() / (m * 1e-3) / 1e9
                        row = dict(
                            graph=spec,
                            nodes=g.num_nodes,
                            edges=g.num_edges,
                            D=dim,
                            dtype=dtype_name,
                            threads=t,
                            mgg_ms=round(m, 3),
                            torch_sparse_ms=_ms(ms, "torch_sparse"),
                            pyg_scatter_ms=_ms(ms, "pyg_scatter"),
                            pyg_spmm_ms=_ms(ms, "pyg_spmm"),
                            speedup_vs_torch_sparse=_ratio(ms, "torch_sparse"),
                            speedup_vs_pyg_scatter=_ratio(ms, "pyg_scatter"),
                            gathered_gbps=round(gathered, 2),
                            triad_gbps=round(triad[t], 2),
                            bw_fraction=round(gathered / triad[t], 3),
                            isa=mgg._C.cpu_kernels(),
                            **env,
                        )
                        rows.append(row)
                        log.add(row)
                        print(
                            f"  D={dim} {dtype_name} {t} thread(s): mgg {m:.2f} ms, "
                            + ", ".join(f"{k} {v:.2f} ms" for k, v in ms.items() if k != "mgg")
                            + f"; {gathered:.1f} GB/s gathered",
                            flush=True,
                        )
                    del x, impls
                    gc.collect()
    finally:
        torch.set_num_threads(threads_before)
    return rows


def _ms(ms: dict, name: str):
    return round(ms[name], 3) if name in ms else None


def _ratio(ms: dict, name: str):
    return round(ms[name] / ms["mgg"], 3) if name in ms else None


def _num(v):
    return None if v in (None, "") else float(v)


def load_rows(path: Path) -> list:
    ints, text = {"nodes", "edges", "D", "threads"}, {"graph", "dtype", "isa", "device", "torch", "date"}
    with open(path) as f:
        return [
            {k: v if k in text else int(v) if k in ints else _num(v) for k, v in r.items()} for r in csv.DictReader(f)
        ]


def verdicts(rows: list) -> list:
    """The issue's targets on fp32 rows: each a (what, value, met) line."""
    fp32 = [r for r in rows if r["dtype"] == "float32"]
    ts = [r["speedup_vs_torch_sparse"] for r in fp32 if r["speedup_vs_torch_sparse"] is not None]
    pyg = [r["speedup_vs_pyg_scatter"] for r in rows if r["speedup_vs_pyg_scatter"] is not None]
    out = []
    if ts:
        out.append(
            (
                f"fp32: min over rows vs torch.sparse >= {TARGETS['torch_sparse_min']}x",
                min(ts),
                min(ts) >= TARGETS["torch_sparse_min"],
            )
        )
        out.append(
            (
                f"fp32: geometric mean vs torch.sparse >= {TARGETS['torch_sparse_geomean']}x",
                geomean(ts),
                geomean(ts) >= TARGETS["torch_sparse_geomean"],
            )
        )
    if pyg:
        out.append(
            (
                f"every row: min vs PyG's scatter >= {TARGETS['pyg_scatter_min']}x",
                min(pyg),
                min(pyg) >= TARGETS["pyg_scatter_min"],
            )
        )
    return out


def markdown(rows: list, env: dict, args) -> str:
    cell = lambda v, unit="": "-" if v is None else f"{v}{unit}"  # noqa: E731
    isa = rows[0]["isa"] if rows else "?"
    out = [
        "# mgg's CPU kernels against torch.sparse and PyG (measured)",
        "",
        f"{env.get('device', 'cpu')}, torch {env.get('torch')}, mgg's CPU kernels: {isa}; {env.get('date')}. "
        f"Sum aggregation ({'GCN-normalised weights' if args.weights == 'gcn' else 'unweighted'}), the median of "
        f"{args.reps} interleaved rounds after a warm-up ({args.slow_reps} for a call over {SLOW_S:.0f} s), every "
        "result checked against the float64 reference first. "
        "`x`: the other's time over mgg's, in this run. `gathered`: E x D x element size over mgg's time; "
        "`triad`: this machine's STREAM triad with the same threads. `-`: not run (no kernel for the dtype, or "
        f"PyG's messages over {args.pyg_gb} GB).",
        "",
        "## Targets",
        "",
        "| target | this run | met |",
        "| --- | --- | --- |",
    ]
    for what, value, met in verdicts(rows):
        out.append(f"| {what} | {value:.2f}x | {'yes' if met else 'no'} |")
    if args.wrong:
        out += ["", "Left out as wrong (their result failed the float64 check): " + "; ".join(args.wrong)]
    out += [
        "",
        "## Geometric means over D",
        "",
        "| graph | dtype | threads | vs torch.sparse | vs PyG scatter |",
        "| --- | --- | --- | --- | --- |",
    ]
    keys = dict.fromkeys((r["graph"], r["dtype"], r["threads"]) for r in rows)
    for spec, dt, t in keys:
        mine = [r for r in rows if (r["graph"], r["dtype"], r["threads"]) == (spec, dt, t)]
        ts = [r["speedup_vs_torch_sparse"] for r in mine if r["speedup_vs_torch_sparse"] is not None]
        pg = [r["speedup_vs_pyg_scatter"] for r in mine if r["speedup_vs_pyg_scatter"] is not None]
        out.append(
            f"| {spec} | {dt} | {t} | {f'{geomean(ts):.2f}x' if ts else '-'} | {f'{geomean(pg):.2f}x' if pg else '-'} |"
        )
    out += [
        "",
        "## Every row",
        "",
        "| graph | D | dtype | threads | mgg ms | torch.sparse ms | x | PyG scatter ms | x | PyG SparseTensor ms | "
        "gathered GB/s | triad GB/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        out.append(
            f"| {r['graph']} | {r['D']} | {r['dtype']} | {r['threads']} | {r['mgg_ms']} | "
            f"{cell(r['torch_sparse_ms'])} | "
            f"{cell(r['speedup_vs_torch_sparse'], 'x')} | {cell(r['pyg_scatter_ms'])} | "
            f"{cell(r['speedup_vs_pyg_scatter'], 'x')} | {cell(r['pyg_spmm_ms'])} | {r['gathered_gbps']} | "
            f"{r['triad_gbps']} |"
        )
    return "\n".join(out) + "\n"


def plot(rows: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = list(dict.fromkeys(r["graph"] for r in rows))
    fig, axes = plt.subplots(2, len(graphs), figsize=(4.2 * len(graphs), 7), squeeze=False)
    for j, spec in enumerate(graphs):
        series = dict.fromkeys((r["dtype"], r["threads"]) for r in rows if r["graph"] == spec)
        for k, (dt, t) in enumerate(series):
            mine = [r for r in rows if (r["graph"], r["dtype"], r["threads"]) == (spec, dt, t)]
            for i, col in enumerate(("speedup_vs_torch_sparse", "speedup_vs_pyg_scatter")):
                pts = [(r["D"], r[col]) for r in mine if r[col] is not None]
                if pts:
                    axes[i][j].plot(*zip(*pts, strict=True), marker="o", color=f"C{k}", label=f"{dt}, {t} thr")
        for i, (what, target) in enumerate(
            (
                ("torch.sparse ms / mgg ms", TARGETS["torch_sparse_min"]),
                ("PyG scatter ms / mgg ms", TARGETS["pyg_scatter_min"]),
            )
        ):
            ax = axes[i][j]
            ax.axhline(target, color="gray", lw=0.8, ls=":")
            ax.set_xscale("log", base=2)
            ax.set(xlabel="D", ylabel=what, title=spec)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
    fig.suptitle("mgg's CPU aggregation against torch.sparse and PyG (measured)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench cpu", description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", nargs="+", default=GRAPHS)
    ap.add_argument("--dims", nargs="+", type=int, default=[16, 64, 128, 256, 512])
    ap.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=["float32", "bfloat16"])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--weights", choices=["none", "gcn"], default="none", help="gcn: GCN's normalised weights")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--slow-reps", type=int, default=2, help=f"rounds of an implementation slower than {SLOW_S} s")
    ap.add_argument("--pyg-gb", type=float, default=4.0, help="PyG's messages (E x D) at most this many GB")
    ap.add_argument("--triad-mb", type=int, default=256, help="each triad array's MB")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny graphs: the harness runs, nothing to cite")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--report", default=None, metavar="CSV", help="write the .md and .png of a run's CSV again")
    args = ap.parse_args(argv)
    if args.smoke:
        for k, v in SMOKE.items():
            setattr(args, k, v)
    if args.data_dir is None:
        from mgg.data import bundled_planetoid_dir

        args.data_dir = bundled_planetoid_dir()
    args.wrong = []
    if any(t < 1 for t in args.threads):
        ap.error(f"--threads takes counts >= 1, got {args.threads}")
    print(f"python -m bench cpu: device cpu, mgg's CPU kernels {mgg._C.cpu_kernels()}", flush=True)
    if args.report:
        rows = load_rows(Path(args.report))
        stem = Path(args.report).with_suffix("")
        write_csv(rows, Path(f"{stem}.csv"), COLUMNS)
    else:
        rows, stem = logged_run(args.out, "cpu", COLUMNS, lambda log: run(args, log))
    env = {k: rows[0][k] for k in ("device", "torch", "date")} if rows else environment(torch.device("cpu"))
    write_report(stem, markdown(rows, env, args), rows, plot)
    return 0

"""Memory per rank: today's path (every rank loads the whole dataset) against a prepared directory
(`mgg prepare`: each rank reads and holds only its part), for CPU processes (gloo).

    python -m bench memory [--datasets 500000:5000000:128 2500000:10000000:224] [--ranks 1 2 4 8]
                           [--backends halo node-halo grid] [--loaders whole prepared] [--epochs 1]
                           [--budget-mb 128] [--cgroup-mb 1100] [--out DIR] [--smoke]

Generated .npz datasets (NODES:EDGES:FEATURES: an R-MAT graph, random float32 features, 16 classes, a
random split) are each prepared once for the largest rank count, streamed (`range`); the largest
inside a cgroup that allows it --cgroup-mb of memory where this machine lets a process make one (its
arrays must be at least twice that: the chunk budget, not the dataset, bounds the prepare). Then for
every dataset, backend,
rank count and loader, `torchrun` runs bench/workers/memory_worker.py: each rank loads, plans and
trains a GCN for --epochs epochs and reports its peak resident memory (VmHWM), peak anonymous memory
(RssAnon sampled every 5 ms), the bytes it read while loading (/proc/self/io rchar), the load time,
its parts' bytes and its halo. Today's path runs only where its copies fit this machine's memory.
The same commands on Cora give F, the fixed cost per rank (torch, the extension, gloo).

Targets (issue 66), checked per row in the summary: per-rank peak - F <= 1.5 (P1 - F) / P + the rank's
halo bytes (P1: one process's peak on the dataset); bytes read <= 1.1 x its parts' bytes + 1 MB. A grid
rank's halo is the rows of layer 0's input it gathers from the other ranks of its axis, and its parts'
bytes those of its blocks, feature columns and rows, counted from the manifest and the block indexes
(bench/workers/memory_worker.py).
Writes memory-<date>.csv, .md and .png."""

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

from mgg.data.prepared import Prepared
from mgg.graph import available_memory
from mgg.heap import requested_threshold

from . import cache
from .env import environment
from .report import logged_run, write_report

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "bench" / "workers" / "memory_worker.py"
COLUMNS = [
    "graph",
    "backend",
    "ranks",
    "loader",
    "rank",
    "part_bytes",
    "halo_bytes",
    "peak_rss_mb",
    "anon_rss_mb",
    "read_mb",
    "load_s",
    "epoch_ms",
    "fixed_mb",
    "one_process_mb",
    "peak_target_mb",
    "peak_ok",
    "read_target_mb",
    "read_ok",
    "grid",
    "grid_share",
    "grid_target_mb",
    "grid_ok",
]
HIDDEN = 16  # the memory worker's GCN (mgg.nn.models.PROTOCOLS["gcn"])
SMOKE = dict(datasets=["3000:30000:16"], ranks=[1, 2], epochs=1, budget_mb=1, cgroup_mb=0)
MB = 2**20


def dataset(nodes: int, edges: int, features: int, folder: Path) -> Path:
    """The generated dataset (kept in the bench cache: written once)."""
    from mgg.data.synthetic import rmat_edges

    path = folder / f"memory-{nodes}-{edges}-{features}.npz"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    src, dst = zip(*rmat_edges(nodes, edges, seed=0), strict=True)
    ei = np.stack([np.concatenate(src), np.concatenate(dst)])
    rng = np.random.default_rng(1)
    x = np.empty((nodes, features), np.float32)
    for a in range(0, nodes, 1 << 18):
        x[a : a + (1 << 18)] = rng.random((min(1 << 18, nodes - a), features), dtype=np.float32)
    split = rng.random(nodes)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp.npz")
    os.close(fd)
    np.savez(
        tmp,
        edge_index=ei,
        x=x,
        y=rng.integers(0, 16, nodes),
        train_mask=split < 0.3,
        val_mask=(split >= 0.3) & (split < 0.5),
        test_mask=split >= 0.5,
    )
    os.replace(tmp, path)
    return path


def _cgroup(limit_mb: int):
    """A memory cgroup (v1) of limit_mb, or None where this process cannot make one."""
    base = Path("/sys/fs/cgroup/memory")
    if limit_mb <= 0 or not base.is_dir():
        return None
    group = base / f"mgg-bench-{os.getpid()}"
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(limit_mb * MB))
        return group
    except OSError:
        return None


def prepare_in_cgroup(source: Path, out: Path, parts: int, budget_mb: float, limit_mb: int) -> dict:
    """`mgg prepare` (range, streamed) in a child, inside a memory cgroup of limit_mb where one can be
    made; its peak RSS (GNU time's maximum resident set) and the cgroup's peak usage."""
    group = _cgroup(limit_mb)
    cmd = [
        sys.executable,
        "-m",
        "mgg",
        "prepare",
        str(source),
        str(out),
        "--parts",
        str(parts),
        "--budget",
        str(budget_mb),
        "--overwrite",
    ]
    timed = ["/usr/bin/time", "-f", "maxrss_kb=%M"] if Path("/usr/bin/time").exists() else []
    inner = " ".join(f"'{c}'" for c in timed + cmd)
    shell = f"echo $$ > {group}/cgroup.procs; exec {inner}" if group else f"exec {inner}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    t0 = time.perf_counter()
    r = subprocess.run(["sh", "-c", shell], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    found = dict(seconds=seconds, returncode=r.returncode, limit_mb=limit_mb if group else None)
    for line in r.stderr.splitlines():
        if line.startswith("maxrss_kb="):
            found["peak_rss_mb"] = int(line.split("=")[1]) / 1024
    if group:
        found["cgroup_peak_mb"] = int((group / "memory.max_usage_in_bytes").read_text()) / MB
        found["oom_kills"] = (group / "memory.oom_control").read_text().count("oom_kill 1")
        group.rmdir()
    if r.returncode:
        raise RuntimeError(f"mgg prepare failed ({r.returncode}): {r.stderr[-2000:]}")
    found["summary"] = r.stdout.strip()
    return found


def run_worker(source, loader: str, backend: str, ranks: int, epochs: int, timeout: float) -> list:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "rows.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}", "--standalone"]
        cmd += [str(WORKER), str(source), loader, backend, str(out), "--epochs", str(epochs)]
        env = dict(
            os.environ,
            OMP_NUM_THREADS="1",
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        )
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        if r.returncode:
            raise RuntimeError(f"{loader} {backend} x{ranks} failed: {r.stderr[-2000:]}")
        return json.loads(out.read_text())


def fits(arrays_bytes: int, ranks: int) -> bool:
    """Whether `ranks` copies of today's path fit this machine (measured: 4.2 times the arrays each,
    with the fixed cost)."""
    have = available_memory()
    return have is None or ranks * (4.5 * arrays_bytes + 1024 * MB) < 0.8 * have


def parts_fit(one_mb: float, fixed_mb: float, ranks: int) -> bool:
    """Whether `ranks` prepared ranks fit this machine: each the fixed cost and its share of one
    process's peak, with a margin (a machine of its own holds one such rank; this one holds them all)."""
    have = available_memory()
    return have is None or 1.15 * (ranks * fixed_mb + (one_mb - fixed_mb)) * MB < 0.9 * have


def run(args, log) -> dict:
    folder = cache.cache_dir()
    top = max(args.ranks)
    cora = folder / f"cora-prepared-{top}"
    prepare_in_cgroup("cora", cora, top, 16, 0)
    fixed: dict = {}  # (backend, ranks) -> F, the same command's peak on Cora
    info: dict = dict(datasets=[], rows=[], skipped=[])
    for k, spec in enumerate(args.datasets):
        nodes, edges, features = (int(v) for v in spec.split(":"))
        data = dataset(nodes, edges, features, folder)
        arrays = os.path.getsize(data)
        prepared = folder / f"{data.stem}-prepared-{top}"
        limit = args.cgroup_mb if k == len(args.datasets) - 1 else 0  # the largest: inside the cgroup
        print(f"dataset {data} ({arrays / MB:.0f} MiB of arrays); preparing {top} parts", flush=True)
        prep = prepare_in_cgroup(data, prepared, top, args.budget_mb, limit)
        print(f"prepare: {prep}", flush=True)
        info["datasets"].append(dict(spec=spec, arrays_mb=arrays / MB, prepare=prep))
        for backend in args.backends:
            for ranks in args.ranks:
                if (backend, ranks) not in fixed:
                    got = run_worker(cora, "prepared", backend, ranks, 1, args.timeout)
                    fixed[backend, ranks] = max(r["peak_rss_bytes"] for r in got) / MB
            one = max(
                r["peak_rss_bytes"] for r in run_worker(prepared, "prepared", backend, 1, args.epochs, args.timeout)
            )
            for ranks in args.ranks:
                for loader in args.loaders:
                    if loader == "whole" and not fits(arrays, ranks):
                        print(f"skip: {spec} whole at {ranks} ranks would not fit this machine's memory", flush=True)
                        continue
                    if loader == "prepared" and not parts_fit(one / MB, fixed[backend, ranks], ranks):
                        print(f"skip: {spec} {ranks} prepared ranks would not fit this machine's memory", flush=True)
                        info["skipped"].append(f"{spec} {backend} x{ranks}")
                        continue
                    t0 = time.perf_counter()
                    got = run_worker(
                        data if loader == "whole" else prepared, loader, backend, ranks, args.epochs, args.timeout
                    )
                    rows = measured_rows(
                        data.stem, backend, ranks, loader, got, prepared, fixed[backend, ranks], one / MB
                    )
                    for row in rows:
                        log.add(row)
                    info["rows"] += rows
                    print(f"{spec} {backend} x{ranks} {loader}: {time.perf_counter() - t0:.0f} s", flush=True)
    return info


def measured_rows(graph: str, backend: str, ranks: int, loader: str, got: list, prepared: Path, f_mb, one_mb) -> list:
    """The CSV rows of one run's ranks, each checked against the targets."""
    book = Prepared(prepared)
    out = []
    for r in got:
        part = r.get("part_bytes")
        if part is None:  # today's path: the same rank's parts, for comparison
            part = (
                0
                if backend == "grid"
                else sum(book.manifest.files[f].bytes for f in book.files_of(book.parts_of(r["rank"], ranks)))
            )
        peak_target = f_mb + 1.5 * (one_mb - f_mb) / ranks + r["halo_bytes"] / MB
        read_target = (1.1 * part + MB) / MB
        share = grid_share(book, r.get("grid", "")) if backend == "grid" else None
        grid_target = f_mb + 1.5 * (one_mb - f_mb) * share if share is not None else None
        out.append(
            dict(
                graph=graph,
                backend=backend,
                ranks=ranks,
                loader=loader,
                rank=r["rank"],
                part_bytes=part,
                halo_bytes=r["halo_bytes"],
                peak_rss_mb=round(r["peak_rss_bytes"] / MB, 1),
                anon_rss_mb=round(r["anon_rss_bytes"] / MB, 1),
                read_mb=round(r["read_bytes"] / MB, 2),
                load_s=round(r["load_s"], 2),
                epoch_ms=round(r["epoch_ms"], 1),
                fixed_mb=round(f_mb, 1),
                one_process_mb=round(one_mb, 1),
                peak_target_mb=round(peak_target, 1),
                peak_ok=r["peak_rss_bytes"] / MB <= peak_target,
                read_target_mb=round(read_target, 2),
                read_ok=loader == "whole" or r["read_bytes"] / MB <= read_target,
                grid=r.get("grid", ""),
                grid_share="" if share is None else round(share, 4),
                grid_target_mb="" if grid_target is None else round(grid_target, 1),
                grid_ok="" if grid_target is None else r["peak_rss_bytes"] / MB <= grid_target,
            )
        )
    return out


def grid_share(book, shape: str) -> float:
    """The grid's own share of one process's memory at `shape`: its memory model's busiest rank
    (mgg.distributed.grid.model.memory_bytes: adjacency shards, activations, weights) over the 1x1x1
    grid's. Plexus's grid holds a layer's whole row or column block of the adjacency and replicates
    dense blocks along an axis, so the share is above 1/P (the 1/P target's premise)."""
    from mgg.distributed.grid import GridShape
    from mgg.distributed.grid.model import GraphStats, memory_bytes

    m = book.manifest
    stats = GraphStats(m.name, m.num_nodes, m.num_edges + m.num_nodes, (m.num_features, HIDDEN, m.num_classes), "gcn")
    return memory_bytes(GridShape.parse(shape), stats, 4) / memory_bytes(GridShape.parse("1x1x1"), stats, 4)


def heap_setting() -> str:
    """The ranks' host heap (mgg.heap, as mgg train's ranks set it): what the run's environment asks for."""
    threshold = requested_threshold()
    if threshold is None:
        return f"glibc's mmap threshold {os.environ['MALLOC_MMAP_THRESHOLD_']} bytes (MALLOC_MMAP_THRESHOLD_)"
    return "glibc's own mmap threshold" if threshold == 0 else f"glibc's mmap threshold fixed at {threshold} bytes"


def markdown(info: dict, args) -> str:
    rows = info["rows"]
    env = environment(__import__("torch").device("cpu"))
    out = [
        "# Memory per rank: every rank loading the dataset, against each rank reading its prepared part",
        "",
        f"{env['device']}, torch {env.get('torch', '')}; GCN, {args.epochs} epoch(s), gloo, one thread per rank; "
        f"{heap_setting()}; generated .npz datasets (R-MAT graph, random float32 features). Every rank's row in "
        "the CSV; here the busiest rank of each run.",
        "",
    ]
    for d in info["datasets"]:
        prep = d["prepare"]
        out.append(
            f"- `{d['spec']}` ({d['arrays_mb']:.0f} MiB of arrays): `mgg prepare` (range, {max(args.ranks)} parts, "
            f"--budget {args.budget_mb} MiB) {prep['seconds']:.0f} s, "
            f"peak RSS {prep.get('peak_rss_mb', float('nan')):.0f} MiB"
            + (
                f", inside a cgroup of {prep['limit_mb']} MiB (peak usage {prep['cgroup_peak_mb']:.0f} MiB, page cache "
                f"included; OOM kills {prep['oom_kills']}): the arrays are {d['arrays_mb'] / prep['limit_mb']:.2f}x "
                "the memory the process was allowed"
                if prep.get("limit_mb")
                else ""
            )
        )
    out += [
        "",
        "| dataset | backend | ranks | loader | peak RSS MiB | anon MiB | target MiB | ok | grid's share | "
        "target by it MiB | ok | read MiB | parts MiB | read ok | load s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    keys = dict.fromkeys((r["graph"], r["backend"], r["ranks"], r["loader"]) for r in rows)
    for g, b, p, ld in keys:
        mine = [r for r in rows if (r["graph"], r["backend"], r["ranks"], r["loader"]) == (g, b, p, ld)]
        worst = max(mine, key=lambda r: r["peak_rss_mb"])
        out.append(
            f"| {g} | {b}{' ' + worst['grid'] if worst['grid'] else ''} | {p} | {ld} | {worst['peak_rss_mb']} | "
            f"{max(r['anon_rss_mb'] for r in mine)} | {worst['peak_target_mb']} | {all(r['peak_ok'] for r in mine)} | "
            + (
                f"{worst['grid_share']} | {worst['grid_target_mb']} | {all(r['grid_ok'] for r in mine)} | "
                if b == "grid"
                else " |  |  | "
            )
            + f"{max(r['read_mb'] for r in mine)} | {max(r['part_bytes'] for r in mine) / MB:.1f} | "
            f"{all(r['read_ok'] for r in mine)} | {max(r['load_s'] for r in mine)} |"
        )
    out += [
        "",
        "target: F + 1.5 (P1 - F) / P + halo bytes (F: the same command's peak on Cora at that rank count; "
        "P1: one process's on the dataset, prepared); the grid's share: its memory model's busiest rank over the "
        "1x1x1 grid's (mgg.distributed.grid.model.memory_bytes), above 1/P by Plexus's design (a layer's whole "
        "row or column block of the adjacency, dense blocks replicated along an axis), and the target by it "
        "F + 1.5 (P1 - F) x share; read target: 1.1 x the rank's parts' bytes + 1 MiB. "
        "Today's path (`whole`) runs only where its copies fit this machine"
        + (
            f"; not run, their ranks together larger than this machine's memory: {', '.join(info['skipped'])}."
            if info["skipped"]
            else "."
        ),
    ]
    return "\n".join(out) + "\n"


def plot(rows: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = list(dict.fromkeys(r["graph"] for r in rows))
    fig, axes = plt.subplots(1, len(graphs), figsize=(6 * len(graphs), 4.5), squeeze=False)
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    for ax, graph in zip(axes[0], graphs, strict=True):
        _plot_one(ax, [r for r in rows if r["graph"] == graph], backends)
        ax.set_title(f"{graph}: whole dataset per rank (dashed) against its part (solid)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_one(ax, rows: list, backends: list) -> None:
    keys = dict.fromkeys((r["backend"], r["loader"]) for r in rows)
    for b, ld in keys:
        mine = [r for r in rows if (r["backend"], r["loader"]) == (b, ld)]
        ranks = sorted({r["ranks"] for r in mine})
        peak = [max(r["peak_rss_mb"] for r in mine if r["ranks"] == p) for p in ranks]
        ax.plot(
            ranks,
            peak,
            "o-" if ld == "prepared" else "s--",
            color=f"C{backends.index(b)}",
            label=f"{b} {ld}",
        )
    ax.set(xlabel="ranks (processes)", ylabel="peak resident memory per rank (MiB, busiest rank)", xscale="log")
    ax.set_xticks(sorted({r["ranks"] for r in rows}), [str(p) for p in sorted({r["ranks"] for r in rows})])
    ax.set_xticks([], minor=True)  # no log-scale minor labels (3 x 10^0) between the rank counts
    ax.legend(fontsize=8)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench memory", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--datasets", nargs="+", default=["500000:5000000:128", "2500000:10000000:224"], help="NODES:EDGES:FEATURES"
    )
    ap.add_argument("--ranks", nargs="+", type=int, default=[1, 2, 4, 8])
    ap.add_argument(
        "--backends", nargs="+", default=["halo", "node-halo", "grid"], choices=["halo", "node-halo", "grid"]
    )
    ap.add_argument("--loaders", nargs="+", default=["whole", "prepared"], choices=["whole", "prepared"])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--budget-mb", type=float, default=128)
    ap.add_argument(
        "--cgroup-mb", type=int, default=1100, help="the largest dataset's prepare's memory limit (0: none)"
    )
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds for one torchrun")
    ap.add_argument("--smoke", action="store_true", help="a tiny dataset: the harness runs, nothing to cite")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    if args.smoke:
        for k, v in SMOKE.items():
            setattr(args, k, v)
    holder: dict = {}

    def go(log):
        holder.update(run(args, log))
        return holder["rows"]

    rows, stem = logged_run(args.out, "memory", COLUMNS, go)
    write_report(stem, markdown(holder, args), rows, plot)
    return 0

"""Memory per rank: today's path (every rank loads the whole dataset) against a prepared directory
(`mgg prepare`: each rank reads and holds only its part), for CPU processes (gloo).

    python -m bench memory [--nodes 2500000] [--edges 25000000] [--features 192] [--ranks 1 2 4 8]
                           [--backends halo node-halo grid] [--loaders whole prepared] [--epochs 2]
                           [--budget-mb 256] [--cgroup-mb 1024] [--out DIR] [--smoke]

A generated .npz dataset (an R-MAT graph, random float32 features, 16 classes, a random split) is
prepared once for the largest rank count, streamed (`range`), inside a cgroup that allows it
--cgroup-mb of memory where this machine lets a process make one (the dataset's arrays must be at
least twice that: the chunk budget, not the dataset, bounds the prepare). Then for every backend,
rank count and loader, `torchrun` runs bench/workers/memory_worker.py: each rank loads, plans and
trains a GCN for --epochs epochs and reports its peak resident memory (VmHWM), peak anonymous memory
(RssAnon sampled every 5 ms), the bytes it read while loading (/proc/self/io rchar), the load time,
its parts' bytes and its halo. Today's path runs only where its copies fit this machine's memory.
The same commands on Cora give F, the fixed cost per rank (torch, the extension, gloo).

Targets (issue 66), checked per row in the summary: per-rank peak - F <= 1.5 (P1 - F) / P + the rank's
halo bytes (P1: one process's peak on the dataset); bytes read <= 1.1 x its parts' bytes + 1 MB.
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

from mgg.graph import available_memory

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
]
SMOKE = dict(nodes=3000, edges=30000, features=16, ranks=[1, 2], epochs=1, budget_mb=1, cgroup_mb=0)
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
    """Whether `ranks` copies of today's path fit this machine (about 2.5 times the arrays each)."""
    have = available_memory()
    return have is None or ranks * 2.5 * arrays_bytes < 0.8 * have


def run(args, log) -> dict:
    folder = cache.cache_dir()
    data = dataset(args.nodes, args.edges, args.features, folder)
    arrays = os.path.getsize(data)
    top = max(args.ranks)
    prepared = folder / f"{data.stem}-prepared-{top}"
    cora = folder / f"cora-prepared-{top}"
    print(f"dataset {data} ({arrays / MB:.0f} MiB of arrays); preparing {top} parts", flush=True)
    info = dict(arrays_mb=arrays / MB, prepare=prepare_in_cgroup(data, prepared, top, args.budget_mb, args.cgroup_mb))
    prepare_in_cgroup("cora", cora, top, 16, 0)
    print(f"prepare: {info['prepare']}", flush=True)
    rows = []
    for backend in args.backends:
        fixed = {}
        for ranks in args.ranks:
            fixed[ranks] = (
                max(r["peak_rss_bytes"] for r in run_worker(cora, "prepared", backend, ranks, 1, args.timeout)) / MB
            )
        one = (
            max(r["peak_rss_bytes"] for r in run_worker(prepared, "prepared", backend, 1, args.epochs, args.timeout))
            / MB
        )
        for ranks in args.ranks:
            for loader in args.loaders:
                if loader == "whole" and not fits(arrays, ranks):
                    print(f"skip: today's path at {ranks} ranks would not fit this machine's memory", flush=True)
                    continue
                t0 = time.perf_counter()
                source = data if loader == "whole" else prepared
                got = run_worker(source, loader, backend, ranks, args.epochs, args.timeout)
                parts = {}
                if loader == "whole" and backend != "grid":
                    parts = {
                        r["rank"]: r["part_bytes"]
                        for r in run_worker(prepared, "prepared", backend, ranks, 1, args.timeout)
                    }
                for r in got:
                    part = r.get("part_bytes", parts.get(r["rank"], 0))
                    peak_target = fixed[ranks] + 1.5 * (one - fixed[ranks]) / ranks + r["halo_bytes"] / MB
                    read_target = (1.1 * part + MB) / MB
                    row = dict(
                        graph=data.stem,
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
                        fixed_mb=round(fixed[ranks], 1),
                        one_process_mb=round(one, 1),
                        peak_target_mb=round(peak_target, 1),
                        peak_ok=r["peak_rss_bytes"] / MB <= peak_target,
                        read_target_mb=round(read_target, 2),
                        read_ok=loader == "whole" or r["read_bytes"] / MB <= read_target,
                        grid=r.get("grid", ""),
                    )
                    log.add(row)
                    rows.append(row)
                print(f"{backend} x{ranks} {loader}: {time.perf_counter() - t0:.0f} s", flush=True)
    info["rows"] = rows
    return info


def markdown(info: dict, args) -> str:
    rows, prep = info["rows"], info["prepare"]
    env = environment(__import__("torch").device("cpu"))
    out = [
        "# Memory per rank: every rank loading the dataset, against each rank reading its prepared part",
        "",
        f"{env['device']}, torch {env.get('torch', '')}; dataset: R-MAT {args.nodes:,} nodes, {args.edges:,} "
        f"edges, {args.features} float32 features ({info['arrays_mb']:.0f} MiB of arrays, .npz); GCN, "
        f"{args.epochs} epochs, gloo, one thread per rank. Every rank's row in the CSV; here the busiest rank.",
        "",
        f"`mgg prepare` (range, {max(args.ranks)} parts, --budget {args.budget_mb} MiB): {prep['seconds']:.0f} s, "
        f"peak RSS {prep.get('peak_rss_mb', float('nan')):.0f} MiB"
        + (
            f", inside a cgroup of {prep['limit_mb']} MiB (peak usage {prep['cgroup_peak_mb']:.0f} MiB, page cache "
            f"included; OOM kills: {prep['oom_kills']}): the dataset's arrays are "
            f"{info['arrays_mb'] / prep['limit_mb']:.1f}x the memory the process was allowed"
            if prep.get("limit_mb")
            else " (no cgroup could be made here: the limit was not enforced)"
        ),
        "",
        "| backend | ranks | loader | peak RSS MiB | anon MiB | target MiB | ok | read MiB | parts MiB | read ok "
        "| load s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    keys = dict.fromkeys((r["backend"], r["ranks"], r["loader"]) for r in rows)
    for b, p, ld in keys:
        mine = [r for r in rows if (r["backend"], r["ranks"], r["loader"]) == (b, p, ld)]
        worst = max(mine, key=lambda r: r["peak_rss_mb"])
        out.append(
            f"| {b}{' ' + worst['grid'] if worst['grid'] else ''} | {p} | {ld} | {worst['peak_rss_mb']} | "
            f"{max(r['anon_rss_mb'] for r in mine)} | {worst['peak_target_mb']} | {all(r['peak_ok'] for r in mine)} | "
            f"{max(r['read_mb'] for r in mine)} | {max(r['part_bytes'] for r in mine) / MB:.1f} | "
            f"{all(r['read_ok'] for r in mine)} | {max(r['load_s'] for r in mine)} |"
        )
    out += [
        "",
        "target: F + 1.5 (P1 - F) / P + halo bytes (F: the same command's peak on Cora at that rank count; "
        "P1: one process's on this dataset, prepared); read target: 1.1 x the rank's parts' bytes + 1 MiB. "
        "Today's path (`whole`) runs only where its copies fit this machine.",
    ]
    return "\n".join(out) + "\n"


def plot(rows: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    keys = dict.fromkeys((r["backend"], r["loader"]) for r in rows)
    backends = list(dict.fromkeys(r["backend"] for r in rows))
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
    ax.legend(fontsize=8)
    ax.set_title("every rank loading the dataset (dashed) against each reading its part (solid)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench memory", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=2_500_000)
    ap.add_argument("--edges", type=int, default=25_000_000)
    ap.add_argument("--features", type=int, default=192)
    ap.add_argument("--ranks", nargs="+", type=int, default=[1, 2, 4, 8])
    ap.add_argument(
        "--backends", nargs="+", default=["halo", "node-halo", "grid"], choices=["halo", "node-halo", "grid"]
    )
    ap.add_argument("--loaders", nargs="+", default=["whole", "prepared"], choices=["whole", "prepared"])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--budget-mb", type=float, default=256)
    ap.add_argument("--cgroup-mb", type=int, default=1024, help="the prepare's memory limit (0: none)")
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

"""The partition methods compared: for each graph, rank count and method, the communication
statistics and the partitioning time (mgg.partition, no disk cache), written as a CSV row by row
and a markdown table.

    python -m bench.partition_compare --graphs cora sbm:100000:8:10:0.9 --ranks 4 8 [--methods ...]
        [--timeout 1800] [--out bench/results] [--tag TAG] [--append CSV]

Each case runs in a child process (`mgg partition GRAPH --ranks P --method M --json --no-cache`),
so a case that runs out of time or memory is recorded and the others go on; its peak resident
memory and CPU time are recorded too. Synthetic graphs are made once and kept in bench's graph cache, and the
children read that file.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from mgg.partitioning import METHODS

from . import cache

COLUMNS = [
    "graph",
    "nodes",
    "edges",
    "ranks",
    "method",
    "status",
    "local_edges",
    "remote_edges",
    "remote_fraction",
    "halo_rows",
    "max_send_peer",
    "edge_imbalance",
    "node_imbalance",
    "seconds",
    "child_cpu_s",
    "peak_rss_gb",
    "date",
]


def _source(spec: str, data_dir) -> str:
    """What the children load: the graph cache's file for a synthetic spec, else the spec."""
    from mgg.data import synthetic

    if not synthetic.is_spec(spec):
        return spec
    path = cache._path(spec)
    if not path.exists():
        cache.graph(spec, data_dir)  # made and written once
        cache._GRAPHS.clear()  # the children load it; this process need not hold it
    return str(path)


def run_case(source: str, ranks: int, method: str, timeout: float, data_dir=None) -> dict:
    """One child `mgg partition ... --json --no-cache`: its total statistics, status and peak RSS."""
    cmd = [
        sys.executable,
        "-m",
        "mgg",
        "partition",
        source,
        "--ranks",
        str(ranks),
        "--method",
        method,
        "--json",
        "--no-cache",
    ] + (["--data-dir", str(data_dir)] if data_dir else [])
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        t0, status = time.monotonic(), "ok"
        while True:
            pid, code, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout:
                p.kill()
                pid, code, usage = os.wait4(p.pid, 0)
                status = f"timed out after {timeout:.0f} s"
                break
            time.sleep(0.2)
        p.returncode = code  # reaped here: keep Popen from waiting again
        out.seek(0)
        err.seek(0)
        row = dict(
            method=method,
            ranks=ranks,
            peak_rss_gb=round(usage.ru_maxrss / 2**20, 2),
            child_cpu_s=round(usage.ru_utime + usage.ru_stime, 2),
        )
        if status == "ok" and code != 0:
            lines = err.read().strip().splitlines() or [f"exit status {code}"]
            status = f"failed: {lines[-1][:200]}"
        if status == "ok":
            res = json.loads(out.read())
            row.update(
                {k: v for k, v in res["total"].items() if k in COLUMNS and k not in ("ranks", "method")},
                nodes=res["nodes"],
                edges=res["edges"],
            )
        return dict(row, status=status)


def markdown(rows: list[dict]) -> str:
    lines = [
        "# Partition methods compared",
        "",
        "remote: the share of edges whose source another rank owns; halo rows: the rows all ranks receive "
        "(the connectivity-minus-one volume); max send: the most rows one rank sends to one peer; "
        "imbalance: the largest rank's edges (nodes) over the mean; s: partitioning wall time (no cache); "
        "child CPU s: the CPU time of the whole child process (loading, partitioning, statistics; all threads), "
        "which depends less on the host's load than wall time.",
        "",
        "| graph | P | method | remote | halo rows | max send | edge imb. | node imb. | s | child CPU s | "
        "peak GB | status |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if r["status"] == "ok":
            lines.append(
                f"| {r['graph']} | {r['ranks']} | {r['method']} | {float(r['remote_fraction']) * 100:.1f}% | "
                f"{int(r['halo_rows']):,} | {int(r['max_send_peer']):,} | {float(r['edge_imbalance']):.3f} | "
                f"{float(r['node_imbalance']):.3f} | {float(r['seconds']):.2f} | {r['child_cpu_s']} | "
                f"{r['peak_rss_gb']} | ok |"
            )
        else:
            lines.append(
                f"| {r['graph']} | {r['ranks']} | {r['method']} | | | | | | | {r['child_cpu_s']} | "
                f"{r['peak_rss_gb']} | {r['status']} |"
            )
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.partition_compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--graphs", nargs="+", default=["cora", "sbm:100000:8:10:0.9"])
    ap.add_argument("--ranks", nargs="+", type=int, default=[4, 8])
    ap.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds for one case")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--tag", default="")
    ap.add_argument("--append", default=None, help="add the rows to this CSV (of an earlier run) and rewrite its .md")
    args = ap.parse_args(argv)
    if args.append:
        stem = Path(args.append).with_suffix("")
        rows = list(csv.DictReader(open(args.append)))
    else:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        stem = out / f"partition-cpu{'-' + args.tag if args.tag else ''}-{stamp}"
        rows = []
    with open(f"{stem}.csv", "a" if args.append else "w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS, extrasaction="ignore")
        if not args.append:
            w.writeheader()
        for spec in args.graphs:
            source = _source(spec, args.data_dir)
            for p in args.ranks:
                for m in args.methods:
                    row = dict(
                        run_case(source, p, m, args.timeout, args.data_dir),
                        graph=spec,
                        date=datetime.now(timezone.utc).strftime("%Y-%m-%d"),
                    )
                    rows.append(row)
                    w.writerow({k: row.get(k, "") for k in COLUMNS})
                    f.flush()
                    print(
                        f"{spec} P={p} {m}: {row['status']} {row.get('remote_fraction', '')} "
                        f"{row.get('halo_rows', '')} {row.get('seconds', '')} s",
                        flush=True,
                    )
    Path(f"{stem}.md").write_text(markdown(rows))
    print(f"wrote {stem}.csv and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())

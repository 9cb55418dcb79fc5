"""python -m bench SUITE [options]: runs suites, writes CSV, plots and a markdown summary."""
from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

from mgg import Config, MggError

from . import report
from .env import copy_bandwidth_gbps, environment
from .peers import PEERS
from .suites import SUITES, Options

SMOKE = dict(graphs=["rmat:1500:15000"], dims=[16], pes=[1, 2], tune_budget=6, load_edges=[100_000])


def parser():
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("suites", nargs="+", choices=[*SUITES, "all"])
    ap.add_argument("--graphs", nargs="+", default=["rmat-reddit", "rmat-products"],
                    help="synthetic specs (rmat-reddit, rmat-products, rmat-reddit:scale=0.1, rmat:N:E), files, "
                         "dataset directories or names under --data-dir (Planetoid, reddit, ogbn-*)")
    ap.add_argument("--dims", nargs="+", type=int, default=[16, 64, 128, 256])
    ap.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    ap.add_argument("--impls", nargs="+", choices=list(PEERS), default=list(PEERS))
    ap.add_argument("--pes", nargs="+", type=int, default=[1, 2, 4])
    ap.add_argument("--ps", type=int, default=16)
    ap.add_argument("--dist", type=int, default=1)
    ap.add_argument("--wpb", type=int, default=4)
    ap.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=20, help="timed repetitions (at least 20)")
    ap.add_argument("--flush-l2", action="store_true", help="flush the GPU L2 cache before each repetition")
    ap.add_argument("--tune-budget", type=int, default=15)
    ap.add_argument("--load-edges", nargs="+", type=int, default=None,
                    help="load suite: edge counts of the generated files (default 100000000)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--tag", default="", help="added to the output file names")
    ap.add_argument("--smoke", action="store_true", help="tiny graphs: every suite in seconds (CI)")
    ap.add_argument("--quiet", action="store_true")
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.reps < 20:
        print("python -m bench: error: --reps must be at least 20", file=sys.stderr)
        return 2
    if args.smoke:
        for k, v in SMOKE.items():
            setattr(args, k, v)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    suites = list(SUITES) if "all" in args.suites else args.suites
    try:
        opt = Options(device=device, graphs=args.graphs, dims=args.dims, dtype=getattr(torch, args.dtype),
                      impls=args.impls, pes=args.pes, config=Config(args.ps, args.dist, args.wpb), warmup=args.warmup,
                      reps=args.reps, flush_l2=args.flush_l2, data_dir=args.data_dir, tune_budget=args.tune_budget,
                      progress=not args.quiet)
        opt.load_edges = args.load_edges
        if args.data_dir is None:
            from mgg.datasets import bundled_planetoid_dir
            opt.data_dir = bundled_planetoid_dir()
        opt.copy_gbps = copy_bandwidth_gbps(device, 64 if device.type == "cpu" else 1024)
        env = environment(device)
        rows = []
        for s in suites:
            rows += [{**r, **env} for r in SUITES[s](opt)]
    except MggError as e:
        print(f"python -m bench: error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = re.sub(r"[^A-Za-z0-9]+", "-", env["device"].split(" (")[0]).strip("-").lower()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    stem = f"{'-'.join(suites) if len(suites) < len(SUITES) else 'all'}-{dev}{'-' + args.tag if args.tag else ''}-{stamp}"
    report.write_csv(rows, out / f"{stem}.csv")
    for s in suites:
        if any(r["suite"] == s for r in rows):
            report.plot(rows, s, out / f"{stem}-{s}.png")
    md = report.summary(rows, opt.copy_gbps)
    (out / f"{stem}.md").write_text(md)
    print(md)
    print(f"wrote {out / stem}.csv, .md and one .png per suite")
    return 0

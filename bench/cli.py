"""python -m bench SUITE [options]: runs suites, writing the CSV row by row as cases are measured,
then one plot per suite and a markdown summary. `python -m bench model [options]` runs the kernels'
performance model instead (bench/model.py)."""

from __future__ import annotations

import argparse
import math
import re
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

from mgg import Config, MggError
from mgg.devices import choose_device
from mgg.partitioning import METHODS

from . import report
from .budget import Budget
from .competitors import IMPLEMENTATIONS
from .env import copy_bandwidth_gbps, environment
from .suites import SUITES, Options

SMOKE = dict(
    graphs=["rmat:1500:15000"],
    dims=[16],
    pes=[1, 2],
    tune_budget=6,
    load_edges=[100_000],
    tta_models=["gcn"],
    tta_seeds=1,
    tta_target=["gcn=0.6"],
    tta_max_epochs=40,
    dlrm_batch=256,
    dlrm_cap=10_000,
)


def _targets(pairs: list) -> dict:
    """MODEL=ACC pairs as {model: acc}."""
    out = {}
    for p in pairs:
        model, sep, acc = p.partition("=")
        try:
            out[model] = float(acc)
        except ValueError:
            raise MggError(f"--tta-target takes MODEL=ACCURACY pairs (gcn=0.78), got {p!r}") from None
        if not sep or not 0 < out[model] <= 1:
            raise MggError(f"--tta-target takes MODEL=ACCURACY pairs with 0 < ACCURACY <= 1, got {p!r}")
    return out


def parser():
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("suites", nargs="+", choices=[*SUITES, "all"])
    ap.add_argument(
        "--graphs",
        nargs="+",
        default=["rmat-reddit", "rmat-products"],
        help="synthetic specs (rmat-reddit, rmat-products, rmat-reddit:scale=0.1, rmat:N:E, "
        "sbm:N:B:DEG:P_IN), files, dataset directories or names under --data-dir (Planetoid, reddit, "
        "ogbn-*)",
    )
    ap.add_argument("--dims", nargs="+", type=int, default=[16, 64, 128, 256])
    ap.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    ap.add_argument("--impls", nargs="+", choices=list(IMPLEMENTATIONS), default=list(IMPLEMENTATIONS))
    ap.add_argument("--pes", nargs="+", type=int, default=[1, 2, 4])
    ap.add_argument(
        "--partition",
        choices=list(METHODS),
        default="range",
        help="scaling and dist: which nodes each rank owns (mgg.partition: range is MGG Algorithm 1; "
        "random, metis, hypergraph relabel the graph first)",
    )
    ap.add_argument("--ps", type=int, default=Config().ps)
    ap.add_argument("--dist", type=int, default=Config().dist)
    ap.add_argument("--wpb", type=int, default=Config().wpb)
    ap.add_argument(
        "--device", default=None, help="cpu, cuda or cuda:N (default: the GPU where mgg has CUDA kernels for it)"
    )
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=20, help="timed repetitions (at least 20)")
    ap.add_argument("--flush-l2", action="store_true", help="flush the GPU L2 cache before each repetition")
    ap.add_argument("--tune-budget", type=int, default=15)
    ap.add_argument(
        "--kernel-tuned",
        choices=["auto", "on", "off"],
        default="auto",
        help="kernel suite: also time mgg at the config the tuner finds (auto: on a GPU)",
    )
    ap.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="seconds per suite: no case starts unless the time left covers the longest case of its "
        "kind so far; skipped cases are listed in the summary",
    )
    ap.add_argument("--worker-timeout", type=float, default=600.0, help="seconds for one torchrun of the dist suite")
    ap.add_argument(
        "--prep-only",
        action="store_true",
        help="prepare every case (graphs, plans, device copies) and record prep_s, but time nothing: "
        "how long a stage's preparation takes, without running the kernels",
    )
    ap.add_argument(
        "--fetch-modes",
        nargs="+",
        default=None,
        help="fetch suite: ways to reach peers' rows (default all: get-thread get-warp get-block direct "
        "uva uvm halo allgather)",
    )
    ap.add_argument(
        "--ncu",
        action="store_true",
        help="fetch suite: also record the mgg kernels' achieved occupancy and SM throughput (Nsight "
        "Compute, where ncu runs)",
    )
    ap.add_argument(
        "--load-edges",
        nargs="+",
        type=int,
        default=None,
        help="load suite: edge counts of the generated files (default 100000000)",
    )
    ap.add_argument("--tta-datasets", nargs="+", default=None, help="tta suite: datasets (default cora)")
    ap.add_argument("--tta-models", nargs="+", default=None, help="tta suite: models (default gcn sage gat)")
    ap.add_argument(
        "--tta-target",
        nargs="+",
        default=[],
        metavar="MODEL=ACC",
        help="tta suite: target validation accuracy per model (default gcn=0.78 sage=0.78 gat=0.78 gin=0.75)",
    )
    ap.add_argument("--tta-seeds", type=int, default=3, help="tta suite: seeds per model and impl")
    ap.add_argument("--tta-max-epochs", type=int, default=200, help="tta suite: epoch limit of a run")
    ap.add_argument("--dlrm-batch", type=int, default=4096, help="dlrm suite: samples per global batch")
    ap.add_argument(
        "--dlrm-cap",
        type=int,
        default=1_000_000,
        help="dlrm suite: rows of the largest table (0: Criteo Kaggle's own, up to 10.1M)",
    )
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--tag", default="", help="added to the output file names")
    ap.add_argument("--smoke", action="store_true", help="tiny graphs: every suite in seconds (CI)")
    ap.add_argument("--quiet", action="store_true")
    return ap


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["model"]:  # not a suite: the kernels' performance model (bench/model.py), no device
        from .model import main as model_main

        return model_main(argv[1:])
    if argv[:1] == ["cpu"]:  # not a suite: the CPU kernels against torch.sparse and PyG (bench/cpu.py)
        from .cpu import main as cpu_main

        return cpu_main(argv[1:])
    if argv[:1] == ["nodes"]:  # not a suite: inter-node bytes of the flat and node-level halo (bench/nodes.py)
        from .nodes import main as nodes_main

        return nodes_main(argv[1:])
    if argv[:1] == ["strategies"]:  # not a suite: every strategy on a described cluster (bench/strategies.py)
        from .strategies import main as strategies_main

        return strategies_main(argv[1:])
    if argv[:1] == ["memory"]:  # not a suite: memory per rank, whole dataset against prepared parts
        from .rank_memory import main as memory_main

        return memory_main(argv[1:])
    if argv[:1] == ["grid"]:  # not a suite: Plexus's grids ranked by the model (bench/grid.py), no device
        from .grid import main as grid_main

        return grid_main(argv[1:])
    if argv[:1] == ["scaling"] and any(a == "--backend" or a.startswith("--backend=") for a in argv):
        from .grid import scaling_main  # the grid backend's scaling: every grid measured at each rank count

        return scaling_main(argv[1:])
    if argv[:1] == ["order"]:  # not a suite: node orders against the user's (bench/order.py), its own columns
        from .order import main as order_main

        return order_main(argv[1:])
    args = parser().parse_args(argv)
    if args.reps < 20:
        print("python -m bench: error: --reps must be at least 20", file=sys.stderr)
        return 2
    if args.smoke:
        for k, v in SMOKE.items():
            setattr(args, k, v)
    try:
        choice = choose_device(args.device)
    except MggError as e:
        print(f"python -m bench: error: {e}", file=sys.stderr)
        return 2
    print(choice.line("python -m bench"), flush=True)
    device = choice.device
    suites = list(SUITES) if "all" in args.suites else list(dict.fromkeys(args.suites))
    try:
        opt = Options(
            device=device,
            graphs=args.graphs,
            dims=args.dims,
            dtype=getattr(torch, args.dtype),
            impls=args.impls,
            pes=args.pes,
            config=Config(args.ps, args.dist, args.wpb),
            warmup=args.warmup,
            reps=args.reps,
            flush_l2=args.flush_l2,
            data_dir=args.data_dir,
            tune_budget=args.tune_budget,
            kernel_tuned={"auto": None, "on": True, "off": False}[args.kernel_tuned],
            progress=not args.quiet,
            budget_s=args.budget_s,
            worker_timeout_s=args.worker_timeout,
            prep_only=args.prep_only,
            load_edges=args.load_edges,
            fetch_modes=args.fetch_modes,
            ncu=args.ncu,
            partition=args.partition,
            tta_datasets=args.tta_datasets,
            tta_models=args.tta_models,
            tta_targets=_targets(args.tta_target),
            tta_seeds=args.tta_seeds,
            tta_max_epochs=args.tta_max_epochs,
            dlrm_batch=args.dlrm_batch,
            dlrm_cap=args.dlrm_cap or None,
        )
    except MggError as e:
        print(f"python -m bench: error: {e}", file=sys.stderr)
        return 2
    if args.data_dir is None:
        from mgg.data import bundled_planetoid_dir

        opt.data_dir = bundled_planetoid_dir()
    env = environment(device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = re.sub(r"[^A-Za-z0-9]+", "-", env["device"].split(" (")[0]).strip("-").lower()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    name = "-".join(suites) if len(suites) < len(SUITES) else "all"
    stem = f"{name}-{dev}{'-' + args.tag if args.tag else ''}-{stamp}"
    log = report.CsvLog(out / f"{stem}.csv")
    print(f"writing {log.path} row by row", flush=True)
    skipped, status = [], 0
    try:
        opt.copy_gbps = copy_bandwidth_gbps(device, 64 if device.type == "cpu" else 1024)
        for s in suites:
            opt.budget = Budget(args.budget_s)
            try:
                for row in SUITES[s](opt):
                    log.add({**row, **env})
            except MggError as e:
                print(f"python -m bench: error in suite {s}: {e}", file=sys.stderr)
                status = 2
            skipped += opt.budget.skipped
    finally:
        log.close()
    rows = log.rows
    for s in suites:
        if any(r["suite"] == s and not math.isnan(float(r["median_ms"])) for r in rows):
            report.plot(rows, s, out / f"{stem}-{s}.png")
    md = report.summary(rows, opt.copy_gbps, skipped, opt.wrong)
    (out / f"{stem}.md").write_text(md)
    print(md)
    print(f"wrote {out / stem}.csv, .md and one .png per suite")
    if opt.wrong:
        print(
            f"python -m bench: {len(opt.wrong)} case(s) gave a wrong result and were not timed:\n"
            + "\n".join(opt.wrong),
            file=sys.stderr,
        )
        status = status or 1
    return status

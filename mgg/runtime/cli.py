"""`mgg tune`: the search trajectory for one (graph, D, dtype), optionally against the whole grid."""
from __future__ import annotations

import csv
from datetime import date
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..io import load_graph
from ..ops import aggregate
from ..plan import Plan
from .cache import ConfigCache, cache_key
from .model import DIST_STEPS, PS_STEPS, DeviceLimits, feasible, grid
from .search import MggSearch
from .timing import measure


def measurer(plan: Plan, x: torch.Tensor, repeat: int):
    return lambda c: measure(lambda: aggregate(x, plan, c), x.device, warmup=1, reps=repeat).median_ms


def exhaustive(plan: Plan, x: torch.Tensor, repeat: int, limits: DeviceLimits, progress=True) -> dict:
    meas = measurer(plan, x, repeat)
    return {c: meas(c) for c in tqdm(grid(x.size(1), limits), desc="grid", disable=not progress)}


def heatmap(table: dict, path: Path, title: str):
    """MGG Fig. 11 style: latency over (ps, dist) for each wpb."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    wpbs = sorted({c.wpb for c in table})
    fig, axes = plt.subplots(1, len(wpbs), figsize=(3.2 * len(wpbs), 3), squeeze=False)
    best = min(table.values())
    for ax, w in zip(axes[0], wpbs, strict=True):
        m = np.full((len(PS_STEPS), len(DIST_STEPS)), np.nan)
        for c, t in table.items():
            if c.wpb == w:
                m[PS_STEPS.index(c.ps), DIST_STEPS.index(c.dist)] = t / best
        im = ax.imshow(m, cmap="viridis_r", origin="lower", aspect="auto")
        ax.set_xticks(range(len(DIST_STEPS)), DIST_STEPS)
        ax.set_yticks(range(len(PS_STEPS)), PS_STEPS)
        ax.set_xlabel("dist")
        ax.set_ylabel("ps")
        ax.set_title(f"wpb={w}")
    fig.colorbar(im, ax=axes[0].tolist(), label="latency / best")
    fig.suptitle(title)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def run_tune(args):
    g = load_graph(args.dataset, args.data_dir)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = getattr(torch, args.dtype)
    x = torch.randn(g.num_nodes, args.dim, device=device).to(dtype)
    plan = Plan(g)
    limits = DeviceLimits.of(device)
    search = MggSearch(lambda c: feasible(c, args.dim, limits), args.iterations)
    meas = measurer(plan, x, args.repeat)
    rows = []
    bar = tqdm(total=args.iterations, desc="tune", disable=args.quiet)
    best = float("inf")
    while (c := search.propose()) is not None:
        t = meas(c)
        search.report(c, t)
        best = min(best, t)
        rows.append(dict(iteration=len(rows) + 1, ps=c.ps, dist=c.dist, wpb=c.wpb, latency_ms=round(t, 4),
                         best_ms=round(best, 4)))
        bar.update(1)
    bar.close()
    print(f"{'iter':>4} {'ps':>3} {'dist':>4} {'wpb':>3} {'latency_ms':>11} {'best_ms':>9}")
    for r in rows:
        print(f"{r['iteration']:4d} {r['ps']:3d} {r['dist']:4d} {r['wpb']:3d} {r['latency_ms']:11.4f} "
              f"{r['best_ms']:9.4f}")
    chosen = search.best
    start = search.trajectory[0][1]
    print(f"chosen: ps={chosen.ps} dist={chosen.dist} wpb={chosen.wpb}  {search.table[chosen]:.4f} ms "
          f"({(1 - search.table[chosen] / start) * 100:.1f}% below the start config) on {device} ({limits.name})")
    ConfigCache(args.cache).put(cache_key(g.fingerprint(), 1, limits.name, args.dim, args.dtype), chosen,
                                search.table[chosen], search.table)
    if args.exhaustive:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        table = exhaustive(plan, x, args.repeat, limits, not args.quiet)
        opt = min(table, key=table.get)
        stem = f"tune-{Path(args.dataset).name.replace(':', '_')}-d{args.dim}-{device.type}-{date.today()}"
        with open(out / f"{stem}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, ["kind", "iteration", "ps", "dist", "wpb", "latency_ms"])
            w.writeheader()
            for r in rows:
                w.writerow(dict(kind="search", iteration=r["iteration"], ps=r["ps"], dist=r["dist"], wpb=r["wpb"],
                                latency_ms=r["latency_ms"]))
            for c, t in table.items():
                w.writerow(dict(kind="grid", iteration="", ps=c.ps, dist=c.dist, wpb=c.wpb, latency_ms=round(t, 4)))
        heatmap(table, out / f"{stem}.png", f"{args.dataset} D={args.dim} ({limits.name})")
        gap = (search.table[chosen] / table[opt] - 1) * 100
        print(f"grid best: ps={opt.ps} dist={opt.dist} wpb={opt.wpb} {table[opt]:.4f} ms; tuner within "
              f"{gap:.1f}% after {len(rows)} iterations; wrote {out / stem}.csv/.png")

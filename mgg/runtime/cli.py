"""`mgg tune`: the search trajectory for one (graph, D, dtype) on the plan of P ranks (P > 1: all
ranks in this process, one after another, as P PEs time-sliced on one device), optionally
against the whole grid with MGG Fig. 11-style heat maps."""

from __future__ import annotations

import csv
from datetime import date
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..data import load_graph
from ..devices import choose_device
from ..plan import Plan
from .config_cache import ConfigCache
from .limits import DIST_STEPS, PS_STEPS, DeviceLimits, grid
from .online import OnlineTuner
from .report import chosen_line, trajectory_rows, trajectory_table
from .targets import InprocTarget, LocalTarget
from .timing import measure


def step_target(plan: Plan, via: str = "peers"):
    """The step `mgg tune` times: the one rank of a one-rank plan, else every rank in turn.

    Args:
        plan: the plan.
        via: for several ranks, 'peers' (read the other ranks' rows in place) or 'halo'.

    Returns:
        A LocalTarget or InprocTarget.
    """
    return LocalTarget(plan) if plan.num_ranks == 1 else InprocTarget(plan, via)


def measurer(x: torch.Tensor, repeat: int):
    """The tuner's timer for `mgg tune`: the median of `repeat` runs of a step after one warm-up."""
    return lambda step, config: (None, measure(step, x.device, warmup=1, reps=repeat).median_ms)


def exhaustive(target, x: torch.Tensor, repeat: int, limits: DeviceLimits, progress=True) -> dict:
    """Every feasible config's step time (each config's schedules dropped once measured).

    Args:
        target: the step (step_target).
        x: the input.
        repeat: timed runs per config.
        limits: the device.
        progress: show a progress bar.

    Returns:
        {config: median ms}.
    """
    table = {}
    for c in tqdm(grid(x.size(1), limits, get=target.get), desc="grid", disable=not progress):
        table[c] = measure(target.prepare(x, c), x.device, warmup=1, reps=repeat).median_ms
        target.drop(c)
    return table


def heatmap(table: dict, path: Path, title: str, trajectory: tuple = ()):
    """MGG Fig. 11 style: latency over (ps, dist) for each wpb, relative to the grid's best; the
    configs the search measured are ringed, its choice starred (the cells it touched, as the
    paper's dotted path).

    Args:
        table: {config: ms} over the grid.
        path: the PNG.
        title: the figure's title.
        trajectory: [(config, ms)] the search measured.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    wpbs = sorted({c.wpb for c in table})
    fig, axes = plt.subplots(1, len(wpbs), figsize=(3.2 * len(wpbs), 3), squeeze=False)
    best = min(table.values())
    top = min(max(table.values()) / best, 3.0)  # one color scale for every panel; 3x and above alike
    for ax, w in zip(axes[0], wpbs, strict=True):
        m = np.full((len(PS_STEPS), len(DIST_STEPS)), np.nan)
        for c, t in table.items():
            if c.wpb == w:
                m[PS_STEPS.index(c.ps), DIST_STEPS.index(c.dist)] = t / best
        im = ax.imshow(m, cmap="viridis_r", origin="lower", aspect="auto", vmin=1.0, vmax=top)
        seen = [c for c, _ in trajectory if c.wpb == w]
        if seen:
            ax.scatter(
                [DIST_STEPS.index(c.dist) for c in seen],
                [PS_STEPS.index(c.ps) for c in seen],
                s=40,
                facecolors="none",
                edgecolors="red",
                linewidths=1.2,
            )
        if trajectory:
            chosen = min(trajectory, key=lambda t: t[1])[0]
            if chosen.wpb == w:
                ax.scatter([DIST_STEPS.index(chosen.dist)], [PS_STEPS.index(chosen.ps)], marker="*", s=120, c="red")
        ax.set_xticks(range(len(DIST_STEPS)), DIST_STEPS)
        ax.set_yticks(range(len(PS_STEPS)), PS_STEPS)
        ax.set_xlabel("dist")
        if ax is axes[0][0]:
            ax.set_ylabel("ps")
        ax.set_title(f"wpb={w}")
    fig.colorbar(im, ax=axes[0].tolist(), label="latency / best (3 and above: the darkest)")
    fig.suptitle(title, y=1.04)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def run_tune(args):
    choice = choose_device(args.device)
    print(choice.line("mgg tune"), flush=True)
    device = choice.device
    g = load_graph(args.dataset, args.data_dir)
    dtype = getattr(torch, args.dtype)
    x = torch.randn(g.num_nodes, args.dim, device=device).to(dtype)
    target = step_target(Plan(g, args.ranks), args.via)
    limits = DeviceLimits.of(device)
    tuner = OnlineTuner(
        args.iterations,
        cache=ConfigCache(args.cache),
        resume=False,
        timer=measurer(x, args.repeat),
        model=not args.no_model,
    )
    bar = tqdm(total=args.iterations, desc="tune", disable=args.quiet)
    while not tuner.done:
        tuner.run(target, x)
        bar.update(len(tuner.probes) - bar.n)
    bar.close()
    summary = tuner.summary()
    rows = trajectory_rows(summary["trajectory"])
    print(trajectory_table(summary["trajectory"]))
    print(f"{chosen_line(summary)} ({device})")
    if not args.exhaustive:
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = exhaustive(target, x, args.repeat, limits, not args.quiet)
    opt = min(table, key=table.get)
    ranks = f"-p{args.ranks}-{args.via}" if args.ranks > 1 else ""
    stem = f"tune-{Path(args.dataset).name.replace(':', '_')}-d{args.dim}{ranks}-{device.type}-{date.today()}"
    with open(out / f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["kind", "iteration", "ps", "dist", "wpb", "latency_ms"])
        w.writeheader()
        for r in rows:
            w.writerow(
                dict(
                    kind="search",
                    iteration=r["iteration"],
                    ps=r["ps"],
                    dist=r["dist"],
                    wpb=r["wpb"],
                    latency_ms=r["latency_ms"],
                )
            )
        for c, t in table.items():
            w.writerow(dict(kind="grid", iteration="", ps=c.ps, dist=c.dist, wpb=c.wpb, latency_ms=round(t, 4)))
    on = f"{args.ranks} ranks in one process ({args.via}), " if args.ranks > 1 else ""
    heatmap(table, out / f"{stem}.png", f"{args.dataset} D={args.dim}, {on}{limits.name}", summary["trajectory"])
    c = summary["chosen"]
    gap = (table[c] / table[opt] - 1) * 100 if c in table else float("nan")
    print(
        f"grid best: ps={opt.ps} dist={opt.dist} wpb={opt.wpb} {table[opt]:.4f} ms; tuner within {gap:.1f}% "
        f"after {len(rows)} iterations (its choice ps={c.ps} dist={c.dist} wpb={c.wpb} measures "
        f"{table.get(c, float('nan')):.4f} ms in the grid's run); wrote {out / stem}.csv/.png"
    )

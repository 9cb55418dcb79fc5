"""The tune suite: the online tuner against the grid."""

from __future__ import annotations

import itertools
import time
from typing import Iterator

from mgg.runtime import DeviceLimits, grid
from mgg.runtime.targets import InprocTarget, LocalTarget

from .. import cache
from .common import (
    Options,
    features,
    result_row,
    timed,
    tuned,
    within_budget,
)


def tune(opt: Options) -> Iterator[dict]:
    """The tuner's trajectory (one measured config per iteration, MGG's search seeded and pruned
    by the cost model) against the exhaustive grid, on the plan of each PE count: one rank, or all
    ranks in one process reading peers' rows in place (the step `mgg tune --ranks P` tunes)."""
    cases = list(itertools.product(opt.graphs, opt.dims, opt.pes))
    for spec, dim, pes in within_budget(opt, "tune", cases, lambda c: f"{c[0]} D={c[1]} P={c[2]}"):
        t0 = time.perf_counter()
        g, _ = cache.normalized(spec, opt.data_dir)
        if pes > g.num_nodes:
            continue
        x = features(g.num_nodes, dim, str(opt.device), opt.dtype)
        plan = cache.plan(g, pes)
        target = InprocTarget(plan, "peers") if pes > 1 else LocalTarget(plan)
        impl = "mgg-tuner" if pes == 1 else "mgg-tuner-inproc"
        probes = []
        if not opt.prep_only:
            tuned(opt, target, x, probes)
        for i, (c, t, peak) in enumerate(probes):
            yield result_row(
                "tune", f"{spec}/d{dim}/p{pes}/search{i + 1:02d}", spec, g, dim, opt, impl, pes, c, "fwd", t, peak
            )
        for c in grid(dim, DeviceLimits.of(opt.device), get=target.get):
            if not opt.budget.start("tune-grid", f"tune grid {spec} D={dim} P={pes} {c.as_tuple()}"):
                continue
            t1 = time.perf_counter()
            t, peak = timed(opt, target.prepare(x, c))
            target.drop(c)  # the grid's schedules go once measured: device memory stays bounded
            yield result_row("tune", f"{spec}/d{dim}/p{pes}/grid", spec, g, dim, opt, "grid", pes, c, "fwd", t, peak)
            opt.budget.done("tune-grid", time.perf_counter() - t1)
        opt.budget.done("tune", time.perf_counter() - t0)

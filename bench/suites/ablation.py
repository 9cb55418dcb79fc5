"""The ablation suite: MGG Fig. 10, each design switch against the full design."""

from __future__ import annotations

import itertools
import time
from typing import Iterator

from mgg import Config

from .. import cache
from ..competitors import check_run
from .common import (
    Options,
    bytes_moved,
    elem_size,
    features,
    inproc_ranks,
    result_row,
    timed,
    verified,
    within_budget,
)

ABLATIONS = {  # MGG Fig. 10: each switch against the full design
    "full": lambda c: c,
    "no-partitioning": lambda c: Config(0, c.dist, c.wpb, c.interleave),
    "no-interleaving": lambda c: Config(c.ps, c.dist, c.wpb, False),
}


def ablation(opt: Options) -> Iterator[dict]:
    """Neighbor partitioning and interleaving on/off on a multi-rank plan (remote work present).
    The thread/warp/block-level NVSHMEM get study needs the multi-GPU runtime and a GPU."""
    pes = max(opt.pes)
    cases = list(itertools.product(opt.graphs, opt.dims, ABLATIONS.items()))
    for spec, dim, (name, mk) in within_budget(opt, "ablation", cases, lambda c: f"{c[0]} D={c[1]} {c[2][0]}"):
        t0 = time.perf_counter()
        g, _ = cache.normalized(spec, opt.data_dir)
        if pes > g.num_nodes:
            continue
        cfg = mk(opt.config)
        x = features(g.num_nodes, dim, str(opt.device), opt.dtype)
        fn = inproc_ranks(cache.plan(g, pes), x, cfg, "peers")
        prep_s = time.perf_counter() - t0
        if not verified(opt, f"ablation {spec} D={dim} {name}", check_run, fn, g, x):
            continue
        t, peak = timed(opt, fn)
        gbps = bytes_moved(g, dim, elem_size(opt)) / (t.median_ms * 1e-3) / 1e9
        yield result_row(
            "ablation",
            f"{spec}/d{dim}/{name}",
            spec,
            g,
            dim,
            opt,
            f"mgg[{name}]",
            pes,
            cfg,
            "fwd",
            t,
            peak,
            gbps,
            prep_s,
        )
        opt.budget.done("ablation", time.perf_counter() - t0)

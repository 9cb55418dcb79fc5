"""The kernel suite: forward and backward of mgg.aggregate against the peers."""

from __future__ import annotations

import itertools
import time
from typing import Iterator

from .. import cache
from ..peers import PEERS, verify
from .common import (
    Options,
    bytes_moved,
    elem_size,
    features,
    result_row,
    timed,
    verified,
    within_budget,
)


def kernel(opt: Options) -> Iterator[dict]:
    """Forward and backward of mgg.aggregate against cuSPARSE (torch.sparse), cupy and PyG."""
    cases = list(itertools.product(opt.graphs, opt.dims, opt.impls))
    for spec, dim, impl in within_budget(opt, "kernel", cases, lambda c: f"{c[0]} D={c[1]} {c[2]}"):
        t0 = time.perf_counter()
        g, _ = cache.normalized(spec, opt.data_dir)
        x = features(g.num_nodes, dim, str(opt.device), opt.dtype)
        prep = PEERS[impl](g, x, config=opt.config, plan=cache.plan(g)) if impl == "mgg" else PEERS[impl](g, x)
        prep_s = time.perf_counter() - t0
        if prep is None:
            continue
        if not verified(opt, f"kernel {spec} D={dim} {impl}", verify, prep, g, x):
            opt.budget.done("kernel", time.perf_counter() - t0)
            continue
        for pass_, fn in (("fwd", prep.fwd), ("bwd", prep.bwd)):
            t, peak = timed(opt, fn)
            gbps = bytes_moved(g, dim, elem_size(opt)) / (t.median_ms * 1e-3) / 1e9
            yield result_row(
                "kernel",
                f"{spec}/d{dim}",
                spec,
                g,
                dim,
                opt,
                impl,
                1,
                opt.config if impl == "mgg" else None,
                pass_,
                t,
                peak,
                gbps,
                prep_s,
            )
        opt.budget.done("kernel", time.perf_counter() - t0)

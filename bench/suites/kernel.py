"""The kernel suite: forward and backward of mgg.aggregate against the competitors, at the given config
and (impl mgg-tuned; on a GPU by default) at the config the tuner finds for the graph and dim."""

from __future__ import annotations

import itertools
import time
from typing import Iterator

from mgg.runtime.targets import LocalTarget

from .. import cache
from ..competitors import IMPLEMENTATIONS, verify
from .common import (
    Options,
    bytes_moved,
    elem_size,
    features,
    result_row,
    timed,
    tuned,
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
        prepare = IMPLEMENTATIONS[impl]
        prep = prepare(g, x, config=opt.config, plan=cache.plan(g)) if impl == "mgg" else prepare(g, x)
        prep_s = time.perf_counter() - t0
        if prep is None:
            continue
        if not verified(opt, f"kernel {spec} D={dim} {impl}", verify, prep, g, x):
            opt.budget.done("kernel", time.perf_counter() - t0)
            continue
        yield from _timed_rows(opt, spec, g, dim, impl, opt.config if impl == "mgg" else None, prep, prep_s)
        if impl == "mgg" and _tunes(opt) and not opt.prep_only:
            chosen = tuned(opt, LocalTarget(cache.plan(g)), x).chosen
            prep = IMPLEMENTATIONS["mgg"](g, x, config=chosen, plan=cache.plan(g))
            if verified(opt, f"kernel {spec} D={dim} mgg tuned {chosen.as_tuple()}", verify, prep, g, x):
                yield from _timed_rows(opt, spec, g, dim, "mgg-tuned", chosen, prep, prep_s)
        opt.budget.done("kernel", time.perf_counter() - t0)


def _tunes(opt: Options) -> bool:
    """Whether mgg is also timed at its tuned config: opt.kernel_tuned, by default on a GPU (on the
    CPU executor warps_per_block and dist do not change the work)."""
    return opt.kernel_tuned if opt.kernel_tuned is not None else opt.device.type == "cuda"


def _timed_rows(opt: Options, spec: str, g, dim: int, impl: str, config, prep, prep_s: float) -> Iterator[dict]:
    for pass_, fn in (("fwd", prep.fwd), ("bwd", prep.bwd)):
        t, peak = timed(opt, fn)
        gbps = bytes_moved(g, dim, elem_size(opt)) / (t.median_ms * 1e-3) / 1e9
        yield result_row("kernel", f"{spec}/d{dim}", spec, g, dim, opt, impl, 1, config, pass_, t, peak, gbps, prep_s)

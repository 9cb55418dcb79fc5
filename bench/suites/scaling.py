"""The scaling suite: in-process ranks at growing rank counts, at the given and the tuned config."""

from __future__ import annotations

import itertools
import time
from typing import Iterator

from mgg.runtime.targets import InprocTarget, LocalTarget

from .. import cache
from ..competitors import check_run
from .common import (
    Options,
    bytes_moved,
    elem_size,
    features,
    format_rank_edges,
    impl_name,
    inproc_ranks,
    result_row,
    timed,
    tuned,
    verified,
    within_budget,
)


def scaling(opt: Options) -> Iterator[dict]:
    """1, 2, 4 ... PEs on one device, in one process (the multi-process runs are the dist suite):
    at the given config, then at the config the tuner finds for that step (impl ...-tuned).
    With opt.partition other than 'range', the plan is of the graph relabelled by that method
    (the features are random, so their order does not matter) and the impl names say so."""
    cases = list(itertools.product(opt.graphs, opt.dims, opt.pes, ("peers", "halo")))
    for spec, dim, pes, via in within_budget(opt, "scaling", cases, lambda c: f"{c[0]} D={c[1]} P={c[2]} {c[3]}"):
        t0 = time.perf_counter()
        g, _ = cache.normalized(spec, opt.data_dir)
        if pes > g.num_nodes:
            continue
        plan = cache.plan(g, pes, part=cache.partition(spec, opt.data_dir, pes, opt.partition))
        x = features(g.num_nodes, dim, str(opt.device), opt.dtype)
        fn = inproc_ranks(plan, x, opt.config, via)
        prep_s = time.perf_counter() - t0
        what = f"scaling {spec} D={dim} P={pes} {via}"
        if not verified(opt, what, check_run, fn, plan.graph, x):  # plan.graph: relabelled by a partition
            continue
        t, peak = timed(opt, fn)
        stats = plan.stats()
        remote = sum(s["remote_edges"] for s in stats) / max(g.num_edges, 1)
        case = f"{spec}/d{dim}/remote={remote:.3f}"
        gbps = bytes_moved(g, dim, elem_size(opt)) / (t.median_ms * 1e-3) / 1e9
        row = result_row(
            "scaling",
            case,
            spec,
            g,
            dim,
            opt,
            impl_name(f"mgg-{via}-inproc", opt),
            pes,
            opt.config,
            "fwd",
            t,
            peak,
            gbps,
            prep_s,
        )
        yield dict(row, rank_edges=format_rank_edges(stats))
        if not opt.prep_only:
            target = InprocTarget(plan, via) if pes > 1 else LocalTarget(plan)
            chosen = tuned(opt, target, x).chosen
            fn = target.prepare(x, chosen)
            if verified(opt, f"{what} tuned {chosen.as_tuple()}", check_run, fn, plan.graph, x):
                t, peak = timed(opt, fn)
                gbps = bytes_moved(g, dim, elem_size(opt)) / (t.median_ms * 1e-3) / 1e9
                row = result_row(
                    "scaling",
                    case,
                    spec,
                    g,
                    dim,
                    opt,
                    impl_name(f"mgg-{via}-inproc-tuned", opt),
                    pes,
                    chosen,
                    "fwd",
                    t,
                    peak,
                    gbps,
                    prep_s,
                )
                yield dict(row, rank_edges=format_rank_edges(stats))
        opt.budget.done("scaling", time.perf_counter() - t0)

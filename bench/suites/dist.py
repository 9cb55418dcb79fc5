"""The dist suite: the distributed epoch over torchrun processes (bench/workers/dist_epoch.py)."""

from __future__ import annotations

import itertools
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

from mgg.runtime.timing import Timing

from .. import cache
from .common import (
    Options,
    impl_name,
    result_row,
    timed,
    torchrun,
    torchrun_command,
    within_budget,
)


def dist(opt: Options) -> Iterator[dict]:
    """Epoch time of full-graph GCN training under torchrun with 1, 2, 4 ... processes on this
    device, for each backend that can run here (halo always; nvshmem with a GPU and an NVSHMEM
    build). Each run is a child torchrun (bench/workers/dist_epoch.py) that reads the graph from the disk
    cache; the epoch time is the slowest rank's, per epoch, and the median over epochs. The ranks
    own the nodes opt.partition gives them (partitioned here first, so the workers read the disk
    cache)."""
    import json

    from mgg.distributed import nvshmem

    backends = ["halo"] + (["nvshmem"] if nvshmem.available() is None and opt.device.type == "cuda" else [])
    cases = list(itertools.product(opt.graphs, opt.dims, opt.pes, backends))
    for spec, dim, pes, backend in within_budget(opt, "dist", cases, lambda c: f"{c[0]} D={c[1]} P={c[2]} {c[3]}"):
        t0 = time.perf_counter()
        g, _ = cache.graph(spec, opt.data_dir)  # made once here; the workers read the disk cache
        if pes > 1:
            cache.partition(spec, opt.data_dir, pes, opt.partition)
        prep_s = time.perf_counter() - t0
        if opt.prep_only:
            t, peak = timed(opt, None)
            yield result_row(
                "dist",
                f"{spec}/d{dim}/gcn2-h16",
                spec,
                g,
                dim,
                opt,
                impl_name(f"mgg-{backend}", opt),
                pes,
                opt.config,
                "epoch",
                t,
                peak,
                prep_s=prep_s,
            )
            continue
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "r.json"
            args = [spec, dim, backend, opt.device.type, opt.warmup, opt.reps, out, opt.data_dir or "", opt.partition]
            cmd, env = torchrun_command("dist_epoch.py", pes, args, split_threads=True, nvshmem=True)
            timeout = min(opt.worker_timeout_s, max(opt.budget.left(), 1.0))
            r = torchrun(cmd, env, timeout)
            if r.returncode != 0:  # reported and skipped: one failed case does not end the suite
                err = r.stderr if len(r.stderr) <= 6000 else f"{r.stderr[:3500]}\n[...]\n{r.stderr[-2500:]}"
                print(
                    f"dist suite: {backend} with {pes} PEs on {spec} failed (exit {r.returncode}):\n{err}",
                    file=sys.stderr,
                )
                opt.budget.skipped.append(f"dist {spec} D={dim} P={pes} {backend} (failed: exit {r.returncode})")
                opt.budget.done("dist", time.perf_counter() - t0)
                continue
            res = json.loads(out.read_text())
        t = Timing(res["median_ms"], res["p10_ms"], res["p90_ms"], res["epochs"])
        yield dict(
            result_row(
                "dist",
                f"{spec}/d{dim}/gcn2-h16",
                spec,
                g,
                dim,
                opt,
                impl_name(f"mgg-{backend}", opt),
                pes,
                opt.config,
                "epoch",
                t,
                res["peak_mem_mb"],
                prep_s=prep_s + res["prep_s"],
            ),
            rank_edges=res["rank_edges"],
        )
        opt.budget.done("dist", time.perf_counter() - t0)

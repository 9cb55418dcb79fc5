"""The `fetch` suite: MGG's comparisons through one kernel (its Figs. 7, 8 and 10c), side by side
on the same graph, plan and run. P PEs share one device; for each way of reaching peers' rows
it records every rank's aggregation time (the slowest rank is the step time) and the bytes each
rank reads from its peers, computed from the plan (traffic_mb, rank_traffic_mb: not measured):

- in one process, ranks one after another (time-sliced, as the scaling suite):
  `direct`     peers' rows read in place through pointers (aggregate_peers, fetch 'direct');
  `uva`        peers' rows in pinned host memory, read zero-copy (fetch 'uva'; DGL on
               PyTorch-Direct, Fig. 7) - GPU only;
  `uvm`        peers' rows in CUDA managed memory (MGG over unified memory, Fig. 8) - GPU only;
  `halo`       each rank gathers its halo rows into a buffer first (the halo backend's data);
  `allgather`  each rank gathers every rank's rows first (CAGNET 1D);
- over NVSHMEM, one process per PE under torchrun (bench/workers/fetch_worker.py), GPU only:
  `get-thread`, `get-warp`, `get-block`  NVSHMEM gets at thread, warp and block scope (Fig. 10c).

With --ncu (where Nsight Compute runs) each in-process case is run once more under ncu and the
mgg kernels' achieved occupancy and SM throughput go into the CSV (Fig. 8's metrics)."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import torch

from mgg.runtime.timing import Timing, measure

from .. import cache
from .common import features, result_row, torchrun_command, verified, within_budget

IN_PROCESS = ("direct", "uva", "uvm", "halo", "allgather")
NVSHMEM = ("get-thread", "get-warp", "get-block")
MODES = NVSHMEM + IN_PROCESS
GPU_ONLY = ("uva", "uvm") + NVSHMEM
NCU_METRICS = {
    "achieved_occupancy": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm_throughput": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
}


def _rank_fns(mode: str, g, pes: int, x: torch.Tensor, config) -> tuple[list, list]:
    """Per rank: the aggregation to time, and the bytes it reads from its peers."""
    from mgg import memory

    elem = x.element_size() * x.size(1)
    plan = cache.plan(g, pes, gathered=mode == "allgather")
    b = plan.bounds
    tables = [x[int(b[r]) : int(b[r + 1])] for r in range(pes)]
    fns, traffic = [], []
    for r in range(pes):
        rp = plan.rank_plan(r, config)
        p = rp.shard
        if mode in ("direct", "uva", "uvm"):
            if mode == "uva":
                peers = [t if q == r else memory.pinned_table(t) for q, t in enumerate(tables)]
            elif mode == "uvm":
                peers = [t if q == r else memory.managed_table(t) for q, t in enumerate(tables)]
            else:
                peers = tables
            rp.op_args(x.device, peers=True, transposed=False)
            fns.append(
                lambda r=r, rp=rp, peers=peers: rp.aggregate_peers(
                    tables[r], peers, r, "uva" if mode == "uva" else "direct"
                )
            )
            traffic.append(p.num_remote_edges * elem)  # every remote edge reads its row
        elif mode == "halo":
            rp.op_args(x.device, transposed=False)
            halo = torch.from_numpy(p.halo_nodes).to(x.device)
            fns.append(lambda r=r, rp=rp, halo=halo: rp.aggregate(tables[r].contiguous(), x.index_select(0, halo)))
            traffic.append(p.num_halo * elem)
        else:  # allgather: the whole table is gathered, then the local kernel reads it
            rp.op_args(x.device, transposed=False)
            empty = x.new_empty((0, x.size(1)))
            fns.append(lambda rp=rp, empty=empty: rp.aggregate(torch.cat(tables), empty))
            traffic.append((g.num_nodes - p.num_rows) * elem)
    return fns, traffic


def _ncu(opt, spec: str, dim: int, pes: int, mode: str) -> dict:
    """The mgg kernels' metrics of one case, from a child run under Nsight Compute."""
    if not (opt.ncu and shutil.which("ncu") and opt.device.type == "cuda"):
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            "ncu",
            "--csv",
            "--kernel-name",
            "regex:aggregate_",
            "--metrics",
            ",".join(NCU_METRICS.values()),
            sys.executable,
            "-m",
            "bench",
            "fetch",
            "--graphs",
            spec,
            "--dims",
            str(dim),
            "--pes",
            str(pes),
            "--fetch-modes",
            mode,
            "--reps",
            "20",
            "--warmup",
            "0",
            "--quiet",
            "--out",
            tmp,
        ]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=opt.worker_timeout_s)
    values = {k: [] for k in NCU_METRICS}
    for line in r.stdout.splitlines():
        for k, metric in NCU_METRICS.items():
            if f'"{metric}"' in line:
                try:
                    values[k].append(float(line.rsplit(",", 1)[1].strip('"').replace(",", "")))
                except ValueError:
                    pass
    return {k: round(sum(v) / len(v), 2) for k, v in values.items() if v}


def _nvshmem_times(opt, spec: str, dim: int, pes: int) -> dict:
    """Every rank's median time per NVSHMEM get scope, from one torchrun of PEs on this GPU."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        args = [spec, dim, ",".join(NVSHMEM), opt.warmup, opt.reps, out, opt.data_dir or ""]
        cmd, env = torchrun_command("fetch_worker.py", pes, args, nvshmem=True)
        r = subprocess.run(
            cmd, capture_output=True, text=True, env=env, timeout=min(opt.worker_timeout_s, max(opt.budget.left(), 1.0))
        )
        if r.returncode != 0:
            raise RuntimeError(r.stderr[-2000:])
        return json.loads(out.read_text())


def fetch(opt) -> Iterator[dict]:
    """Rows of the fetch suite (see the module's docstring)."""
    from ..competitors import check_run

    modes = [m for m in (opt.fetch_modes or MODES) if m in MODES]
    gpu = opt.device.type == "cuda"
    cases = list(itertools.product(opt.graphs, opt.dims, opt.pes))
    for spec, dim, pes in within_budget(opt, "fetch", cases, lambda c: f"{c[0]} D={c[1]} P={c[2]}"):
        t0 = time.perf_counter()
        g, _ = cache.normalized(spec, opt.data_dir)
        if pes > g.num_nodes:
            continue
        x = features(g.num_nodes, dim, str(opt.device), opt.dtype)
        nv = {}
        if gpu and any(m in NVSHMEM for m in modes):
            try:
                nv = _nvshmem_times(opt, spec, dim, pes)
            except Exception as e:  # reported and skipped: the other modes still run
                print(f"fetch suite: the NVSHMEM run of {spec} P={pes} failed:\n{e}", file=sys.stderr)
                opt.budget.skipped.append(f"fetch {spec} D={dim} P={pes} NVSHMEM gets (failed)")
        for mode in modes:
            if mode in GPU_ONLY and not gpu:
                opt.budget.skipped.append(f"fetch {spec} D={dim} P={pes} {mode} (needs a GPU)")
                continue
            if mode in NVSHMEM:
                if mode not in nv:
                    continue
                per_rank = [Timing(*m) for m in nv[mode]["ranks"]]
                traffic = nv[mode]["traffic"]
            else:
                fns, traffic = _rank_fns(mode, g, pes, x, opt.config)
                if not verified(opt, f"fetch {spec} D={dim} P={pes} {mode}", check_run, fns, g, x):
                    continue
                per_rank = [
                    measure(f, opt.device, opt.warmup, opt.reps)
                    if not opt.prep_only
                    else Timing(float("nan"), float("nan"), float("nan"), 0)
                    for f in fns
                ]
            slow = max(per_rank, key=lambda t: t.median_ms)
            row = result_row(
                "fetch",
                f"{spec}/d{dim}/P{pes}/{mode}",
                spec,
                g,
                dim,
                opt,
                f"fetch-{mode}",
                pes,
                opt.config,
                "fwd",
                slow,
                float("nan"),
                prep_s=time.perf_counter() - t0,
            )
            row.update(
                rank_ms=";".join(f"r{r}:{t.median_ms:.4f}" for r, t in enumerate(per_rank)),
                traffic_mb=round(sum(traffic) / 2**20, 3),
                rank_traffic_mb=";".join(f"r{r}:{b / 2**20:.3f}" for r, b in enumerate(traffic)),
            )
            if mode in IN_PROCESS:
                row.update(_ncu(opt, spec, dim, pes, mode))
            yield row
        opt.budget.done("fetch", time.perf_counter() - t0)

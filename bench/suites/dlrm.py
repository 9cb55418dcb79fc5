"""The `dlrm` suite (MGG Table 4, DLRM on Criteo Kaggle): sharded embedding-bag lookups of
Criteo-Kaggle-like batches (mgg.embedding.dlrm: 26 tables of that data set's cardinalities, capped by
--dlrm-cap; power-law indices; pooling factor 1 and a multi-hot setting of 8) under torchrun with
2 and 4 ranks (the --pes above 1), mgg's `halo` path (per-batch plan, distinct remote rows
fetched once, the fused op) against the `alltoall` baseline of DLRM systems (indices to the
owners, pooling there, partial bags back: torchrec's row-wise scheme on torch.distributed).

Rows: impl mgg-halo and alltoall-rw (and mgg-nvshmem on GPUs with nvshmem4py: traffic_mb
counts the remote rows its kernel reads), passes fwd and fwd+bwd (median of the slowest rank per
batch, the per-batch plan included), traffic_mb (bytes all ranks send per batch, forward, in MB)
and rank_traffic_mb; and impl mgg-plan, pass plan: building one rank's plan of a batch alone.
Every case is checked against torch.nn.functional.embedding_bag before it is timed.

The plot (one PNG): lookup time and bytes moved per batch against the ranks.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Iterator

from mgg.runtime.timing import Timing

from .common import torchrun, torchrun_command, within_budget

POOLINGS = (1, 8)
IMPLS = {"halo": "mgg-halo", "alltoall": "alltoall-rw", "nvshmem": "mgg-nvshmem"}


def _row(opt, case, rows, lookups, dim, impl, pes, pass_, t: Timing, **extra):
    return dict(
        suite="dlrm",
        case=case,
        graph="criteo-kaggle-synth",
        nodes=rows,
        edges=lookups,
        dim=dim,
        dtype="float32",
        impl=impl,
        pes=pes,
        ps=opt.config.ps,
        dist=opt.config.dist,
        wpb=opt.config.wpb,
        **{"pass": pass_},
        median_ms=round(t.median_ms, 5),
        p10_ms=round(t.p10_ms, 5),
        p90_ms=round(t.p90_ms, 5),
        gbps=float("nan"),
        bw_fraction=float("nan"),
        peak_mem_mb=float("nan"),
        prep_s=0.0,
        **extra,
    )


def dlrm(opt) -> Iterator[dict]:
    pes_list = [p for p in opt.pes if p > 1] or [2]
    cap = "none" if opt.dlrm_cap is None else str(opt.dlrm_cap)
    cases = [(d, p, k) for d in opt.dims for k in POOLINGS for p in pes_list]
    for dim, pes, pooling in within_budget(opt, "dlrm", cases, lambda c: f"D={c[0]} P={c[1]} pooling={c[2]}"):
        t0 = time.perf_counter()
        case = f"b{opt.dlrm_batch}/cap{cap}/pool{pooling}/d{dim}"
        if opt.prep_only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "r.json"
            args = [dim, opt.dlrm_batch, cap, pooling, opt.device.type, opt.warmup, opt.reps, out]
            cmd, env = torchrun_command("dlrm_worker.py", pes, args, split_threads=True)
            r = torchrun(cmd, env, min(opt.worker_timeout_s, max(opt.budget.left(), 1.0)))
            if r.returncode != 0:
                err = r.stderr if len(r.stderr) <= 6000 else f"{r.stderr[:3500]}\n[...]\n{r.stderr[-2500:]}"
                print(f"dlrm suite: {case} with {pes} ranks failed (exit {r.returncode}):\n{err}", file=sys.stderr)
                opt.budget.skipped.append(f"dlrm {case} P={pes} (failed: exit {r.returncode})")
                opt.budget.done("dlrm", time.perf_counter() - t0)
                continue
            res = json.loads(out.read_text())
        for w in res["wrong"]:
            opt.wrong.append(f"dlrm {case} P={pes} {w}")
            print(f"bench: dlrm {case} P={pes} {w}: wrong result, not timed", file=sys.stderr)
        for key, m in res["impls"].items():
            t = Timing(m["median_ms"], m["p10_ms"], m["p90_ms"], m["reps"])
            if key == "plan":
                yield _row(opt, case, res["rows"], res["lookups"], dim, "mgg-plan", pes, "plan", t)
                continue
            backend, pass_ = key.split(":")
            sent = m["rank_bytes"]
            yield _row(
                opt,
                case,
                res["rows"],
                res["lookups"],
                dim,
                IMPLS[backend],
                pes,
                pass_,
                t,
                traffic_mb=round(sum(sent) / 2**20, 4),
                rank_traffic_mb=";".join(f"{b / 2**20:.4f}" for b in sent),
            )
        opt.budget.done("dlrm", time.perf_counter() - t0)


def plot(rows: list[dict], path: Path) -> None:
    """Lookup time (forward, and forward + backward) and MB moved per batch against the ranks, per
    impl and pooling factor; the plan's build time beside the lookups."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sel = [r for r in rows if r["suite"] == "dlrm"]
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(11, 4))
    series, traffic = defaultdict(list), defaultdict(list)
    for r in sel:
        pool = r["case"].split("/pool")[1].split("/")[0]
        label = f"{r['impl']} {r['pass']} pool={pool} D={r['dim']}"
        series[label].append((int(r["pes"]), float(r["median_ms"])))
        if r["pass"] == "fwd":
            traffic[f"{r['impl']} pool={pool} D={r['dim']}"].append((int(r["pes"]), float(r["traffic_mb"])))
    for label, pts in sorted(series.items()):
        pts.sort()
        ax_t.plot(
            [p for p, _ in pts], [t for _, t in pts], marker="o", ls="--" if "plan" in label else "-", label=label
        )
    for label, pts in sorted(traffic.items()):
        pts.sort()
        ax_b.plot([p for p, _ in pts], [b for _, b in pts], marker="o", label=label)
    pes = sorted({int(r["pes"]) for r in sel})
    for ax, what in ((ax_t, "median ms per batch (slowest rank)"), (ax_b, "MB sent per batch (all ranks, fwd)")):
        ax.set_xlabel("ranks")
        ax.set_xticks(pes)
        ax.set_ylabel(what)
        ax.legend(fontsize=6)
    dev = sel[0]["device"] if sel else ""
    fig.suptitle(f"dlrm: sharded embedding lookup, Criteo-Kaggle-like — {dev}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary_lines(rows: list[dict]) -> list[str]:
    """The summary's dlrm table: per case and ranks, both implementations' times, the plan's
    share and the bytes each moves."""
    sel = [r for r in rows if r["suite"] == "dlrm"]
    if not sel:
        return []
    by = defaultdict(dict)
    for r in sel:
        by[(r["case"], int(r["pes"]))][(r["impl"], r["pass"])] = r
    out = [
        "## dlrm: sharded embedding lookup per batch (median ms, slowest rank; MB all ranks send, fwd)",
        "",
        "| case | ranks | mgg fwd | all-to-all fwd | mgg fwd+bwd | all-to-all fwd+bwd | mgg plan alone | "
        "mgg MB | all-to-all MB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def ms(c, key):
        return f"{float(c[key]['median_ms']):.1f}" if key in c else "-"

    def mb(c, impl):
        return f"{float(c[(impl, 'fwd')]['traffic_mb']):.2f}" if (impl, "fwd") in c else "-"

    for (case, pes), c in sorted(by.items()):
        out.append(
            f"| {case} | {pes} | {ms(c, ('mgg-halo', 'fwd'))} | {ms(c, ('alltoall-rw', 'fwd'))} | "
            f"{ms(c, ('mgg-halo', 'fwd+bwd'))} | {ms(c, ('alltoall-rw', 'fwd+bwd'))} | "
            f"{ms(c, ('mgg-plan', 'plan'))} | {mb(c, 'mgg-halo')} | {mb(c, 'alltoall-rw')} |"
        )
    return out + [""]

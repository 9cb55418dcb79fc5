"""How many bytes the nvshmem backend reads from peers per aggregation, in each remote-read mode
(issue 34): `per-edge` (MGG's fused kernel: a remote row once per edge that names it) and `once`
(each of a rank's halo rows gathered once from its owner, then aggregated from a local table).

    python -m bench.remote_reads [--graphs rmat-reddit:scale=0.0005 rmat-products:scale=0.0001]
                                 [--ranks 2 4 8] [--dim 32] [--sources direct get-warp]
                                 [--model-graphs rmat-reddit rmat-products] [--out DIR]

Two parts, both written to remote-reads-<date>.{csv,md,png}:

- counted: every rank's steps run by the CUDA kernels under the SIMT emulator (simt/emulator.py,
  fp32) on small stand-ins with the degree profiles of Reddit and products, each result checked
  against the float64 reference (per-edge: A @ x; once: the gathered rows are x's halo rows)
  before its counters are read. Bytes from peers: direct loads from peers' tables, or the rows
  NVSHMEM gets landed (read once from shared memory). The ratio to the unique remote rows' bytes
  (halo rows x D x 4) is the issue's figure; sectors per request of the local and the remote
  row loads beside it.
- model: for the full-size graphs, each rank's local edges, remote edges and halo rows (the
  plan's, exact) turned into bytes at D 16..256 and into a step-time lower bound from the H100
  SXM's published bandwidths: HBM3 3.35 TB/s, NVLink 4 450 GB/s per direction (900 GB/s
  bidirectional), from mgg.runtime.remote_reads.remote_read_bytes: max(peer bytes / NVLink,
  bytes moved meanwhile / HBM) + bytes moved after / HBM. per-edge: the remote edges' rows from
  peers beside the local edges' rows (the fused kernel overlaps them); once: the halo rows from
  peers (and their write) beside the local edges' rows, then the remote edges' rows from the
  halo table (run_peers_once's overlapped path). The halo backend moves the same rows as `once`, through a
  host-driven all-to-all whose launch and synchronisation costs are not modelled. A model, not
  a measurement: the GPU issue measures it. The time to build every rank's shard (the plan both
  modes share) and what the once mode adds (every rank's halo gather step; one rank's halo return
  step for GAT's backward, built as under torchrun, where each rank finds every rank's halo rows
  on its own; the arrays of every rank's two steps), are measured on this machine.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MODES = ("per-edge", "once")
COUNTED = [
    "part",
    "graph",
    "ranks",
    "dim",
    "source",
    "mode",
    "remote_edges",
    "halo_rows",
    "peer_bytes",
    "unique_bytes",
    "peer_over_unique",
    "local_sectors_per_request",
    "remote_sectors_per_request",
]
MODELLED = [
    "part",
    "graph",
    "ranks",
    "dim",
    "mode",
    "nvlink_bytes",
    "hbm_bytes",
    "model_ms",
    "halo_backend_bytes",
    "shard_build_s",
    "shard_mb",
    "gather_build_s",
    "return_build_s",
    "gather_mb",
]


def _loads(folder: Path) -> dict:
    """A rank's loads summed per region (over the sites that read it)."""
    from simt import emulator

    out: dict = {}
    for (_, region), v in emulator.counters_of(folder)["loads"].items():
        acc = out.setdefault(region, dict.fromkeys(emulator.LOAD_FIELDS, 0))
        for f in emulator.LOAD_FIELDS:
            acc[f] += v[f]
    return out


def _sum(per_rank: list, pick) -> dict:
    """requests, sectors and bytes summed over ranks and the regions pick(rank) names."""
    tot = dict(requests=0, sectors=0, bytes=0)
    for r, loads in enumerate(per_rank):
        for region in pick(r):
            for f in tot:
                tot[f] += loads.get(region, {}).get(f, 0)
    return tot


def _spr(t: dict) -> object:
    return round(t["sectors"] / t["requests"], 3) if t["requests"] else ""


def counted(spec: str, ranks: int, dim: int, source: str, work: Path) -> list[dict]:
    """Both modes of one case under the emulator, summed over ranks. per-edge: the fused step
    reading peers' rows by `source`; once: the halo gather by `source`, then the step reading
    the gathered rows from the local halo table."""
    import torch

    from bench import cache
    from mgg import Config
    from mgg.testing import assert_matches_reference
    from simt.emulated_ops import aggregate

    g, _ = cache.graph(spec)
    plan = cache.plan(g, ranks)
    x = torch.randn(g.num_nodes, dim, generator=torch.Generator().manual_seed(0))
    completion = "proxy" if source.startswith("get") else "loadstore"
    out = aggregate(work / "per-edge", plan, x, Config(), source, completion, counters=True)
    assert_matches_reference(out, g, x)
    halo = aggregate(work / "gather", plan, x, Config(), source, completion, counters=True, halo_gather=True)
    shards = [plan.shard(r) for r in range(ranks)]
    if not torch.equal(halo, x[torch.from_numpy(np.concatenate([s.halo_nodes for s in shards]))]):
        raise AssertionError(f"{spec}, {ranks} ranks, {source}: the halo gather did not bring the halo rows")
    out = aggregate(work / "once", plan, x, Config(), "table", counters=True)  # reads the gathered halo table
    assert_matches_reference(out, g, x)
    edge, gather, once = ([_loads(work / k / f"rank{r}") for r in range(ranks)] for k in ("per-edge", "gather", "once"))

    def from_peers(r: int) -> list:  # direct loads from peers' tables, or the rows gets landed
        return [f"peer{p}" for p in range(ranks) if p != r] if source == "direct" else ["shared"]

    remote_edges = sum(s.num_remote_edges for s in shards)
    halo_rows = sum(s.num_halo for s in shards)
    unique = halo_rows * dim * 4
    figures = {
        "per-edge": (
            _sum(edge, from_peers)["bytes"],
            _spr(_sum(edge, lambda r: [f"peer{r}"])),
            _spr(_sum(edge, from_peers)),
        ),
        "once": (
            _sum(gather, from_peers)["bytes"],
            _spr(_sum(once, lambda r: ["table"])),
            _spr(_sum(once, lambda r: ["remote_table"])),
        ),
    }
    return [
        dict(
            part="counted",
            graph=spec,
            ranks=ranks,
            dim=dim,
            source=source,
            mode=mode,
            remote_edges=remote_edges,
            halo_rows=halo_rows,
            peer_bytes=peer,
            unique_bytes=unique,
            peer_over_unique=round(peer / unique, 3) if unique else "",
            local_sectors_per_request=local,
            remote_sectors_per_request=remote,
        )
        for mode, (peer, local, remote) in figures.items()
    ]


def _nbytes(*parts) -> int:
    """Bytes of numpy arrays, tensors and CSRs (their rowptr, col, weight)."""
    total = 0
    for p in parts:
        if hasattr(p, "rowptr"):
            total += _nbytes(p.rowptr, p.col, *([p.weight] if p.weight is not None else []))
        else:
            total += p.nbytes
    return total


def modelled(spec: str, ranks: int, dims: list) -> list[dict]:
    """The model's rows of one full-size graph and rank count (the slowest rank's figures)."""
    from bench import cache
    from mgg import Config
    from mgg.plan import Plan
    from mgg.runtime.remote_reads import estimate_ms, remote_read_bytes

    g, _ = cache.graph(spec)
    t0 = time.perf_counter()
    plan = Plan(g, ranks)
    shards = [plan.shard(r) for r in range(ranks)]
    t1 = time.perf_counter()
    gathers = [plan.rank_plan(r, Config()).halo_gather for r in range(ranks)]  # what the once mode adds
    t2 = time.perf_counter()
    Plan(g, bounds=plan.bounds).halo_return(ranks - 1, Config())  # GAT's return step, as one rank builds it
    t3 = time.perf_counter()
    returns = [plan.halo_return(r, Config()) for r in range(ranks)]
    shard_mb = sum(_nbytes(s.local, s.remote, s.remote_pe, s.remote_offset, s.halo_pe, s.halo_offset) for s in shards)
    steps = gathers + returns
    gather_mb = sum(_nbytes(h.local, h.remote, h.remote_pe, h.schedule.ranges, h.schedule.fixups) for h in steps)
    rows = []
    for dim in dims:
        worst = dict.fromkeys(MODES, (0.0, 0, 0))  # the slowest rank's (ms, peer bytes, local bytes)
        for shard in shards:
            ms = estimate_ms(shard, dim, 4)
            for mode, (peer, during, after) in remote_read_bytes(shard, dim, 4).items():
                if ms[mode] > worst[mode][0]:
                    worst[mode] = (ms[mode], peer, during + after)
        halo_bytes = max(s.num_halo for s in shards) * dim * 4
        for mode in MODES:
            t, nv, hbm = worst[mode]
            rows.append(
                dict(
                    part="model",
                    graph=spec,
                    ranks=ranks,
                    dim=dim,
                    mode=mode,
                    nvlink_bytes=nv,
                    hbm_bytes=hbm,
                    model_ms=round(t, 3),
                    halo_backend_bytes=halo_bytes,
                    shard_build_s=round(t1 - t0, 2),
                    shard_mb=round(shard_mb / 2**20, 1),
                    gather_build_s=round(t2 - t1, 3),
                    return_build_s=round(t3 - t2, 3),
                    gather_mb=round(gather_mb / 2**20, 1),
                )
            )
    return rows


def markdown(counted_rows: list[dict], model_rows: list[dict]) -> str:
    out = [
        "Counted (SIMT emulator, fp32, all ranks): bytes read from peers per aggregation over the unique remote "
        "rows' bytes",
        "",
        "| graph | P | D | source | per-edge ÷ unique | once ÷ unique | local sectors/req | remote sectors/req "
        "(per-edge, once) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by = {(r["graph"], r["ranks"], r["dim"], r["source"], r["mode"]): r for r in counted_rows}
    for g, p, d, s, m in by:
        if m != "per-edge":
            continue
        e, o = by[(g, p, d, s, "per-edge")], by[(g, p, d, s, "once")]
        out.append(
            f"| {g} | {p} | {d} | {s} | {e['peer_over_unique']} | {o['peer_over_unique']} | "
            f"{e['local_sectors_per_request']} | {e['remote_sectors_per_request']}, {o['remote_sectors_per_request']} |"
        )
    if model_rows:
        out += [
            "",
            "Model (H100 SXM published bandwidths; not a measurement): the slowest rank's forward aggregation",
            "",
            "| graph | P | D | per-edge: NVLink MB | once: NVLink MB | per-edge ms | once ms | halo backend MB | "
            "shards: build s, MiB | once: gathers s, a rank's return s, MiB |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        mb = {(r["graph"], r["ranks"], r["dim"], r["mode"]): r for r in model_rows}
        for g, p, d, m in mb:
            if m != "per-edge":
                continue
            e, o = mb[(g, p, d, "per-edge")], mb[(g, p, d, "once")]
            out.append(
                f"| {g} | {p} | {d} | {e['nvlink_bytes'] / 1e6:.1f} | {o['nvlink_bytes'] / 1e6:.1f} | "
                f"{e['model_ms']} | {o['model_ms']} | {e['halo_backend_bytes'] / 1e6:.1f} | "
                f"{e['shard_build_s']}, {e['shard_mb']} | {e['gather_build_s']}, {e['return_build_s']}, "
                f"{e['gather_mb']} |"
            )
    return "\n".join(out)


def plot(counted_rows: list[dict], model_rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for (g, s), pts in _group(counted_rows, ("graph", "source")).items():
        for mode, marker in (("per-edge", "o"), ("once", "s")):
            mine = sorted((r for r in pts if r["mode"] == mode), key=lambda r: int(r["ranks"]))
            axes[0].plot(
                [int(r["ranks"]) for r in mine],
                [float(r["peer_over_unique"]) for r in mine],
                marker=marker,
                label=f"{g} {s} {mode}",
            )
    axes[0].axhline(1.5, color="gray", linestyle="--", linewidth=1, label="issue 34's bound for once")
    axes[0].set(xlabel="ranks P", ylabel="bytes from peers / unique remote rows' bytes", title="counted (emulator)")
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=6)
    for (g, p), pts in _group(model_rows, ("graph", "ranks")).items():
        for mode, style in (("per-edge", "-"), ("once", "--")):
            mine = sorted((r for r in pts if r["mode"] == mode), key=lambda r: int(r["dim"]))
            axes[1].plot(
                [int(r["dim"]) for r in mine],
                [float(r["model_ms"]) for r in mine],
                style,
                marker="o",
                label=f"{g} P={p} {mode}",
            )
    axes[1].set(xlabel="feature width D", ylabel="modelled ms (lower bound)", title="model: H100 SXM bandwidths")
    axes[1].set_xscale("log", base=2)
    axes[1].set_yscale("log")
    axes[1].legend(fontsize=6)
    fig.suptitle("remote rows per edge (MGG) or once per aggregation (issue 34)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _group(rows: list[dict], keys: tuple) -> dict:
    out: dict = {}
    for r in rows:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.remote_reads", description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", nargs="*", default=["rmat-reddit:scale=0.0005", "rmat-products:scale=0.0001"])
    ap.add_argument("--ranks", nargs="+", type=int, default=[2, 4, 8])
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--sources", nargs="+", default=["direct", "get-warp"], help="direct, get-thread, get-warp")
    ap.add_argument("--model-graphs", nargs="*", default=["rmat-reddit", "rmat-products"])
    ap.add_argument("--model-dims", nargs="+", type=int, default=[16, 32, 64, 128, 256])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    if str(ROOT) not in sys.path:  # simt.emulator, from the checkout
        sys.path.insert(0, str(ROOT))
    cases = [(g, p, s) for g in args.graphs for p in args.ranks for s in args.sources]
    counted_rows, model_rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (g, p, s) in enumerate(cases):
            print(f"[counted {i + 1}/{len(cases)}] {g} P={p} {s}", flush=True)
            counted_rows += counted(g, p, args.dim, s, Path(tmp) / str(i))
    for g in args.model_graphs:
        for p in args.ranks:
            print(f"[model] {g} P={p}", flush=True)
            model_rows += modelled(g, p, args.model_dims)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"remote-reads-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    with open(f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(COUNTED + MODELLED)))
        w.writeheader()
        w.writerows(counted_rows + model_rows)
    table = markdown(counted_rows, model_rows)
    Path(f"{stem}.md").write_text(table + "\n")
    plot(counted_rows, model_rows, Path(f"{stem}.png"))
    print(table)
    print(f"wrote {stem}.csv, .md, .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The suites. Each yields rows (dicts with the CSV columns); timing goes through
mgg.runtime.timing.measure, so every suite follows the same discipline."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Iterator, Optional

import torch
from tqdm.auto import tqdm

from mgg import Config, Graph, Plan
from mgg.io import load_graph
from mgg.runtime import DeviceLimits, MggSearch, feasible, grid
from mgg.runtime.timing import Timing, measure

from .load import load
from .peers import PEERS, prepare_mgg
from .report import format_rank_edges


@dataclass
class Options:
    device: torch.device
    graphs: list
    dims: list
    dtype: torch.dtype = torch.float32
    impls: list = field(default_factory=lambda: list(PEERS))
    pes: list = field(default_factory=lambda: [1, 2, 4])
    config: Config = field(default_factory=Config)
    warmup: int = 3
    reps: int = 20
    flush_l2: bool = False
    data_dir: Optional[str] = None
    tune_budget: int = 15
    progress: bool = True
    copy_gbps: float = float("nan")


def _graphs(opt: Options) -> Iterator[tuple[str, Graph]]:
    for spec in opt.graphs:
        g = load_graph(spec, opt.data_dir)
        yield spec, g.gcn_norm(add_self_loops=False) if g.weight is None else g


def _bytes_moved(g: Graph, dim: int, elem: int) -> int:
    """Gathered rows + indices and weights + written rows: the aggregation's compulsory traffic."""
    return g.num_edges * (dim * elem + 8) + g.num_nodes * dim * elem


def _timed(opt: Options, fn) -> tuple[Timing, float]:
    if opt.device.type == "cuda":
        torch.cuda.synchronize(opt.device)
        torch.cuda.reset_peak_memory_stats(opt.device)
    t = measure(fn, opt.device, opt.warmup, opt.reps, opt.flush_l2)
    peak = torch.cuda.max_memory_allocated(opt.device) / 2**20 if opt.device.type == "cuda" else float("nan")
    return t, peak


def _row(suite, case, spec, g, dim, opt, impl, pes, config, pass_, t: Timing, peak, gbps=float("nan")):
    return dict(suite=suite, case=case, graph=spec, nodes=g.num_nodes, edges=g.num_edges, dim=dim,
                dtype=str(opt.dtype).split(".")[-1], impl=impl, pes=pes,
                ps=config.ps if config else "", dist=config.dist if config else "", wpb=config.wpb if config else "",
                **{"pass": pass_}, median_ms=round(t.median_ms, 5), p10_ms=round(t.p10_ms, 5),
                p90_ms=round(t.p90_ms, 5), gbps=round(gbps, 3),
                bw_fraction=round(gbps / opt.copy_gbps, 4) if gbps == gbps else float("nan"),
                peak_mem_mb=round(peak, 2))


def kernel(opt: Options) -> Iterator[dict]:
    """Forward and backward of mgg.aggregate against cuSPARSE (torch.sparse), cupy and PyG."""
    cases = list(itertools.product(list(_graphs(opt)), opt.dims, opt.impls))
    elem = torch.tensor([], dtype=opt.dtype).element_size()
    for (spec, g), dim, impl in tqdm(cases, desc="kernel", disable=not opt.progress):
        x = torch.randn(g.num_nodes, dim, device=opt.device).to(opt.dtype)
        prep = PEERS[impl](g, x, config=opt.config) if impl == "mgg" else PEERS[impl](g, x)
        if prep is None:
            continue
        for pass_, fn in (("fwd", prep.fwd), ("bwd", prep.bwd)):
            t, peak = _timed(opt, fn)
            gbps = _bytes_moved(g, dim, elem) / (t.median_ms * 1e-3) / 1e9
            yield _row("kernel", f"{spec}/d{dim}", spec, g, dim, opt, impl, 1,
                       opt.config if impl == "mgg" else None, pass_, t, peak, gbps)


ABLATIONS = {  # MGG Fig. 10: each switch against the full design
    "full": lambda c: c,
    "no-partitioning": lambda c: Config(0, c.dist, c.wpb, c.interleave),
    "no-interleaving": lambda c: Config(c.ps, c.dist, c.wpb, False),
}


def ablation(opt: Options) -> Iterator[dict]:
    """Neighbor partitioning and interleaving on/off on a multi-rank plan (remote work present).
    The thread/warp/block-level NVSHMEM get study needs the multi-GPU runtime and a GPU."""
    pes = max(opt.pes)
    elem = torch.tensor([], dtype=opt.dtype).element_size()
    cases = list(itertools.product(list(_graphs(opt)), opt.dims, ABLATIONS.items()))
    for (spec, g), dim, (name, mk) in tqdm(cases, desc="ablation", disable=not opt.progress):
        plan = Plan(g, pes)
        cfg = mk(opt.config)
        x = torch.randn(g.num_nodes, dim, device=opt.device).to(opt.dtype)
        fn = _inproc_ranks(plan, x, cfg, "peers")
        t, peak = _timed(opt, fn)
        gbps = _bytes_moved(g, dim, elem) / (t.median_ms * 1e-3) / 1e9
        yield _row("ablation", f"{spec}/d{dim}/{name}", spec, g, dim, opt, f"mgg[{name}]", pes, cfg, "fwd", t, peak, gbps)


def _inproc_ranks(plan: Plan, x: torch.Tensor, cfg: Config, via: str):
    """All ranks of a plan run one after another in this process: the work of P PEs
    time-sliced on one device. via='peers': each rank reads remote rows straight from the
    other ranks' slices of x (aggregate_peers with direct loads, what PEs do through
    nvshmem_ptr); via='halo': each rank first gathers its halo rows into a buffer."""
    from mgg.ops import _run, _run_peers

    tables = [x[int(plan.bounds[r]):int(plan.bounds[r + 1])] for r in range(plan.num_ranks)]
    ranks = []
    for r in range(plan.num_ranks):
        rp = plan.rank_plan(r, cfg).to(x.device)
        ranks.append((r, rp, rp.partition.halo_nodes.to(x.device)))
    if via == "peers":
        return lambda: [_run_peers(tables[r], tables, r, rp, "direct", False) for r, rp, _ in ranks]
    return lambda: [_run(tables[r].contiguous(), x.index_select(0, halo), rp, False) for r, rp, halo in ranks]


def scaling(opt: Options) -> Iterator[dict]:
    """1, 2, 4 ... PEs on one device, in one process (the multi-process runs are the dist suite)."""
    elem = torch.tensor([], dtype=opt.dtype).element_size()
    cases = list(itertools.product(list(_graphs(opt)), opt.dims, opt.pes, ("peers", "halo")))
    for (spec, g), dim, pes, via in tqdm(cases, desc="scaling", disable=not opt.progress):
        if pes > g.num_nodes:
            continue
        plan = Plan(g, pes)
        x = torch.randn(g.num_nodes, dim, device=opt.device).to(opt.dtype)
        t, peak = _timed(opt, _inproc_ranks(plan, x, opt.config, via))
        remote = sum(s["remote_edges"] for s in plan.stats()) / max(g.num_edges, 1)
        row = _row("scaling", f"{spec}/d{dim}/remote={remote:.3f}", spec, g, dim, opt, f"mgg-{via}-inproc", pes,
                   opt.config, "fwd", t, peak, _bytes_moved(g, dim, elem) / (t.median_ms * 1e-3) / 1e9)
        yield dict(row, rank_edges=format_rank_edges(plan.stats()))


def dist(opt: Options) -> Iterator[dict]:
    """Epoch time of full-graph GCN training under torchrun with 1, 2, 4 ... processes on this
    device, for each backend that can run here (halo always; nvshmem with a GPU and an NVSHMEM
    build). Each run is a child torchrun (bench/dist_epoch.py); the epoch time is the slowest
    rank's, per epoch, and the median over epochs."""
    import json
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from mgg.distributed import nvshmem

    backends = ["halo"] + (["nvshmem"] if nvshmem.available() is None and opt.device.type == "cuda" else [])
    worker = Path(__file__).with_name("dist_epoch.py")
    cases = list(itertools.product(opt.graphs, opt.dims, opt.pes, backends))
    for spec, dim, pes, backend in tqdm(cases, desc="dist", disable=not opt.progress):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "r.json"
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={pes}", "--standalone",
                   str(worker), spec, str(dim), backend, opt.device.type, str(opt.warmup), str(opt.reps), str(out),
                   str(opt.data_dir or "")]
            env = dict(os.environ, OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 2) // pes)))
            env.setdefault("NVSHMEM_REMOTE_TRANSPORT", "none")
            for attempt in (1, 2):  # a rendezvous can fail on a busy machine: one retry, reported
                r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
                if r.returncode == 0:
                    break
                print(f"dist suite: {backend} with {pes} PEs failed (attempt {attempt}):\n{r.stderr[-2000:]}",
                      file=sys.stderr)
            if r.returncode != 0:
                raise RuntimeError(f"dist suite: {backend} with {pes} PEs failed twice; see the output above")
            res = json.loads(out.read_text())
        g = load_graph(spec, opt.data_dir)
        t = Timing(res["median_ms"], res["p10_ms"], res["p90_ms"], res["epochs"])
        yield dict(_row("dist", f"{spec}/d{dim}/gcn2-h16", spec, g, dim, opt, f"mgg-{backend}", pes, opt.config,
                        "epoch", t, res["peak_mem_mb"]), rank_edges=res["rank_edges"])


def e2e(opt: Options) -> Iterator[dict]:
    """Epoch time (forward, backward, optimizer step) of a 2-layer GCN (hidden 16) and a 5-layer
    GIN (hidden 64): mgg layers against PyG's, same data, same initial weights."""
    try:
        import torch_geometric.nn as pyg_nn
    except ImportError:
        return
    from mgg.nn.models import build

    models = [("gcn2-h16", "gcn", 16, 2), ("gin5-h64", "gin", 64, 5)]
    cases = list(itertools.product(list(_graphs(opt)), opt.dims, models))
    for (spec, g), dim, (name, kind, hidden, layers) in tqdm(cases, desc="e2e", disable=not opt.progress):
        torch.manual_seed(0)
        x = torch.randn(g.num_nodes, dim, device=opt.device)
        y = torch.randint(0, 8, (g.num_nodes,), device=opt.device)
        plain = Graph(g.rowptr, g.col)  # layers normalise themselves
        ei = plain.edge_index().to(opt.device)
        ref = build(kind, dim, 8, hidden, conv_module=pyg_nn, num_layers=layers).to(opt.device)
        ours = build(kind, dim, 8, hidden, num_layers=layers, config=opt.config).to(opt.device)
        ours.load_state_dict(ref.state_dict())
        for impl, model, graph_arg in (("mgg", ours, plain), ("pyg", ref, ei)):
            o = torch.optim.Adam(model.parameters(), lr=0.01)

            def epoch():
                o.zero_grad()
                torch.nn.functional.cross_entropy(model(x, graph_arg), y).backward()
                o.step()

            t, peak = _timed(opt, epoch)
            yield _row("e2e", f"{spec}/d{dim}/{name}", spec, g, dim, opt, impl, 1,
                       opt.config if impl == "mgg" else None, "epoch", t, peak)


def tune(opt: Options) -> Iterator[dict]:
    """The tuner's trajectory (one measured config per iteration) against the exhaustive grid."""
    for (spec, g), dim in tqdm(list(itertools.product(list(_graphs(opt)), opt.dims)), desc="tune",
                               disable=not opt.progress):
        x = torch.randn(g.num_nodes, dim, device=opt.device).to(opt.dtype)
        plan = Plan(g)
        limits = DeviceLimits.of(opt.device)

        def time_config(c):
            prep = prepare_mgg(g, x, c, plan)
            return _timed(opt, prep.fwd)

        search = MggSearch(lambda c: feasible(c, dim, limits), opt.tune_budget)
        while (c := search.propose()) is not None:
            t, peak = time_config(c)
            search.report(c, t.median_ms)
            yield _row("tune", f"{spec}/d{dim}/search{len(search.trajectory):02d}", spec, g, dim, opt, "mgg-tuner",
                       1, c, "fwd", t, peak)
        for c in grid(dim, limits):
            t, peak = time_config(c)
            yield _row("tune", f"{spec}/d{dim}/grid", spec, g, dim, opt, "grid", 1, c, "fwd", t, peak)


SUITES = {"kernel": kernel, "ablation": ablation, "scaling": scaling, "dist": dist, "e2e": e2e, "tune": tune,
          "load": load}

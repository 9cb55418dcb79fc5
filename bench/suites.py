"""The suites. Each yields rows (dicts with the CSV columns) as it measures them; timing goes
through mgg.runtime.timing.measure, so every suite follows the same discipline. Graphs come from
bench.cache (made once per process, kept on disk for later processes), plans are shared across
dims and fetch policies, and every suite stops starting cases when its time budget runs out."""
from __future__ import annotations

import functools
import itertools
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import torch
from tqdm.auto import tqdm

from mgg import Config, Graph
from mgg.runtime import DeviceLimits, grid
from mgg.runtime.online import OnlineTuner
from mgg.runtime.targets import InprocTarget, LocalTarget
from mgg.runtime.timing import Timing, measure

from . import cache
from .budget import Budget
from .dlrm import dlrm
from .fetch import fetch
from .load import load
from .peers import PEERS, check_run, verify
from .report import format_rank_edges
from .tta import tta


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
    budget_s: Optional[float] = None  # per suite
    worker_timeout_s: float = 600.0  # one torchrun of the dist suite
    prep_only: bool = False  # prepare every case (graphs, plans, device copies) but time nothing
    load_edges: Optional[list] = None  # the load suite's file sizes (edges)
    fetch_modes: Optional[list] = None  # the fetch suite's modes (default: all)
    ncu: bool = False  # the fetch suite records Nsight Compute metrics where ncu runs
    partition: str = "range"  # scaling and dist: which nodes each rank owns (a method of mgg.partition)
    tta_datasets: Optional[list] = None  # the tta suite's datasets (default: cora)
    tta_models: Optional[list] = None  # the tta suite's models (default: gcn, sage, gat)
    tta_targets: Optional[dict] = None  # model -> target validation accuracy (default: bench.tta.DEFAULT_TARGETS)
    tta_seeds: int = 3
    tta_max_epochs: int = 200
    budget: Budget = field(default_factory=lambda: Budget(None))
    dlrm_batch: int = 4096  # the dlrm suite's global batch (samples)
    dlrm_cap: Optional[int] = 1_000_000  # the dlrm suite's largest table (rows; None: Criteo's own)
    wrong: list = field(default_factory=list)  # cases whose result was wrong: not timed, not reported


def _elem(opt: Options) -> int:
    return torch.tensor([], dtype=opt.dtype).element_size()


def _bytes_moved(g: Graph, dim: int, elem: int) -> int:
    """Gathered rows + indices and weights + written rows: the aggregation's compulsory traffic."""
    return g.num_edges * (dim * elem + 8) + g.num_nodes * dim * elem


def _timed(opt: Options, fn) -> tuple[Timing, float]:
    if opt.prep_only:
        nan = float("nan")
        return Timing(nan, nan, nan, 0), nan
    if opt.device.type == "cuda":
        torch.cuda.synchronize(opt.device)
        torch.cuda.reset_peak_memory_stats(opt.device)
    t = measure(fn, opt.device, opt.warmup, opt.reps, opt.flush_l2)
    peak = torch.cuda.max_memory_allocated(opt.device) / 2**20 if opt.device.type == "cuda" else float("nan")
    return t, peak


def _row(suite, case, spec, g, dim, opt, impl, pes, config, pass_, t: Timing, peak, gbps=float("nan"), prep_s=0.0):
    return dict(suite=suite, case=case, graph=spec, nodes=g.num_nodes, edges=g.num_edges, dim=dim,
                dtype=str(opt.dtype).split(".")[-1], impl=impl, pes=pes,
                ps=config.ps if config else "", dist=config.dist if config else "", wpb=config.wpb if config else "",
                **{"pass": pass_}, median_ms=round(t.median_ms, 5), p10_ms=round(t.p10_ms, 5),
                p90_ms=round(t.p90_ms, 5), gbps=round(gbps, 3),
                bw_fraction=round(gbps / opt.copy_gbps, 4) if gbps == gbps else float("nan"),
                peak_mem_mb=round(peak, 2), prep_s=round(prep_s, 3))


def _impl(name: str, opt: Options) -> str:
    """An implementation's name, with the partition method where it is not MGG's ranges."""
    return name if opt.partition == "range" else f"{name}[{opt.partition}]"


def _verified(opt: Options, what: str, check: Callable, *args) -> bool:
    """check(*args), a check of a case's result, before the case is timed (not under --prep-only).
    A wrong result is recorded in opt.wrong and said on stderr, and the case is not timed: False."""
    if opt.prep_only:
        return True
    try:
        check(*args)
    except AssertionError as e:
        opt.wrong.append(f"{what}: {e}")
        print(f"bench: {what} gives a wrong result, not timed: {e}", file=sys.stderr)
        return False
    return True


def _cases(opt: Options, suite: str, cases: list, name: Callable) -> Iterator:
    """The cases a suite may start within its budget (progress bar; skipped ones recorded)."""
    for case in tqdm(cases, desc=suite, disable=not opt.progress):
        if opt.budget.start(suite, f"{suite} {name(case)}"):
            yield case


@functools.lru_cache(maxsize=None)
def _features(num_nodes: int, dim: int, device: str, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    return torch.randn(num_nodes, dim, generator=torch.Generator().manual_seed(seed)).to(device, dtype)


def kernel(opt: Options) -> Iterator[dict]:
    """Forward and backward of mgg.aggregate against cuSPARSE (torch.sparse), cupy and PyG."""
    cases = list(itertools.product(opt.graphs, opt.dims, opt.impls))
    for spec, dim, impl in _cases(opt, "kernel", cases, lambda c: f"{c[0]} D={c[1]} {c[2]}"):
        t0 = time.perf_counter()
        g, _ = cache.normalized(spec, opt.data_dir)
        x = _features(g.num_nodes, dim, str(opt.device), opt.dtype)
        prep = PEERS[impl](g, x, config=opt.config, plan=cache.plan(g)) if impl == "mgg" else PEERS[impl](g, x)
        prep_s = time.perf_counter() - t0
        if prep is None:
            continue
        if not _verified(opt, f"kernel {spec} D={dim} {impl}", verify, prep, g, x):
            opt.budget.done("kernel", time.perf_counter() - t0)
            continue
        for pass_, fn in (("fwd", prep.fwd), ("bwd", prep.bwd)):
            t, peak = _timed(opt, fn)
            gbps = _bytes_moved(g, dim, _elem(opt)) / (t.median_ms * 1e-3) / 1e9
            yield _row("kernel", f"{spec}/d{dim}", spec, g, dim, opt, impl, 1,
                       opt.config if impl == "mgg" else None, pass_, t, peak, gbps, prep_s)
        opt.budget.done("kernel", time.perf_counter() - t0)


ABLATIONS = {  # MGG Fig. 10: each switch against the full design
    "full": lambda c: c,
    "no-partitioning": lambda c: Config(0, c.dist, c.wpb, c.interleave),
    "no-interleaving": lambda c: Config(c.ps, c.dist, c.wpb, False),
}


def _inproc_ranks(plan, x: torch.Tensor, cfg: Config, via: str):
    """All ranks of a plan run one after another in this process: the work of P PEs
    time-sliced on one device (mgg.runtime.targets.InprocTarget, the step `mgg tune --ranks P`
    tunes). via='peers': each rank reads remote rows straight from the other ranks' slices of x
    (aggregate_peers with direct loads, what PEs do through nvshmem_ptr); via='halo': each rank
    first gathers its halo rows into a buffer."""
    return InprocTarget(plan, via).prepare(x, cfg)


TUNE_REPS = 5  # timed runs per candidate while a suite tunes (the chosen config is then timed in full)


def _tuned(opt: Options, target, x: torch.Tensor, record: Optional[list] = None) -> OnlineTuner:
    """MGG's search (seeded and pruned by the cost model) over a step, one measured config per
    iteration.

    Args:
        opt: the suite's options (tune_budget; warmup and reps when recording).
        target: the step (mgg.runtime.targets).
        x: its input.
        record: if given, each candidate is timed as the suite times everything (warmup, reps)
            and (config, Timing, peak MB) appended to it; else TUNE_REPS runs per candidate.

    Returns:
        The finished OnlineTuner (chosen, summary()).
    """
    def timer(step, config):
        if record is None:
            return None, measure(step, opt.device, 1, TUNE_REPS).median_ms
        t, peak = _timed(opt, step)
        record.append((config, t, peak))
        return None, t.median_ms

    tuner = OnlineTuner(opt.tune_budget, use_cache=False, timer=timer)
    while not tuner.done:
        tuner.run(target, x)
    return tuner


def ablation(opt: Options) -> Iterator[dict]:
    """Neighbor partitioning and interleaving on/off on a multi-rank plan (remote work present).
    The thread/warp/block-level NVSHMEM get study needs the multi-GPU runtime and a GPU."""
    pes = max(opt.pes)
    cases = list(itertools.product(opt.graphs, opt.dims, ABLATIONS.items()))
    for spec, dim, (name, mk) in _cases(opt, "ablation", cases, lambda c: f"{c[0]} D={c[1]} {c[2][0]}"):
        t0 = time.perf_counter()
        g, _ = cache.normalized(spec, opt.data_dir)
        if pes > g.num_nodes:
            continue
        cfg = mk(opt.config)
        x = _features(g.num_nodes, dim, str(opt.device), opt.dtype)
        fn = _inproc_ranks(cache.plan(g, pes), x, cfg, "peers")
        prep_s = time.perf_counter() - t0
        if not _verified(opt, f"ablation {spec} D={dim} {name}", check_run, fn, g, x):
            continue
        t, peak = _timed(opt, fn)
        gbps = _bytes_moved(g, dim, _elem(opt)) / (t.median_ms * 1e-3) / 1e9
        yield _row("ablation", f"{spec}/d{dim}/{name}", spec, g, dim, opt, f"mgg[{name}]", pes, cfg, "fwd", t, peak,
                   gbps, prep_s)
        opt.budget.done("ablation", time.perf_counter() - t0)


def scaling(opt: Options) -> Iterator[dict]:
    """1, 2, 4 ... PEs on one device, in one process (the multi-process runs are the dist suite):
    at the given config, then at the config the tuner finds for that step (impl ...-tuned).
    With opt.partition other than 'range', the plan is of the graph relabelled by that method
    (the features are random, so their order does not matter) and the impl names say so."""
    cases = list(itertools.product(opt.graphs, opt.dims, opt.pes, ("peers", "halo")))
    for spec, dim, pes, via in _cases(opt, "scaling", cases, lambda c: f"{c[0]} D={c[1]} P={c[2]} {c[3]}"):
        t0 = time.perf_counter()
        g, _ = cache.normalized(spec, opt.data_dir)
        if pes > g.num_nodes:
            continue
        plan = cache.plan(g, pes, part=cache.partition(spec, opt.data_dir, pes, opt.partition))
        x = _features(g.num_nodes, dim, str(opt.device), opt.dtype)
        fn = _inproc_ranks(plan, x, opt.config, via)
        prep_s = time.perf_counter() - t0
        what = f"scaling {spec} D={dim} P={pes} {via}"
        if not _verified(opt, what, check_run, fn, plan.graph, x):  # plan.graph: relabelled by a partition
            continue
        t, peak = _timed(opt, fn)
        stats = plan.stats()
        remote = sum(s["remote_edges"] for s in stats) / max(g.num_edges, 1)
        case = f"{spec}/d{dim}/remote={remote:.3f}"
        gbps = _bytes_moved(g, dim, _elem(opt)) / (t.median_ms * 1e-3) / 1e9
        row = _row("scaling", case, spec, g, dim, opt, _impl(f"mgg-{via}-inproc", opt),
                   pes, opt.config, "fwd", t, peak, gbps, prep_s)
        yield dict(row, rank_edges=format_rank_edges(stats))
        if not opt.prep_only:
            target = InprocTarget(plan, via) if pes > 1 else LocalTarget(plan)
            chosen = _tuned(opt, target, x).chosen
            fn = target.prepare(x, chosen)
            if _verified(opt, f"{what} tuned {chosen.as_tuple()}", check_run, fn, plan.graph, x):
                t, peak = _timed(opt, fn)
                gbps = _bytes_moved(g, dim, _elem(opt)) / (t.median_ms * 1e-3) / 1e9
                row = _row("scaling", case, spec, g, dim, opt, _impl(f"mgg-{via}-inproc-tuned", opt), pes, chosen,
                           "fwd", t, peak, gbps, prep_s)
                yield dict(row, rank_edges=format_rank_edges(stats))
        opt.budget.done("scaling", time.perf_counter() - t0)


def _torchrun(cmd: list, env: dict, timeout: float):
    import subprocess

    try:
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(cmd, -9, e.stdout or "", f"timed out after {timeout:.0f} s")


def dist(opt: Options) -> Iterator[dict]:
    """Epoch time of full-graph GCN training under torchrun with 1, 2, 4 ... processes on this
    device, for each backend that can run here (halo always; nvshmem with a GPU and an NVSHMEM
    build). Each run is a child torchrun (bench/dist_epoch.py) that reads the graph from the disk
    cache; the epoch time is the slowest rank's, per epoch, and the median over epochs. The ranks
    own the nodes opt.partition gives them (partitioned here first, so the workers read the disk
    cache)."""
    import json
    import os
    import sys
    import tempfile
    from pathlib import Path

    from mgg.distributed import nvshmem

    backends = ["halo"] + (["nvshmem"] if nvshmem.available() is None and opt.device.type == "cuda" else [])
    worker = Path(__file__).with_name("dist_epoch.py")
    root = str(Path(__file__).resolve().parent.parent)
    cases = list(itertools.product(opt.graphs, opt.dims, opt.pes, backends))
    for spec, dim, pes, backend in _cases(opt, "dist", cases, lambda c: f"{c[0]} D={c[1]} P={c[2]} {c[3]}"):
        t0 = time.perf_counter()
        g, _ = cache.graph(spec, opt.data_dir)  # made once here; the workers read the disk cache
        if pes > 1:
            cache.partition(spec, opt.data_dir, pes, opt.partition)
        prep_s = time.perf_counter() - t0
        if opt.prep_only:
            t, peak = _timed(opt, None)
            yield _row("dist", f"{spec}/d{dim}/gcn2-h16", spec, g, dim, opt, _impl(f"mgg-{backend}", opt), pes,
                       opt.config, "epoch", t, peak, prep_s=prep_s)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "r.json"
            cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={pes}", "--standalone",
                   str(worker), spec, str(dim), backend, opt.device.type, str(opt.warmup), str(opt.reps), str(out),
                   str(opt.data_dir or ""), opt.partition]
            env = dict(os.environ, OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 2) // pes)),
                       PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
            env.setdefault("NVSHMEM_REMOTE_TRANSPORT", "none")
            env.setdefault("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo")  # one node: bootstrap over loopback
            timeout = min(opt.worker_timeout_s, max(opt.budget.left(), 1.0))
            r = _torchrun(cmd, env, timeout)
            if r.returncode != 0:  # reported and skipped: one failed case does not end the suite
                err = r.stderr if len(r.stderr) <= 6000 else f"{r.stderr[:3500]}\n[...]\n{r.stderr[-2500:]}"
                print(f"dist suite: {backend} with {pes} PEs on {spec} failed (exit {r.returncode}):\n{err}",
                      file=sys.stderr)
                opt.budget.skipped.append(f"dist {spec} D={dim} P={pes} {backend} (failed: exit {r.returncode})")
                opt.budget.done("dist", time.perf_counter() - t0)
                continue
            res = json.loads(out.read_text())
        t = Timing(res["median_ms"], res["p10_ms"], res["p90_ms"], res["epochs"])
        yield dict(_row("dist", f"{spec}/d{dim}/gcn2-h16", spec, g, dim, opt, _impl(f"mgg-{backend}", opt), pes,
                        opt.config, "epoch", t, res["peak_mem_mb"], prep_s=prep_s + res["prep_s"]),
                   rank_edges=res["rank_edges"])
        opt.budget.done("dist", time.perf_counter() - t0)


def _epoch_fn(model, optimizer, x, graph_arg, y):
    def epoch():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x, graph_arg), y).backward()
        optimizer.step()
    return epoch


def e2e(opt: Options) -> Iterator[dict]:
    """Epoch time (forward, backward, optimizer step) of a 2-layer GCN (hidden 16) and a 5-layer
    GIN (hidden 64): mgg layers against PyG's, same data, same initial weights."""
    try:
        import torch_geometric.nn as pyg_nn
    except ImportError:
        return
    from mgg.nn.models import build

    models = [("gcn2-h16", "gcn", 16, 2), ("gin5-h64", "gin", 64, 5)]
    cases = list(itertools.product(opt.graphs, opt.dims, models))
    for spec, dim, (name, kind, hidden, layers) in _cases(opt, "e2e", cases, lambda c: f"{c[0]} D={c[1]} {c[2][0]}"):
        t0 = time.perf_counter()
        g, _ = cache.graph(spec, opt.data_dir)
        torch.manual_seed(0)
        x = _features(g.num_nodes, dim, str(opt.device), torch.float32)
        y = torch.randint(0, 8, (g.num_nodes,), device=opt.device)
        plain = Graph(g.rowptr, g.col)  # layers normalise themselves
        ei = plain.edge_index().to(opt.device)
        ref = build(kind, dim, 8, hidden, conv_module=pyg_nn, num_layers=layers).to(opt.device)
        ours = build(kind, dim, 8, hidden, num_layers=layers, config=opt.config).to(opt.device)
        ours.load_state_dict(ref.state_dict())
        prep_s = time.perf_counter() - t0
        for impl, model, graph_arg in (("mgg", ours, plain), ("pyg", ref, ei)):
            epoch = _epoch_fn(model, torch.optim.Adam(model.parameters(), lr=0.01), x, graph_arg, y)
            t, peak = _timed(opt, epoch)
            yield _row("e2e", f"{spec}/d{dim}/{name}", spec, g, dim, opt, impl, 1,
                       opt.config if impl == "mgg" else None, "epoch", t, peak, prep_s=prep_s)
        opt.budget.done("e2e", time.perf_counter() - t0)


def tune(opt: Options) -> Iterator[dict]:
    """The tuner's trajectory (one measured config per iteration, MGG's search seeded and pruned
    by the cost model) against the exhaustive grid, on the plan of each PE count: one rank, or all
    ranks in one process reading peers' rows in place (the step `mgg tune --ranks P` tunes)."""
    cases = list(itertools.product(opt.graphs, opt.dims, opt.pes))
    for spec, dim, pes in _cases(opt, "tune", cases, lambda c: f"{c[0]} D={c[1]} P={c[2]}"):
        t0 = time.perf_counter()
        g, _ = cache.normalized(spec, opt.data_dir)
        if pes > g.num_nodes:
            continue
        x = _features(g.num_nodes, dim, str(opt.device), opt.dtype)
        plan = cache.plan(g, pes)
        target = InprocTarget(plan, "peers") if pes > 1 else LocalTarget(plan)
        impl = "mgg-tuner" if pes == 1 else "mgg-tuner-inproc"
        probes = []
        if not opt.prep_only:
            _tuned(opt, target, x, probes)
        for i, (c, t, peak) in enumerate(probes):
            yield _row("tune", f"{spec}/d{dim}/p{pes}/search{i + 1:02d}", spec, g, dim, opt, impl, pes, c, "fwd", t,
                       peak)
        for c in grid(dim, DeviceLimits.of(opt.device), get=target.get):
            if not opt.budget.start("tune-grid", f"tune grid {spec} D={dim} P={pes} {c.as_tuple()}"):
                continue
            t1 = time.perf_counter()
            t, peak = _timed(opt, target.prepare(x, c))
            target.drop(c)  # the grid's schedules go once measured: device memory stays bounded
            yield _row("tune", f"{spec}/d{dim}/p{pes}/grid", spec, g, dim, opt, "grid", pes, c, "fwd", t, peak)
            opt.budget.done("tune-grid", time.perf_counter() - t1)
        opt.budget.done("tune", time.perf_counter() - t0)


SUITES = {"kernel": kernel, "ablation": ablation, "scaling": scaling, "dist": dist, "e2e": e2e, "tune": tune,
          "load": load, "fetch": fetch, "tta": tta, "dlrm": dlrm}

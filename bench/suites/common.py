"""What every suite shares: the options (Options), the CSV row (result_row), the budget's case loop
(within_budget), timing (timed: mgg.runtime.timing.measure, so every suite follows the same
discipline), the check before timing (verified), features, in-process tuning (tuned), and the
torchrun children of the dist, fetch and dlrm suites (torchrun_command, torchrun). Graphs
come from bench.cache (made once per process, kept on disk for later processes), plans are shared
across dims and fetch policies, and every suite stops starting cases when its time budget runs
out."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

import torch
from tqdm.auto import tqdm

from mgg import Config, Graph
from mgg.runtime.online import OnlineTuner
from mgg.runtime.targets import InprocTarget
from mgg.runtime.timing import Timing, measure

from ..budget import Budget
from ..competitors import IMPLEMENTATIONS


@dataclass
class Options:
    device: torch.device
    graphs: list
    dims: list
    dtype: torch.dtype = torch.float32
    impls: list = field(default_factory=lambda: list(IMPLEMENTATIONS))
    pes: list = field(default_factory=lambda: [1, 2, 4])
    config: Config = field(default_factory=Config)
    warmup: int = 3
    reps: int = 20
    flush_l2: bool = False
    data_dir: Optional[str] = None
    tune_budget: int = 15
    kernel_tuned: Optional[bool] = None  # the kernel suite also times mgg at the tuned config (None: on a GPU)
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
    tta_targets: Optional[dict] = None  # model -> target accuracy (default: bench.suites.tta.DEFAULT_TARGETS)
    tta_seeds: int = 3
    tta_max_epochs: int = 200
    budget: Budget = field(default_factory=lambda: Budget(None))
    dlrm_batch: int = 4096  # the dlrm suite's global batch (samples)
    dlrm_cap: Optional[int] = 1_000_000  # the dlrm suite's largest table (rows; None: Criteo's own)
    wrong: list = field(default_factory=list)  # cases whose result was wrong: not timed, not reported


def elem_size(opt: Options) -> int:
    return torch.tensor([], dtype=opt.dtype).element_size()


def bytes_moved(g: Graph, dim: int, elem: int) -> int:
    """Gathered rows + indices and weights + written rows: the aggregation's compulsory traffic."""
    return g.num_edges * (dim * elem + 8) + g.num_nodes * dim * elem


def timed(opt: Options, fn) -> tuple[Timing, float]:
    if opt.prep_only:
        nan = float("nan")
        return Timing(nan, nan, nan, 0), nan
    if opt.device.type == "cuda":
        torch.cuda.synchronize(opt.device)
        torch.cuda.reset_peak_memory_stats(opt.device)
    t = measure(fn, opt.device, opt.warmup, opt.reps, opt.flush_l2)
    peak = torch.cuda.max_memory_allocated(opt.device) / 2**20 if opt.device.type == "cuda" else float("nan")
    return t, peak


def result_row(
    suite, case, spec, g, dim, opt, impl, pes, config, pass_, t: Timing, peak, gbps=float("nan"), prep_s=0.0
):
    return dict(
        suite=suite,
        case=case,
        graph=spec,
        nodes=g.num_nodes,
        edges=g.num_edges,
        dim=dim,
        dtype=str(opt.dtype).split(".")[-1],
        impl=impl,
        pes=pes,
        ps=config.ps if config else "",
        dist=config.dist if config else "",
        wpb=config.wpb if config else "",
        **{"pass": pass_},
        median_ms=round(t.median_ms, 5),
        p10_ms=round(t.p10_ms, 5),
        p90_ms=round(t.p90_ms, 5),
        gbps=round(gbps, 3),
        bw_fraction=round(gbps / opt.copy_gbps, 4) if gbps == gbps else float("nan"),
        peak_mem_mb=round(peak, 2),
        prep_s=round(prep_s, 3),
    )


def impl_name(name: str, opt: Options) -> str:
    """An implementation's name, with the partition method where it is not MGG's ranges."""
    return name if opt.partition == "range" else f"{name}[{opt.partition}]"


def verified(opt: Options, what: str, check: Callable, *args) -> bool:
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


def within_budget(opt: Options, suite: str, cases: list, name: Callable) -> Iterator:
    """The cases a suite may start within its budget (progress bar; skipped ones recorded)."""
    for case in tqdm(cases, desc=suite, disable=not opt.progress):
        if opt.budget.start(suite, f"{suite} {name(case)}"):
            yield case


@functools.lru_cache(maxsize=None)
def features(num_nodes: int, dim: int, device: str, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    return torch.randn(num_nodes, dim, generator=torch.Generator().manual_seed(seed)).to(device, dtype)


def inproc_ranks(plan, x: torch.Tensor, cfg: Config, via: str):
    """All ranks of a plan run one after another in this process: the work of P PEs
    time-sliced on one device (mgg.runtime.targets.InprocTarget, the step `mgg tune --ranks P`
    tunes). via='peers': each rank reads remote rows straight from the other ranks' slices of x
    (aggregate_peers with direct loads, what PEs do through nvshmem_ptr); via='halo': each rank
    first gathers its halo rows into a buffer."""
    return InprocTarget(plan, via).prepare(x, cfg)


TUNE_REPS = 5  # timed runs per candidate while a suite tunes (the chosen config is then timed in full)


def tuned(opt: Options, target, x: torch.Tensor, record: Optional[list] = None) -> OnlineTuner:
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
        t, peak = timed(opt, step)
        record.append((config, t, peak))
        return None, t.median_ms

    tuner = OnlineTuner(opt.tune_budget, use_cache=False, timer=timer)
    while not tuner.done:
        tuner.run(target, x)
    return tuner


ROOT = Path(__file__).resolve().parents[2]  # the checkout: the workers import mgg and bench from it
WORKERS = ROOT / "bench" / "workers"


def torchrun_command(worker: str, pes: int, args: list, split_threads: bool = False, nvshmem: bool = False):
    """The command line and environment of a torchrun child (the dist, fetch and dlrm suites'):
    `pes` processes on this node, each running bench/workers/<worker> with `args`, the checkout
    first on PYTHONPATH. split_threads: OMP_NUM_THREADS is the cores shared among the ranks (at
    least 1 each). nvshmem: NVSHMEM on one node (no remote transport, bootstrap over loopback)
    unless the environment sets them. Returns (cmd, env) for torchrun() or subprocess.run."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={pes}", "--standalone"]
    cmd += [str(WORKERS / worker), *(str(a) for a in args)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    if split_threads:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 2) // pes))
    if nvshmem:
        env.setdefault("NVSHMEM_REMOTE_TRANSPORT", "none")
        env.setdefault("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo")  # one node: bootstrap over loopback
    return cmd, env


def torchrun(cmd: list, env: dict, timeout: float) -> subprocess.CompletedProcess:
    """A torchrun child (the dist and dlrm suites' workers); past `timeout` seconds a completed
    process with exit -9 and the reason as its stderr."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(cmd, -9, e.stdout or "", f"timed out after {timeout:.0f} s")


def format_rank_edges(stats: list[dict]) -> str:
    """Plan.stats() as the CSV's rank_edges column: 'r0:LOCAL/REMOTE;r1:...'."""
    return ";".join(f"r{s['rank']}:{s['local_edges']}/{s['remote_edges']}" for s in stats)


def parse_rank_edges(s: str) -> list[tuple[int, int]]:
    """The rank_edges column back as [(local, remote)] per rank."""
    out = []
    for part in filter(None, s.split(";")):
        local, remote = part.split(":", 1)[1].split("/")
        out.append((int(local), int(remote)))
    return out

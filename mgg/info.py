"""Facts about this installation: versions, devices, what the extension was built with."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version

import torch


def _ver(pkg: str) -> str:
    try:
        return version(pkg)
    except PackageNotFoundError:
        return "not installed"


def collect() -> dict:
    from . import _C, __version__
    from ._extension import build_facts

    nvshmem = next(
        (_ver(p) for p in ("nvidia-nvshmem-cu13", "nvidia-nvshmem-cu12") if _ver(p) != "not installed"), "not installed"
    )
    from .distributed.nvshmem import available

    why = available()
    gpus = (
        [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    )
    return {
        "mgg": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda (torch build)": torch.version.cuda or "none",
        "nvshmem": nvshmem,
        "extension CUDA kernels": bool(_C.with_cuda),
        "extension NVSHMEM runtime": bool(_C.with_nvshmem),
        "CPU kernels": f"{_C.cpu_kernels()}, {torch.get_num_threads()} threads",
        **{
            f"built with {k}": ("none" if v is None else ", ".join(v) if isinstance(v, list) else v)
            for k, v in build_facts().items()
        },
        "distributed backends": "halo, nvshmem" if why is None else f"halo (nvshmem: {why.split(';')[0]})",
        "torch-geometric": _ver("torch-geometric"),
        "gpus": gpus or "none",
    }


def graph_facts(spec: str, data_dir=None, relabel: bool = False) -> dict:
    """Degree statistics of a graph (mgg.data.stats.degree_stats), with the published statistics
    of the dataset when the graph is a synthetic stand-in for one."""
    from .data import resolve
    from .data.stats import degree_stats
    from .data.synthetic import real_stats

    src = resolve(spec, data_dir, relabel=relabel)
    facts = dict(graph=src.name, kind=src.kind, **degree_stats(src.graph))
    real = real_stats(spec) if src.kind == "synthetic" else None
    if real is not None:
        facts["real"] = real
    return facts


_ROWS = [
    ("nodes", "nodes"),
    ("edges", "directed edges"),
    ("avg_degree", "average degree"),
    ("max_degree", "max in-degree"),
    ("max_over_avg", "max / average"),
    ("isolated", "isolated nodes"),
    ("isolated_fraction", "isolated share"),
    ("top1pct_share", "edges at top 1% nodes"),
    ("gini", "in-degree Gini"),
    ("self_loops", "self-loops"),
    ("duplicates", "duplicate edges"),
    ("symmetric", "symmetric"),
]


def _fmt(v) -> str:
    if v is None:
        return "unknown (not published)"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.4f}" if abs(v) < 1 else f"{v:,.1f}"
    return str(v)


def print_graph_facts(facts: dict) -> str:
    """The statistics as a table; with a stand-in, a second column of the published values."""
    real = facts.get("real")
    lines = [f"{facts['graph']} ({facts['kind']})" + (f": synthetic stand-in for {real['dataset']}" if real else "")]
    w = max(len(label) for _, label in _ROWS)
    if real:
        lines.append(f"{'':{w}s}  {'this graph':>24s}  {real['dataset']:>24s}")
    for key, label in _ROWS:
        row = f"{label:{w}s}  {_fmt(facts.get(key)):>24s}"
        lines.append(row + (f"  {_fmt(real.get(key)):>24s}" if real else ""))
    if real:
        lines.append(f"published: {real['source']}")
    return "\n".join(lines) + "\n"

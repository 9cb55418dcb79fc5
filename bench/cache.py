"""What the suites share within a process and across processes: graphs made once per process
and kept on disk for later processes (the dist suite's workers, the next run), partitions made
once per process (metis and hypergraph results also on disk, by mgg.partition), and one plan per
(graph, ranks, partition) whose rank plans are reused across dims and fetch policies."""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from mgg import Graph, Partition, Plan
from mgg import partition as partition_nodes
from mgg.data import load_graph

_GRAPHS: dict = {}
_PLANS: dict = {}
FORMAT = 2  # bump when the generator or the file layout changes: old files are ignored


def cache_dir() -> Path:
    """$MGG_GRAPH_CACHE, else ~/.cache/mgg/graphs."""
    return Path(os.environ.get("MGG_GRAPH_CACHE", Path.home() / ".cache" / "mgg" / "graphs"))


def _path(spec: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in spec)[:60]
    digest = hashlib.sha1(f"{FORMAT}:{spec}".encode()).hexdigest()[:10]
    return cache_dir() / f"{safe}-{digest}.npz"


def _read(path: Path) -> Optional[Graph]:
    try:
        with np.load(path, allow_pickle=False) as z:
            w = z["weight"] if "weight" in z.files else None
            return Graph.from_csr(z["rowptr"], z["col"], w, what=str(path))
    except Exception as e:  # a corrupt or foreign file: regenerate
        print(f"bench: ignoring graph cache {path} ({e.__class__.__name__}: {e})")
        return None


def _write(path: Path, g: Graph) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp.npz")
    os.close(fd)
    arrays = dict(rowptr=g.rowptr.numpy(), col=g.col.numpy().astype(np.int32))
    if g.weight is not None:
        arrays["weight"] = g.weight.numpy()
    np.savez(tmp, **arrays)
    os.replace(tmp, path)  # atomic: a killed run never leaves half a file


def graph(spec: str, data_dir=None) -> tuple[Graph, float]:
    """The graph of a spec and the seconds it took here: from this process's memory, else from
    the disk cache (synthetic specs, which are slow to generate), else made (and cached)."""
    key = (spec, str(data_dir))
    if key in _GRAPHS:
        return _GRAPHS[key], 0.0
    t0 = time.perf_counter()
    from mgg.data import synthetic

    path = _path(spec) if synthetic.is_spec(spec) else None
    g = _read(path) if path is not None and path.exists() else None
    if g is None:
        g = load_graph(spec, data_dir)
        if path is not None:
            _write(path, g)
    _GRAPHS[key] = g
    return g, time.perf_counter() - t0


def normalized(spec: str, data_dir=None) -> tuple[Graph, float]:
    """The graph with GCN's symmetric normalisation (no self-loops) unless it has weights: the
    aggregation the kernel suites time."""
    key = ("normalized", spec, str(data_dir))
    if key in _GRAPHS:
        return _GRAPHS[key], 0.0
    g, t = graph(spec, data_dir)
    t0 = time.perf_counter()
    n = g.gcn_norm(add_self_loops=False) if g.weight is None else g
    _GRAPHS[key] = n
    return n, t + time.perf_counter() - t0


def partition(spec: str, data_dir, ranks: int, method: str = "range") -> Partition:
    """The partition of a spec's graph over `ranks` by `method` (mgg.partition, on the graph as
    loaded: its structure, whatever the normalisation), made once per process; metis and
    hypergraph results are kept on disk by mgg.partition, so the dist suite's workers and later
    runs read them."""
    key = ("partition", spec, str(data_dir), ranks, method)
    if key not in _GRAPHS:
        _GRAPHS[key] = partition_nodes(graph(spec, data_dir)[0], ranks, method)
    return _GRAPHS[key]


def plan(g: Graph, ranks: int = 1, gathered: bool = False, part: Optional[Partition] = None) -> Plan:
    """One Plan per (graph, ranks, gathered, partition) for the whole run; its rank plans (one
    per config) are kept in its bounded cache and shared by every dim and fetch policy.
    gathered: every source from one gathered table (the allgather backend). With a partition,
    the plan of g relabelled into the ranks' order (its features are taken in that order)."""
    key = (id(g), ranks, gathered, id(part))
    if key not in _PLANS:  # holding g and part keeps their ids unique
        _PLANS[key] = (
            (g, part),
            Plan(g, ranks, gathered=gathered) if part is None else part.plan(g, gathered=gathered),
        )
    return _PLANS[key][1]


def forget_device_copies() -> None:
    """Drops every cached plan (device copies and schedules) before a suite that needs the
    memory; graphs stay."""
    _PLANS.clear()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()

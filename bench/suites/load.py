"""The `load` suite: how fast a graph file becomes an mgg Graph (CSR), and the memory it takes.

For each edge count in `opt.load_edges` (default 100M; `--smoke`: 100k), one random graph
(ids uniform over edges/10 nodes) is written under a temporary directory in each format
mgg reads: a SNAP-style text edge list (comment header, tab-separated), the same gzipped
(level 1), a Matrix Market pattern file, an .npz with edge_index (np.savez) in random order and
one sorted by target (as mgg's Graph.edge_index() gives it: no sort needed), and a scipy CSR
.npz (save_npz, uncompressed). Each file is loaded by mgg.data.load_graph in a fresh child
process, after a load of a tiny file of the same format (imports, first-call setup) and one
read of the file to warm the page cache: the first load gives the peak
memory (the child's high-water RSS, reset just before through /proc/self/clear_refs, minus its
RSS before the load; the Graph itself counts), and it and the further loads give the times
(`reps` of them: at most 3 for files of 10M edges or more). Rows: median/p10/p90 ms,
edges_per_s (at the median), file GB/s in the gbps column, peak_mem_mb and
peak_mem_bytes_per_edge. Then each benchmark graph's plan for 8 ranks (every rank's forward and
transposed step, host side), also in a fresh process: built afresh as many times as a file is
loaded, the first build giving the peak memory, the builds the median/p10/p90."""

from __future__ import annotations

import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

DEFAULT_EDGES = [100_000_000]
FORMATS = ["text", "text.gz", "mtx", "npz-edge_index", "npz-edge_index-by-dst", "npz-scipy-csr"]

_CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
from mgg.data import load_graph
from bench.suites.load import write_files
from bench.memory import peak_rss_bytes, reset_peak_rss, rss_bytes

path, fmt, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
with tempfile.TemporaryDirectory() as tmp:  # a tiny file of the format first: lazy imports, first-call setup
    load_graph(str(write_files(Path(tmp), 1000)[fmt]))
with open(path, "rb") as f:  # warm the page cache
    while f.read(1 << 24):
        pass
reset_peak_rss()
rss0 = rss_bytes()
times = []
for i in range(reps):
    t = time.perf_counter()
    g = load_graph(path)
    times.append(time.perf_counter() - t)
    if i == 0:
        peak = peak_rss_bytes() - rss0
    nodes, edges = g.num_nodes, g.num_edges
    del g
print(json.dumps(dict(times=times, peak=peak, nodes=nodes, edges=edges)))
"""


_PLAN_CHILD = r"""
import json, sys, time
from bench import cache
from bench.memory import peak_rss_bytes, reset_peak_rss, rss_bytes
from mgg import Config, Plan

from bench.suites.load import repetitions

spec, data_dir, ranks, reps = sys.argv[1], sys.argv[2] or None, int(sys.argv[3]), int(sys.argv[4])
g, _ = cache.graph(spec, data_dir)  # generated or read from the disk cache: not timed
reset_peak_rss()
rss0 = rss_bytes()
times = []
for i in range(repetitions(g.num_edges, reps)):  # a fresh plan each time; the first gives the peak memory
    t = time.perf_counter()
    plan = Plan(g, min(ranks, g.num_nodes))
    for r in range(plan.num_ranks):  # the forward and the backward's transposed step, host side
        plan.rank_plan(r, Config()).op_args("cpu")
    times.append(time.perf_counter() - t)
    if i == 0:
        peak = peak_rss_bytes()
    num_ranks = plan.num_ranks
    del plan
print(json.dumps(dict(times=times, peak=peak - rss0, total=peak, nodes=g.num_nodes, edges=g.num_edges,
                      ranks=num_ranks)))
"""


def _digits(a: np.ndarray) -> np.ndarray:
    """ASCII decimal digits of non-negative ints, one row per number, zero-padded to one width."""
    w = max(1, len(str(int(a.max())))) if a.size else 1
    d = np.empty((a.size, w), np.uint8)
    x = a.astype(np.int64)
    for k in range(w - 1, -1, -1):
        d[:, k] = x % 10 + 48
        x //= 10
    return d


def text_lines(src: np.ndarray, dst: np.ndarray, sep: bytes = b"\t") -> bytes:
    """`src<sep>dst\\n` lines without leading zeros, formatted by numpy (not a Python loop)."""
    n = src.size
    cols = [_digits(src), np.full((n, 1), sep[0], np.uint8), _digits(dst), np.full((n, 1), 10, np.uint8)]
    keep = [~np.cumprod(c == 48, axis=1).astype(bool) for c in (cols[0], cols[2])]
    for k in keep:
        k[:, -1] = True  # the last digit stays, even a 0
    line = np.concatenate(cols, axis=1)
    mask = np.concatenate([keep[0], np.ones((n, 1), bool), keep[1], np.ones((n, 1), bool)], axis=1)
    return line[mask].tobytes()


def write_files(d: Path, num_edges: int, seed: int = 0, chunk: int = 1 << 22) -> dict:
    """The graph in every format; returns {format: path}."""
    rng = np.random.default_rng(seed)
    n = max(2, num_edges // 10)
    src = rng.integers(0, n, num_edges, dtype=np.int32)
    dst = rng.integers(0, n, num_edges, dtype=np.int32)
    src[0], dst[0] = n - 1, 0  # the last node exists
    paths = {
        f: d / name
        for f, name in zip(FORMATS, ["g.txt", "g.txt.gz", "g.mtx", "g.npz", "g-by-dst.npz", "g-csr.npz"], strict=True)
    }
    header = f"# Directed graph: generated by bench load\n# Nodes: {n} Edges: {num_edges}\n# FromNodeId\tToNodeId\n"
    with (
        open(paths["text"], "wb") as t,
        gzip.open(paths["text.gz"], "wb", compresslevel=1) as z,
        open(paths["mtx"], "wb") as m,
    ):
        t.write(header.encode())
        z.write(header.encode())
        m.write(
            f"%%MatrixMarket matrix coordinate pattern general\n% generated by bench load\n"
            f"{n} {n} {num_edges}\n".encode()
        )
        for i in range(0, num_edges, chunk):
            s, e = src[i : i + chunk], dst[i : i + chunk]
            lines = text_lines(s, e)
            t.write(lines)
            z.write(lines)
            m.write(text_lines(e.astype(np.int64) + 1, s.astype(np.int64) + 1, b" "))  # row i gathers j
    np.savez(paths["npz-edge_index"], edge_index=np.stack([src, dst]).astype(np.int64), num_nodes=n)
    from mgg import Graph

    g = Graph.from_edges(src, dst, n)
    del src, dst
    np.savez(paths["npz-edge_index-by-dst"], edge_index=g.edge_index().numpy(), num_nodes=n)
    a = sp.csr_matrix(
        (np.ones(g.num_edges, np.float32), g.col.numpy().astype(np.int32), g.rowptr.numpy()), shape=(n, n)
    )
    sp.save_npz(paths["npz-scipy-csr"], a, compressed=False)
    return paths


def repetitions(num_edges: int, reps: int) -> int:
    """Timed loads (or plans) of a graph: at most 5, at most 3 from 10M edges on."""
    return min(reps, 3 if num_edges >= 10_000_000 else 5)


def _timing_fields(times: list) -> dict:
    """median/p10/p90 in ms of the measured times (seconds)."""
    return dict(
        median_ms=round(statistics.median(times) * 1e3, 3),
        p10_ms=round(float(np.percentile(times, 10)) * 1e3, 3),
        p90_ms=round(float(np.percentile(times, 90)) * 1e3, 3),
    )


def _child(script: str, *args: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"load suite: {' '.join(args)} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _measure(path: Path, fmt: str, reps: int) -> dict:
    return _child(_CHILD, str(path), fmt, str(reps))


def load(opt) -> Iterator[dict]:
    sizes = list(opt.load_edges or DEFAULT_EDGES)
    for num_edges in sizes:
        reps = repetitions(num_edges, opt.reps)
        with tempfile.TemporaryDirectory(prefix="mgg-load-") as tmp:
            paths = write_files(Path(tmp), num_edges)
            for fmt in tqdm(FORMATS, desc=f"load {num_edges:,}", disable=not opt.progress):
                path = paths[fmt]
                res = _measure(path, fmt, reps)
                med = statistics.median(res["times"])
                size = path.stat().st_size
                yield dict(
                    suite="load",
                    case=f"{fmt}/{num_edges}",
                    graph=fmt,
                    nodes=res["nodes"],
                    edges=res["edges"],
                    dim="",
                    dtype="",
                    impl="mgg.data.load_graph",
                    pes=1,
                    ps="",
                    dist="",
                    wpb="",
                    **{"pass": "load"},
                    **_timing_fields(res["times"]),
                    gbps=round(size / med / 1e9, 3),
                    bw_fraction="",
                    peak_mem_mb=round(res["peak"] / 2**20, 1),
                    edges_per_s=round(res["edges"] / med),
                    peak_mem_bytes_per_edge=round(res["peak"] / res["edges"], 2),
                )
    for spec in opt.graphs:  # the plan of each benchmark graph for 8 ranks, in a fresh process
        res = _child(_PLAN_CHILD, spec, str(opt.data_dir or ""), "8", str(opt.reps))
        yield dict(
            suite="load",
            case=f"plan/{spec}/P{res['ranks']}",
            graph=spec,
            nodes=res["nodes"],
            edges=res["edges"],
            dim="",
            dtype="",
            impl="mgg.Plan",
            pes=res["ranks"],
            ps="",
            dist="",
            wpb="",
            **{"pass": "plan"},
            **_timing_fields(res["times"]),
            gbps="",
            bw_fraction="",
            peak_mem_mb=round(res["total"] / 2**20, 1),
            edges_per_s=round(res["edges"] / statistics.median(res["times"])),
            peak_mem_bytes_per_edge=round(res["peak"] / res["edges"], 2),
        )

"""Seeded synthetic graphs: R-MAT (power-law degrees) for a requested node and edge count,
with presets of the sizes of reddit and ogbn-products. Edges are made in chunks, so host memory
stays near the size of the CSR itself (16 bytes per edge at the peak)."""
from __future__ import annotations

import re

import numpy as np

from .errors import GraphError
from .graph import Graph

PRESETS = {
    "reddit": (232_965, 114_615_892),
    "products": (2_449_029, 61_859_140),
}
SPEC_HELP = "'reddit', 'products', 'rmat:NODES:EDGES[:SEED]', optionally 'preset:scale=0.01'"


def rmat_edges(num_nodes: int, num_edges: int, seed: int = 0, abcd=(0.57, 0.19, 0.19, 0.05),
               chunk: int = 1 << 22):
    """Yields (src, dst) int64 chunks of an R-MAT graph; ids are scrambled by a seeded
    permutation so that high-degree nodes are not all at the front."""
    if num_nodes <= 0 or num_edges < 0:
        raise GraphError(f"rmat: need nodes > 0 and edges >= 0, got {num_nodes} and {num_edges}")
    rng = np.random.default_rng(seed)
    scale = max(1, int(np.ceil(np.log2(num_nodes))))
    perm = rng.permutation(num_nodes)
    cdf = np.cumsum(abcd) / np.sum(abcd)
    made = 0
    while made < num_edges:
        n = min(chunk, num_edges - made)
        src = np.zeros(n, np.int64)
        dst = np.zeros(n, np.int64)
        for _ in range(scale):
            q = np.searchsorted(cdf, rng.random(n, dtype=np.float32), side="right")
            src = (src << 1) | (q >> 1)
            dst = (dst << 1) | (q & 1)
        ok = (src < num_nodes) & (dst < num_nodes)
        src, dst = src[ok], dst[ok]
        yield perm[src], perm[dst]
        made += src.size


def rmat(num_nodes: int, num_edges: int, seed: int = 0, chunk: int = 1 << 22) -> Graph:
    """An R-MAT graph with exactly num_edges directed edges (duplicates and self-loops kept).
    Peak host memory is about 16 bytes per edge plus one chunk's temporaries (the reddit preset:
    about 2 GB)."""
    counts = np.zeros(num_nodes, np.int64)
    chunks = []
    for src, dst in rmat_edges(num_nodes, num_edges, seed, chunk=chunk):
        counts += np.bincount(dst, minlength=num_nodes)
        chunks.append((src.astype(np.int32), dst.astype(np.int32)))
    rowptr = np.zeros(num_nodes + 1, np.int64)
    np.cumsum(counts, out=rowptr[1:])
    col = np.empty(int(rowptr[-1]), np.int64)
    fill = rowptr[:-1].copy()
    for src, dst in chunks:  # counting sort, chunk by chunk
        order = np.argsort(dst, kind="stable")
        d, s = dst[order], src[order]
        starts = np.searchsorted(d, np.arange(num_nodes), side="left")
        ends = np.searchsorted(d, np.arange(num_nodes), side="right")
        pos = fill[d] + (np.arange(d.size) - starts[d])
        col[pos] = s
        fill += ends - starts
    return Graph.from_csr(rowptr, col, what=f"rmat:{num_nodes}:{num_edges}")


def is_spec(spec: str) -> bool:
    return spec.split(":")[0] in PRESETS or spec.startswith("rmat:")


def from_spec(spec: str) -> Graph:
    m = re.fullmatch(r"(reddit|products)(?::scale=([0-9.eE+-]+))?(?::seed=(\d+))?", spec)
    if m:
        nodes, edges = PRESETS[m.group(1)]
        s = float(m.group(2) or 1.0)
        if not 0 < s <= 1:
            raise GraphError(f"{spec}: scale must be in (0, 1], got {s}")
        return rmat(max(1, int(nodes * s)), int(edges * s), int(m.group(3) or 0))
    m = re.fullmatch(r"rmat:(\d+):(\d+)(?::(\d+))?", spec)
    if m:
        return rmat(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    raise GraphError(f"{spec}: not a synthetic spec ({SPEC_HELP})")

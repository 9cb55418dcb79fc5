"""Seeded synthetic graphs.

- `rmat:NODES:EDGES[:SEED]`: a plain R-MAT graph with exactly EDGES directed edges (duplicates
  and self-loops kept), for kernels and tests.
- `rmat-reddit`, `rmat-products`, `rmat-amazon`: stand-ins for Reddit, ogbn-products and the Amazon
  graph of the 1.5D papers. Undirected like the
  real graphs (every edge in both directions), no duplicate edges, no self-loops, with the real
  node count and directed edge count (so the real average degree). The R-MAT parameters and
  the share of uniformly drawn edges (which keeps low-degree nodes from being isolated) were
  chosen for a heavy but bounded degree tail; `mgg info GRAPH` prints the statistics next to
  the published ones (the maximum degree, isolated share and skew of the real graphs are not
  published, so they are shown as unknown). The old names `reddit` and `products` still work
  and say on stderr that they are the stand-ins.
- `sbm:NODES:BLOCKS:AVG_DEG:P_IN[:SEED]`: a stochastic block model, a graph with community
  structure (what graph partitioning can exploit and R-MAT barely has): BLOCKS equal
  communities over randomly numbered nodes (so the node order says nothing of them), undirected
  and simple, NODES * AVG_DEG directed edges, a share P_IN of the pairs inside a community.

Edges are made in chunks, so host memory stays near the size of the CSR itself."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..errors import GraphError
from ..graph import Graph
from .arrays import sorted_unique
from .stats import degree_stats, gini  # noqa: F401  (their home before mgg.data.stats)


@dataclass(frozen=True)
class Preset:
    nodes: int
    edges: int  # directed edges: twice the undirected pairs
    abcd: tuple  # R-MAT quadrant probabilities
    uniform: float  # share of the pairs drawn uniformly at random
    real: dict  # the published statistics of the dataset it stands in for


def _real(dataset: str, nodes: int, edges: int, source: str) -> dict:
    """Published statistics; None where a statistic is not published (shown as unknown)."""
    return dict(
        dataset=dataset,
        nodes=nodes,
        edges=edges,
        avg_degree=edges / nodes,
        source=source,
        **{
            k: None
            for k in (
                "max_degree",
                "max_over_avg",
                "isolated",
                "isolated_fraction",
                "top1pct_share",
                "gini",
                "self_loops",
                "duplicates",
                "symmetric",
            )
        },
    )


PRESETS = {
    # Reddit (PyG / GraphSAGE): 232,965 nodes, 114,615,892 directed edges, symmetric.
    "rmat-reddit": Preset(
        232_965,
        114_615_892,
        (0.50, 0.17, 0.17, 0.16),
        0.10,
        _real(
            "Reddit (PyG)",
            232_965,
            114_615_892,
            "232,965 nodes, 114,615,892 edges: PyG's Reddit docstring; "
            "undirected (GraphSAGE, Hamilton et al. 2017); the other statistics are not published",
        ),
    ),
    # ogbn-products: 2,449,029 nodes, 61,859,140 undirected edges = 123,718,280 directed as loaded.
    "rmat-products": Preset(
        2_449_029,
        123_718_280,
        (0.47, 0.19, 0.19, 0.15),
        0.15,
        _real(
            "ogbn-products",
            2_449_029,
            123_718_280,
            "2,449,029 nodes, 61,859,140 undirected edges: OGB's "
            "node-property table (loaded with inverse edges: 123,718,280); the other statistics are not published",
        ),
    ),
    # Amazon (Shchur et al.'s co-purchase graph as the 1.5D papers use it, SA:L269; CAGNET:L1342):
    # 14,249,639 nodes, 230,788,269 edges; "much more irregular" than Reddit (SA:L301)
    "rmat-amazon": Preset(
        14_249_639,
        230_788_269,
        (0.57, 0.19, 0.19, 0.05),
        0.05,
        _real(
            "Amazon (1.5D papers)",
            14_249_639,
            230_788_269,
            "14,249,639 nodes, 230,788,269 edges: sparsity-aware-communication.txt's and CAGNET's dataset "
            "table; the other statistics are not published",
        ),
    ),
}
ALIASES = {"reddit": "rmat-reddit", "products": "rmat-products"}
SPEC_HELP = (
    "'rmat-reddit', 'rmat-products', 'rmat-amazon' (optionally ':scale=0.1', ':seed=1'), 'rmat:NODES:EDGES[:SEED]', "
    "'sbm:NODES:BLOCKS:AVG_DEG:P_IN[:SEED]'"
)
_PRESET_RE = re.compile(
    r"(rmat-reddit|rmat-products|rmat-amazon|reddit|products)(?::scale=([0-9.eE+-]+))?(?::seed=(\d+))?"
)
_SBM_RE = re.compile(r"sbm:(\d+):(\d+):([0-9.eE+-]+):([0-9.eE+-]+)(?::(\d+))?")


def rmat_edges(num_nodes: int, num_edges: int, seed: int = 0, abcd=(0.57, 0.19, 0.19, 0.05), chunk: int = 1 << 22):
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
    Peak host memory is about 16 bytes per edge plus one chunk's temporaries."""
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


def _pairs(rng, n: int, num_nodes: int, scale: int, cut: np.ndarray, uniform: float):
    """n candidate pairs (u, v), int64: R-MAT (two comparisons per level on one float32 draw),
    a `uniform` share drawn uniformly; ids >= num_nodes dropped."""
    u = np.zeros(n, np.int64)
    v = np.zeros(n, np.int64)
    for _ in range(scale):
        r = rng.random(n, dtype=np.float32)
        u <<= 1
        v <<= 1
        u |= r >= cut[1]  # quadrants c, d: lower half
        v |= ((r >= cut[0]) & (r < cut[1])) | (r >= cut[2])  # quadrants b, d: right half
    k = int(rng.binomial(n, uniform))
    u[:k] = rng.integers(0, num_nodes, k)
    v[:k] = rng.integers(0, num_nodes, k)
    ok = (u < num_nodes) & (v < num_nodes) & (u != v)
    return u[ok], v[ok]


def rmat_undirected(
    num_nodes: int,
    num_edges: int,
    seed: int = 0,
    abcd=(0.57, 0.19, 0.19, 0.05),
    uniform: float = 0.0,
    chunk: int = 1 << 22,
) -> Graph:
    """An undirected simple graph with exactly num_edges directed edges (num_edges / 2 distinct
    pairs, each in both directions; no self-loops): R-MAT pairs, a `uniform` share drawn
    uniformly, ids scrambled by a seeded permutation. Pairs are deduplicated as 64-bit keys,
    chunk by chunk, and topped up until there are enough; the excess of the last round is
    dropped at random. Peak host memory is about 24 bytes per directed edge."""
    if num_edges % 2:
        raise GraphError(f"rmat: an undirected graph has an even number of directed edges, got {num_edges}")
    pairs = num_edges // 2
    if num_nodes < 2 or pairs > num_nodes * (num_nodes - 1) // 2:
        raise GraphError(f"rmat: {pairs} distinct pairs do not fit in {num_nodes} nodes")
    rng = np.random.default_rng(seed)
    scale = max(1, int(np.ceil(np.log2(num_nodes))))
    perm = rng.permutation(num_nodes)
    cut = np.cumsum(abcd)[:3] / np.sum(abcd)
    keys = np.empty(0, np.int64)
    while keys.size < pairs:
        want = pairs - keys.size
        fresh = []
        drawn = 0
        while drawn < want * 1.1 + 1000:  # a little over: duplicates and out-of-range ids fall out
            u, v = _pairs(rng, min(chunk, int(want * 1.1) + 1000), num_nodes, scale, cut, uniform)
            u, v = perm[u], perm[v]
            fresh.append(sorted_unique(np.minimum(u, v) * num_nodes + np.maximum(u, v)))
            drawn += u.size
            del u, v
        fresh = sorted_unique(np.concatenate(fresh))
        if keys.size:  # keep the pairs not drawn in earlier rounds
            at = np.minimum(np.searchsorted(keys, fresh), keys.size - 1)
            fresh = fresh[keys[at] != fresh]
        if keys.size + fresh.size > pairs:  # drop the excess of this round at random
            fresh = np.delete(fresh, rng.choice(fresh.size, keys.size + fresh.size - pairs, replace=False))
        keys = np.sort(np.concatenate([keys, fresh]), kind="stable") if keys.size else fresh
        del fresh
    u = (keys // num_nodes).astype(np.int32)
    v = (keys % num_nodes).astype(np.int32)
    del keys
    src = np.concatenate([u, v])
    dst = np.concatenate([v, u])
    del u, v
    return Graph.from_edges(src, dst, num_nodes, what=f"rmat-undirected:{num_nodes}:{num_edges}")


def _distinct_pairs(draw, want: int, num_nodes: int, rng, chunk: int) -> np.ndarray:
    """`want` distinct undirected pairs as sorted keys min * N + max: candidates from draw(k)
    (two id arrays, no self-loops) until there are enough; the excess is dropped at random."""
    keys = np.empty(0, np.int64)
    while keys.size < want:
        u, v = draw(min(chunk, int((want - keys.size) * 1.1) + 1000))
        fresh = sorted_unique(np.minimum(u, v) * num_nodes + np.maximum(u, v))
        if keys.size:
            at = np.minimum(np.searchsorted(keys, fresh), keys.size - 1)
            fresh = fresh[keys[at] != fresh]
        if keys.size + fresh.size > want:
            fresh = np.delete(fresh, rng.choice(fresh.size, keys.size + fresh.size - want, replace=False))
        keys = np.sort(np.concatenate([keys, fresh])) if keys.size else fresh
    return keys


def sbm_communities(num_nodes: int, blocks: int, seed: int = 0) -> np.ndarray:
    """The community of every node of sbm(num_nodes, blocks, ..., seed): equal shares (+-1),
    randomly placed."""
    return np.random.default_rng([seed, 1]).permutation(np.arange(num_nodes) % blocks)


def sbm(num_nodes: int, blocks: int, avg_degree: float, p_in: float, seed: int = 0, chunk: int = 1 << 22) -> Graph:
    """A stochastic block model: an undirected simple graph (every pair in both directions, no
    self-loops or duplicates) over `blocks` communities of equal size (+-1) with randomly drawn
    members (sbm_communities). It has round(num_nodes * avg_degree / 2) distinct pairs, round(p_in * pairs) of
    them inside a community (one end uniform, the other uniform in its community) and the rest
    between two different communities.

    Args:
        num_nodes: N >= 2.
        blocks: communities, 1 <= blocks <= N / 2.
        avg_degree: directed edges per node.
        p_in: the share of pairs inside a community, in [0, 1] (1 with one block).
        seed: the generator's seed.

    Returns:
        The Graph.
    """
    what = f"sbm:{num_nodes}:{blocks}:{avg_degree}:{p_in}"
    if num_nodes < 2 or not 1 <= blocks <= num_nodes // 2 or not avg_degree > 0 or not 0 <= p_in <= 1:
        raise GraphError(f"{what}: need NODES >= 2, 1 <= BLOCKS <= NODES / 2, AVG_DEG > 0 and P_IN in [0, 1]")
    if blocks == 1 and p_in < 1:
        raise GraphError(f"{what}: one block has no pairs between communities (P_IN must be 1)")
    rng = np.random.default_rng(seed)
    comm = sbm_communities(num_nodes, blocks, seed)
    order = np.argsort(comm, kind="stable")  # the members of each block, block by block
    size = np.bincount(comm, minlength=blocks)
    start = np.concatenate([[0], np.cumsum(size)[:-1]])
    pairs = int(round(num_nodes * avg_degree / 2))
    inside = int(round(p_in * pairs))
    room_in = int((size * (size - 1) // 2).sum())
    room_out = num_nodes * (num_nodes - 1) // 2 - room_in
    if inside > room_in // 2 or pairs - inside > room_out // 2:
        raise GraphError(f"{what}: {pairs:,} pairs are too many for a sparse block model of {num_nodes:,} nodes")

    def within(k):  # u uniform, v uniform in u's block
        u = rng.integers(0, num_nodes, k)
        b = comm[u]
        v = order[start[b] + (rng.random(k) * size[b]).astype(np.int64)]
        keep = u != v
        return u[keep], v[keep]

    def between(k):  # u uniform, v uniform outside u's block
        u = rng.integers(0, num_nodes, k)
        b = comm[u]
        i = (rng.random(k) * (num_nodes - size[b])).astype(np.int64)
        return u, order[i + (i >= start[b]) * size[b]]

    keys = np.concatenate(
        [
            _distinct_pairs(within, inside, num_nodes, rng, chunk),
            _distinct_pairs(between, pairs - inside, num_nodes, rng, chunk),
        ]
    )
    u, v = keys // num_nodes, keys % num_nodes
    return Graph.from_edges(np.concatenate([u, v]), np.concatenate([v, u]), num_nodes, what=what)


def canonical(spec: str) -> str:
    """The name a synthetic spec stands for in outputs: old preset names become rmat-*."""
    m = _PRESET_RE.fullmatch(spec)
    if m and m.group(1) in ALIASES:
        return ALIASES[m.group(1)] + spec[len(m.group(1)) :]
    return spec


def is_spec(spec: str) -> bool:
    return bool(_PRESET_RE.fullmatch(spec)) or spec.startswith(("rmat:", "sbm:"))


def preset_of(spec: str) -> Optional[tuple[str, float]]:
    """(preset name, scale) of a preset spec, None for others."""
    m = _PRESET_RE.fullmatch(spec)
    return (ALIASES.get(m.group(1), m.group(1)), float(m.group(2) or 1.0)) if m else None


def from_spec(spec: str) -> Graph:
    m = _PRESET_RE.fullmatch(spec)
    if m:
        name = m.group(1)
        if name in ALIASES:
            print(
                f"mgg: note: '{name}' is {ALIASES[name]}, a synthetic R-MAT stand-in with the size of "
                f"{PRESETS[ALIASES[name]].real['dataset']}, not the real data (for that, give its directory or "
                f"--data-dir)",
                file=sys.stderr,
            )
            name = ALIASES[name]
        p = PRESETS[name]
        s = float(m.group(2) or 1.0)
        if not 0 < s <= 1:
            raise GraphError(f"{spec}: scale must be in (0, 1], got {s}")
        nodes = max(2, int(p.nodes * s))
        edges = min(2 * (int(p.edges * s) // 2), nodes * (nodes - 1))
        return rmat_undirected(nodes, edges, int(m.group(3) or 0), p.abcd, p.uniform)
    m = re.fullmatch(r"rmat:(\d+):(\d+)(?::(\d+))?", spec)
    if m:
        return rmat(int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    m = _SBM_RE.fullmatch(spec)
    if m:
        try:
            deg, p_in = float(m.group(3)), float(m.group(4))
        except ValueError:
            raise GraphError(f"{spec}: AVG_DEG and P_IN must be numbers ({SPEC_HELP})") from None
        return sbm(int(m.group(1)), int(m.group(2)), deg, p_in, int(m.group(5) or 0))
    raise GraphError(f"{spec}: not a synthetic spec ({SPEC_HELP})")


def real_stats(spec: str) -> Optional[dict]:
    """The published statistics of the dataset a preset spec stands in for (full size only)."""
    p = preset_of(spec)
    return PRESETS[p[0]].real if p and p[1] == 1.0 else None

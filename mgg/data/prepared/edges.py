"""A source's edge stream as mgg's loaders make the graph of it, one piece at a time: checked (ids
inside the node count, weights real and finite, as Graph.from_edges checks them), counted (each
node's in-degree, which the partition needs before the edges are bucketed), and coalesced where the
source says so (each (source, destination) pair once, a row's edges by source id: torch_geometric's
coalesce), through temporary buckets of destination ranges so that no piece holds all the edges."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np
from tqdm.auto import tqdm

from ...errors import GraphError
from .write import Buckets


@dataclass
class EdgeStream:
    """The edges as the graph holds them: `pieces()` gives (src, dst, weight or None) pieces in each
    row's order; `degrees` each node's in-degree; `weight_dtype` None for an unweighted graph."""

    pieces: Callable[[], Iterator[tuple]]
    degrees: np.ndarray
    weight_dtype: Optional[type]

    @property
    def num_edges(self) -> int:
        return int(self.degrees.sum())


def checked(pieces: Iterator[tuple], n: int, what: str) -> Iterator[tuple]:
    """The pieces, each id checked against [0, n) and each weight for being real and finite."""
    first = 0
    for src, dst, w in pieces:
        if src.shape != dst.shape:
            raise GraphError(f"{what}: {src.size} sources but {dst.size} destinations")
        if src.size:
            lo, hi = min(int(src.min()), int(dst.min())), max(int(src.max()), int(dst.max()))
            if lo < 0 or hi >= n:
                i = int(np.flatnonzero((src < 0) | (dst < 0) | (src >= n) | (dst >= n))[0])
                kind = "a negative node id" if min(src[i], dst[i]) < 0 else f"a node id >= num_nodes {n}"
                raise GraphError(f"{what}: edge {first + i} ({src[i]} -> {dst[i]}) has {kind}")
        if w is not None:
            if np.asarray(w).dtype.kind not in "biuf":
                raise GraphError(f"{what}: edge weights must be real numbers, got dtype {np.asarray(w).dtype}")
            if not np.isfinite(w).all():
                raise GraphError(f"{what}: edge weights have non-finite entries")
        first += src.size
        yield src, dst, w


def add_counts(counts: np.ndarray, ids: np.ndarray) -> None:
    """counts[i] += how often i occurs in ids (a bincount of the whole length only when ids are as
    many: a piece's count costs its own size, not the node count)."""
    if ids.size >= counts.size // 8:
        counts += np.bincount(ids, minlength=counts.size)
    elif ids.size:
        u, c = np.unique(ids, return_counts=True)
        counts[u] += c


def stream_of(source, per_piece: int, scratch: Path, cap: int, progress: bool) -> EdgeStream:
    """The source's edges as the graph holds them (module docstring). One pass over the source counts
    them; a coalescing source takes a second, into buckets of destination ranges of at most `cap`
    edges, each made distinct and sorted, the result kept in a scratch file read back in pieces."""
    n, what = source.num_nodes, source.name
    degrees = np.zeros(n, np.int64)
    unit, weighted = True, False
    bar = tqdm(desc="reading edges", unit="edge", unit_scale=True, disable=not progress, leave=False)
    for _, dst, w in checked(source.edges(per_piece), n, what):
        add_counts(degrees, dst)
        if w is not None:
            weighted = True
            unit = unit and bool(np.all(np.asarray(w) == 1))
        bar.update(dst.size)
    bar.close()
    if weighted and source.drop_unit_weights and unit:
        weighted = False
    wdt = source.weight_dtype if weighted else None
    if not source.coalesce:

        def pieces() -> Iterator[tuple]:
            for src, dst, w in source.edges(per_piece):
                yield src, dst, (None if wdt is None else np.asarray(w, wdt))

        return EdgeStream(pieces, degrees, wdt)
    if weighted:
        raise GraphError(f"{what}: a coalesced source has no edge weights")
    return _coalesced(source, degrees, per_piece, scratch, cap, progress)


def _coalesced(source, degrees: np.ndarray, per_piece: int, scratch: Path, cap: int, progress: bool) -> EdgeStream:
    n = source.num_nodes
    cum = np.cumsum(degrees)
    total = int(cum[-1]) if n else 0
    cuts = np.union1d([0, n], np.searchsorted(cum, np.arange(cap, total, cap), side="left") + 1)
    cuts = cuts[cuts <= n]
    rec_t = np.dtype([("dst", np.int64), ("src", np.int64)])
    buckets = Buckets(scratch, cuts.size - 1, rec_t, "coalesce")
    bar = tqdm(total=total, desc="coalescing", unit="edge", unit_scale=True, disable=not progress, leave=False)
    for src, dst, _ in source.edges(per_piece):
        rec = np.empty(dst.size, rec_t)
        rec["dst"], rec["src"] = dst, src
        buckets.add(np.searchsorted(cuts, dst, side="right") - 1, rec)
        bar.update(dst.size)
    bar.close()
    out = scratch / "coalesced.bin"
    distinct = np.zeros(n, np.int64)
    with open(out, "wb") as f:
        for b in range(cuts.size - 1):
            rec = buckets.take(b)
            key = np.unique(rec["dst"] * np.int64(n) + rec["src"])  # by destination, then source
            dst, src = key // n, key % n
            add_counts(distinct, dst)
            pair = np.empty(key.size, rec_t)
            pair["dst"], pair["src"] = dst, src
            f.write(memoryview(pair.view(np.uint8)))

    def pieces() -> Iterator[tuple]:
        with open(out, "rb") as f:
            while True:
                rec = np.fromfile(f, rec_t, count=per_piece)
                if not rec.size:
                    return
                yield rec["src"].copy(), rec["dst"].copy(), None

    return EdgeStream(pieces, distinct, None)

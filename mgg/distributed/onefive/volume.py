"""The bytes each rank of a 1.5D algorithm moves per aggregation (shared/notes/one_point_five_d.md
section 5.2), from the graph's b-way block partition alone: what the backends' counters count at the
collectives, and what the strategy model (mgg.runtime.strategy) ranks strategies by.

Per rank P(i, j), one aggregation of rows of width f and e bytes an element, K = chunk(j),
V[k, i] = the distinct rows of block k that block i's rows read, n_k = block k's rows:

    sa-1.5d      forward  recv f e sum_{k in K, k != i} V[k, i]       (exactly the rows read)
                          send f e [i in K] sum_{l != i} V[i, l]      (the stage owner serves its column)
                          row  all-reduce 2 (c - 1) / c n_i f e
                 backward the exchange reversed (send and recv swap); row broadcast (c - 1) / c n_i f e
    cagnet-1.5d  forward  recv f e sum_{k in K, k != i} n_k          (every block of the chunk, whole)
                          send f e sum_{k in K} (b - 1) / b n_k       (pipelined ring broadcasts)
                          row  all-reduce as above
                 backward reduces to the roots (send and recv swap); row broadcast as above

(A ring broadcast or reduce over G ranks moves (G - 1) / G of the buffer per rank: grid.comm_sizes.)
c = 1: sa-1.5d moves the halo backend's rows, cagnet-1.5d the allgather backend's; c = P: one block, no
exchange, the all-reduce alone."""

from __future__ import annotations

import numpy as np

from ..grid.comm_sizes import ring_bytes
from .layout import Layout

ALGORITHMS = ("sa-1.5d", "cagnet-1.5d")


def rank_bytes(algorithm: str, layout: Layout, volume: np.ndarray, sizes, width: int, elem: int = 4) -> dict:
    """Rank layout.rank's bytes of one aggregation: {direction: {kind: bytes}} with directions
    forward and backward and kinds recv, send (the column exchange or broadcasts) and row (the row
    all-reduce forward, the row broadcast backward)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    i, (k0, k1), b, c = layout.block, layout.chunk, layout.blocks, layout.c
    row = int(sizes[i]) * width * elem
    stages = [k for k in range(k0, k1) if k != i]
    if algorithm == "sa-1.5d":
        recv = sum(int(volume[k, i]) for k in stages) * width * elem
        send = (int(volume[i].sum() - volume[i, i]) if k0 <= i < k1 else 0) * width * elem
    else:
        recv = sum(int(sizes[k]) for k in stages) * width * elem
        send = sum(ring_bytes("broadcast", int(sizes[k]) * width * elem, b) for k in range(k0, k1))
    return dict(
        forward=dict(recv=recv, send=send, row=ring_bytes("all_reduce", row, c)),
        backward=dict(recv=send, send=recv, row=ring_bytes("broadcast", row, c)),
    )


def totals(algorithm: str, world: int, c: int, rule: str, volume: np.ndarray, sizes, width: int, elem: int = 4) -> dict:
    """The sums over ranks and the busiest rank's bytes of one forward aggregation: recv, send,
    row, and their max."""
    rows = [
        rank_bytes(algorithm, Layout(world, c, r, rule), volume, sizes, width, elem)["forward"] for r in range(world)
    ]
    out = {f"total_{k}": sum(r[k] for r in rows) for k in ("recv", "send", "row")}
    out.update({f"max_{k}": max(r[k] for r in rows) for k in ("recv", "send", "row")})
    return out

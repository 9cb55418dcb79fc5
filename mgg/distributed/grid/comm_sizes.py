"""Bytes a rank moves in one ring collective (Thakur et al., as Plexus's model takes them; no
latency term): the one formula the collectives' counters and the models use (Plexus's grid,
mgg.distributed.grid.model; the 1.5D algorithms, mgg.distributed.onefive.volume). A broadcast or a
reduce is a pipelined ring: every rank forwards (G - 1) / G of the buffer."""

from __future__ import annotations

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")


def ring_bytes(kind: str, total_bytes: int, ranks: int) -> float:
    """Bytes one rank sends in `kind` over `ranks` ranks; total_bytes is the whole buffer (the
    all-reduced tensor, the gathered result, the tensor reduce-scattered)."""
    if ranks <= 1:
        return 0.0
    share = total_bytes * (ranks - 1) / ranks
    if kind == "all_reduce":
        return 2 * share
    if kind in ("all_gather", "reduce_scatter", "broadcast", "reduce"):
        return share
    raise ValueError(f"ring_bytes: kind must be one of {KINDS}, got {kind!r}")

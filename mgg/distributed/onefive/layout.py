"""The 1.5D algorithms' layout (cagnet-reducing-communication.txt section IV-B; sparsity-aware-
communication.txt Algorithm 2): P ranks as b = P / c block rows of c replicas. Rank r is P(i, j) with
i = r // c its block (the process row P(i, :) = the c consecutive ranks holding block i) and j = r % c
its column (the process column P(:, j) = ranks j, j + c, ..., one per block): Plexus's GridShape(b, c,
1), whose 'y' groups are the process rows and 'x' groups the process columns.

Column j multiplies the blocks of its chunk (a run of consecutive blocks); every block lies in exactly
one chunk, so the column of block k, j*(k), is where its rows travel. Two rules cut the chunks:
`cagnet` (CAGNET's code: s = floor(P / c^2) blocks each, the last column the rest; degenerate when
c^2 > P: columns 0..c-2 idle) and `balanced` (floor(j b / c) .. floor((j + 1) b / c); the same as
CAGNET's when c^2 divides P), the default."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from ...errors import MggError
from ...graph import Graph

STAGE_RULES = ("balanced", "cagnet")


def check_replication(world: int, c) -> None:
    """c must be a positive divisor of the world."""
    if not isinstance(c, (int, np.integer)) or isinstance(c, bool) or c < 1 or world % c:
        divisors = [d for d in range(1, world + 1) if world % d == 0]
        raise MggError(f"replication c={c!r} must divide the {world} ranks (one of {divisors})")


def chunks(blocks: int, c: int, rule: str = "balanced") -> list:
    """Column j's chunk of blocks, [first, end), for j = 0..c-1."""
    if rule not in STAGE_RULES:
        raise MggError(f"stage rule must be one of {STAGE_RULES}, got {rule!r}")
    if rule == "balanced":
        return [(j * blocks // c, (j + 1) * blocks // c) for j in range(c)]
    s = (blocks * c) // (c * c)  # floor(P / c^2) with P = b c
    return [(j * s, (j + 1) * s) if j < c - 1 else ((c - 1) * s, blocks) for j in range(c)]


@dataclass(frozen=True)
class Layout:
    """Rank `rank`'s place among P = blocks * c ranks (module docstring)."""

    world: int
    c: int
    rank: int
    rule: str = "balanced"

    def __post_init__(self):
        check_replication(self.world, self.c)

    @property
    def blocks(self) -> int:
        return self.world // self.c

    @property
    def block(self) -> int:
        return self.rank // self.c

    @property
    def column(self) -> int:
        return self.rank % self.c

    @cached_property
    def chunks(self) -> list:
        return chunks(self.blocks, self.c, self.rule)

    @property
    def chunk(self) -> tuple:
        return self.chunks[self.column]

    def column_of(self, block: int) -> int:
        """j*(block): the column whose chunk holds the block."""
        return next(j for j, (a, b) in enumerate(self.chunks) if a <= block < b)

    def rank_of(self, block: int, column: int) -> int:
        return block * self.c + column


def column_graph(graph: Graph, bounds: np.ndarray, chunk: tuple) -> Graph:
    """The edges of `graph` whose source lies in the blocks of `chunk` (what a column multiplies), in
    each row's order, weights kept; the other rows' edges are gone, the node count kept."""
    lo, hi = int(bounds[chunk[0]]), int(bounds[chunk[1]])
    col = graph.col
    keep = (col >= lo) & (col < hi)
    rows = graph.rows()[keep]
    ptr = torch.zeros(graph.num_nodes + 1, dtype=torch.int64)
    ptr[1:] = torch.cumsum(torch.bincount(rows, minlength=graph.num_nodes), 0)
    return Graph._unchecked(ptr, col[keep], None if graph.weight is None else graph.weight[keep])

"""The shape of Plexus's process grid (plexus-3d-parallel.txt, section 3): G = Gx * Gy * Gz ranks,
rank = z * Gx * Gy + x * Gy + y, so that Y is innermost (consecutive ranks, inside a node), then X,
then Z. Pure arithmetic: which grids there are for G ranks, a rank's coordinates, the ranks of each
axis group and whether those stay inside a node of `gpus_per_node` consecutive ranks."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...errors import MggError

AXES = ("x", "y", "z")
# torch's DeviceMesh dims, outermost first: the mesh's row-major rank order is z, x, y
MESH_DIMS = ("z", "x", "y")


@dataclass(frozen=True)
class GridShape:
    x: int
    y: int
    z: int

    def __post_init__(self):
        for a in AXES:
            n = getattr(self, a)
            if not isinstance(n, int) or n < 1:
                raise MggError(f"grid: G{a} must be a positive int, got {n!r}")

    @staticmethod
    def parse(text: str) -> "GridShape":
        """'GXxGYxGZ', e.g. '4x2x1'."""
        m = re.fullmatch(r"\s*(\d+)\s*x\s*(\d+)\s*x\s*(\d+)\s*", str(text))
        if m is None:
            raise MggError(f"grid: expected GXxGYxGZ (e.g. 4x2x1), got {text!r}")
        return GridShape(*(int(v) for v in m.groups()))

    @property
    def size(self) -> int:
        return self.x * self.y * self.z

    def __str__(self) -> str:
        return f"{self.x}x{self.y}x{self.z}"

    def extent(self, axis: str) -> int:
        return getattr(self, axis)

    @property
    def mesh_shape(self) -> tuple:
        return tuple(self.extent(a) for a in MESH_DIMS)

    def coords(self, rank: int) -> dict:
        """rank -> {'x': .., 'y': .., 'z': ..}."""
        return {"z": rank // (self.x * self.y), "x": rank // self.y % self.x, "y": rank % self.y}

    def rank(self, x: int, y: int, z: int) -> int:
        return z * self.x * self.y + x * self.y + y

    def groups(self, axis: str) -> list:
        """The rank lists of the groups along `axis` (each varies that coordinate only)."""
        out = {}
        for r in range(self.size):
            c = self.coords(r)
            key = tuple(c[a] for a in AXES if a != axis)
            out.setdefault(key, []).append(r)
        return list(out.values())

    def inside_node(self, axis: str, gpus_per_node: int) -> bool:
        """Whether every group along `axis` lies within one node (ranks // gpus_per_node)."""
        return all(len({r // gpus_per_node for r in g}) == 1 for g in self.groups(axis))

    def check_world(self, world: int) -> None:
        if self.size != world:
            raise MggError(f"grid {self}: Gx*Gy*Gz = {self.size} ranks, but the world has {world}")


def factorizations(gpus: int) -> list:
    """Every grid of `gpus` ranks (ordered Gx, Gy, Gz), 1D and 2D shapes included."""
    if gpus < 1:
        raise MggError(f"grid: the number of GPUs must be >= 1, got {gpus}")
    out = []
    for x in range(1, gpus + 1):
        if gpus % x:
            continue
        for y in range(1, gpus // x + 1):
            if (gpus // x) % y == 0:
                out.append(GridShape(x, y, gpus // x // y))
    return out

"""Plexus's 3D process grid (plexus-3d-parallel.txt) on torch.distributed, with mgg's op as the
local SpMM: the grid's shape (shape.py), what each rank holds (shards.py), the collectives with
their adjoints and byte counts (collectives.py), GCN, SAGE and GIN on the grid (net.py) and Plexus's model of a
grid's epoch (model.py: bench grid, grid="auto")."""

from .collectives import Grid
from .net import GridNet
from .shape import GridShape, factorizations
from .shards import Orders, balance

__all__ = ["Grid", "GridNet", "GridShape", "Orders", "balance", "factorizations"]

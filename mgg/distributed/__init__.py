"""Full-graph training over the ranks of a torch.distributed group (torchrun)."""

from .graph import BACKENDS, DistGraph, DistPlan
from .prepared import Part, read_part

__all__ = ["BACKENDS", "DistGraph", "DistPlan", "Part", "read_part"]

"""Full-graph training over the ranks of a torch.distributed group (torchrun)."""

from .graph import BACKENDS, DistGraph, DistPlan

__all__ = ["BACKENDS", "DistGraph", "DistPlan"]

"""Neighbor sampling for mini-batch training: mgg's sampler (neighbor.py) and, where PyG is
installed, the same sampler behind PyG's NeighborLoader (pyg.py, imported on demand)."""

from .neighbor import NeighborSampler, Subgraph, check_fanouts

__all__ = ["NeighborSampler", "Subgraph", "check_fanouts"]

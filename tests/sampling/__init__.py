"""mgg.sampling: the neighbor sampler (neighbor.py) and its PyG NeighborLoader adapter (pyg.py)."""

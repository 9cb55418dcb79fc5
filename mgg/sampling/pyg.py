"""mgg's neighbor sampler as the sampler of PyG's NeighborLoader (and LinkNeighborLoader), for
where pyg-lib and torch-sparse, the two samplers PyG calls, are not installed:

    from torch_geometric.loader import NeighborLoader
    from mgg.sampling.pyg import PygNeighborSampler

    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=64, input_nodes=data.train_mask,
                            neighbor_sampler=PygNeighborSampler(data, [10, 10]))

The loader then works as with pyg-lib: seeds first in each batch's n_id, edge ids through PyG's
edge permutation (so edge attributes follow), `bidirectional` subgraphs and backward sampling
direction as PyG post-processes them. What mgg.sampling.NeighborSampler does not do (sampling
with replacement, disjoint trees, temporal or weighted sampling, induced subgraphs,
heterogeneous graphs) is refused in one line at construction. Needs torch_geometric."""

from __future__ import annotations

import warnings
from typing import Optional

import torch
from torch_geometric.sampler import NeighborSampler as _PygSampler
from torch_geometric.sampler import SamplerOutput
from torch_geometric.sampler.base import DataType, SubgraphType

from ..errors import MggError
from .neighbor import NeighborSampler, check_fanouts


class PygNeighborSampler(_PygSampler):
    """PyG's NeighborSampler with mgg's uniform sampling (mgg.sampling.NeighborSampler) in place
    of pyg-lib's, on a homogeneous in-memory graph.

    Args:
        data, num_neighbors, subgraph_type, sample_direction, ...: as PyG's NeighborSampler.
        generator: a torch.Generator for reproducible batches; None uses torch's global
            generator (so torch.manual_seed decides the samples, as with pyg-lib).
    """

    def __init__(
        self,
        data,
        num_neighbors,
        subgraph_type="directional",
        replace: bool = False,
        disjoint: bool = False,
        temporal_strategy: str = "uniform",
        time_attr: Optional[str] = None,
        weight_attr: Optional[str] = None,
        is_sorted: bool = False,
        share_memory: bool = False,
        directed: bool = True,
        sample_direction: str = "forward",
        generator: Optional[torch.Generator] = None,
    ):
        what = "PygNeighborSampler"
        kind = DataType.from_data(data)
        if kind != DataType.homogeneous:
            raise MggError(f"{what}: only a homogeneous in-memory graph (torch_geometric.data.Data), got {kind}")
        refused = {  # before PyG's constructor, which would ask for pyg-lib for some of them
            "replace=True": replace,
            "disjoint=True": disjoint,
            "temporal sampling (time_attr)": time_attr is not None,
            "weighted sampling (weight_attr)": weight_attr is not None,
            "subgraph_type='induced'": not directed or SubgraphType(subgraph_type) == SubgraphType.induced,
        }
        for name, given in refused.items():
            if given:
                raise MggError(f"{what}: {name} is not supported by mgg's sampler (install pyg-lib for it)")
        with warnings.catch_warnings():  # PyG's advice to install pyg-lib does not apply here
            warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation.*")
            super().__init__(
                data,
                num_neighbors,
                subgraph_type=subgraph_type,
                temporal_strategy=temporal_strategy,
                is_sorted=is_sorted,
                share_memory=share_memory,
                sample_direction=sample_direction,
            )
        self._mgg = NeighborSampler.from_csr(self.colptr, self.row, self._current_fanouts(), generator)

    def _current_fanouts(self) -> list:
        """PyG's num_neighbors as mgg's fan-outs (any negative count: every in-neighbor)."""
        return check_fanouts([-1 if int(f) < 0 else int(f) for f in self.num_neighbors.get_mapped_values()])

    def _sample(self, seed, seed_time=None, **kwargs) -> SamplerOutput:
        if isinstance(seed, dict) or seed_time is not None:
            raise MggError("PygNeighborSampler: only homogeneous, non-temporal seeds")
        self._mgg.num_neighbors = self._current_fanouts()  # PyG lets users change num_neighbors
        sub = self._mgg.sample(seed)
        row, col = sub.edge_index[0], sub.edge_index[1]
        if self.sample_direction == "backward":  # the CSC was built transposed: edges point back
            row, col = col, row
        return SamplerOutput(
            node=sub.n_id,
            row=row,
            col=col,
            edge=sub.e_id,
            batch=None,
            num_sampled_nodes=sub.num_sampled_nodes,
            num_sampled_edges=sub.num_sampled_edges,
        )

"""Uniform neighbor sampling for mini-batch training (GraphSAGE; the semantics of PyG's
NeighborLoader on a homogeneous graph, without replacement, not disjoint) in plain torch, for
where pyg-lib and torch-sparse, which NeighborLoader needs, are not installed.

Hop k samples, for each node first reached at hop k - 1 (the seeds at hop 1), min(fanout_k,
in-degree) of its in-edges uniformly without replacement (all of them for fanout -1); the
sources not reached before join the subgraph in order of first appearance. The subgraph has the
seeds first, then each hop's new nodes, and only the sampled edges (ids local to the subgraph,
row 0 sources, row 1 targets)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import torch

from ..errors import MggError
from ..graph import Graph


@dataclass
class Subgraph:
    """A sampled mini-batch.

    n_id: global ids of the subgraph's nodes, the seeds first.
    edge_index: [2, E] sampled edges in local ids (row 0 sources, row 1 targets).
    e_id: each sampled edge's position in the graph's CSR (Graph.col).
    batch_size: the number of seeds.
    num_sampled_nodes: nodes added per hop (the seeds first).
    num_sampled_edges: edges sampled per hop.
    """

    n_id: torch.Tensor
    edge_index: torch.Tensor
    e_id: torch.Tensor
    batch_size: int
    num_sampled_nodes: list
    num_sampled_edges: list


def check_fanouts(num_neighbors) -> list:
    """num_neighbors as a list of fan-outs (>= 0, or -1 for every in-neighbor), or an MggError."""
    fanouts = list(num_neighbors) if isinstance(num_neighbors, (list, tuple)) else None
    if not fanouts or any(isinstance(f, bool) or not isinstance(f, int) or f < -1 for f in fanouts):
        raise MggError(f"num_neighbors must be a non-empty list of fan-outs >= 0 or -1, got {num_neighbors!r}")
    return fanouts


class NeighborSampler:
    """Samples the in-neighborhoods of seed nodes, hop by hop.

    Args:
        graph: the graph (row i of its CSR lists the sources of i's in-edges).
        num_neighbors: the fan-out of each hop, -1 for every in-neighbor.
        generator: a torch.Generator (CPU) for reproducible samples.
    """

    def __init__(self, graph: Graph, num_neighbors: list, generator: Optional[torch.Generator] = None):
        self.rowptr, self.col = graph.rowptr.long(), graph.col.long()
        self.num_nodes = graph.num_nodes
        self.num_neighbors = check_fanouts(num_neighbors)
        self.generator = generator
        self._local = torch.full((self.num_nodes,), -1, dtype=torch.long)  # global -> local id, -1: not reached

    @classmethod
    def from_csr(
        cls, rowptr: torch.Tensor, col: torch.Tensor, num_neighbors: list, generator: Optional[torch.Generator] = None
    ) -> "NeighborSampler":
        """A sampler over a CSR of in-edges given as arrays (row i: the sources of i's in-edges),
        e.g. PyG's CSC (colptr, row)."""
        return cls(Graph(rowptr.long().contiguous(), col.long().contiguous()), num_neighbors, generator)

    def _hop(self, frontier: torch.Tensor, fanout: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(CSR positions of the sampled in-edges, their targets) of one hop."""
        start = self.rowptr[frontier]
        deg = self.rowptr[frontier + 1] - start
        seg = torch.repeat_interleave(torch.arange(frontier.numel()), deg)
        offsets = torch.cumsum(deg, 0) - deg
        rank = torch.arange(seg.numel()) - offsets[seg]  # position among the target's in-edges
        pos = start[seg] + rank
        if fanout != -1 and bool((deg > fanout).any()):
            keys = torch.rand(seg.numel(), generator=self.generator, dtype=torch.float64)
            order = torch.argsort(seg.double() + keys)  # a random order within each target's in-edges
            pos, seg = pos[order], seg[order]
            keep = rank < fanout  # rank is that of the sorted slot: segments keep their place
            pos, seg = pos[keep], seg[keep]
        return pos, frontier[seg]

    def sample(self, seeds: torch.Tensor) -> Subgraph:
        """The sampled subgraph of seeds.

        Args:
            seeds: distinct global node ids.

        Returns:
            The Subgraph.
        """
        seeds = seeds.long().cpu()
        if seeds.numel() and (int(seeds.min()) < 0 or int(seeds.max()) >= self.num_nodes):
            raise MggError(f"seed ids must be in [0, {self.num_nodes})")
        if torch.unique(seeds).numel() != seeds.numel():
            raise MggError("seeds must be distinct")
        local = self._local
        local[seeds] = torch.arange(seeds.numel())
        nodes, frontier, count = [seeds], seeds, seeds.numel()
        positions, targets, n_nodes, n_edges = [], [], [seeds.numel()], []
        for fanout in self.num_neighbors:
            pos, dst = self._hop(frontier, fanout)
            src = self.col[pos]
            fresh = src[local[src] < 0]
            uniq, inv = torch.unique(fresh, return_inverse=True)
            first = torch.full((uniq.numel(),), fresh.numel(), dtype=torch.long)
            first.scatter_reduce_(0, inv, torch.arange(fresh.numel()), "amin")
            new = uniq[torch.argsort(first)]  # in order of first appearance
            local[new] = torch.arange(count, count + new.numel())
            count += new.numel()
            nodes.append(new)
            positions.append(pos)
            targets.append(dst)
            n_nodes.append(new.numel())
            n_edges.append(pos.numel())
            frontier = new
        n_id = torch.cat(nodes)
        e_id = torch.cat(positions)
        edge_index = torch.stack([local[self.col[e_id]], local[torch.cat(targets)]])
        local[n_id] = -1
        return Subgraph(n_id, edge_index, e_id, seeds.numel(), n_nodes, n_edges)

    def batches(self, input_nodes: torch.Tensor, batch_size: int, shuffle: bool = True) -> Iterator[Subgraph]:
        """One epoch of mini-batches over input_nodes (as NeighborLoader iterates).

        Args:
            input_nodes: global ids of the nodes to train on (or a boolean mask over the nodes).
            batch_size: seeds per batch (the last batch may have fewer).
            shuffle: a random order each epoch (from the sampler's generator).

        Yields:
            Subgraph per batch.
        """
        ids = input_nodes.nonzero().view(-1) if input_nodes.dtype == torch.bool else input_nodes.long()
        if shuffle:
            ids = ids[torch.randperm(ids.numel(), generator=self.generator)]
        for i in range(0, ids.numel(), batch_size):
            yield self.sample(ids[i : i + batch_size])

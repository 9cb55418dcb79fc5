"""mgg's sampler behind PyG's own NeighborLoader (mgg.sampling.pyg): the batches the loader
builds from it follow NeighborLoader's semantics (the replay of test_neighbor.check on the
sampler's CSC), every sampled edge is an edge of the user's graph with its own attributes (the
edge permutation PyG applies), and what mgg's sampler cannot do is refused in one line."""

import pytest
import torch

pytest.importorskip("torch_geometric")

from torch_geometric.data import Data  # noqa: E402
from torch_geometric.loader import NeighborLoader  # noqa: E402

from mgg import MggError  # noqa: E402
from mgg.graph import Graph  # noqa: E402
from mgg.sampling import Subgraph  # noqa: E402
from mgg.sampling.pyg import PygNeighborSampler  # noqa: E402
from mgg.testing import random_graph  # noqa: E402

from .test_neighbor import check  # noqa: E402


def _data(num_nodes=300, num_edges=3000, seed=3) -> Data:
    """A skewed multigraph (hubs, self loops, duplicates, nodes without in-edges) whose edges are
    in a random order (so PyG's CSC conversion permutes them), each edge's id as an attribute."""
    ei = random_graph(num_nodes, num_edges, seed=seed, skew=0.6).edge_index()
    ei = ei[:, torch.randperm(ei.size(1), generator=torch.Generator().manual_seed(seed))]
    return Data(edge_index=ei, num_nodes=num_nodes, eid=torch.arange(ei.size(1)), x=torch.arange(num_nodes)[:, None])


def _loader(data, fanouts, sampling=None, **kwargs) -> NeighborLoader:
    """NeighborLoader over data with mgg's sampler (sampling: the sampler's own arguments)."""
    sampler = PygNeighborSampler(data, fanouts, generator=torch.Generator().manual_seed(0), **(sampling or {}))
    return NeighborLoader(data, num_neighbors=fanouts, neighbor_sampler=sampler, **kwargs)


@pytest.mark.parametrize("fanouts", [[10, 5], [3, 2, 2], [-1, -1], [2, 0]])
def test_loader_batches_follow_neighborloader_semantics(fanouts):
    data = _data()
    loader = _loader(data, fanouts, batch_size=37, shuffle=True)
    sampler = loader.node_sampler
    csc = Graph(sampler.colptr, sampler.row)  # the graph as the sampler sees it
    inverse = torch.empty_like(sampler.perm)
    inverse[sampler.perm] = torch.arange(sampler.perm.numel())
    seeds_seen = []
    for b in loader:
        seeds = b.n_id[: b.batch_size].tolist()
        seeds_seen += seeds
        sub = Subgraph(b.n_id, b.edge_index, inverse[b.e_id], b.batch_size, b.num_sampled_nodes, b.num_sampled_edges)
        check(csc, seeds, sub, fanouts)
        assert torch.equal(b.x[:, 0], b.n_id)  # node features gathered for n_id
        # the edges are the user's edges, in the user's numbering, with their own attributes
        assert torch.equal(data.edge_index[:, b.eid], b.n_id[b.edge_index])
    assert sorted(seeds_seen) == list(range(data.num_nodes))


def test_backward_direction_samples_out_edges():
    data = _data()
    loader = _loader(data, [4, 3], {"sample_direction": "backward"}, batch_size=50)
    for b in loader:
        assert torch.equal(data.edge_index[:, b.eid], b.n_id[b.edge_index])
        hop1 = b.edge_index[:, : b.num_sampled_edges[0]]
        assert bool((hop1[0] < b.batch_size).all())  # the first hop leaves the seeds


def test_batches_are_reproducible_with_torch_manual_seed():
    data = _data()
    runs = []
    for _ in range(2):
        torch.manual_seed(5)
        loader = NeighborLoader(
            data, [6, 3], batch_size=64, shuffle=True, neighbor_sampler=PygNeighborSampler(data, [6, 3])
        )
        runs.append([(b.n_id, b.edge_index) for b in loader])
    for (n1, e1), (n2, e2) in zip(*runs, strict=True):
        assert torch.equal(n1, n2) and torch.equal(e1, e2)


def test_num_neighbors_changed_after_construction_is_followed():
    data = _data()
    loader = _loader(data, [8, 8], batch_size=20)
    loader.node_sampler.num_neighbors = [1]  # PyG accepts a new fan-out list between epochs
    b = next(iter(loader))
    assert len(b.num_sampled_edges) == 1 and b.num_sampled_edges[0] <= 20


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        ({"replace": True}, "replace=True"),
        ({"disjoint": True}, "disjoint=True"),
        ({"subgraph_type": "induced"}, "induced"),
        ({"weight_attr": "w"}, "weighted"),
        ({"time_attr": "t"}, "temporal"),
    ],
)
def test_what_mggs_sampler_cannot_do_is_refused_in_one_line(kwargs, msg):
    data = _data(50, 200)
    data.w = torch.rand(data.num_edges)
    data.t = torch.arange(data.num_nodes)
    with pytest.raises(MggError, match=msg) as e:
        PygNeighborSampler(data, [3], **kwargs)
    assert "\n" not in str(e.value)


def test_heterogeneous_data_is_refused_in_one_line():
    from torch_geometric.datasets import FakeHeteroDataset

    with pytest.raises(MggError, match="homogeneous") as e:
        PygNeighborSampler(FakeHeteroDataset(num_graphs=1)[0], [3])
    assert "\n" not in str(e.value)

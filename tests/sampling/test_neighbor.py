"""mgg.sampling.NeighborSampler against a brute-force replay of NeighborLoader's semantics: the
seeds first, per hop min(fan-out, in-degree) distinct in-edges of each node first reached at the
previous hop, new nodes in order of first appearance, only the sampled edges; and uniform."""

import collections

import pytest
import torch

from mgg import MggError
from mgg.graph import Graph
from mgg.sampling import NeighborSampler
from mgg.testing import random_graph


def check(g: Graph, seeds: list, sub, fanouts: list) -> None:
    """Replays the sample edge by edge with Python lists and asserts every property."""
    rowptr, col = g.rowptr.tolist(), g.col.tolist()
    n_id = sub.n_id.tolist()
    assert n_id[: sub.batch_size] == seeds and sub.batch_size == len(seeds)
    assert len(set(n_id)) == len(n_id)
    assert sum(sub.num_sampled_nodes) == len(n_id) and sum(sub.num_sampled_edges) == sub.e_id.numel()
    assert sub.edge_index.shape == (2, sub.e_id.numel())
    bounds = [0]
    for c in sub.num_sampled_nodes:
        bounds.append(bounds[-1] + c)
    hop_nodes = [n_id[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    seen, e = set(seeds), 0
    for k, fanout in enumerate(fanouts):
        m = sub.num_sampled_edges[k]
        pos = sub.e_id[e : e + m].tolist()
        src = [n_id[i] for i in sub.edge_index[0, e : e + m].tolist()]
        dst = [n_id[i] for i in sub.edge_index[1, e : e + m].tolist()]
        e += m
        assert len(set(pos)) == len(pos)  # without replacement
        for p, s, t in zip(pos, src, dst, strict=True):
            assert rowptr[t] <= p < rowptr[t + 1] and col[p] == s  # a real in-edge of its target
        frontier = hop_nodes[k]
        expect = {
            v: (rowptr[v + 1] - rowptr[v]) if fanout == -1 else min(fanout, rowptr[v + 1] - rowptr[v]) for v in frontier
        }
        got = collections.Counter(dst)
        assert {v: got.get(v, 0) for v in frontier} == expect and set(got) <= set(frontier)
        new = []
        for s in src:
            if s not in seen:
                seen.add(s)
                new.append(s)
        assert new == hop_nodes[k + 1]


@pytest.mark.parametrize("fanouts", [[25, 10], [3, 2, 2], [-1, -1], [1], [4, 0]])
def test_samples_follow_the_semantics_on_a_multigraph(fanouts):
    """Hub targets, nodes without in-edges, duplicate edges, self loops."""
    g = random_graph(300, 3000, seed=3, skew=0.6)
    sampler = NeighborSampler(g, fanouts, torch.Generator().manual_seed(0))
    for seeds in ([0, 5, 17, 299], list(range(0, 300, 7)), [int(g.degree().argmax())]):
        check(g, seeds, sampler.sample(torch.tensor(seeds)), fanouts)


def test_full_fanout_is_the_k_hop_in_neighborhood(cora):
    """With fan-out -1 every in-edge of every node reached is taken: the brute-force BFS."""
    g = cora.graph
    seeds = [0, 100, 2000]
    sub = NeighborSampler(g, [-1, -1]).sample(torch.tensor(seeds))
    rowptr, col = g.rowptr.tolist(), g.col.tolist()
    frontier, seen, edges = seeds, set(seeds), []
    for _ in range(2):
        nxt = []
        for v in frontier:
            for p in range(rowptr[v], rowptr[v + 1]):
                edges.append(p)
                if col[p] not in seen:
                    seen.add(col[p])
                    nxt.append(col[p])
        frontier = nxt
    assert sorted(sub.e_id.tolist()) == sorted(edges) and set(sub.n_id.tolist()) == seen


def test_cora_batches_cover_the_training_nodes_once(cora):
    sampler = NeighborSampler(cora.graph, [25, 10], torch.Generator().manual_seed(1))
    seen = []
    for sub in sampler.batches(cora.train_mask, 64):
        seeds = sub.n_id[: sub.batch_size].tolist()
        check(cora.graph, seeds, sub, [25, 10])
        seen += seeds
    assert sorted(seen) == cora.train_mask.nonzero().view(-1).tolist()
    assert len(seen) == 140


def test_neighbors_are_drawn_uniformly():
    """A node with 20 in-neighbors, fan-out 5, 4000 draws: each neighbor about 1000 times."""
    g = Graph.from_edges(list(range(1, 21)), [0] * 20, 21)
    sampler = NeighborSampler(g, [5], torch.Generator().manual_seed(2))
    counts = collections.Counter()
    for _ in range(4000):
        counts.update(sampler.sample(torch.tensor([0])).n_id[1:].tolist())
    assert set(counts) == set(range(1, 21))
    assert all(850 < c < 1150 for c in counts.values()), counts  # about 5 sigma


def test_same_generator_seed_same_sample(cora):
    a = NeighborSampler(cora.graph, [25, 10], torch.Generator().manual_seed(4)).sample(torch.arange(50))
    b = NeighborSampler(cora.graph, [25, 10], torch.Generator().manual_seed(4)).sample(torch.arange(50))
    assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)


@pytest.mark.parametrize(
    "fanouts, seeds, msg",
    [
        ([], [0], "num_neighbors"),
        ([-2], [0], "num_neighbors"),
        ([1.5], [0], "num_neighbors"),
        ([2], [0, 0], "distinct"),
        ([2], [9], r"in \[0, 3\)"),
    ],
)
def test_bad_input_is_refused_in_one_line(fanouts, seeds, msg):
    g = Graph.from_edges([0, 1], [1, 2], 3)
    with pytest.raises(MggError, match=msg) as e:
        NeighborSampler(g, fanouts).sample(torch.tensor(seeds))
    assert "\n" not in str(e.value)

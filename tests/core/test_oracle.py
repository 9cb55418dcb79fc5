"""The oracles judge every kernel, so they are tested first: one edge dropped, doubled or moved to
another source, in a hub row of thousands of edges and in a row of a few, makes each of them fail,
under every config; an exact case holds bit for bit in every dtype; the attention oracle fails the
same way."""

import numpy as np
import pytest
import torch

import mgg
from mgg import Graph, Plan, functional
from mgg.testing import (
    CONFIGS,
    assert_attention_matches_reference,
    assert_exact_reference,
    assert_matches_reference,
    exact_inputs,
    random_graph,
)

MUTATIONS = ("drop", "duplicate", "move")


@pytest.fixture(scope="module")
def skewed():
    """The suite's skewed graph (hub degree about 5,000)."""
    return random_graph(2000, 40000, seed=7, weighted=True, skew=0.9)


def _rows(g):
    """The hub row and a row of 2 to 4 edges."""
    deg = g.degree().numpy()
    small = int(np.flatnonzero((deg >= 2) & (deg <= 4))[0])
    return {"hub": int(deg.argmax()), "small": small}


def mutate(g: Graph, row: int, how: str, k: int = 0) -> Graph:
    """g with its row's k-th edge dropped, doubled, or moved to the next source node."""
    rowptr, col = g.rowptr.numpy(), g.col.numpy().copy()
    w = g.weight.numpy() if g.weight is not None else None
    pick = (lambda keep: None) if w is None else (lambda keep: w[keep])
    dst = np.repeat(np.arange(g.num_nodes), np.diff(rowptr))
    e = int(rowptr[row]) + k
    assert e < rowptr[row + 1]
    if how == "drop":
        keep = np.arange(g.num_edges) != e
        return Graph.from_edges(col[keep], dst[keep], g.num_nodes, pick(keep))
    if how == "duplicate":
        both = np.r_[np.arange(g.num_edges), e]
        return Graph.from_edges(col[both], dst[both], g.num_nodes, pick(both))
    col[e] = (col[e] + 1) % g.num_nodes
    return Graph.from_edges(col, dst, g.num_nodes, w)  # the graph's order is kept (stable sort by row)


@pytest.mark.parametrize("config", CONFIGS, ids=str)
def test_one_wrong_edge_fails_the_realistic_oracle(skewed, config):
    x = torch.randn(skewed.num_nodes, 64, generator=torch.Generator().manual_seed(1))
    assert_matches_reference(mgg.aggregate(x, Plan(skewed), config), skewed, x)
    for row in _rows(skewed).values():
        for how in MUTATIONS:
            out = mgg.aggregate(x, Plan(mutate(skewed, row, how)), config)
            with pytest.raises(AssertionError, match=f"out\\[{row}, "):
                assert_matches_reference(out, skewed, x)


def test_every_edge_of_the_hub_row_is_seen(skewed):
    """The check the worst-case bound failed: each of 60 edges of the hub row, taken out of the
    output alone, fails (at D = 64, x ~ N(0, 1), weights in [0.1, 2])."""
    x = torch.randn(skewed.num_nodes, 64, generator=torch.Generator().manual_seed(2))
    out = mgg.aggregate(x, skewed)
    hub = _rows(skewed)["hub"]
    lo = int(skewed.rowptr[hub])
    assert int(skewed.degree()[hub]) > 4000
    for e in range(lo, lo + 60):
        bad = out.clone()
        bad[hub] -= float(skewed.weight[e]) * x[int(skewed.col[e])]
        with pytest.raises(AssertionError, match=f"out\\[{hub}, "):
            assert_matches_reference(bad, skewed, x)


@pytest.mark.parametrize("config", CONFIGS, ids=str)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_exact_case_is_bit_exact_and_one_wrong_edge_fails(skewed, config, dtype):
    g, x = exact_inputs(skewed, 16, dtype, seed=3)
    for det in (False, True):
        assert_exact_reference(mgg.aggregate(x, Plan(g), config, deterministic=det), g, x)
    for row in _rows(g).values():
        for how in MUTATIONS:
            out = mgg.aggregate(x, Plan(mutate(g, row, how)), config)
            with pytest.raises(AssertionError, match=f"out\\[{row}, "):
                assert_exact_reference(out, g, x)


def test_exact_inputs_are_exact():
    g, x = exact_inputs(random_graph(50, 400, seed=4, weighted=True), 9, torch.bfloat16)
    assert torch.equal(x.double(), x.double().round()) and int(x.abs().max()) <= 255 and bool((x != 0).all())
    assert set(g.weight.unique().tolist()) <= {0.5, 1.0, 1.5, 2.0}
    with pytest.raises(ValueError, match="2\\^14"):
        exact_inputs(Graph.from_edges(np.zeros(2**14 + 1, int), np.zeros(2**14 + 1, int), 1), 1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_one_wrong_edge_fails_the_attention_oracle(dtype):
    g = functional.attention_graph(random_graph(2000, 30000, seed=9, skew=0.9))
    gen = torch.Generator().manual_seed(5)
    h, a_src, a_dst = (
        torch.randn(*s, generator=gen, dtype=torch.float64).to(dtype) for s in ((2000, 2, 16), (2000, 2), (2000, 2))
    )
    src, dst = g.edge_index()
    assert_attention_matches_reference(functional.attend(h, a_src, a_dst, g), h, a_src, a_dst, src, dst, 0.2)
    for row in _rows(g).values():
        for how in MUTATIONS:
            out = functional.attend(h, a_src, a_dst, mutate(g, row, how, k=1))
            with pytest.raises(AssertionError, match=f"out\\[{row}, "):
                assert_attention_matches_reference(out, h, a_src, a_dst, src, dst, 0.2)

"""Graph type, loaders, synthetic generators and normalisation."""

import pickle
import re
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from mgg import GraphError
from mgg.data import NodeDataset, load_edge_list, load_graph, load_npz, load_planetoid
from mgg.data.stats import degree_stats
from mgg.data.synthetic import PRESETS, from_spec, preset_of, rmat, rmat_undirected, sbm_communities
from mgg.graph import Graph
from mgg.testing import random_graph


def test_edge_list_comments_whitespace_and_weights(tmp_path):
    f = tmp_path / "g.txt"
    f.write_text("# SNAP header\n% other comment\n\n0\t1 0.5\n1   2  1.5\n  2 0 2\n// trailing\n")
    g = load_edge_list(f)
    assert (g.num_nodes, g.num_edges) == (3, 3)
    # row 1 receives the edge 0 -> 1 with weight 0.5
    a = g.to_scipy().toarray()
    assert a[1, 0] == 0.5 and a[2, 1] == 1.5 and a[0, 2] == 2.0


def test_edge_list_undirected_and_num_nodes(tmp_path):
    f = tmp_path / "g.txt"
    f.write_text("0 1\n1 2\n")
    g = load_edge_list(f, num_nodes=5, undirected=True)
    assert g.num_nodes == 5 and g.num_edges == 4 and g.is_symmetric()


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("0 1\n1 x\n", ":2: non-numeric"),
        ("0 1\n-1 2\n", ":2: node ids must be non-negative"),
        ("0 1\n1 2 3 4\n", ":2: expected 'src dst'"),
        ("0 1\n1.5 2\n", ":2: node ids must be non-negative integers"),
        ("# only comments\n", "empty graph"),
    ],
)
def test_edge_list_errors_name_file_and_line(tmp_path, text, fragment):
    f = tmp_path / "bad.txt"
    f.write_text(text)
    with pytest.raises(GraphError, match="bad.txt") as e:
        load_edge_list(f)
    assert fragment in str(e.value)
    assert "\n" not in str(e.value)


def test_edge_list_id_out_of_range(tmp_path):
    f = tmp_path / "g.txt"
    f.write_text("0 1\n1 7\n")
    with pytest.raises(GraphError, match=r"g.txt:2: node id >= num_nodes 5"):
        load_edge_list(f, num_nodes=5)


def test_npz_formats(tmp_path):
    g = random_graph(50, 300, weighted=True)
    sp.save_npz(tmp_path / "a.npz", g.to_scipy())
    np.savez(tmp_path / "b.npz", rowptr=g.rowptr.numpy(), col=g.col.numpy(), weight=g.weight.numpy())
    np.savez(tmp_path / "c.npz", edge_index=g.edge_index().numpy(), edge_weight=g.weight.numpy(), num_nodes=50)
    for name in "abc":
        h = load_npz(tmp_path / f"{name}.npz")
        assert (h.to_scipy() != g.to_scipy()).nnz == 0, name
    np.savez(tmp_path / "d.npz", foo=np.arange(3))
    with pytest.raises(GraphError, match=r"d.npz: .npz has fields \['foo'\]"):
        load_npz(tmp_path / "d.npz")


def test_csr_validation_messages():
    with pytest.raises(GraphError, match="not monotonic: rowptr\\[2\\]"):
        Graph.from_csr([0, 2, 1, 3], [0, 1, 2])
    with pytest.raises(GraphError, match="col\\[1\\] = 9 is outside"):
        Graph.from_csr([0, 1, 2], [0, 9])
    with pytest.raises(GraphError, match="col\\[0\\] = -1"):
        Graph.from_csr([0, 1, 1], [-1])
    with pytest.raises(GraphError, match="empty graph"):
        Graph.from_csr([0], [])
    with pytest.raises(GraphError, match="rowptr\\[-1\\] = 5"):
        Graph.from_csr([0, 5], [0])
    with pytest.raises(GraphError, match="edge 1 .* negative"):
        Graph.from_edge_index(torch.tensor([[0, -2], [1, 1]]))
    with pytest.raises(GraphError, match="shape \\[2, num_edges\\]"):
        Graph.from_edge_index(torch.zeros(3, 4, dtype=torch.long))


def test_graph_from_edges_refuses_huge_counts_without_allocating():
    with pytest.raises(GraphError, match="edge 1 .* 3,000,000,001 nodes, more than"):
        Graph.from_edges(np.array([0, 1]), np.array([1, 3_000_000_000]))
    with pytest.raises(GraphError, match="num_nodes: 4,000,000,000 nodes"):
        Graph.from_edges(np.array([0]), np.array([1]), num_nodes=4_000_000_000)
    assert Graph.from_edges(np.array([0]), np.array([1]), num_nodes=2_000_000).num_nodes == 2_000_000


@pytest.mark.parametrize(
    "e, n, weighted, presorted",
    [
        (5000, 300, True, False),
        (5000, 300, False, True),  # already sorted by destination: no sort at all
        (1 << 22, 100_000, False, False),  # large enough for the two-pass (bucket, then row) sort
    ],
)
def test_from_edges_matches_a_stable_sort_by_destination(e, n, weighted, presorted):
    """The counting sort keeps each row's edges in input order, as a stable argsort."""
    rng = np.random.default_rng(5)
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    if presorted:
        dst.sort()
    w = rng.random(e).astype(np.float32) if weighted else None
    g = Graph.from_edges(src.astype(np.int32), dst, n, w)
    order = np.argsort(dst, kind="stable")
    assert np.array_equal(g.col.numpy(), src[order])
    assert np.array_equal(g.rowptr.numpy(), np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))]))
    if weighted:
        assert np.array_equal(g.weight.numpy(), w[order])


def test_from_edges_refuses_non_integer_ids():
    with pytest.raises(GraphError, match="node ids \\(sources\\) must be integers"):
        Graph.from_edges(np.array([0.5]), np.array([1]))


def test_features_must_match_graph():
    g = random_graph(10, 20)
    with pytest.raises(GraphError, match="x has 9 rows but the graph has 10 nodes"):
        NodeDataset(
            "toy",
            g,
            torch.zeros(9, 3),
            torch.zeros(10, dtype=torch.long),
            *(torch.zeros(10, dtype=torch.bool) for _ in range(3)),
        )


def test_planetoid_cora(cora):
    assert cora.graph.num_nodes == 2708 and cora.graph.num_edges == 10556  # as PyG's Planetoid
    assert cora.x.shape == (2708, 1433) and cora.num_classes == 7
    assert (int(cora.train_mask.sum()), int(cora.val_mask.sum()), int(cora.test_mask.sum())) == (140, 500, 1000)
    assert cora.graph.is_symmetric()


def _write_planetoid(root, name, n_train, n_other, test_index, feats=4, classes=3, graph=None):
    rng = np.random.default_rng(0)
    onehot = lambda k: np.eye(classes)[rng.integers(0, classes, k)]  # noqa: E731
    nt = len(test_index)
    objs = dict(
        x=sp.csr_matrix(rng.random((n_train, feats))),
        y=onehot(n_train),
        allx=sp.csr_matrix(rng.random((n_train + n_other, feats))),
        ally=onehot(n_train + n_other),
        tx=sp.csr_matrix(rng.random((nt, feats))),
        ty=onehot(nt),
    )
    n = n_train + n_other + (max(test_index) - min(test_index) + 1)
    objs["graph"] = graph if graph is not None else {i: [(i + 1) % n, (i + 1) % n, i] for i in range(n)}
    for k, v in objs.items():
        with open(root / f"ind.{name}.{k}", "wb") as f:
            pickle.dump(v, f, protocol=2)
    (root / f"ind.{name}.test.index").write_text("\n".join(map(str, test_index)) + "\n")
    return n


def test_planetoid_gaps_duplicates_and_self_loops(tmp_path):
    # test indices 10..15 with 12 missing (an isolated node, as in Citeseer), listed unsorted
    n = _write_planetoid(tmp_path, "toy", 4, 6, [15, 10, 11, 14, 13])
    ds = load_planetoid(tmp_path, "toy")
    assert ds.graph.num_nodes == n == 16
    assert ds.x[12].abs().sum() == 0  # padded row
    assert int(ds.test_mask.sum()) == 5 and not ds.test_mask[12]
    # duplicate edges collapse, self-loops are dropped
    assert ds.graph.num_edges == n
    assert not bool((ds.graph.rows() == ds.graph.col).any())


def test_planetoid_errors(tmp_path):
    with pytest.raises(GraphError, match="no Planetoid dataset 'nope'"):
        load_planetoid(tmp_path, "nope")
    _write_planetoid(tmp_path, "toy", 4, 6, [10, 11])
    (tmp_path / "ind.toy.test.index").write_text("10\nabc\n")
    with pytest.raises(GraphError, match="test.index:2: expected a node index"):
        load_planetoid(tmp_path, "toy")
    (tmp_path / "ind.toy.test.index").write_text("10\n11\n")
    (tmp_path / "ind.toy.tx").write_bytes(b"garbage")
    with pytest.raises(GraphError, match="ind.toy.tx: not a Planetoid pickle"):
        load_planetoid(tmp_path, "toy")


def test_gcn_norm_matches_pyg():
    gcn_norm = pytest.importorskip("torch_geometric.nn.conv.gcn_conv").gcn_norm
    g = random_graph(40, 200, seed=3, weighted=True)
    # give two nodes an existing self-loop: PyG keeps its weight
    ei = torch.cat([g.edge_index(), torch.tensor([[5, 7], [5, 7]])], 1)
    w = torch.cat([g.weight, torch.tensor([3.0, 0.5])])
    ours = Graph.from_edge_index(ei, 40, w).gcn_norm()
    pei, pw = gcn_norm(ei, w, 40, add_self_loops=True)
    ref = Graph.from_edge_index(pei, 40, pw)
    assert np.allclose(ours.to_scipy().toarray(), ref.to_scipy().toarray(), atol=1e-6)


def test_transpose_and_mean_norm():
    g = random_graph(30, 100, weighted=True)
    assert np.allclose(g.transpose().to_scipy().toarray(), g.to_scipy().toarray().T)
    m = g.mean_norm().to_scipy().toarray()
    deg = np.maximum(g.degree().numpy(), 1)
    assert np.allclose(m, g.to_scipy().toarray() / deg[:, None])


def test_rmat_is_seeded_and_exact():
    a, b, c = rmat(1000, 20000, seed=1), rmat(1000, 20000, seed=1), rmat(1000, 20000, seed=2)
    assert a.num_edges == 20000 and a.num_nodes == 1000
    assert torch.equal(a.col, b.col) and torch.equal(a.rowptr, b.rowptr)
    assert not torch.equal(a.col, c.col)
    deg = a.degree().float()
    assert deg.max() > 10 * deg.mean()  # power-law: heavy rows


def test_rmat_matches_edge_generator():
    from mgg.data.synthetic import rmat_edges

    src, dst = map(np.concatenate, zip(*rmat_edges(300, 5000, seed=4), strict=True))
    g = rmat(300, 5000, seed=4)
    ref = Graph.from_edges(src, dst, 300)
    assert torch.equal(g.rowptr, ref.rowptr)
    # within a row the order may differ: the dense matrices (edge counts per (dst, src)) are equal
    # entry by entry, and so are each row's sorted neighbour lists
    assert np.array_equal(g.to_scipy().toarray(), ref.to_scipy().toarray())
    rows = np.repeat(np.arange(300), np.diff(g.rowptr.numpy()))
    ours, theirs = (np.sort(rows * 300 + x.col.numpy()) for x in (g, ref))
    assert np.array_equal(ours, theirs)


def test_presets_scale_and_memory():
    assert (PRESETS["rmat-reddit"].nodes, PRESETS["rmat-reddit"].edges) == (232_965, 114_615_892)
    assert (PRESETS["rmat-products"].nodes, PRESETS["rmat-products"].edges) == (2_449_029, 123_718_280)
    g = from_spec("rmat-reddit:scale=0.01")
    assert g.num_nodes == 2329 and g.num_edges == 1_146_158
    # Peak memory per directed edge once edges far outnumber one chunk, as for the full presets
    # (57M pairs in 4M-pair chunks): at 40 bytes per edge the reddit preset needs < 5 GB.
    tracemalloc.start()
    g = rmat_undirected(20_000, 1_000_000, abcd=PRESETS["rmat-reddit"].abcd, uniform=0.1, chunk=1 << 15)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak / g.num_edges < 40, f"{peak / g.num_edges:.1f} bytes per edge"


@pytest.mark.parametrize("spec", ["rmat-reddit:scale=0.01", "rmat-products:scale=0.003"])
def test_presets_are_simple_undirected_graphs_of_the_real_size(spec):
    g = from_spec(spec)
    s = degree_stats(g)
    name, scale = preset_of(spec)
    p = PRESETS[name]
    assert g.num_nodes == int(p.nodes * scale) and g.num_edges == 2 * (int(p.edges * scale) // 2)
    assert s["symmetric"] and s["duplicates"] == 0 and s["self_loops"] == 0
    assert s["isolated_fraction"] < 0.01 and s["max_degree"] < g.num_nodes
    assert 2 < s["max_over_avg"] and s["gini"] > 0.2  # a skewed degree distribution
    assert abs(s["avg_degree"] - p.real["avg_degree"]) < 0.01 * p.real["avg_degree"]


def test_preset_generator_is_seeded_and_exact():
    a = rmat_undirected(3000, 40_000, seed=1, abcd=(0.5, 0.2, 0.2, 0.1), uniform=0.1)
    b = rmat_undirected(3000, 40_000, seed=1, abcd=(0.5, 0.2, 0.2, 0.1), uniform=0.1)
    c = rmat_undirected(3000, 40_000, seed=2, abcd=(0.5, 0.2, 0.2, 0.1), uniform=0.1)
    assert a.num_edges == 40_000 and torch.equal(a.col, b.col) and not torch.equal(a.col, c.col)
    with pytest.raises(GraphError, match="even number"):
        rmat_undirected(10, 11)
    with pytest.raises(GraphError, match="do not fit"):
        rmat_undirected(4, 14)


def test_sbm_is_simple_undirected_with_its_share_inside_communities():
    g = from_spec("sbm:2000:4:8:0.9:3")
    s = degree_stats(g)
    assert (s["nodes"], s["edges"], s["self_loops"], s["duplicates"], s["symmetric"]) == (2000, 16000, 0, 0, True)
    comm = sbm_communities(2000, 4, 3)
    assert np.bincount(comm).tolist() == [500] * 4
    inside = comm[g.rows().numpy()] == comm[g.col.numpy()]
    assert int(inside.sum()) == 2 * round(0.9 * 8000)
    assert torch.equal(from_spec("sbm:2000:4:8:0.9:3").col, g.col)
    assert not torch.equal(from_spec("sbm:2000:4:8:0.9:4").col, g.col)
    assert from_spec("sbm:100:1:4:1").num_edges == 400


@pytest.mark.parametrize(
    "spec, msg",
    [
        ("sbm:100:1:4:0.5", "one block has no pairs between communities"),
        ("sbm:100:80:4:0.5", "1 <= BLOCKS <= NODES / 2"),
        ("sbm:20:2:15:0.5", "too many for a sparse block model"),
        ("sbm:100:2:4:1.5", "P_IN in [0, 1]"),
    ],
)
def test_sbm_refuses_impossible_specs(spec, msg):
    with pytest.raises(GraphError, match=re.escape(msg)):
        from_spec(spec)


def test_degree_stats_on_a_known_graph():
    # a star with a duplicate edge and a self-loop, one isolated node
    g = Graph.from_edges([1, 2, 3, 1, 0], [0, 0, 0, 0, 0], 5)
    s = degree_stats(g)
    assert (s["max_degree"], s["isolated"], s["self_loops"], s["duplicates"], s["symmetric"]) == (5, 1, 1, 1, False)
    assert s["avg_degree"] == 1.0 and s["top1pct_share"] == 1.0
    assert s["gini"] == pytest.approx(0.8)


def test_load_graph_dispatch(tmp_path, cora):
    from mgg.data import bundled_planetoid_dir

    assert load_graph("cora", bundled_planetoid_dir()).num_edges == cora.graph.num_edges
    assert load_graph("rmat:100:500").num_edges == 500
    assert load_graph("rmat-products:scale=0.001").num_nodes == 2449
    with pytest.raises(GraphError, match="no such file"):
        load_graph(str(tmp_path / "missing.txt"))

"""Loaders against their reference implementations, on small files written in exactly the real
layouts. Planetoid: torch_geometric.io.read_planetoid_data."""
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from mgg.graph import Graph
from mgg.io import load_planetoid


def edges_of(g: Graph) -> np.ndarray:
    """Sorted (src, dst, weight) rows: the graph as a multiset of edges."""
    ei = g.edge_index().numpy()
    w = g.weight.numpy() if g.weight is not None else np.ones(g.num_edges, np.float32)
    t = np.stack([ei[0], ei[1], w], 1)
    return t[np.lexsort((t[:, 2], t[:, 1], t[:, 0]))]


def edges_of_index(ei, w=None) -> np.ndarray:
    ei = np.asarray(ei)
    w = np.ones(ei.shape[1], np.float32) if w is None else np.asarray(w, np.float32)
    t = np.stack([ei[0], ei[1], w], 1)
    return t[np.lexsort((t[:, 2], t[:, 1], t[:, 0]))]


# ---- Planetoid ------------------------------------------------------------------------------------
def write_planetoid(root, name, test_index, n_train=20, n_other=520, feats=6, classes=4, seed=0,
                    isolated=(), extra_edges=()):
    """Planetoid raw files as Kipf's: allx = the first n_train + n_other nodes (x, y = its first
    n_train), tx/ty row k for the k-th node listed in test.index (listed unsorted), and a graph
    dict with duplicate edges, self-loops, one-way edges and isolated nodes."""
    rng = np.random.default_rng(seed)
    test_index = list(test_index)
    nt = len(test_index)
    onehot = lambda k: np.eye(classes)[rng.integers(0, classes, k)]  # noqa: E731
    n_all = n_train + n_other
    objs = dict(allx=sp.csr_matrix(rng.random((n_all, feats)) * (rng.random((n_all, feats)) < 0.5)),
                ally=onehot(n_all), tx=sp.csr_matrix(rng.random((nt, feats))), ty=onehot(nt))
    objs["x"], objs["y"] = objs["allx"][:n_train], objs["ally"][:n_train]
    n = n_all + max(test_index) - min(test_index) + 1
    graph = {}
    for u in range(n):
        if u in isolated:
            graph[u] = []
            continue
        nb = [int(v) for v in rng.integers(0, n, 3) if v not in isolated]
        graph[u] = nb + nb[:1] + ([u] if u % 7 == 0 else [])  # a duplicate, and some self-loops
    for u, v in extra_edges:
        graph[u].append(v)
    objs["graph"] = graph
    for k, v in objs.items():
        with open(root / f"ind.{name}.{k}", "wb") as f:
            pickle.dump(v, f, protocol=2)
    (root / f"ind.{name}.test.index").write_text("\n".join(map(str, test_index)) + "\n")
    return n


def assert_same_as_pyg(ds, data):
    assert torch.equal(ds.x, data.x)
    assert torch.equal(ds.y, data.y)
    for k in ("train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(ds, k), getattr(data, k)), k
    assert np.array_equal(edges_of(ds.graph), edges_of_index(data.edge_index.numpy()))


@pytest.mark.parametrize("name, test_index, isolated", [
    # Citeseer-style: gaps in the test range (isolated nodes without a row), listed unsorted
    ("citeseer", [557, 540, 541, 549, 546, 552, 545, 543, 556, 542, 550, 548], (544, 547, 551, 553)),
    # no gaps, unsorted (Cora/Pubmed style), with isolated nodes elsewhere
    ("toy", [545, 540, 543, 541, 544, 542, 546], (3, 100, 541)),
])
def test_planetoid_matches_pyg_on_every_quirk(tmp_path, name, test_index, isolated):
    pyg = pytest.importorskip("torch_geometric.io.planetoid")
    write_planetoid(tmp_path, name, test_index, isolated=isolated, extra_edges=[(0, 5), (0, 5), (9, 9)])
    ds = load_planetoid(tmp_path, name)
    data = pyg.read_planetoid_data(str(tmp_path), name)
    assert_same_as_pyg(ds, data)
    # the k-th listed test node holds row k of tx and ty
    tx = pickle.load(open(tmp_path / f"ind.{name}.tx", "rb")).toarray()
    ty = pickle.load(open(tmp_path / f"ind.{name}.ty", "rb"))
    assert np.array_equal(ds.x[test_index].numpy(), tx.astype(np.float32))
    assert np.array_equal(ds.y[test_index].numpy(), ty.argmax(1))
    # duplicates gone, self-loops dropped, isolated nodes have no edges
    e = edges_of(ds.graph)
    assert len(np.unique(e[:, :2], axis=0)) == len(e) and not (e[:, 0] == e[:, 1]).any()
    assert all(ds.graph.degree()[i] == 0 for i in isolated)


def test_planetoid_bundled_cora_matches_pyg(cora, tmp_path):
    pyg = pytest.importorskip("torch_geometric.io.planetoid")
    from mgg.datasets import bundled_planetoid_dir

    assert_same_as_pyg(cora, pyg.read_planetoid_data(bundled_planetoid_dir(), "cora"))

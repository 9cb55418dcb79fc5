"""Loaders against their reference implementations, on small files written in exactly the real
layouts: Planetoid (torch_geometric.io.read_planetoid_data), Matrix Market (scipy.io.mmread),
scipy .npz (scipy.sparse.load_npz), PyG Reddit (torch_geometric.datasets.Reddit), OGB
(ogb's NodePropPredDataset); SNAP edge lists; PyG inputs; dataset resolution."""

import gzip
import os
import pickle

import numpy as np
import pytest
import scipy.io as sio
import scipy.sparse as sp
import torch

from mgg import GraphError
from mgg.data import NodeDataset, load_edge_list, load_graph, load_mtx, load_npz, load_planetoid, read_edge_list
from mgg.data.datasets import load_ogb, load_reddit
from mgg.data.resolve import resolve
from mgg.graph import Graph


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
def write_planetoid(
    root, name, test_index, n_train=20, n_other=520, feats=6, classes=4, seed=0, isolated=(), extra_edges=()
):
    """Planetoid raw files as Kipf's: allx = the first n_train + n_other nodes (x, y = its first
    n_train), tx/ty row k for the k-th node listed in test.index (listed unsorted), and a graph
    dict with duplicate edges, self-loops, one-way edges and isolated nodes."""
    rng = np.random.default_rng(seed)
    test_index = list(test_index)
    nt = len(test_index)
    onehot = lambda k: np.eye(classes)[rng.integers(0, classes, k)]  # noqa: E731
    n_all = n_train + n_other
    objs = dict(
        allx=sp.csr_matrix(rng.random((n_all, feats)) * (rng.random((n_all, feats)) < 0.5)),
        ally=onehot(n_all),
        tx=sp.csr_matrix(rng.random((nt, feats))),
        ty=onehot(nt),
    )
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


@pytest.mark.parametrize(
    "name, test_index, isolated",
    [
        # Citeseer-style: gaps in the test range (isolated nodes without a row), listed unsorted
        ("citeseer", [557, 540, 541, 549, 546, 552, 545, 543, 556, 542, 550, 548], (544, 547, 551, 553)),
        # no gaps, unsorted (Cora/Pubmed style), with isolated nodes elsewhere
        ("toy", [545, 540, 543, 541, 544, 542, 546], (3, 100, 541)),
    ],
)
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
    from mgg.data import bundled_planetoid_dir

    assert_same_as_pyg(cora, pyg.read_planetoid_data(bundled_planetoid_dir(), "cora"))


def test_planetoid_pyg_directory_layout(tmp_path):
    """PyG keeps the files in root/NAME/raw; a name resolves there as well."""
    raw = tmp_path / "CiteSeer" / "raw"
    raw.mkdir(parents=True)
    write_planetoid(raw, "citeseer", [541, 540, 543])
    assert resolve("citeseer", tmp_path).dataset().graph.num_nodes == 544


# ---- Matrix Market ------------------------------------------------------------------------------
MTX = {
    "pattern-general": "%%MatrixMarket matrix coordinate pattern general\n% a comment\n%\n4 4 5\n1 2\n2 3\n3 1\n4 4\n"
    "1 2\n",
    "real-symmetric": "%%MatrixMarket matrix coordinate real symmetric\n% SuiteSparse: lower triangle\n5 5 5\n"
    "2 1 0.5\n3 1 1.5\n4 3 2\n4 4 3\n5 2 -1e-1\n",
    "integer-general": "%%MatrixMarket matrix coordinate integer general\n\n3\t3\t3\n1\t2\t7\n\n2 3 1\n3 3 -2\n",
    "skew-symmetric": "%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 2\n2 1 4\n3 2 1\n",
    "pattern-symmetric": "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 3\n2 1\n3 3\n3 1\n",
    "ones": "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 2 1\n2 1 1.0\n",
}


@pytest.mark.parametrize("case", sorted(MTX))
@pytest.mark.parametrize("gz", [False, True])
def test_mtx_matches_scipy(tmp_path, case, gz):
    f = tmp_path / (f"{case}.mtx.gz" if gz else f"{case}.mtx")
    with gzip.open(f, "wt") if gz else open(f, "w") as fh:
        fh.write(MTX[case])
    g = load_mtx(f)
    ref = sio.mmread(str(f)).tocoo()
    # the matrix is the aggregation matrix: entry (i, j) is the edge j -> i, with its value
    want = edges_of_index(np.stack([ref.col, ref.row]), None if "pattern" in case or case == "ones" else ref.data)
    assert g.num_nodes == ref.shape[0]
    assert np.array_equal(edges_of(g), want)
    assert (g.to_scipy() != ref.tocsr().astype(np.float32)).nnz == 0
    assert load_graph(str(f)).num_edges == g.num_edges  # by name as well


def test_mtx_size_line_is_never_an_edge(tmp_path):
    f = tmp_path / "g.mtx"
    f.write_text(MTX["pattern-general"])
    g = load_mtx(f)
    assert g.num_edges == 5 and g.num_nodes == 4  # not 6 edges, not 5 nodes from '4 4 5'
    f2 = tmp_path / "unnamed.txt"  # a Matrix Market file under another name is recognised by its banner
    f2.write_text(MTX["pattern-general"])
    assert np.array_equal(edges_of(load_graph(str(f2))), edges_of(g))


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("%%MatrixMarket matrix coordinate pattern general\n3 3 1\n4 1\n", "g.mtx:3: node id past 3"),
        ("%%MatrixMarket matrix coordinate pattern general\n3 3 2\n0 1\n1 1\n", "g.mtx:3: node ids must be positive"),
        ("%%MatrixMarket matrix coordinate pattern general\n3 3 3\n1 2\n", "g.mtx:2: the size line declares 3 entries"),
        ("%%MatrixMarket matrix coordinate pattern general\n3 4 1\n1 2\n", "g.mtx:2: a graph's matrix must be square"),
        ("%MatrixMarket matrix coordinate pattern general\n3 3 1\n1 2\n", "g.mtx:1: expected a Matrix Market banner"),
        ("%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n", "g.mtx:1: 'array' (dense)"),
        ("%%MatrixMarket matrix coordinate complex general\n2 2 1\n1 2 1 0\n", "field 'complex' is not supported"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 2 1\n2 x 1\n", "g.mtx:4: non-numeric"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 2\n", "g.mtx:3: a 'real' file has 3 fields"),
        ("%%MatrixMarket matrix coordinate pattern general\n% c\n3 3\n", "g.mtx:3: expected the size line"),
    ],
)
def test_mtx_errors_name_file_and_line(tmp_path, text, fragment):
    f = tmp_path / "g.mtx"
    f.write_text(text)
    with pytest.raises(GraphError) as e:
        load_mtx(f)
    assert fragment in str(e.value) and "\n" not in str(e.value), str(e.value)


# ---- .npz ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "bsr", "dia"])
@pytest.mark.parametrize("array", [False, True])
def test_npz_every_scipy_format(tmp_path, fmt, array):
    rng = np.random.default_rng(1)
    m = sp.random(40, 40, density=0.1, random_state=2, format="coo", dtype=np.float32)
    m.data[:] = rng.integers(1, 4, m.nnz)
    if fmt == "dia":
        m = sp.diags([1.0, 2.0, 3.0], [-1, 0, 2], shape=(40, 40), dtype=np.float32)
    m = m.asformat(fmt)
    if array:
        m = sp.csr_array(m).asformat(fmt)
    f = tmp_path / f"{fmt}.npz"
    sp.save_npz(f, m, compressed=fmt != "coo")
    ref = sp.load_npz(f)
    g = load_npz(f)
    assert g.num_nodes == 40
    assert (g.to_scipy() != sp.csr_matrix(ref)).nnz == 0
    r = sp.coo_matrix(ref)
    r.eliminate_zeros()
    assert np.array_equal(edges_of(g), edges_of_index(np.stack([r.col, r.row]), r.data))


def test_npz_coo_keeps_duplicate_entries(tmp_path):
    """A COO file with a repeated entry: two edges (they add up in aggregation, as scipy sums them)."""
    m = sp.coo_matrix((np.ones(3, np.float32), ([0, 0, 1], [1, 1, 0])), shape=(2, 2))
    sp.save_npz(tmp_path / "d.npz", m)
    g = load_npz(tmp_path / "d.npz")
    assert g.num_edges == 3 and (g.to_scipy() != sp.load_npz(tmp_path / "d.npz").tocsr()).nnz == 0


def test_npz_not_square(tmp_path):
    sp.save_npz(tmp_path / "r.npz", sp.random(3, 4, density=0.5, format="coo"))
    with pytest.raises(GraphError, match=r"r.npz: adjacency must be square, got shape \(3, 4\)"):
        load_npz(tmp_path / "r.npz")


# ---- PyG Reddit ---------------------------------------------------------------------------------
def write_reddit_raw(raw, n=30, seed=0):
    """PyG's Reddit raw layout: reddit_data.npz (feature, label, node_types) and reddit_graph.npz,
    a scipy COO matrix, unsorted, with duplicates, a self-loop and a one-way edge."""
    rng = np.random.default_rng(seed)
    raw.mkdir(parents=True)
    row = rng.integers(0, n, 200)
    col = rng.integers(0, n, 200)
    row = np.concatenate([row, col, [3, 3, 5], [0]]).astype(np.int32)
    col = np.concatenate([col, row[:200], [4, 4, 5], [9]]).astype(np.int32)
    sp.save_npz(raw / "reddit_graph.npz", sp.coo_matrix((np.ones(row.size, np.float32), (row, col)), shape=(n, n)))
    np.savez(
        raw / "reddit_data.npz",
        feature=rng.random((n, 5)).astype(np.float32),
        label=rng.integers(0, 41, n),
        node_types=rng.integers(1, 4, n),
    )


def test_reddit_matches_pyg(tmp_path):
    datasets = pytest.importorskip("torch_geometric.datasets")
    write_reddit_raw(tmp_path / "Reddit" / "raw")
    data = datasets.Reddit(str(tmp_path / "Reddit"))[0]  # runs PyG's process() on the raw files
    for spec, data_dir in (
        (str(tmp_path / "Reddit"), None),
        (str(tmp_path / "Reddit" / "raw"), None),
        ("reddit", tmp_path),
    ):
        src = resolve(spec, data_dir)
        assert src.kind == "reddit"
        ds = src.dataset()
        assert_same_as_pyg(ds, data)
        assert np.array_equal(edges_of(src.graph), edges_of(ds.graph))


def test_reddit_graph_must_be_coo(tmp_path):
    raw = tmp_path / "raw"
    write_reddit_raw(raw)
    sp.save_npz(raw / "reddit_graph.npz", sp.csr_matrix(np.eye(30)))
    with pytest.raises(GraphError, match="reddit_graph.npz: expected a scipy COO matrix"):
        load_reddit(tmp_path)


# ---- OGB ---------------------------------------------------------------------------------------
def _csv_gz(path, arr, fmt):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        np.savetxt(f, np.asarray(arr).reshape(len(arr), -1), fmt=fmt, delimiter=",")


OGB_SPLIT = {
    "ogbn-arxiv": "time",
    "ogbn-products": "sales_ranking",
    "ogbn-proteins": "species",
    "ogbn-papers100M": "time",
}


def write_ogb(root, name, n=40, e=120, seed=0):
    """A node-property dataset directory as OGB downloads it: root/ogbn_NAME/{raw, split/SCHEME,
    processed, RELEASE_v1.txt}; CSV layout, or the binary layout of papers100M."""
    rng = np.random.default_rng(seed)
    d = root / name.replace("-", "_")
    edges = np.stack([rng.integers(0, n, e), rng.integers(0, n, e)], 1)
    edges[:3] = [[1, 2], [1, 2], [4, 4]]  # a duplicate and a self-loop, kept as OGB keeps them
    feat = rng.random((n, 4)).astype(np.float32)
    perm = rng.permutation(n)
    split = dict(train=perm[:20], valid=perm[20:28], test=perm[28:36])
    if name == "ogbn-papers100M":
        raw = d / "raw"
        raw.mkdir(parents=True)
        lab = rng.integers(0, 172, (n, 1)).astype(np.float64)
        lab[perm[36:]] = np.nan  # unlabelled nodes
        np.savez_compressed(
            raw / "data.npz",
            edge_index=edges.T.astype(np.int64),
            num_nodes_list=np.array([n]),
            num_edges_list=np.array([e]),
            node_feat=feat,
            node_year=np.full((n, 1), 2019),
        )
        np.savez_compressed(raw / "node-label.npz", node_label=lab)
    else:
        _csv_gz(d / "raw" / "edge.csv.gz", edges, "%d")
        _csv_gz(d / "raw" / "num-node-list.csv.gz", [n], "%d")
        _csv_gz(d / "raw" / "num-edge-list.csv.gz", [e], "%d")
        if name == "ogbn-proteins":
            _csv_gz(d / "raw" / "edge-feat.csv.gz", rng.random((e, 8)), "%.6f")
            _csv_gz(d / "raw" / "node_species.csv.gz", np.full(n, 3702), "%d")
            _csv_gz(d / "raw" / "node-label.csv.gz", rng.integers(0, 2, (n, 112)), "%d")
        else:
            _csv_gz(d / "raw" / "node-feat.csv.gz", feat, "%.6f")
            _csv_gz(d / "raw" / "node-label.csv.gz", rng.integers(0, 40, n), "%d")
            if name == "ogbn-arxiv":
                _csv_gz(d / "raw" / "node_year.csv.gz", np.full(n, 2019), "%d")
    for k, idx in split.items():
        _csv_gz(d / "split" / OGB_SPLIT[name] / f"{k}.csv.gz", idx, "%d")
    (d / "RELEASE_v1.txt").write_text("")
    (d / "processed").mkdir()
    return d


def _ogb_reference(root, name):
    os.environ.setdefault("OUTDATED_IGNORE", "1")  # ogb asks PyPI whether it is outdated
    nodeproppred = pytest.importorskip("ogb.nodeproppred")
    ref = nodeproppred.NodePropPredDataset(name, root=str(root))
    graph, y = ref[0]
    return graph, y, ref.get_idx_split()


def assert_same_as_ogb(ds, graph, y, split):
    assert ds.graph.num_nodes == graph["num_nodes"]
    assert np.array_equal(edges_of(ds.graph), edges_of_index(graph["edge_index"]))
    y = np.asarray(y)
    y = np.where(np.isnan(y), -1, y).astype(np.int64) if y.dtype.kind == "f" else y
    assert np.array_equal(ds.y.numpy(), y[:, 0] if y.shape[1] == 1 else y)
    if graph["node_feat"] is not None:
        assert np.array_equal(ds.x.numpy(), graph["node_feat"])
    else:  # proteins: the mean of each node's incoming edge features
        ef, dst = graph["edge_feat"], graph["edge_index"][1]
        want = np.zeros((graph["num_nodes"], ef.shape[1]))
        np.add.at(want, dst, ef)
        want /= np.maximum(np.bincount(dst, minlength=graph["num_nodes"]), 1)[:, None]
        assert np.allclose(ds.x.numpy(), want, atol=1e-6)
    for mask, k in zip((ds.train_mask, ds.val_mask, ds.test_mask), ("train", "valid", "test"), strict=True):
        assert np.array_equal(np.flatnonzero(mask.numpy()), np.sort(split[k])), k


@pytest.mark.parametrize("name", ["ogbn-arxiv", "ogbn-products", "ogbn-proteins", "ogbn-papers100M"])
def test_ogb_matches_ogb_reader(tmp_path, name):
    d = write_ogb(tmp_path, name)
    ours_raw = load_ogb(d)  # before ogb writes its cache: read from raw/
    graph, y, split = _ogb_reference(tmp_path, name)
    assert_same_as_ogb(ours_raw, graph, y, split)
    # ogb wrote processed/data_processed; it is read (numpy-only unpickling) even without raw/
    assert (d / "processed" / "data_processed").is_file()
    for f in ("edge.csv.gz", "data.npz"):
        if (d / "raw" / f).exists():
            (d / "raw" / f).unlink()
    assert_same_as_ogb(load_ogb(d), graph, y, split)
    # by name under a data directory, and as a directory path
    assert resolve(name, tmp_path).name == name
    assert resolve(str(d), None).kind == "ogb"


def test_ogb_add_inverse_edge_interleaves_as_ogb(tmp_path):
    d = write_ogb(tmp_path, "ogbn-products", e=3)
    raw = pytest.importorskip("ogb.io.read_graph_raw")
    g = raw.read_csv_graph_raw(str(d / "raw"), add_inverse_edge=True)[0]
    ours = load_ogb(d, features=False).graph
    assert ours.num_edges == 6 and np.array_equal(edges_of(ours), edges_of_index(g["edge_index"]))


def test_ogb_processed_cache_refuses_objects(tmp_path, capsys):
    """A data_processed that would build an arbitrary object is not unpickled: raw/ is read."""
    d = write_ogb(tmp_path, "ogbn-arxiv")

    class Evil:
        def __reduce__(self):
            return (print, ("unpickled!",))

    torch.save({"graph": Evil(), "labels": None}, d / "processed" / "data_processed")
    ds = load_ogb(d)
    out = capsys.readouterr()
    assert "unpickled!" not in out.out and "not readable as OGB's numpy cache" in out.err
    assert ds.graph.num_edges == 120


def test_ogb_bad_csv_names_line(tmp_path):
    d = write_ogb(tmp_path, "ogbn-arxiv")
    with gzip.open(d / "raw" / "edge.csv.gz", "wt") as f:
        f.write("0,1\n1,2\n2,x\n")
    with pytest.raises(GraphError, match=r"edge.csv.gz:3: edges 'src,dst': non-numeric entry in '2,x'"):
        load_ogb(d)


# ---- SNAP edge lists ------------------------------------------------------------------------------
SNAP = (
    "# Directed graph (each unordered pair of nodes is saved once): web-Toy.txt\n# Nodes: 6 Edges: 7\n"
    "# FromNodeId\tToNodeId\n1\t2\n2\t3\n0\t0\n5\t1\n2\t3\n4\t5\n3\t1\n"
)


@pytest.mark.parametrize("gz", [False, True])
def test_snap_edge_list_plain_and_gz(tmp_path, gz):
    f = tmp_path / ("web-Toy.txt.gz" if gz else "web-Toy.txt")
    with gzip.open(f, "wt") if gz else open(f, "w") as fh:
        fh.write(SNAP)
    g = load_edge_list(f)
    pairs = np.array([[int(t) for t in ln.split()] for ln in SNAP.splitlines() if not ln.startswith("#")])
    assert g.num_nodes == 6 and np.array_equal(edges_of(g), edges_of_index(pairs.T))
    loops = pairs[:, 0] == pairs[:, 1]  # a self-loop is its own reverse: added once
    assert np.array_equal(
        edges_of(load_edge_list(f, undirected=True)),
        edges_of_index(np.concatenate([pairs, pairs[~loops, ::-1]]).T),
    )


def test_edge_list_fast_and_line_by_line_paths_agree(tmp_path):
    """A file the C reader takes and the same edges with mixed comment styles (line-by-line)."""
    rng = np.random.default_rng(0)
    e = rng.integers(0, 500, (3000, 2))
    w = rng.random(3000).astype(np.float32)
    fast, slow = tmp_path / "fast.txt", tmp_path / "slow.txt"
    lines = [f"{a} {b} {c!r}" for (a, b), c in zip(e.tolist(), w.tolist(), strict=True)]
    fast.write_text("% header\n" + "\n".join(lines) + "\n")
    slow.write_text("# header\n" + "\n".join(lines[:1000]) + "\n// middle\n% other\n\n" + "\n".join(lines[1000:]))
    a, b = read_edge_list(fast), read_edge_list(slow)
    for x, y in ((a.src, b.src), (a.dst, b.dst), (a.weight, b.weight), (a.src, e[:, 0]), (a.weight, w)):
        assert np.array_equal(x, y)


def test_edge_list_error_late_in_file_names_its_line(tmp_path):
    f = tmp_path / "big.txt"
    f.write_text("# c\n" + "".join(f"{i} {i + 1}\n" for i in range(5000)) + "7 x\n")
    with pytest.raises(GraphError, match=r"big.txt:5002: non-numeric entry in '7 x'"):
        load_edge_list(f)


@pytest.mark.parametrize(
    "text, line, what",
    [
        ("0 1\n1 3000000000\n", 2, "more than the 2,147,483,647 a plan can index"),
        ("# c\n0 1\n5 2\n99999999 1\n", 4, "node id 99,999,999 would make 100,000,000 nodes for 3 edges"),
    ],
)
def test_huge_or_sparse_ids_fail_before_allocating(tmp_path, text, line, what):
    f = tmp_path / "ids.txt"
    f.write_text(text)
    with pytest.raises(GraphError) as e:
        load_edge_list(f)
    msg = str(e.value)
    assert f"ids.txt:{line}: " in msg and what in msg and "--relabel" in msg and "\n" not in msg, msg


def test_relabel_keeps_the_map(tmp_path):
    f = tmp_path / "ids.txt"
    f.write_text("3000000000 17\n17 42\n42 3000000000\n")
    t = read_edge_list(f, relabel=True)
    assert t.ids.tolist() == [17, 42, 3000000000]
    assert t.src.tolist() == [2, 0, 1] and t.dst.tolist() == [0, 1, 2]
    g = load_edge_list(f, relabel=True)
    assert g.num_nodes == 3 and np.array_equal(edges_of(g), edges_of_index([[2, 0, 1], [0, 1, 2]]))


# ---- PyG inputs ----------------------------------------------------------------------------------
def test_node_dataset_from_pyg():
    tg = pytest.importorskip("torch_geometric.data")
    ei = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    data = tg.Data(
        x=torch.randn(4, 3),
        y=torch.tensor([[0.0], [1.0], [float("nan")], [2.0]]),
        edge_index=ei,
        edge_weight=torch.tensor([1.0, 2.0, 3.0, 4.0]),
        train_mask=torch.tensor([1, 1, 0, 0]).bool(),
        val_mask=torch.tensor([2]),
        test_mask=torch.tensor([False, False, False, True]),
    )
    ds = NodeDataset.from_pyg(data, "toy")
    assert torch.equal(ds.x, data.x) and ds.y.tolist() == [0, 1, -1, 2]
    assert ds.val_mask.tolist() == [False, False, True, False]
    assert np.array_equal(edges_of(ds.graph), edges_of_index(ei.numpy(), data.edge_weight.numpy()))
    with pytest.raises(GraphError, match="toy: the PyG Data has no train_mask"):
        NodeDataset.from_pyg(tg.Data(x=data.x, y=data.y, edge_index=ei), "toy")


def test_layers_accept_edge_index_subclass_and_sparse_tensor():
    from mgg.nn import GCNConv
    from mgg.nn.graph_input import to_graph

    pyg = pytest.importorskip("torch_geometric")
    torch.manual_seed(0)
    ei = torch.tensor([[0, 1, 1, 2, 3, 0], [1, 0, 2, 1, 0, 3]])
    x = torch.randn(4, 5)
    conv = GCNConv(5, 3)
    ref = conv(x, ei)
    e = pyg.EdgeIndex(ei, sparse_size=(4, 4))
    assert torch.allclose(conv(x, e), ref, atol=1e-6)

    class SparseTensor:  # the torch_sparse.SparseTensor calls mgg makes: csr() and sparse_sizes()
        __module__ = "torch_sparse.tensor"

        def __init__(self, row, col, n):
            a = sp.csr_matrix((np.ones(len(row)), (row, col)), shape=(n, n))
            self._csr = (torch.from_numpy(a.indptr).long(), torch.from_numpy(a.indices).long(), None)
            self._n = n

        def csr(self):
            return self._csr

        def sparse_sizes(self):
            return (self._n, self._n)

    adj_t = SparseTensor(ei[1].numpy(), ei[0].numpy(), 4)  # PyG's adj_t[target, source]
    assert torch.allclose(conv(x, adj_t), ref, atol=1e-6)
    assert (to_graph(adj_t, 4).to_scipy() != to_graph(ei, 4).to_scipy()).nnz == 0


def test_layers_accept_torch_sparse_sparse_tensor():
    torch_sparse = pytest.importorskip("torch_sparse")
    from mgg.nn import GCNConv

    torch.manual_seed(0)
    ei = torch.tensor([[0, 1, 1, 2, 3, 0], [1, 0, 2, 1, 0, 3]])
    x = torch.randn(4, 5)
    conv = GCNConv(5, 3)
    adj_t = torch_sparse.SparseTensor(row=ei[1], col=ei[0], sparse_sizes=(4, 4))
    assert torch.allclose(conv(x, adj_t), conv(x, ei), atol=1e-6)


def test_layers_refuse_other_inputs_in_one_line():
    from mgg import MggError
    from mgg.nn.graph_input import to_graph

    with pytest.raises(MggError, match="edge_index must be a tensor .* SparseTensor .* got list"):
        to_graph([[0, 1], [1, 0]], 2)


# ---- resolution --------------------------------------------------------------------------------
def test_resolve_every_kind(tmp_path):
    write_planetoid(tmp_path, "toy", [541, 540])
    write_reddit_raw(tmp_path / "Reddit" / "raw")
    write_ogb(tmp_path, "ogbn-arxiv")
    (tmp_path / "e.txt").write_text("0 1\n1 2\n")
    np.savez(
        tmp_path / "d.npz",
        edge_index=np.array([[0, 1], [1, 0]]),
        x=np.ones((2, 3)),
        y=np.array([0, 1]),
        train_mask=np.array([True, False]),
        val_mask=np.array([1]),
        test_mask=np.array([1]),
    )
    kinds = {
        s: resolve(s, tmp_path).kind
        for s in ("toy", "reddit", "ogbn-arxiv", "e.txt", "d.npz", "cora", "rmat-reddit:scale=0.001", "rmat:10:20")
    }
    assert kinds == {
        "toy": "planetoid",
        "reddit": "reddit",
        "ogbn-arxiv": "ogb",
        "e.txt": "file",
        "d.npz": "npz-dataset",
        "cora": "planetoid",
        "rmat-reddit:scale=0.001": "synthetic",
        "rmat:10:20": "synthetic",
    }
    ds = resolve("d.npz", tmp_path).dataset()
    assert ds.val_mask.tolist() == [False, True] and ds.x.shape == (2, 3)
    with pytest.raises(GraphError, match="e.txt: a graph without node features, labels or split"):
        resolve("e.txt", tmp_path).dataset()
    with pytest.raises(
        GraphError,
        match=r"nope: no such file, not a dataset in .* \(found there: "
        r"ogbn-arxiv, reddit, toy\)",
    ):
        resolve("nope", tmp_path)


def test_old_preset_names_are_noted_aliases(capsys):
    g = resolve("reddit:scale=0.001", None)
    assert g.name == "rmat-reddit:scale=0.001" and g.kind == "synthetic"
    assert g.graph.num_nodes == 232
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'reddit' is rmat-reddit, a synthetic R-MAT stand-in" in err

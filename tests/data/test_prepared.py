"""Prepared datasets (mgg prepare, mgg.data.prepared) without processes: a prepare streamed from each
source kind writes the same files as one from the dataset in memory; the directory reads back as
the dataset load_dataset gives; a rank's rows are the relabelled graph's rows of its range, read
from its parts' files only; Shchur et al.'s .npz reads as PyG reads it; bad directories and
interrupted prepares; a streamed prepare's memory stays within its chunk budget."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import mgg
from mgg import GraphError, MggError
from mgg.data import NodeDataset, load_dataset, resolve
from mgg.data.prepared import Manifest, Prepared
from mgg.data.prepared.layout import MANIFEST, crc_chunks
from mgg.data.prepared.sources import Shchur, load_shchur, shchur_split, streaming_source
from mgg.partitioning.prepare import prepare
from mgg.testing import random_graph
from tests.data.test_io import write_ogb, write_reddit_raw
from tests.distributed.test_distributed import worker_env

MIB = 1 << 20


def dataset(n=900, e=12000, d=12, seed=0, weighted=False) -> NodeDataset:
    g = random_graph(n, e, seed=seed, skew=0.6, weighted=weighted)
    rng = np.random.default_rng(seed)
    return NodeDataset(
        "synthetic",
        g,
        torch.from_numpy(rng.random((n, d)).astype(np.float32)),
        torch.from_numpy(rng.integers(0, 5, n)),
        *(torch.from_numpy(rng.random(n) < p) for p in (0.2, 0.2, 0.5)),
    )


def write_npz(path, ds: NodeDataset, layout: str, seed=0):
    """ds as an .npz dataset with its graph in `layout`, its edges shuffled where the layout keeps
    their order (a row's order is the file's)."""
    common = dict(
        x=ds.x.numpy(),
        y=ds.y.numpy(),
        train_mask=ds.train_mask.numpy(),
        val_mask=ds.val_mask.numpy(),
        test_mask=ds.test_mask.numpy(),
    )
    g = ds.graph
    ei = g.edge_index().numpy()
    order = np.random.default_rng(seed).permutation(ei.shape[1])
    w = np.random.default_rng(seed + 1).random(ei.shape[1]).astype(np.float32) + 0.5
    n = g.num_nodes
    if layout == "edge_index":  # edge_index and x in Fortran order (a transposed array saved as it is)
        np.savez(path, edge_index=np.asfortranarray(ei[:, order]), **dict(common, x=np.asfortranarray(common["x"])))
    elif layout == "edge_index-weighted-compressed":
        np.savez_compressed(path, edge_index=np.ascontiguousarray(ei[:, order]), edge_weight=w, **common)
    elif layout == "rowptr":
        np.savez(path, rowptr=g.rowptr.numpy(), col=g.col.numpy(), weight=w, **common)
    elif layout == "scipy-coo":
        m = sp.coo_matrix((w[order], (ei[1][order], ei[0][order])), shape=(n, n))
        np.savez(path, format=np.array("coo"), shape=np.array(m.shape), row=m.row, col=m.col, data=m.data, **common)
    elif layout == "scipy-csr-unit":
        m = sp.csr_matrix((np.ones(ei.shape[1]), (ei[1], ei[0])), shape=(n, n))
        np.savez(
            path,
            format=np.array("csr"),
            shape=np.array(m.shape),
            indptr=m.indptr,
            indices=m.indices,
            data=m.data,
            **common,
        )
    return path


def write_shchur(path, n=700, seed=0, features=30, classes=6):
    """Shchur et al.'s .npz layout (PyG's Amazon and Coauthor raw files): a directed adjacency with
    self-loops and duplicate directions, sparse count attributes, labels."""
    rng = np.random.default_rng(seed)
    adj = sp.random(n, n, density=8 / n, random_state=seed, format="csr")
    adj.data[:] = 1
    adj = (adj + sp.eye(n, format="csr")).tocsr()
    attr = sp.random(n, features, density=0.15, random_state=seed + 1, format="csr")
    attr.data = np.round(attr.data * 3)
    np.savez(
        path,
        adj_data=adj.data,
        adj_indices=adj.indices,
        adj_indptr=adj.indptr,
        adj_shape=np.array(adj.shape),
        attr_data=attr.data,
        attr_indices=attr.indices,
        attr_indptr=attr.indptr,
        attr_shape=np.array(attr.shape),
        labels=rng.integers(0, classes, n),
        class_names=np.array([f"c{i}" for i in range(classes)]),
    )
    return path


def same_files(a, b) -> list:
    """The files two prepared directories hold differently (by their checksums), or []."""
    fa, fb = Manifest.read(a).files, Manifest.read(b).files
    assert fa.keys() == fb.keys(), sorted(fa.keys() ^ fb.keys())
    return [k for k in fa if fa[k].crc32 != fb[k].crc32 or fa[k].bytes != fb[k].bytes]


def assert_same_dataset(got: NodeDataset, want: NodeDataset):
    for f in ("rowptr", "col"):
        assert torch.equal(getattr(got.graph, f), getattr(want.graph, f)), f
    assert (got.graph.weight is None) == (want.graph.weight is None)
    if want.graph.weight is not None:
        assert torch.equal(got.graph.weight, want.graph.weight)
    for f in ("x", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(got, f), getattr(want, f)), f


NPZ_LAYOUTS = ["edge_index", "edge_index-weighted-compressed", "rowptr", "scipy-coo", "scipy-csr-unit"]


def _sources(tmp_path):
    """Every streaming source kind: (name, spec, data_dir)."""
    ds = dataset()
    out = [(f"npz-{k}", str(write_npz(tmp_path / f"{k}.npz", ds, k)), None) for k in NPZ_LAYOUTS]
    write_reddit_raw(tmp_path / "Reddit" / "raw", n=400)
    out.append(("reddit", str(tmp_path / "Reddit"), None))
    out.append(("shchur", str(write_shchur(tmp_path / "amazon_electronics_computers.npz")), None))
    for name in ("ogbn-arxiv", "ogbn-products", "ogbn-papers100M"):
        d = write_ogb(tmp_path / "ogb", name, n=300, e=2500)
        shutil.rmtree(d / "processed")  # no processed cache: the raw files are read
        out.append((name, str(d), None))
    return out


@pytest.mark.parametrize("method", ["range", "random"])
def test_streamed_prepare_writes_what_the_dataset_in_memory_gives(tmp_path, method):
    """From every source kind, with a budget small enough for several pieces and buckets: the files
    are those of a prepare from load_dataset's NodeDataset, and they read back as that dataset."""
    for name, spec, data_dir in _sources(tmp_path):
        src = streaming_source(resolve(spec, data_dir).path)
        assert src is not None and src.streams, name
        src.close()
        want = load_dataset(spec, data_dir)
        streamed, in_memory = tmp_path / f"{name}-{method}-s", tmp_path / f"{name}-{method}-m"
        prepare(spec, streamed, 4, method, budget=MIB)
        prepare(want, in_memory, 4, method)
        assert same_files(streamed, in_memory) == [], name
        assert_same_dataset(Prepared(streamed).dataset(), want)


@pytest.mark.parametrize("method", ["range", "random", "metis", "hypergraph"])
def test_a_rank_reads_the_relabelled_rows_of_its_range(tmp_path, method):
    """Prepared for 8 parts, read by 1, 2, 4 and 8 ranks (consecutive parts merged): each rank's rows
    are mgg.partition's relabelled graph's rows of its range, its features, labels and split those of
    its nodes, and it reads its parts' files and nothing more."""
    if method in ("metis", "hypergraph"):
        pytest.importorskip({"metis": "pymetis", "hypergraph": "mtkahypar"}[method])
    ds = dataset(weighted=True)
    out = tmp_path / "p"
    m = prepare(ds, out, 8, method, seed=3)
    part = mgg.partition(ds.graph, 8, method, seed=3, cache=False)
    assert list(m.bounds) == part.bounds.tolist()
    relabelled = part.relabel(ds.graph)
    rp = relabelled.rowptr.numpy()
    for world in (1, 2, 4, 8):
        prepared = Prepared(out)
        bounds = prepared.rank_bounds(world)
        assert bounds.tolist() == part.bounds[:: 8 // world].tolist()
        for rank in range(world):
            before = prepared.bytes_read
            r = prepared.rows(rank, world)
            lo, hi = r.row_begin, r.row_end
            assert np.array_equal(r.rowptr, rp[lo : hi + 1] - rp[lo])
            assert np.array_equal(r.col, relabelled.col.numpy()[rp[lo] : rp[hi]])
            assert np.array_equal(r.weight, relabelled.weight.numpy()[rp[lo] : rp[hi]])
            users = part.perm[lo:hi]
            assert np.array_equal(r.ids, users)
            assert np.array_equal(r.x, ds.x.numpy()[users]) and np.array_equal(r.y, ds.y.numpy()[users])
            for s, mask in zip(("train", "val", "test"), (ds.train_mask, ds.val_mask, ds.test_mask), strict=True):
                assert np.array_equal(r.mask(s), mask.numpy()[users])
            mine = sum(
                e.bytes for rel, e in m.files.items() if rel in prepared.files_of(prepared.parts_of(rank, world))
            )
            assert r.bytes_read == prepared.bytes_read - before <= mine


def test_the_directory_reads_back_as_the_dataset(tmp_path):
    """One process: `mgg train --dataset DIR` and load_dataset read the prepared dataset whole, in the
    user's order (graph, features, labels, split)."""
    ds = load_dataset("cora")
    prepare("cora", tmp_path / "cora", 4, "random")
    src = resolve(str(tmp_path / "cora"))
    assert src.kind == "prepared"
    assert_same_dataset(src.dataset(), ds)
    assert torch.equal(src.graph.col, ds.graph.col)


def test_shchur_npz_reads_as_pyg_reads_it(tmp_path):
    """Amazon and Coauthor's raw .npz, which mgg refused before: PyG's read_npz is the oracle for the
    graph (self-loops removed, undirected, coalesced) and the binarised features; the split draws 20
    and 30 nodes of each class, seeded."""
    io = pytest.importorskip("torch_geometric.io")
    path = write_shchur(tmp_path / "ms_academic_cs.npz")
    assert Shchur.recognises(path)
    data = io.read_npz(str(path))
    ds = load_dataset(str(path))
    want = mgg.Graph.from_edge_index(data.edge_index, data.num_nodes)
    assert torch.equal(ds.graph.rowptr, want.rowptr) and torch.equal(ds.graph.col, want.col)
    assert torch.equal(ds.x, data.x) and torch.equal(ds.y, data.y)
    y = ds.y.numpy()
    for c in np.unique(y):
        members = y == c
        assert ds.train_mask.numpy()[members].sum() == min(20, members.sum())
        assert ds.val_mask.numpy()[members].sum() == min(30, max(members.sum() - 20, 0))
    assert not (ds.train_mask & ds.val_mask).any() and not ((ds.train_mask | ds.val_mask) & ds.test_mask).any()
    assert int((ds.train_mask | ds.val_mask | ds.test_mask).sum()) == ds.graph.num_nodes
    again = shchur_split(y)
    assert all(
        np.array_equal(a, b.numpy()) for a, b in zip(again, (ds.train_mask, ds.val_mask, ds.test_mask), strict=True)
    )
    assert resolve(str(path)).kind == "shchur"  # mgg partition and mgg train take it
    assert load_shchur(path).graph.num_edges == want.num_edges


# ---- bad directories ---------------------------------------------------------------------------------
@pytest.fixture
def cora4(tmp_path):
    out = tmp_path / "cora4"
    prepare("cora", out, 4, "random")
    return out


def _one_line(e) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_a_rank_count_that_does_not_divide_the_parts(cora4):
    with pytest.raises(GraphError, match="prepared for 4 parts, which 3 ranks cannot share") as e:
        Prepared(cora4).rows(0, 3)
    _one_line(e)


@pytest.mark.parametrize(
    "damage,fragment",
    [
        ("missing", "x.npy: missing"),
        ("truncated", "col.npy: truncated"),
        ("changed", "col.npy: changed since it was prepared"),
        ("version", "format version 99, but this mgg reads versions 1, 2"),
        ("no manifest", "manifest.json: missing"),
        ("other prepare", "x.npy: changed since it was prepared .* another prepare's file"),
        ("other partition", "ids.npy: longer than written"),
    ],
)
def test_a_damaged_directory_is_one_line_naming_the_file(tmp_path, cora4, damage, fragment):
    """Each damage found before any data is used, in one line naming the file; the other parts still
    read (a rank that reads only undamaged files is not stopped by another's)."""
    p1 = cora4 / "parts" / "00001"
    if damage == "missing":
        os.remove(p1 / "x.npy")
    elif damage == "truncated":
        with open(p1 / "col.npy", "r+b") as f:
            f.truncate(os.path.getsize(p1 / "col.npy") - 8)
    elif damage == "changed":
        with open(p1 / "col.npy", "r+b") as f:
            f.seek(200)
            b = f.read(1)
            f.seek(200)
            f.write(bytes([b[0] ^ 1]))
    elif damage == "version":
        d = json.loads((cora4 / MANIFEST).read_text())
        d["version"] = 99
        (cora4 / MANIFEST).write_text(json.dumps(d))
    elif damage == "no manifest":
        os.remove(cora4 / MANIFEST)
    elif damage == "other prepare":  # a part of another prepare of the same shapes (other features)
        ds = load_dataset("cora")
        ds.x += 1
        prepare(ds, tmp_path / "other", 4, "random")
        shutil.copy(tmp_path / "other" / "parts" / "00001" / "x.npy", p1 / "x.npy")
    else:  # a part of another partition (other nodes in part 1)
        prepare("cora", tmp_path / "other", 4, "range")
        shutil.copy(tmp_path / "other" / "parts" / "00001" / "ids.npy", p1 / "ids.npy")
    with pytest.raises(GraphError, match=fragment) as e:
        Prepared(cora4).rows(0, 2)  # parts 0 and 1
    _one_line(e)
    if damage not in ("version", "no manifest"):
        assert Prepared(cora4).rows(1, 2).num_rows > 0  # parts 2 and 3 are whole


def test_prepare_refuses_in_one_line(tmp_path, cora4):
    for kwargs, fragment in (
        (dict(out=cora4), "exists; remove it"),
        (dict(method="spectral"), "--method must be one of"),
        (dict(parts=0), "--parts must be a positive integer"),
        (dict(parts=5000), "5000 parts exceed the dataset's 2708 nodes"),
        (dict(budget=1000), "at least 1 MiB"),
        (dict(spec=str(cora4)), "a prepared dataset already"),
    ):
        args = dict(spec="cora", out=tmp_path / "new", parts=4, method="range")
        args.update(kwargs)
        with pytest.raises(MggError, match=fragment) as e:
            prepare(args.pop("spec"), args.pop("out"), **args)
        _one_line(e)
        assert not (tmp_path / "new").exists()


def test_in_memory_methods_refuse_what_cannot_fit(tmp_path, monkeypatch):
    """metis and hypergraph hold the graph in memory: estimated from the files' headers first, and a
    dataset that cannot fit is refused in one line, nothing written or allocated."""
    path = write_npz(tmp_path / "d.npz", dataset(), "edge_index")
    monkeypatch.setattr("mgg.partitioning.prepare.available_memory", lambda: 10_000)
    with pytest.raises(MggError, match="metis partitions in memory: about .* GiB .* are available") as e:
        prepare(str(path), tmp_path / "out", 4, "metis")
    _one_line(e)
    assert os.listdir(tmp_path) == ["d.npz"]
    prepare(str(path), tmp_path / "out", 4, "range")  # streamed: no estimate stops it


def test_a_failed_prepare_leaves_nothing(tmp_path, monkeypatch):
    import mgg.partitioning.prepare as module

    def broken(*args, **kwargs):
        raise GraphError("the features broke")

    monkeypatch.setattr(module, "write_nodes", broken)
    with pytest.raises(GraphError, match="the features broke"):
        prepare("cora", tmp_path / "out", 4)
    assert os.listdir(tmp_path) == []


def test_an_interrupted_prepare_leaves_nothing_that_looks_finished(tmp_path):
    """A prepare killed (SIGKILL) while it writes: no OUT, and the temporary directory it leaves has no
    manifest, so nothing reads it as a dataset; overwriting a complete OUT keeps it until the new is whole."""
    ds = dataset(n=3000, e=400_000, d=64)
    path = write_npz(tmp_path / "big.npz", ds, "edge_index")
    prepare(str(path), tmp_path / "out", 2)
    before = Manifest.read(tmp_path / "out").id
    cmd = [sys.executable, "-m", "mgg", "prepare", str(path), str(tmp_path / "out"), "--parts", "4", "--overwrite"]
    child = subprocess.Popen(cmd + ["--budget", "1"], env=worker_env(), stderr=subprocess.PIPE, text=True)
    try:
        for line in iter(child.stderr.readline, ""):  # its progress: kill it while it buckets the edges
            if "edges to" in line or "features" in line:
                break
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=60)
    assert Manifest.read(tmp_path / "out").id == before  # the complete one, untouched
    leftovers = [p for p in tmp_path.iterdir() if ".partial-" in p.name]
    for p in leftovers:
        assert not (p / MANIFEST).exists()
        with pytest.raises(GraphError, match="an interrupted mgg prepare"):
            resolve(str(p))


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_streamed_prepare_holds_its_budget_not_the_dataset(tmp_path):
    """The peak memory of range and random (numpy's allocations, traced) is about the chunk budget
    and a few arrays of the node count: the same for 4 times the edges and 4 times the feature width,
    and well under the dataset's arrays."""
    n = 20_000
    small = write_npz(tmp_path / "small.npz", dataset(n, 200_000, 16), "edge_index")
    big = write_npz(tmp_path / "big.npz", dataset(n, 800_000, 64), "edge_index")
    budget = 2 * MIB
    peaks = {}
    for name, path in (("small", small), ("big", big)):
        for method in ("range", "random"):
            out = tmp_path / f"{name}-{method}"
            peaks[name, method] = _peak(lambda p=path, o=out, m=method: prepare(str(p), o, 4, m, budget=budget))
    arrays = os.path.getsize(big)
    node_arrays = 8 * 8 * n  # degrees, perm and its inverse, labels, the split: a few int64 per node
    for method in ("range", "random"):
        assert peaks["big", method] <= 3 * budget + node_arrays, (method, peaks)
        assert peaks["big", method] < arrays / 4
        assert peaks["big", method] <= 1.5 * peaks["small", method] + MIB, (method, peaks)


def test_a_range_read_reads_at_most_a_chunk_past_each_end(cora4):
    """Bytes [a, b) of a file read out to the chunks they touch, no further (the grid's per-block
    ranges: version 1's 1 MiB chunks read 16% past a rank's blocks at 8 ranks); and the chunk size is
    the manifest's (another size: every checksum differs)."""
    from mgg.data.prepared.layout import Reads

    m = Manifest.read(cora4)
    rel = "parts/00001/col.npy"
    size = m.files[rel].bytes
    for chunk in (64, 1000, 4096):
        d = json.loads((cora4 / MANIFEST).read_text())
        d["chunk"] = chunk
        for k, e in d["files"].items():
            e["crc32"] = crc_chunks(cora4 / k, chunk)
        (cora4 / MANIFEST).write_text(json.dumps(d))
        reads = Reads(cora4, Manifest.read(cora4))
        a, b = size // 3 + 5, 2 * size // 3 + 7
        out = bytearray(b - a)
        reads.read_into(rel, a, b, memoryview(out))
        assert bytes(out) == (cora4 / rel).read_bytes()[a:b]
        first, last = a // chunk * chunk, min(-(-b // chunk) * chunk, size)
        assert reads.bytes_read == last - first
    d["chunk"] = 4095  # the manifest's chunk is what the checksums are of
    (cora4 / MANIFEST).write_text(json.dumps(d))
    with pytest.raises(GraphError, match="changed since it was prepared"):
        Prepared(cora4).rows(0, 1)


def test_a_version_1_directory_reads_with_its_1_mib_chunks(cora4):
    """Version 1's manifest had no chunk size: its files were checksummed in 1 MiB chunks."""
    want = Prepared(cora4).rows(0, 2)
    d = json.loads((cora4 / MANIFEST).read_text())
    assert d["version"] == 2 and d["chunk"] < 1 << 20
    d["version"] = 1
    del d["chunk"]
    for k, e in d["files"].items():
        e["crc32"] = crc_chunks(cora4 / k, 1 << 20)
    (cora4 / MANIFEST).write_text(json.dumps(d))
    got = Prepared(cora4).rows(0, 2)
    assert Prepared(cora4).manifest.chunk == 1 << 20
    assert np.array_equal(got.x, want.x) and np.array_equal(got.col, want.col)

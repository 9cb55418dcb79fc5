"""Damaged and unusual files as they arrive in practice: a truncated download, a corrupt gzip
stream, a UTF-8 byte-order mark, weights that are not finite or not real, masks stored as 0/1
integers, ids outside the matrix. Each loads as the format means or fails in one GraphError line
that names the file (and the line, where there is one); none is read into a wrong graph."""

import gzip
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from mgg import GraphError
from mgg.data import NodeDataset, load_dataset, load_graph
from mgg.data.datasets import load_ogb, load_reddit

from .test_io import edges_of, edges_of_index, write_ogb, write_reddit_raw


def one_line_error(fn, *fragments):
    with pytest.raises(GraphError) as e:
        fn()
    msg = str(e.value)
    assert "\n" not in msg and all(f in msg for f in fragments), msg
    return msg


# ---- damaged archives and streams -----------------------------------------------------------------
def _npz_graph(path):
    sp.save_npz(path, sp.random(60, 60, density=0.2, format="csr", random_state=0))


def _damage_member(path, member):
    """Flip bytes inside one stored member of a zip archive (its CRC no longer matches)."""
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(member)
    raw = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    for k in range(start + 40, start + 48):
        raw[k] ^= 0xFF
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("load", [load_graph, load_dataset])
def test_truncated_npz_is_one_line(tmp_path, load):
    full, cut = tmp_path / "full.npz", tmp_path / "cut.npz"
    _npz_graph(full)
    cut.write_bytes(full.read_bytes()[:300])
    one_line_error(lambda: load(str(cut)), "cut.npz", "not a readable .npz")


def test_npz_with_a_damaged_member_is_one_line(tmp_path):
    f = tmp_path / "crc.npz"
    np.savez(f, edge_index=np.arange(400).reshape(2, 200) % 50)
    _damage_member(f, "edge_index.npy")
    one_line_error(lambda: load_graph(str(f)), "crc.npz", "a field cannot be read")


@pytest.mark.parametrize(
    "fields, fragment",
    [
        (dict(edge_index=np.array([[0, 1], [1, 2]], dtype=object)), "field cannot be read"),
        (dict(edge_index=np.array([[0, 1], [1, 2]]), num_nodes=np.array(2.9)), "num_nodes must be one"),
        (dict(rowptr=np.array([0, 1.7, 2, 2]), col=np.array([1, 2])), "rowptr must be integers"),
        (dict(format=np.array(b"lil"), shape=np.array([3, 3]), data=np.ones(1)), "'lil'"),
    ],
)
def test_npz_fields_of_the_wrong_kind_are_one_line(tmp_path, fields, fragment):
    f = tmp_path / "g.npz"
    np.savez(f, **fields)
    one_line_error(lambda: load_graph(str(f)), "g.npz", fragment)


def test_npz_count_stored_as_a_one_element_array(tmp_path):
    f = tmp_path / "g.npz"
    np.savez(f, edge_index=np.array([[0, 1], [1, 2]]), num_nodes=np.array([5]))
    assert load_graph(str(f)).num_nodes == 5


def test_npy_is_not_an_npz(tmp_path):
    from mgg.data import load_npz

    f = tmp_path / "x.npy"
    np.save(f, np.zeros(3))
    one_line_error(lambda: load_npz(f), "x.npy", "not an .npz archive")


def _corrupt_gzip(text: str) -> bytes:
    b = bytearray(gzip.compress(text.encode()))
    for k in range(30, 38):  # inside the deflate stream, past the header
        b[k] ^= 0xFF
    return bytes(b)


def test_corrupt_gzip_edge_list_and_mtx_are_one_line(tmp_path):
    body = "".join(f"{i} {i * 7 % 1000}\n" for i in range(20000))
    f = tmp_path / "e.txt.gz"
    f.write_bytes(_corrupt_gzip("# c\n" + body))
    one_line_error(lambda: load_graph(str(f)), "e.txt.gz", "cannot read")
    m = tmp_path / "m.mtx.gz"
    m.write_bytes(_corrupt_gzip("%%MatrixMarket matrix coordinate pattern general\n1000 1000 20000\n" + body))
    one_line_error(lambda: load_graph(str(m)), "m.mtx.gz", "cannot read")


def test_corrupt_gzip_ogb_csv_is_one_line(tmp_path):
    d = write_ogb(tmp_path, "ogbn-arxiv")
    (d / "raw" / "edge.csv.gz").write_bytes(_corrupt_gzip("".join(f"{i},{i + 1}\n" for i in range(20000))))
    one_line_error(lambda: load_ogb(d), "edge.csv.gz")


# ---- text as other tools write it -------------------------------------------------------------------
@pytest.mark.parametrize("gz", [False, True])
def test_utf8_byte_order_mark(tmp_path, gz):
    text = b"\xef\xbb\xbf# Directed graph: bom.txt\n0\t1\n1\t2\n5\t1\n"
    f = tmp_path / ("bom.txt.gz" if gz else "bom.txt")
    f.write_bytes(gzip.compress(text) if gz else text)
    assert np.array_equal(edges_of(load_graph(str(f))), edges_of_index([[0, 1, 5], [1, 2, 1]]))
    g = tmp_path / "bom2.txt"
    g.write_bytes(b"\xef\xbb\xbf0 1\n1 2\n")  # the mark before the first data line
    assert np.array_equal(edges_of(load_graph(str(g))), edges_of_index([[0, 1], [1, 2]]))


@pytest.mark.parametrize("weight", ["nan", "inf", "1e40"])
def test_weights_that_are_not_finite_float32_name_their_line(tmp_path, weight):
    f = tmp_path / "w.txt"
    f.write_text(f"0 1 1.0\n1 2 2.5\n2 0 {weight}\n")
    one_line_error(lambda: load_graph(str(f)), "w.txt:3:", "not a finite float32")
    m = tmp_path / "w.mtx"
    m.write_text(f"%%MatrixMarket matrix coordinate real general\n3 3 2\n1 2 1.0\n2 3 {weight}\n")
    one_line_error(lambda: load_graph(str(m)), "w.mtx:4:", "not a finite float32")


def test_python_only_number_spellings_are_refused(tmp_path):
    f = tmp_path / "u.txt"
    f.write_text("1_0 2\n")
    one_line_error(lambda: load_graph(str(f)), "u.txt:1:", "non-numeric")


@pytest.mark.parametrize("fmt", ["csr", "coo"])
def test_complex_matrices_are_refused(tmp_path, fmt):
    f = tmp_path / "c.npz"
    sp.save_npz(f, sp.csr_matrix(np.array([[0, 1 + 2j], [3j, 0]])).asformat(fmt))
    one_line_error(lambda: load_graph(str(f)), "c.npz", "complex edge weights")


# ---- datasets ---------------------------------------------------------------------------------------
def _npz_dataset(path, **masks):
    n = 6
    np.savez(
        path,
        edge_index=np.array([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]]),
        x=np.arange(n * 3, dtype=np.float32).reshape(n, 3),
        y=np.array([0, 1, 0, 1, 2, 2]),
        **masks,
    )


SPLIT = ([1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 0, 0], [0, 0, 0, 0, 1, 1])
MASKS = ("train_mask", "val_mask", "test_mask")


@pytest.mark.parametrize("dtype", [bool, np.uint8, np.int32, np.int64])
def test_npz_masks_of_zeros_and_ones_are_masks(tmp_path, dtype):
    f = tmp_path / "d.npz"
    _npz_dataset(f, **{k: np.array(m, dtype) for k, m in zip(MASKS, SPLIT, strict=True)})
    ds = load_dataset(str(f))
    for got, want in zip((ds.train_mask, ds.val_mask, ds.test_mask), SPLIT, strict=True):
        assert got.dtype == torch.bool and got.tolist() == [bool(v) for v in want]


@pytest.mark.parametrize(
    "mask, fragment",
    [
        (np.array([1, 1, 0, 0, 0, 0, 0], np.uint8), "a mask of 7 entries for a graph of 6 nodes"),
        (np.array([1, 1, 0, 0, 0], np.int64), "a mask of 5 entries for a graph of 6 nodes"),
        (np.array([1, 2, 0, 0, 0, 0], np.uint8), "a uint8 mask must hold only 0 and 1"),
        (np.ones(5, bool), "a mask of 5 entries"),
    ],
)
def test_npz_masks_of_the_wrong_length_are_refused(tmp_path, mask, fragment):
    f = tmp_path / "d.npz"
    _npz_dataset(f, train_mask=mask, val_mask=np.array([3]), test_mask=np.array([4]))
    one_line_error(lambda: load_dataset(str(f)), "d.npz: field train_mask", fragment)


def test_npz_column_masks_are_flattened(tmp_path):
    f = tmp_path / "d.npz"
    _npz_dataset(f, **{k: np.array(m, bool)[:, None] for k, m in zip(MASKS, SPLIT, strict=True)})
    assert load_dataset(str(f)).train_mask.tolist() == [True, True, True, False, False, False]


def test_npz_index_lists_stay_index_lists(tmp_path):
    f = tmp_path / "d.npz"
    _npz_dataset(f, train_mask=np.array([0, 1, 2]), val_mask=np.array([3]), test_mask=np.array([5, 4]))
    ds = load_dataset(str(f))
    assert ds.train_mask.nonzero().view(-1).tolist() == [0, 1, 2]
    assert ds.val_mask.nonzero().view(-1).tolist() == [3] and ds.test_mask.nonzero().view(-1).tolist() == [4, 5]


@pytest.mark.parametrize(
    "field, value, fragment",
    [
        ("train_mask", np.array([0.0, 1.0, 1.0]), "boolean mask or integer node indices"),
        ("y", np.array(list("abcdef")), "labels must be numbers"),
        ("x", np.zeros((5, 3), np.float32), "has a node id >= num_nodes 5: the node count is the rows of field x"),
    ],
)
def test_npz_dataset_fields_of_the_wrong_kind(tmp_path, field, value, fragment):
    f = tmp_path / "d.npz"
    fields = dict(train_mask=np.array([0]), val_mask=np.array([1]), test_mask=np.array([2]))
    n = 6
    base = dict(x=np.zeros((n, 3), np.float32), y=np.zeros(n, np.int64))
    base.update(fields)
    base[field] = value
    np.savez(f, edge_index=np.array([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]]), **base)
    one_line_error(lambda: load_dataset(str(f)), "d.npz", fragment)


def test_pyg_byte_masks_are_masks():
    tg = pytest.importorskip("torch_geometric.data")
    masks = {k: torch.tensor(m, dtype=torch.uint8) for k, m in zip(MASKS, SPLIT, strict=True)}
    data = tg.Data(x=torch.ones(6, 2), y=torch.zeros(6, dtype=torch.long), edge_index=torch.tensor([[0], [1]]), **masks)
    ds = NodeDataset.from_pyg(data)
    assert [m.tolist() for m in (ds.train_mask, ds.val_mask, ds.test_mask)] == [[bool(v) for v in m] for m in SPLIT]


@pytest.mark.parametrize("bad", [30, -1])
@pytest.mark.parametrize("axis", ["row", "col"])
def test_reddit_entries_outside_the_matrix_are_refused(tmp_path, axis, bad):
    raw = tmp_path / "raw"
    write_reddit_raw(raw)  # 30 nodes
    row, col = np.array([0, 1, 2], np.int32), np.array([1, 2, 3], np.int32)
    (row if axis == "row" else col)[2] = bad
    np.savez(raw / "reddit_graph.npz", row=row, col=col, data=np.ones(3, np.float32), format=b"coo", shape=[30, 30])
    one_line_error(lambda: load_reddit(tmp_path), "reddit_graph.npz", f"entry 2 has {axis} {bad}, outside [0, 30)")


@pytest.mark.parametrize("declared", ["mtx", "npz"])
def test_a_declared_size_past_memory_is_refused_in_one_line(tmp_path, monkeypatch, declared):
    monkeypatch.setattr("mgg.graph.available_memory", lambda: 2**30)  # 1 GiB: 44.7M nodes at 24 bytes
    if declared == "mtx":
        f = tmp_path / "big.mtx"
        f.write_text("%%MatrixMarket matrix coordinate pattern general\n100000000 100000000 1\n1 2\n")
        one_line_error(lambda: load_graph(str(f)), "big.mtx:2:", "100,000,000 nodes need 2.2 GiB", "1.0 GiB")
    else:
        f = tmp_path / "big.npz"
        np.savez(f, edge_index=np.array([[0], [1]]), num_nodes=np.array(100_000_000))
        one_line_error(lambda: load_graph(str(f)), "big.npz", "100,000,000 nodes need")
    small = tmp_path / "small.npz"  # a size that fits the same memory loads
    np.savez(small, edge_index=np.array([[0], [1]]), num_nodes=np.array(1_000_000))
    assert load_graph(str(small)).num_nodes == 1_000_000

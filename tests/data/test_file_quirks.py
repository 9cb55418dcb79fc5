"""Files as other tools write them: compressed by bzip2 or xz, packed in a zip or tar archive,
saved in UTF-16 or with a Latin-1 comment, comments after the numbers, Matrix Market's rarer
headers, an .npz dataset whose last nodes have no edges, Planetoid and OGB files that do not hold
what their format says. Each loads as an outside reader (scipy.io.mmread, numpy) reads it, or
fails in one GraphError line that names the file (and the line) and says what to do."""

import bz2
import gzip
import io
import lzma
import pickle
import tarfile
import zipfile

import numpy as np
import pytest
import scipy.io as sio

from mgg.data import load_dataset, load_graph
from mgg.data.formats import load_mtx

from .test_bad_files import one_line_error
from .test_io import _csv_gz, edges_of, edges_of_index, write_ogb, write_planetoid

EDGES = "# a SNAP-style list\n0 1\n1 2\n2 0\n3 1\n"
WANT = edges_of_index([[0, 1, 2, 3], [1, 2, 0, 1]])


# ---- compression and containers ------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, pack",
    [
        ("e.txt.bz2", bz2.compress),
        ("e.txt.xz", lzma.compress),
        ("e.txt.gz", gzip.compress),
        ("e.txt", bz2.compress),  # told apart by the magic bytes, not the name
    ],
)
def test_compressed_edge_lists_read_as_the_plain_file(tmp_path, name, pack):
    f = tmp_path / name
    f.write_bytes(pack(EDGES.encode()))
    assert np.array_equal(edges_of(load_graph(str(f))), WANT)


def test_compressed_matrix_market_reads_as_scipy(tmp_path):
    text = "%%MatrixMarket matrix coordinate real general\n3 3 3\n1 2 0.5\n2 3 2\n3 1 4\n"
    f = tmp_path / "m.mtx.xz"
    f.write_bytes(lzma.compress(text.encode()))
    ref = sio.mmread(io.StringIO(text)).tocoo()
    assert np.array_equal(edges_of(load_mtx(f)), edges_of_index(np.stack([ref.col, ref.row]), ref.data))


def _tar(path, member, data, mode):
    with tarfile.open(path, mode) as t:
        info = tarfile.TarInfo(member)
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("mode, name", [("w:gz", "g.tar.gz"), ("w", "g.tar"), ("w:bz2", "g.tar.bz2")])
def test_a_tar_archive_is_refused_saying_so(tmp_path, mode, name):
    """SuiteSparse's downloads are NAME.tar.gz holding NAME/NAME.mtx."""
    f = tmp_path / name
    _tar(f, "g/g.mtx", b"%%MatrixMarket matrix coordinate pattern general\n2 2 1\n1 2\n", mode)
    msg = one_line_error(lambda: load_graph(str(f)), name, "a tar archive: extract the graph file")
    assert len(msg) < 300, msg


def test_a_zip_archive_is_refused_saying_so(tmp_path):
    f = tmp_path / "edges.zip"
    with zipfile.ZipFile(f, "w") as z:
        z.writestr("edges.txt", EDGES)
    one_line_error(lambda: load_graph(str(f)), "edges.zip", "a zip archive: extract the graph file")


def test_a_long_bad_line_is_quoted_short(tmp_path):
    f = tmp_path / "e.txt"
    f.write_text("0 1\n" + "7 " * 2000 + "\n")
    msg = one_line_error(lambda: load_graph(str(f)), "e.txt:2:", "(3,999 characters)")
    assert len(msg) < 300, msg


# ---- text encodings and comments -----------------------------------------------------------------
def test_a_latin1_comment_is_read_past(tmp_path):
    text = b"%%MatrixMarket matrix coordinate real general\n% caf\xe9, Z\xfcrich\n3 3 1\n1 2 3\n"
    f = tmp_path / "m.mtx"
    f.write_bytes(text)
    ref = sio.mmread(str(f)).tocoo()
    assert np.array_equal(edges_of(load_mtx(f)), edges_of_index(np.stack([ref.col, ref.row]), ref.data))
    e = tmp_path / "e.txt"
    e.write_bytes(b"# \xe9t\xe9\n" + EDGES.encode())
    assert np.array_equal(edges_of(load_graph(str(e))), WANT)


def test_a_byte_that_is_not_utf8_in_a_number_is_named_by_its_line(tmp_path):
    f = tmp_path / "e.txt"
    f.write_bytes(b"0 1\n1 \xe92\n")
    one_line_error(lambda: load_graph(str(f)), "e.txt:2:")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-8-sig"])
def test_unicode_files_with_a_byte_order_mark(tmp_path, encoding):
    f = tmp_path / "e.txt"
    bom = {"utf-16-be": b"\xfe\xff"}.get(encoding, b"")
    f.write_bytes(bom + EDGES.replace("\n", "\r\n").encode(encoding))
    assert np.array_equal(edges_of(load_graph(str(f))), WANT)


@pytest.mark.parametrize("first", ["0 1 # from a crawl", "0 1\t% x", "0 1 // x"])
def test_a_comment_after_the_numbers_on_any_line(tmp_path, first):
    f = tmp_path / "e.txt"
    f.write_text(f"{first}\n1 2 # b\n2 0\n3 1 # d\n")
    assert np.array_equal(edges_of(load_graph(str(f))), WANT)
    m = tmp_path / "m.mtx"
    m.write_text("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 2 3 % first\n2 3 4\n")
    assert np.array_equal(edges_of(load_mtx(m)), edges_of_index([[1, 2], [0, 1]], [3, 4]))


# ---- Matrix Market headers -----------------------------------------------------------------------
def test_real_hermitian_is_symmetric_as_scipy_reads_it(tmp_path):
    f = tmp_path / "h.mtx"
    f.write_text("%%MatrixMarket matrix coordinate real hermitian\n3 3 3\n2 1 0.5\n3 3 2\n3 2 -1\n")
    ref = sio.mmread(str(f)).tocoo()
    assert np.array_equal(edges_of(load_mtx(f)), edges_of_index(np.stack([ref.col, ref.row]), ref.data))


@pytest.mark.parametrize(
    "text, fragment",
    [
        (
            "%%MatrixMarket matrix coordinate pattern skew-symmetric\n3 3 2\n2 1\n3 2\n",
            "m.mtx:1: a 'pattern' file has no values, so it cannot be 'skew-symmetric'",
        ),
        ("%%MatrixMarket matrix coordinate pattern hermitian\n3 3 1\n2 1\n", "cannot be 'hermitian'"),
        ("%%MatrixMarket matrix coordinate real general\n-3 -3 1\n1 2 3\n", "m.mtx:2: the size line"),
        ("%%MatrixMarket matrix coordinate real general\n3 3 -1\n", "m.mtx:2: the size line"),
    ],
)
def test_matrix_market_headers_the_format_does_not_allow(tmp_path, text, fragment):
    f = tmp_path / "m.mtx"
    f.write_text(text)
    one_line_error(lambda: load_mtx(f), fragment)


# ---- datasets ------------------------------------------------------------------------------------
def _npz_dataset(path, n=6, **fields):
    rng = np.random.default_rng(0)
    d = dict(
        edge_index=np.array([[0, 1, 2, 3], [1, 2, 3, 4]]),  # nodes 4 and 5: no out-edges; node 5: none at all
        x=rng.random((n, 4)).astype(np.float32),
        y=np.arange(n) % 3,
        train_mask=np.arange(n) < 2,
        val_mask=(np.arange(n) >= 2) & (np.arange(n) < 4),
        test_mask=np.arange(n) >= 4,
    )
    d.update(fields)
    np.savez(path, **d)


def test_an_npz_dataset_takes_its_node_count_from_x(tmp_path):
    """As PyG's Data: nodes past the largest id in edge_index, with no edges, are nodes."""
    f = tmp_path / "d.npz"
    _npz_dataset(f)
    ds = load_dataset(str(f))
    assert ds.graph.num_nodes == 6 and ds.x.shape == (6, 4) and int(ds.test_mask.sum()) == 2
    assert np.array_equal(edges_of(ds.graph), edges_of_index([[0, 1, 2, 3], [1, 2, 3, 4]]))
    _npz_dataset(f, edge_index=np.array([[0, 6], [1, 2]]))  # an id past x's rows
    one_line_error(lambda: load_dataset(str(f)), "d.npz")


@pytest.mark.parametrize(
    "x, fragment",
    [(np.arange(6.0), "float64 [6]"), (np.array([["a"] * 2] * 6), "<U1 [6, 2]")],
)
def test_an_npz_dataset_x_must_be_a_matrix_of_numbers(tmp_path, x, fragment):
    f = tmp_path / "d.npz"
    _npz_dataset(f, x=x)
    one_line_error(lambda: load_dataset(str(f)), "d.npz: field x must be a [nodes, features] matrix", fragment)


@pytest.mark.parametrize(
    "graph, fragment",
    [
        ({0: 1, 1: 0}, "node 0 has neighbours 1, expected a list"),
        ({"0": ["1"], "1": ["0"]}, "node ids must be non-negative integers, got '0'"),
        ({0: [1, -2]}, "got -2"),
        ([[1], [0]], "expected a dict of adjacency lists, got list"),
    ],
)
def test_a_planetoid_graph_pickle_that_is_not_an_adjacency_dict(tmp_path, graph, fragment):
    raw = tmp_path / "cora" / "raw"
    raw.mkdir(parents=True)
    write_planetoid(raw, "cora", [541, 540, 543])
    (raw / "ind.cora.graph").write_bytes(pickle.dumps(graph, protocol=2))
    one_line_error(lambda: load_dataset(str(raw)), "ind.cora.graph", fragment)


def test_ogb_files_that_do_not_hold_what_ogb_writes(tmp_path):
    write_ogb(tmp_path, "ogbn-arxiv")
    raw = tmp_path / "ogbn_arxiv" / "raw"
    edges = (raw / "edge.csv.gz").read_bytes()
    _csv_gz(raw / "edge.csv.gz", [[0.0, 1.5], [1, 2]], "%g")
    one_line_error(lambda: load_dataset(str(tmp_path / "ogbn_arxiv")), "edge.csv.gz:1:", "expected integers")
    (raw / "edge.csv.gz").write_bytes(gzip.compress(b""))
    one_line_error(lambda: load_dataset(str(tmp_path / "ogbn_arxiv")), "edge.csv.gz: no edges")
    (raw / "edge.csv.gz").write_bytes(edges)
    _csv_gz(raw / "node-feat.csv.gz", np.ones((3, 4)), "%g")
    one_line_error(
        lambda: load_dataset(str(tmp_path / "ogbn_arxiv")), "node-feat.csv.gz: 3 rows, but num-node-list.csv.gz says 40"
    )

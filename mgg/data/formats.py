"""Graph files: edge lists (plain or .gz; SNAP's and KONECT's headers honoured: EdgeListHeader),
Matrix Market (.mtx, .mtx.gz), .npz (any scipy.sparse format, rowptr/col, or edge_index); PyG
Data. Every error, a damaged file's too, names the file and, where there is one, the line. The
datasets around a graph: node_dataset.py, planetoid_raw.py, datasets.py (Reddit, OGB, .npz);
directories and dataset names are resolved in mgg.data.resolve; `mgg.data.load_graph` and
`mgg.data.load_dataset` are the entry points.

Text is parsed by numpy's C reader (`np.loadtxt` on a path, numpy >= 1.23); only when it fails
does a line-by-line pass run, to name the offending line (or to read files that mix comment
styles)."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import re
import warnings
import zipfile
import zlib
from array import array
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import scipy.sparse as sp

from ..errors import GraphError, MggError
from ..graph import MAX_NODES, Graph, node_count_problem
from .arrays import sorted_unique

_COMMENT = ("#", "%", "//")
# What reading a damaged file raises: truncated or corrupt compressed streams and zip archives
# (zlib.error, LZMAError and BadZipFile are not OSErrors), and text that is not UTF-8.
UNREADABLE = (OSError, EOFError, UnicodeDecodeError, zlib.error, lzma.LZMAError, zipfile.BadZipFile)

# Compressed text, told apart by its magic bytes whatever the file's name: gzip, bzip2, xz.
_DECOMPRESS = {b"\x1f\x8b": gzip.open, b"BZh": bz2.open, b"\xfd7zXZ\x00": lzma.open}
# What holds a graph file but is not one: refused, saying what to do.
_CONTAINERS = {
    b"PK\x03\x04": "a zip archive: extract the graph file from it first",
    b"7z\xbc\xaf\x27\x1c": "a 7z archive: extract the graph file from it first",
    b"\x28\xb5\x2f\xfd": "zstd-compressed, which is not read here: decompress it (zstd -d) or use gzip",
}


def _show(s: str, limit: int = 80) -> str:
    """A line as an error message quotes it: its repr, cut at `limit` characters."""
    return repr(s) if len(s) <= limit else repr(s[:limit]) + f"... ({len(s):,} characters)"


def _open_binary(path: Path):
    """The file's bytes, decompressed where its magic bytes say gzip, bzip2 or xz."""
    with open(path, "rb") as f:
        magic = f.read(6)
    for m, opener in _DECOMPRESS.items():
        if magic.startswith(m):
            return opener(path, "rb")
    for m, what in _CONTAINERS.items():
        if magic.startswith(m):
            raise GraphError(f"{path}: {what}")
    return open(path, "rb")


def _open_text(path: Path):
    """A text stream over a plain, gzip-, bzip2- or xz-compressed file (told apart by the magic
    bytes). UTF-8, its byte-order mark (files saved on Windows) skipped; UTF-16 where a UTF-16
    byte-order mark says so; a byte that is not UTF-8 (a Latin-1 comment) becomes U+FFFD, so a
    comment never stops a file and a number holding one is named by its line. A tar archive (a
    SuiteSparse .tar.gz) is refused, saying so."""
    f = _open_binary(path)
    try:
        head = f.read(512)
        f.seek(0)
    except UNREADABLE:
        f.close()
        raise
    if head[257:262] == b"ustar":
        f.close()
        raise GraphError(f"{path}: a tar archive: extract the graph file from it first (tar -xf)")
    encoding = "utf-16" if head[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-8-sig"
    return io.TextIOWrapper(f, encoding=encoding, errors="replace", newline=None)


def text_lines(path: Path):
    """(line number, stripped line) of every line, with a one-line error for unreadable files."""
    try:
        with _open_text(path) as f:
            for ln, line in enumerate(f, 1):
                yield ln, line.strip()
    except UNREADABLE as e:
        raise GraphError(f"{path}: cannot read ({e.__class__.__name__}: {e})") from None


def _uncommented(s: str) -> str:
    """A line without its trailing comment ('0 1  # from x' is '0 1', as numpy's reader reads it)."""
    for c in _COMMENT:
        k = s.find(c)
        if k >= 0:
            s = s[:k].rstrip()
    return s


def _data_lines(path: Path, start: int = 0):
    """(line number, text) of the lines that are neither blank nor comments, after line `start`,
    without their trailing comments."""
    for ln, s in text_lines(path):
        if ln > start and s and not s.startswith(_COMMENT):
            s = _uncommented(s)
            if s:
                yield ln, s


def _line_of_row(path: Path, row: int, start: int = 0) -> tuple[int, str]:
    """File line number and text of data row `row` (0-based), counting as the fast reader does."""
    for k, (ln, s) in enumerate(_data_lines(path, start)):
        if k == row:
            return ln, s
    return 0, ""


def _loadtxt(path: Path, dtype, skip: int, comment: str, usecols=None):
    """numpy's C text reader (a path and a one-character comment keep it off the Python line
    iterator): (array, None), or (None, the reader's message) when it cannot parse the file and
    the caller takes the line-by-line path."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = np.loadtxt(
                str(path),
                dtype=dtype,
                comments=comment,
                skiprows=skip,
                ndmin=1 if isinstance(dtype, list) else 2,
                encoding="utf-8-sig",
                usecols=usecols,
            )
        return a, None
    except (ValueError, IndexError, *UNREADABLE) as e:
        return None, str(e)


def _first_data_line(path: Path, start: int = 0):
    """(lines before the first data line, its line number, its fields, comment chars seen)."""
    seen = set()
    for ln, s in text_lines(path):
        if ln <= start:
            continue
        if not s:
            continue
        if s.startswith(_COMMENT):
            seen.add(s[:2] if s.startswith("//") else s[0])
            continue
        return ln - 1, ln, _uncommented(s).split(), seen
    return None


def _read_table(path: Path, start: int = 0, comment: Optional[str] = None, extra_columns: bool = False):
    """Columns of a whitespace-separated table of 2 or 3 columns (`a b [value]`) after line
    `start`: (a, b, value or None, start). Integer columns a, b; float32 value. extra_columns:
    columns past the third are read past (KONECT's timestamps)."""
    first = _first_data_line(path, start)
    if first is None:
        raise GraphError(f"{path}: empty graph (no edges)")
    skip, _, fields, seen = first
    width = len(fields)
    if extra_columns and width > 3:
        a, _ = _loadtxt(path, [("a", np.int64), ("b", np.int64), ("w", np.float32)], skip, comment or "%", (0, 1, 2))
        if a is not None:
            return a["a"], a["b"], a["w"], start
    elif width in (2, 3):
        comment = comment or ("%" if ("%" in seen and "#" not in seen) else "#")
        if width == 2:
            a, err = _loadtxt(path, np.int32, skip, comment)
            m = re.search(r"could not convert string '\+?(\d+)' to int32", err or "")
            if m:  # an id past int32: read 64-bit ids (the range check then names it)
                a, err = _loadtxt(path, np.int64, skip, comment)
            if a is not None and a.shape[1] == 2:
                return a[:, 0], a[:, 1], None, start
        else:
            a, _ = _loadtxt(path, [("a", np.int64), ("b", np.int64), ("w", np.float32)], skip, comment)
            if a is not None:
                return a["a"], a["b"], a["w"], start
    return _read_table_slow(path, start, extra_columns)


def _read_table_slow(path: Path, start: int = 0, extra_columns: bool = False):
    """The line-by-line reader: names the first malformed line; reads any comment style."""
    a, b, w = array("q"), array("q"), array("f")
    width = first = None
    for ln, s in _data_lines(path, start):
        t = s.split()
        if extra_columns and len(t) > 3:
            t = t[:3]
        if width is None:
            width, first = len(t), ln
            if width not in (2, 3):
                raise GraphError(f"{path}:{ln}: expected 'src dst' or 'src dst weight', got {_show(s)}")
        elif len(t) != width:
            raise GraphError(f"{path}:{ln}: expected 'src dst' or 'src dst weight' like line {first}, got {_show(s)}")
        try:
            ids = [_int_field(t[0]), _int_field(t[1])]
            val = float(t[2]) if width == 3 else None
        except ValueError:
            raise GraphError(f"{path}:{ln}: non-numeric entry in {_show(s)}") from None
        if None in ids or min(ids) < 0:
            raise GraphError(f"{path}:{ln}: node ids must be non-negative integers, got {_show(s)}")
        if max(ids) >= 2**63:
            raise GraphError(f"{path}:{ln}: node id {max(ids)} is beyond 64 bits")
        a.append(ids[0])
        b.append(ids[1])
        if val is not None:
            w.append(val)
    if width is None:
        raise GraphError(f"{path}: empty graph (no edges)")
    return (
        np.frombuffer(a, np.int64),
        np.frombuffer(b, np.int64),
        np.frombuffer(w, np.float32) if width == 3 else None,
        start,
    )


def _int_field(tok: str) -> Optional[int]:
    """An integer field ('12', or a float spelling of a whole number such as '12.0'); None for a
    number that is not whole; ValueError for text (and for Python's '1_000', which no other
    reader of these formats accepts)."""
    if "_" in tok:
        raise ValueError(tok)
    try:
        return int(tok)
    except ValueError:
        v = float(tok)
        return int(v) if v == v and v == int(v) else None


def _check_ids(path: Path, a, b, start: int, num_nodes: Optional[int], relabel: bool, one_based: bool = False):
    """Range checks on parsed ids with the file line of the first culprit: negative ids, ids
    >= num_nodes, and (unless relabel) ids no plan can index or far beyond the edge count."""
    lo = 1 if one_based else 0
    if a.size and min(a.min(), b.min()) < lo:
        k = int(np.flatnonzero((a < lo) | (b < lo))[0])
        ln, s = _line_of_row(path, k, start)
        kind = "positive (1-based)" if one_based else "non-negative"
        raise GraphError(f"{path}:{ln}: node ids must be {kind} integers, got {_show(s)}")
    if num_nodes is not None and a.size and max(a.max(), b.max()) >= num_nodes + lo:
        k = int(np.flatnonzero((a >= num_nodes + lo) | (b >= num_nodes + lo))[0])
        ln, s = _line_of_row(path, k, start)
        raise GraphError(
            f"{path}:{ln}: node id past {num_nodes} (ids count from 1) in {_show(s)}"
            if one_based
            else f"{path}:{ln}: node id >= num_nodes {num_nodes} in {_show(s)}"
        )
    if relabel or num_nodes is not None or not a.size:
        return
    top = int(max(a.max(), b.max()))
    why = node_count_problem(top + 1 - lo, a.size)
    if why:
        k = int(np.flatnonzero((a == top) | (b == top))[0])
        raise GraphError(f"{path}:{_line_of_row(path, k, start)[0]}: {why}")


def _check_weights(path: Path, w: Optional[np.ndarray], start: int) -> None:
    """Weights that are not finite float32 numbers (nan, inf, or past float32's range), named by
    the line of the first."""
    if w is not None and not np.isfinite(w).all():
        ln, s = _line_of_row(path, int(np.flatnonzero(~np.isfinite(w))[0]), start)
        raise GraphError(f"{path}:{ln}: the edge weight is not a finite float32 number in {_show(s)}")


def _relabel(a, b):
    """Distinct ids numbered 0..N-1 in sorted order: (new a, new b, the original id of each node)."""

    ids = sorted_unique(np.concatenate([a, b]))
    return np.searchsorted(ids, a), np.searchsorted(ids, b), ids


@dataclass(frozen=True)
class EdgeListHeader:
    """What an edge list's own comment lines say of it. SNAP: a line '# Undirected graph ...' or
    '# Directed graph ...'. KONECT (konect.cc's out.* files): the first line '% FORMAT WEIGHTS'
    with FORMAT sym (undirected), asym (directed) or bip (bipartite: left ids and right ids each
    count from 1), an optional size line '% EDGES LEFT RIGHT', 1-based ids, and columns past the
    weight (timestamps)."""

    undirected: Optional[bool] = None  # None: the header does not say
    konect: Optional[str] = None  # 'sym' | 'asym' | 'bip'
    sides: Optional[tuple[int, int]] = None  # KONECT's (left, right) node counts

    @staticmethod
    def read(path: Path) -> "EdgeListHeader":
        undirected = konect = sides = None
        lines = text_lines(path)
        for ln, s in lines:
            if not s:
                continue
            if not s.startswith(_COMMENT):
                break
            words = s.lstrip("#%/").split()
            if ln == 1 and s.startswith("%") and words and words[0] in ("sym", "asym", "bip"):
                konect, undirected = words[0], words[0] != "asym"
            elif konect and sides is None and len(words) == 3 and all(w.isdigit() for w in words):
                sides = (int(words[1]), int(words[2]))
            elif konect is None and " ".join(words[:2]).lower().rstrip(":") in ("undirected graph", "directed graph"):
                undirected = words[0].lower() == "undirected"
        lines.close()
        return EdgeListHeader(undirected, konect, sides)


@dataclass
class EdgeTable:
    """Parsed edges before they become a Graph: src[i] -> dst[i], optional weights, with
    relabelling the original id of each node (`ids[k]` is node k's id in the file), and whether
    the file's header declares the graph undirected (None: it does not say)."""

    src: np.ndarray
    dst: np.ndarray
    weight: Optional[np.ndarray]
    num_nodes: Optional[int]
    ids: Optional[np.ndarray] = None
    undirected: Optional[bool] = None

    def graph(self, what: str, undirected: Optional[bool] = None) -> Graph:
        """The graph; undirected (default: as the header declares) adds the reverse v -> u of
        every edge u -> v that is not a self-loop and whose reverse the file does not list (a
        file that lists both directions, whatever its header says, is taken as it is)."""
        src, dst, w = self.src, self.dst, self.weight
        if (self.undirected if undirected is None else undirected) and src.size:
            m = int(max(src.max(), dst.max())) + 1
            key = src.astype(np.int64) * m + dst
            add = (src != dst) & ~np.isin(dst.astype(np.int64) * m + src, key)
            src, dst = np.concatenate([src, dst[add]]), np.concatenate([dst, src[add]])
            w = None if w is None else np.concatenate([w, w[add]])
        return Graph.from_edges(src, dst, self.num_nodes, w, what=what)


def read_edge_list(path, num_nodes: Optional[int] = None, relabel: bool = False) -> EdgeTable:
    """Lines `src dst [weight]`, any whitespace; blank lines and lines starting with #, % or //
    are skipped. Node ids are non-negative integers. relabel=True numbers the distinct ids
    0..N-1 in sorted order (for files of sparse ids) and keeps the map in `ids`. A KONECT file
    is read as EdgeListHeader describes: node k is id k + 1, a bipartite file's right id r is
    node LEFT + r - 1."""
    path = Path(path)
    if not path.is_file():
        raise GraphError(f"{path}: no such file")
    head = EdgeListHeader.read(path)
    a, b, w, start = _read_table(path, extra_columns=head.konect is not None)
    if head.konect is None:
        _check_ids(path, a, b, start, num_nodes, relabel)
    else:
        a, b, num_nodes = _konect_ids(path, head, a, b, start, num_nodes, relabel)
    _check_weights(path, w, start)
    ids = None
    if relabel:
        a, b, ids = _relabel(a, b)
        num_nodes = ids.size
        if head.konect is not None:
            ids = ids + 1  # the file's own (1-based) ids
    return EdgeTable(a, b, w, num_nodes, ids, head.undirected)


def _konect_ids(path: Path, head: EdgeListHeader, a, b, start: int, num_nodes: Optional[int], relabel: bool):
    """A KONECT file's 1-based ids as 0-based nodes (and the node count its size line gives)."""
    left, right = head.sides or (None, None)
    if head.konect == "bip":
        if relabel:
            raise GraphError(f"{path}: relabel of a bipartite KONECT file (its left and right ids overlap)")
        if head.sides is None:  # the sides from the ids: as sparse as any file's ids may be
            left, right = int(a.max()), int(b.max())
            why = node_count_problem(left + right, a.size)
            if why:
                raise GraphError(f"{path}: the largest left and right ids {left:,} and {right:,}: {why}")
        _check_ids(path, a, a, start, left, relabel=False, one_based=True)
        _check_ids(path, b, b, start, right, relabel=False, one_based=True)
        a, b, n = a - 1, b - 1 + left, left + right
    else:
        n = left if left is not None and left == right else None
        _check_ids(path, a, b, start, n, relabel, one_based=True)
        a, b = a - 1, b - 1
    if num_nodes is not None:
        if (n is not None and num_nodes != n) or (a.size and max(a.max(), b.max()) >= num_nodes):
            raise GraphError(f"{path}: num_nodes {num_nodes} does not fit the file ({n or 'its ids need more'} nodes)")
        n = num_nodes
    return a, b, n


def load_edge_list(
    path, num_nodes: Optional[int] = None, undirected: Optional[bool] = None, relabel: bool = False
) -> Graph:
    """An edge list (see read_edge_list) as a Graph: the line `u v` is the edge u -> v, so row v
    gathers u. undirected=True adds the reverses the file does not list (EdgeTable.graph); the
    default follows the file's header (EdgeListHeader), directed where it says nothing."""
    return read_edge_list(path, num_nodes, relabel).graph(str(path), undirected)


# ---- Matrix Market -------------------------------------------------------------------------------
_MM_FIELDS = ("real", "integer", "pattern", "double")
_MM_SYMMETRY = ("general", "symmetric", "skew-symmetric", "hermitian")  # hermitian: of real values, symmetric


def load_mtx(path) -> Graph:
    """A Matrix Market coordinate file (`.mtx`, `.mtx.gz`): banner, % comments, the size line
    `rows cols entries`, then 1-based `i j [value]` lines. Like a scipy .npz, the matrix is the
    aggregation matrix (MGG reads CSR rows as they are): entry (i, j) means row i gathers node j,
    the edge j -> i. `symmetric` files store one triangle; the other is added (the diagonal
    once), as scipy.io.mmread does. pattern files have no weights; real/integer values become
    edge weights (dropped when all are 1)."""
    path = Path(path)
    if not path.is_file():
        raise GraphError(f"{path}: no such file")
    lines = text_lines(path)
    ln, banner = next(lines, (1, ""))
    t = banner.split()
    if len(t) != 5 or t[0] != "%%MatrixMarket" or t[1].lower() != "matrix":
        raise GraphError(
            f"{path}:1: expected a Matrix Market banner '%%MatrixMarket matrix coordinate FIELD "
            f"SYMMETRY', got {banner[:80]!r}"
        )
    fmt, field, symmetry = (x.lower() for x in t[2:])
    if fmt != "coordinate":
        raise GraphError(f"{path}:1: '{fmt}' (dense) Matrix Market files are not graphs; expected 'coordinate'")
    if field not in _MM_FIELDS:
        raise GraphError(f"{path}:1: field '{field}' is not supported (expected {', '.join(_MM_FIELDS[:3])})")
    if symmetry not in _MM_SYMMETRY:
        raise GraphError(f"{path}:1: symmetry '{symmetry}' is not supported (expected {', '.join(_MM_SYMMETRY)})")
    if field == "pattern" and symmetry in ("skew-symmetric", "hermitian"):  # the format does not allow it
        raise GraphError(f"{path}:1: a 'pattern' file has no values, so it cannot be '{symmetry}'")
    if symmetry == "hermitian":  # a real hermitian matrix is symmetric (scipy.io.mmread reads it so)
        symmetry = "symmetric"
    size = None
    for ln, s in lines:
        if s and not s.startswith("%"):
            size = (ln, s)
            break
    lines.close()
    if size is None:
        raise GraphError(f"{path}: no size line 'rows cols entries' after the banner")
    size_ln, s = size
    try:
        rows, cols, nnz = (int(x) for x in s.split())
    except ValueError:
        raise GraphError(f"{path}:{size_ln}: expected the size line 'rows cols entries', got {_show(s)}") from None
    if min(rows, cols, nnz) < 0:
        raise GraphError(f"{path}:{size_ln}: the size line 'rows cols entries' has a negative number: {_show(s)}")
    if rows != cols:
        raise GraphError(f"{path}:{size_ln}: a graph's matrix must be square, got {rows} x {cols}")
    why = node_count_problem(rows)
    if why:
        raise GraphError(f"{path}:{size_ln}: {why}")
    if nnz == 0:
        raise GraphError(f"{path}:{size_ln}: empty graph (no edges)")
    width = 2 if field == "pattern" else 3
    i, j, w, start = _read_table(path, size_ln, comment="%")
    if (2 if w is None else 3) != width:
        ln, s = _line_of_row(path, 0, size_ln)
        raise GraphError(f"{path}:{ln}: a '{field}' file has {width} fields per entry, got {_show(s)}")
    if i.size != nnz:
        raise GraphError(f"{path}:{size_ln}: the size line declares {nnz} entries, the file has {i.size}")
    _check_ids(path, i, j, size_ln, rows, relabel=False, one_based=True)
    _check_weights(path, w, size_ln)
    i, j = i - 1, j - 1
    if symmetry != "general":
        off = i != j
        if symmetry == "skew-symmetric" and not off.all():
            ln, s = _line_of_row(path, int(np.flatnonzero(~off)[0]), size_ln)
            raise GraphError(f"{path}:{ln}: a skew-symmetric matrix has no diagonal entries, got {_show(s)}")
        i, j = np.concatenate([i, j[off]]), np.concatenate([j, i[off]])
        if w is not None:
            w = np.concatenate([w, -w[off] if symmetry == "skew-symmetric" else w[off]])
    if w is not None and bool(np.all(w == 1)):
        w = None
    return Graph.from_edges(j, i, rows, w, what=str(path))


# ---- .npz ----------------------------------------------------------------------------------------
@contextmanager
def open_npz(path: Path):
    """The fields of an .npz archive (numpy's NpzFile, never unpickling), open for the `with`
    body. A file that is not an .npz archive or is damaged (a truncated download, a bad CRC, an
    object array) is a one-line GraphError naming the file, whether numpy finds out on opening
    the archive or on reading a field in the body."""
    try:
        z = np.load(path, allow_pickle=False)
    except (ValueError, *UNREADABLE) as e:
        raise GraphError(f"{path}: not a readable .npz file ({e.__class__.__name__}: {e})") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise GraphError(f"{path}: a single numpy array (.npy), not an .npz archive of named fields")
    with z:
        try:
            yield z
        except MggError:
            raise
        except KeyError as e:
            raise GraphError(f"{path}: no field {e} (fields: {', '.join(sorted(z.files))})") from None
        except (ValueError, *UNREADABLE) as e:
            raise GraphError(f"{path}: a field cannot be read ({e.__class__.__name__}: {e})") from None


def count_field(z, key: str, path: Path) -> int:
    """A count stored as an .npz field (num_nodes): one whole non-negative number."""
    a = np.asarray(z[key]).reshape(-1)
    if a.size != 1 or a.dtype.kind not in "iuf" or not (0 <= a[0] <= MAX_NODES and a[0] % 1 == 0):
        raise GraphError(f"{path}: field {key} must be one whole number of nodes in [0, {MAX_NODES:,}], got {a[:4]!r}")
    return int(a[0])


def load_npz(path, num_nodes: Optional[int] = None) -> Graph:
    """A scipy.sparse .npz (save_npz, any format: csr, csc, coo, bsr, dia), or an .npz with arrays
    rowptr+col[+weight] or edge_index[+edge_weight, num_nodes]. A sparse matrix is the
    aggregation matrix: entry (i, j) means row i gathers node j (the edge j -> i). num_nodes: the
    node count of an edge_index file without a num_nodes field (a dataset's: its feature rows;
    else the largest id + 1)."""
    path = Path(path)
    with open_npz(path) as z:
        keys = set(z.files)
        if "format" in keys and "shape" in keys:
            return _scipy_npz(path, z)
        if {"rowptr", "col"} <= keys:
            return Graph.from_csr(z["rowptr"], z["col"], z["weight"] if "weight" in keys else None, what=str(path))
        if "edge_index" in keys:
            ei = z["edge_index"]
            if ei.ndim != 2 or ei.shape[0] != 2:
                raise GraphError(f"{path}: field edge_index must have shape [2, E], got {list(ei.shape)}")
            n = count_field(z, "num_nodes", path) if "num_nodes" in keys else num_nodes
            if ei.dtype == np.int64 and ei.size and 0 <= ei.min() and ei.max() < 2**31:
                ei = ei.astype(np.int32)  # half the memory while the CSR is built
            return Graph.from_edges(
                ei[0], ei[1], n, z["edge_weight"] if "edge_weight" in keys else None, what=str(path)
            )
    raise GraphError(
        f"{path}: .npz has fields {sorted(keys)}; expected a scipy.sparse matrix (save_npz), rowptr+col, or edge_index"
    )


def _scipy_npz(path: Path, z) -> Graph:
    fmt = z["format"].item()
    fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
    shape = tuple(int(x) for x in z["shape"])
    if len(shape) != 2 or shape[0] != shape[1]:
        raise GraphError(f"{path}: adjacency must be square, got shape {shape}")
    why = node_count_problem(shape[0])
    if why:
        raise GraphError(f"{path}: field shape: {why}")
    if fmt == "coo":  # no conversion: the entries become edges as they are
        need = {"row", "col", "data"} - set(z.files)
        if need:
            raise GraphError(f"{path}: a coo matrix needs fields row, col, data; missing {sorted(need)}")
        w = z["data"]
        w = None if bool(np.all(w == 1)) else w
        return Graph.from_edges(z["col"], z["row"], shape[0], w, what=str(path))
    try:
        m = sp.load_npz(path)
    except (ValueError, KeyError, NotImplementedError, *UNREADABLE) as e:
        raise GraphError(f"{path}: not a readable scipy.sparse '{fmt}' matrix ({e})") from None
    return Graph.from_scipy(m, what=str(path))


def from_pyg(data) -> Graph:
    """The graph of a torch_geometric Data object (edge_index, optional edge_weight, num_nodes)."""
    w = getattr(data, "edge_weight", None)
    return Graph.from_edge_index(data.edge_index, data.num_nodes, w)

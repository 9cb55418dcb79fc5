"""What `mgg prepare` reads: a dataset as a source of edge pieces, feature pieces, labels and a split,
each giving exactly the dataset mgg.data.load_dataset gives (the same edges in each row's order, the
same features, labels and masks), so that a prepared run trains what an in-memory run trains.

A streaming source reads its files a piece at a time (the .npz datasets with an edge_index, rowptr
and col, or a scipy COO or CSR graph; PyG's Reddit raw files; Shchur et al.'s Amazon and Coauthor
.npz; OGB's raw files), so that preparing with `range` or `random` holds a bounded chunk of the edges
and features and never all of them. Any other dataset (Planetoid, OGB's processed cache, scipy's other
layouts) is an InMemory source over the NodeDataset load_dataset gives.

An edge piece is (src, dst, weight or None) in the user's ids, in the order that makes each row's
order: the order of the stream, or (coalesce) by source id with each (source, destination) pair once."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import torch

from ...errors import GraphError
from ...graph import MAX_NODES
from ..datasets import OGB_META, _ogb_split_dir, ogb_name, ogb_root, reddit_dir
from ..formats import count_field
from ..node_dataset import NodeDataset, labels, mask_of, split_mask
from .stream import NpzArray, csv_pieces, npz_fields

SHCHUR_FIELDS = {
    "adj_data",
    "adj_indices",
    "adj_indptr",
    "adj_shape",
    "attr_data",
    "attr_indices",
    "attr_indptr",
    "attr_shape",
    "labels",
}
SHCHUR_SPLIT = (20, 30)  # per class: training, validation nodes (Shchur et al. 2018); the rest is the test set
SHCHUR_SPLIT_SEED = 0


class Source:
    """The protocol every source speaks (module docstring)."""

    name: str
    num_nodes: int
    num_features: int
    coalesce: bool = False  # each (source, destination) pair once, a row's edges by source id
    drop_unit_weights: bool = False  # weights that are all 1 mean an unweighted graph (scipy's layouts)
    weight_dtype = np.float32
    streams: bool = True  # False: the whole dataset is in memory (InMemory)
    edge_count_hint: Optional[int] = None  # the edges the files hold, where their headers say

    def edges(self, per_piece: int) -> Iterator[tuple]:
        raise NotImplementedError

    def features(self, per_piece: int) -> Iterator[np.ndarray]:
        """The feature rows in node order, float32, per_piece rows at a time."""
        raise NotImplementedError

    def labels(self) -> np.ndarray:
        raise NotImplementedError

    def masks(self) -> tuple:
        """(train, val, test) boolean masks over the nodes."""
        raise NotImplementedError

    def close(self) -> None:
        """Closes the files the source holds open."""


class InMemory(Source):
    """A NodeDataset already in memory: its CSR rows in order are the edge stream."""

    streams = False

    def __init__(self, ds: NodeDataset):
        self.ds, self.name = ds, ds.name
        self.num_nodes, self.num_features = ds.graph.num_nodes, int(ds.x.size(1))
        self.edge_count_hint = ds.graph.num_edges
        w = ds.graph.weight
        self.weight_dtype = np.float64 if w is not None and w.dtype == torch.float64 else np.float32

    def edges(self, per_piece: int) -> Iterator[tuple]:
        g = self.ds.graph
        rp, col = g.rowptr.numpy(), g.col.numpy()
        w = None if g.weight is None else g.weight.numpy()
        for e0 in range(0, g.num_edges, per_piece):
            e1 = min(g.num_edges, e0 + per_piece)
            dst = np.searchsorted(rp, np.arange(e0, e1), side="right") - 1
            yield col[e0:e1], dst, None if w is None else w[e0:e1]

    def features(self, per_piece: int) -> Iterator[np.ndarray]:
        x = self.ds.x
        for a in range(0, self.num_nodes, per_piece):
            yield x[a : a + per_piece].numpy().astype(np.float32, copy=False)

    def labels(self) -> np.ndarray:
        return self.ds.y.numpy()

    def masks(self) -> tuple:
        return tuple(m.numpy() for m in (self.ds.train_mask, self.ds.val_mask, self.ds.test_mask))


def _pairs(src: np.ndarray, dst: np.ndarray, w):
    return src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False), w


class NpzDataset(Source):
    """An .npz dataset (mgg.data.datasets.load_npz_dataset) whose graph is an edge_index, rowptr and
    col, or a scipy COO or CSR matrix."""

    @staticmethod
    def streamable(path: Path) -> bool:
        f = npz_fields(path)
        if not {"x", "y", "train_mask", "val_mask", "test_mask"} <= f:
            return False
        if "format" in f and "shape" in f:
            fmt = NpzArray(path, "format").whole().item()
            fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
            return fmt in ("coo", "csr")
        return {"rowptr", "col"} <= f or "edge_index" in f

    def __init__(self, path: Path):
        self.path, self.name = Path(path), Path(path).stem
        f = npz_fields(self.path)
        self.x = NpzArray(self.path, "x")
        if len(self.x.shape) != 2 or self.x.dtype.kind not in "biuf":
            raise GraphError(
                f"{path}: field x must be a [nodes, features] matrix of numbers, "
                f"got {self.x.dtype} {list(self.x.shape)}"
            )
        self.num_features = self.x.shape[1]
        self._open = [self.x]
        if "format" in f and "shape" in f:
            fmt = NpzArray(self.path, "format").whole().item()
            self.layout = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
            shape = tuple(int(s) for s in NpzArray(self.path, "shape").whole())
            if len(shape) != 2 or shape[0] != shape[1]:
                raise GraphError(f"{path}: adjacency must be square, got shape {shape}")
            self.num_nodes = shape[0]
            self.drop_unit_weights = True
            names = ("row", "col", "data") if self.layout == "coo" else ("indptr", "indices", "data")
        elif {"rowptr", "col"} <= f:
            self.layout = "rowptr"
            names = ("rowptr", "col") + (("weight",) if "weight" in f else ())
        else:
            self.layout = "edge_index"
            names = ("edge_index",) + (("edge_weight",) if "edge_weight" in f else ())
        self.arrays = {n: NpzArray(self.path, n) for n in names}
        self._open += list(self.arrays.values())
        first = next(iter(self.arrays.values()))
        self.edge_count_hint = first.shape[1] if self.layout == "edge_index" else len(self.arrays[names[1]])
        if self.layout == "rowptr":
            self.num_nodes = len(self.arrays["rowptr"]) - 1
        elif self.layout == "edge_index":
            ei = self.arrays["edge_index"]
            if len(ei.shape) != 2 or ei.shape[0] != 2:
                raise GraphError(f"{path}: field edge_index must have shape [2, E], got {list(ei.shape)}")
            if "num_nodes" in f:
                with np.load(self.path) as z:
                    self.num_nodes = count_field(z, "num_nodes", self.path)
            else:
                self.num_nodes = self.x.shape[0]
        if self.num_nodes > MAX_NODES:
            raise GraphError(f"{path}: {self.num_nodes:,} nodes, more than the {MAX_NODES:,} a plan can index")
        if self.x.shape[0] != self.num_nodes:
            raise GraphError(
                f"{path}: field x has shape {list(self.x.shape)}, expected {self.num_nodes} rows (the graph's nodes)"
            )

    def edges(self, per_piece: int) -> Iterator[tuple]:
        a = self.arrays
        if self.layout == "edge_index":
            ws = a["edge_weight"].items(0, len(a["edge_weight"]), per_piece) if "edge_weight" in a else None
            for ei in a["edge_index"].columns(per_piece):
                yield _pairs(ei[0], ei[1], None if ws is None else next(ws))
            return
        if self.layout == "coo":  # entry (i, j) is the edge j -> i
            rows, cols, data = (a[n].items(0, len(a[n]), per_piece) for n in ("row", "col", "data"))
            for r, c, w in zip(rows, cols, data, strict=True):
                yield _pairs(c, r, w)
            return
        ptr_name, col_name = ("indptr", "indices") if self.layout == "csr" else ("rowptr", "col")
        w_name = "data" if self.layout == "csr" else ("weight" if "weight" in a else None)
        yield from _csr_edges(a[ptr_name], a[col_name], None if w_name is None else a[w_name], per_piece, self.path)

    def features(self, per_piece: int) -> Iterator[np.ndarray]:
        for piece in self.x.pieces(per_piece):
            yield np.asarray(piece, np.float32)

    def labels(self) -> np.ndarray:
        y = NpzArray(self.path, "y").whole()
        if y.ndim == 0 or y.shape[0] != self.num_nodes:
            raise GraphError(f"{self.path}: field y has shape {list(y.shape)}, expected {self.num_nodes} rows")
        return labels(y, f"{self.path}: field y").numpy()

    def masks(self) -> tuple:
        return tuple(
            split_mask(NpzArray(self.path, k).whole(), self.num_nodes, f"{self.path}: field {k}").numpy()
            for k in ("train_mask", "val_mask", "test_mask")
        )

    def close(self) -> None:
        for a in self._open:
            a.close()


def _csr_edges(ptr: NpzArray, col: NpzArray, w: Optional[NpzArray], per_piece: int, path: Path) -> Iterator[tuple]:
    """The edges of a CSR over destination rows, in its stored order (duplicates kept)."""
    rowptr = ptr.whole().astype(np.int64)  # N + 1: a node count, never the edge count
    if rowptr.size < 2 or rowptr[0] != 0 or np.any(np.diff(rowptr) < 0):
        raise GraphError(f"{path}: the row pointer is not a non-decreasing sequence from 0")
    if rowptr[-1] != len(col):
        raise GraphError(f"{path}: rowptr[-1] = {rowptr[-1]} but there are {len(col)} column indices")
    cols = col.pieces(per_piece)
    ws = None if w is None else w.pieces(per_piece)
    at = 0
    for c in cols:
        dst = np.searchsorted(rowptr, np.arange(at, at + c.size), side="right") - 1
        at += c.size
        yield c.astype(np.int64), dst, None if ws is None else next(ws)


class Reddit(Source):
    """PyG's Reddit raw files (mgg.data.datasets.load_reddit): a scipy COO graph, coalesced."""

    coalesce = True

    def __init__(self, path: Path):
        self.dir = reddit_dir(Path(path))
        self.name = "reddit"
        g, d = self.dir / "reddit_graph.npz", self.dir / "reddit_data.npz"
        fmt = NpzArray(g, "format").whole().item()
        fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
        if fmt != "coo":
            raise GraphError(f"{g}: expected a scipy COO matrix (save_npz) with row, col, shape; got format {fmt!r}")
        self.row, self.col = NpzArray(g, "row"), NpzArray(g, "col")
        self.edge_count_hint = len(self.row)
        self.feature = NpzArray(d, "feature")
        self.num_nodes, self.num_features = self.feature.shape[0], self.feature.shape[1]
        shape = tuple(int(s) for s in NpzArray(g, "shape").whole())
        if shape != (self.num_nodes, self.num_nodes):
            raise GraphError(f"{g}: matrix shape {shape} but {d.name} has {self.num_nodes} nodes")
        self._data = d

    def edges(self, per_piece: int) -> Iterator[tuple]:  # the edge row -> col
        for r, c in zip(self.row.pieces(per_piece), self.col.pieces(per_piece), strict=True):
            yield _pairs(r, c, None)

    def features(self, per_piece: int) -> Iterator[np.ndarray]:
        for piece in self.feature.pieces(per_piece):
            yield np.asarray(piece, np.float32)

    def labels(self) -> np.ndarray:
        return labels(NpzArray(self._data, "label").whole(), f"{self._data}: field label").numpy()

    def masks(self) -> tuple:
        t = NpzArray(self._data, "node_types").whole()
        return t == 1, t == 2, t == 3

    def close(self) -> None:
        for a in (self.row, self.col, self.feature):
            a.close()


class Shchur(Source):
    """Shchur et al.'s .npz (PyG's Amazon and Coauthor raw files: adj_*, attr_*, labels), read as
    PyG's read_npz reads it: features binarised (x > 0 -> 1), self-loops removed, made undirected and
    coalesced; with no split in the file, a seeded one as Shchur et al. draw it: 20 nodes of each
    class for training, 30 for validation, the rest for testing."""

    coalesce = True

    @staticmethod
    def recognises(path: Path) -> bool:
        return Path(path).suffix == ".npz" and SHCHUR_FIELDS <= npz_fields(path)

    def __init__(self, path: Path, split_seed: int = SHCHUR_SPLIT_SEED):
        self.path, self.name, self.split_seed = Path(path), Path(path).stem, split_seed
        a = {n: NpzArray(self.path, n) for n in sorted(SHCHUR_FIELDS)}
        self.a = a
        adj_shape = tuple(int(s) for s in a["adj_shape"].whole())
        attr_shape = tuple(int(s) for s in a["attr_shape"].whole())
        if len(adj_shape) != 2 or adj_shape[0] != adj_shape[1]:
            raise GraphError(f"{path}: adj_shape must be square, got {adj_shape}")
        self.num_nodes = adj_shape[0]
        if len(attr_shape) != 2 or attr_shape[0] != self.num_nodes:
            raise GraphError(f"{path}: attr_shape {attr_shape} does not have the graph's {self.num_nodes} rows")
        self.num_features = attr_shape[1]
        self.edge_count_hint = 2 * len(a["adj_indices"])
        self.attr_ptr = a["attr_indptr"].whole().astype(np.int64)
        if self.attr_ptr.size != self.num_nodes + 1:
            raise GraphError(f"{path}: attr_indptr has {self.attr_ptr.size} entries for {self.num_nodes} rows")

    def edges(self, per_piece: int) -> Iterator[tuple]:
        a = self.a
        for s, d, _ in _csr_edges(a["adj_indptr"], a["adj_indices"], None, per_piece, self.path):
            # a CSR row i holds the edges i -> j (PyG: edge_index = [row, col]): destination row i
            # gathers from j in mgg's CSR, so the pair read is (src i, dst j), then its reverse
            src, dst = d, s
            if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= self.num_nodes):
                raise GraphError(f"{self.path}: an adjacency index lies outside [0, {self.num_nodes})")
            keep = src != dst
            src, dst = src[keep], dst[keep]
            yield np.concatenate([src, dst]), np.concatenate([dst, src]), None

    def features(self, per_piece: int) -> Iterator[np.ndarray]:
        a, ptr = self.a, self.attr_ptr
        for r0 in range(0, self.num_nodes, per_piece):
            r1 = min(self.num_nodes, r0 + per_piece)
            e0, e1 = int(ptr[r0]), int(ptr[r1])
            cols = _read_range(a["attr_indices"], e0, e1).astype(np.int64)
            data = _read_range(a["attr_data"], e0, e1)
            if cols.size and (cols.min() < 0 or cols.max() >= self.num_features):
                raise GraphError(f"{self.path}: an attribute index lies outside [0, {self.num_features})")
            x = np.zeros((r1 - r0, self.num_features), np.float32)
            rows = np.repeat(np.arange(r1 - r0), np.diff(ptr[r0 : r1 + 1]))
            np.add.at(x, (rows, cols), data.astype(np.float32))  # duplicates add up, as scipy's todense
            x[x > 0] = 1.0
            yield x

    def labels(self) -> np.ndarray:
        y = self.a["labels"].whole()
        if y.shape[0] != self.num_nodes:
            raise GraphError(f"{self.path}: labels has {y.shape[0]} entries for {self.num_nodes} nodes")
        return labels(y, f"{self.path}: field labels").numpy()

    def masks(self) -> tuple:
        return shchur_split(self.labels(), self.split_seed)

    def close(self) -> None:
        for v in self.a.values():
            v.close()


def load_shchur(path, split_seed: int = SHCHUR_SPLIT_SEED) -> NodeDataset:
    """Shchur et al.'s .npz dataset in memory (the Shchur source read whole)."""
    from ...graph import Graph

    src = Shchur(Path(path), split_seed)
    try:
        n = src.num_nodes
        pieces = list(src.edges(1 << 22))
        s = np.concatenate([p[0] for p in pieces]) if pieces else np.zeros(0, np.int64)
        d = np.concatenate([p[1] for p in pieces]) if pieces else np.zeros(0, np.int64)
        key = np.unique(d * np.int64(n) + s)  # coalesced: each pair once, a row's edges by source
        graph = Graph.from_edges(key % n, key // n, n, what=str(path))
        x = torch.from_numpy(np.concatenate(list(src.features(1 << 16))))
        masks = [torch.from_numpy(m) for m in src.masks()]
        return NodeDataset(src.name, graph, x, torch.from_numpy(src.labels()), *masks)
    finally:
        src.close()


def _read_range(arr: NpzArray, first: int, stop: int) -> np.ndarray:
    parts = list(arr.items(first, stop, max(stop - first, 1))) if stop > first else []
    return np.concatenate(parts) if parts else np.zeros(0, arr.dtype)


def shchur_split(y: np.ndarray, seed: int = SHCHUR_SPLIT_SEED) -> tuple:
    """Shchur et al.'s split: in each class, a seeded draw of 20 training and 30 validation nodes
    (fewer where the class has fewer), the rest of the labelled nodes for testing."""
    n = y.shape[0]
    train, val = np.zeros(n, bool), np.zeros(n, bool)
    rng = np.random.default_rng(seed)
    labelled = y >= 0 if y.ndim == 1 else np.ones(n, bool)
    classes = np.unique(y[labelled]) if y.ndim == 1 else []
    for c in classes:
        members = rng.permutation(np.flatnonzero(y == c))
        k_train, k_val = SHCHUR_SPLIT
        train[members[:k_train]] = True
        val[members[k_train : k_train + k_val]] = True
    test = labelled & ~train & ~val
    return train, val, test


class Ogb(Source):
    """An OGB node-property dataset's raw files (mgg.data.datasets.load_ogb): the binary layout
    (raw/data.npz, papers100M) or the CSVs, inverse edges interleaved where the dataset says so, node
    features (a dataset without them is read in memory), labels, the split as given."""

    @staticmethod
    def streamable(path: Path) -> bool:
        root = ogb_root(Path(path))
        if root is None or (root / "processed" / "data_processed").is_file():
            return False
        raw = root / "raw"
        if (raw / "data.npz").is_file():
            return "node_feat" in npz_fields(raw / "data.npz")
        return (raw / "node-feat.csv.gz").is_file()

    def __init__(self, path: Path):
        self.root = ogb_root(Path(path))
        self.name = ogb_name(self.root)
        self.meta = OGB_META.get(
            self.name, dict(add_inverse_edge=False, split=None, binary=(self.root / "raw" / "data.npz").is_file())
        )
        raw = self.root / "raw"
        self.binary = (raw / "data.npz").is_file() if self.name not in OGB_META else self.meta["binary"]
        if self.binary:
            if self.meta["add_inverse_edge"]:
                raise GraphError(f"{raw}: add_inverse_edge is not defined for the binary layout (as in OGB)")
            self.ei = NpzArray(raw / "data.npz", "edge_index")
            self.feat = NpzArray(raw / "data.npz", "node_feat")
            self.num_nodes = int(NpzArray(raw / "data.npz", "num_nodes_list").whole().sum())
            self.num_features = self.feat.shape[1]
            self.edge_count_hint = self.ei.shape[1]
        else:
            self.num_nodes = int(
                sum(int(a.sum()) for a in csv_pieces(raw / "num-node-list.csv.gz", np.int64, "node count", 1 << 20))
            )
            first = next(csv_pieces(raw / "node-feat.csv.gz", np.float32, "node features", 1 << 16), None)
            self.num_features = 0 if first is None else first.shape[1]

    def edges(self, per_piece: int) -> Iterator[tuple]:
        raw = self.root / "raw"
        if self.binary:
            for ei in self.ei.columns(per_piece):
                yield _pairs(ei[0], ei[1], None)
            return
        for a in csv_pieces(raw / "edge.csv.gz", np.int64, "edges 'src,dst'", max(per_piece * 16, 1 << 16)):
            if a.shape[1] != 2:
                raise GraphError(f"{raw / 'edge.csv.gz'}: expected 2 columns 'src,dst', got {a.shape[1]}")
            s, d = a[:, 0], a[:, 1]
            if self.meta["add_inverse_edge"]:  # (u, v), (v, u) interleaved, as OGB
                s, d = np.stack([s, d], 1).reshape(-1), np.stack([d, s], 1).reshape(-1)
            yield s, d, None

    def features(self, per_piece: int) -> Iterator[np.ndarray]:
        if self.binary:
            for piece in self.feat.pieces(per_piece):
                yield np.asarray(piece, np.float32)
            return
        path = self.root / "raw" / "node-feat.csv.gz"
        for a in csv_pieces(path, np.float32, "node features", max(per_piece * self.num_features * 8, 1 << 16)):
            yield a

    def labels(self) -> np.ndarray:
        raw = self.root / "raw"
        if self.binary:
            lab = NpzArray(raw / "node-label.npz", "node_label").whole()
        else:
            lab = np.concatenate(list(csv_pieces(raw / "node-label.csv.gz", np.float64, "node labels", 1 << 24)))
        if lab.shape[0] != self.num_nodes:
            raise GraphError(f"{raw}: {lab.shape[0]:,} labels, but num-node-list says {self.num_nodes:,}")
        return labels(lab, f"{self.root}: labels").numpy()

    def masks(self) -> tuple:
        d = _ogb_split_dir(self.root, self.meta["split"])
        out = []
        for k in ("train", "valid", "test"):
            idx = np.concatenate(list(csv_pieces(d / f"{k}.csv.gz", np.int64, "node indices", 1 << 24)))[:, 0]
            out.append(mask_of(idx, self.num_nodes, str(d / f"{k}.csv.gz")).numpy())
        return tuple(out)

    def close(self) -> None:
        if self.binary:
            self.ei.close()
            self.feat.close()


def streaming_source(path: Path) -> Optional[Source]:
    """The streaming source of a dataset path, or None where the dataset is read in memory."""
    path = Path(path)
    if path.is_dir():
        if reddit_dir(path) is not None:
            return Reddit(path)
        if ogb_root(path) is not None and Ogb.streamable(path):
            return Ogb(path)
        return None
    if path.suffix == ".npz" and path.is_file():
        if Shchur.recognises(path):
            return Shchur(path)
        if NpzDataset.streamable(path):
            return NpzDataset(path)
    return None


def piece_rows(budget: int, row_bytes: int) -> int:
    """Rows of a piece that fit a quarter of the budget (several pieces are alive at once)."""
    return max(1, math.floor(budget / 4 / max(row_bytes, 1)))

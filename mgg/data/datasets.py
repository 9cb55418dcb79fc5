"""The dataset loaders beyond single files: PyG Reddit's raw files, OGB node-property datasets
(raw CSVs or the processed pickle) and .npz datasets (x, y and masks beside the graph). Names
and directories become loaders in mgg.data.resolve."""

from __future__ import annotations

import pickle
import re
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..errors import GraphError
from ..graph import Graph
from .arrays import sorted_unique
from .formats import UNREADABLE, load_npz, open_npz, text_lines
from .node_dataset import NodeDataset, labels, mask_of, split_mask

# ---- .npz datasets ---------------------------------------------------------------------------------
_NPZ_FEATURES = ("x", "y", "train_mask", "val_mask", "test_mask")


def _npz_has_features(path: Path) -> bool:
    """Whether the .npz holds a dataset (x and y beside the graph); a damaged file is named here."""
    with open_npz(path) as z:
        return {"x", "y"} <= set(z.files)


def load_npz_dataset(path) -> NodeDataset:
    """An .npz holding a graph (any layout load_npz reads) plus x, y, train_mask, val_mask and
    test_mask (boolean or 0/1 masks, or index lists: split_mask). x is a [nodes, features] matrix
    of numbers; its rows give the node count of an edge_index graph without num_nodes (as in
    PyG's Data), so nodes past the largest id that have no edges are kept."""
    path = Path(path)
    with open_npz(path) as z:
        missing = [k for k in _NPZ_FEATURES if k not in z.files]
        if missing:
            raise GraphError(f"{path}: a dataset .npz needs fields {', '.join(_NPZ_FEATURES)}; missing {missing}")
        fields = {k: z[k] for k in _NPZ_FEATURES}  # each read once: a field is decompressed per access
        counted_by_x = "edge_index" in z.files and "num_nodes" not in z.files and "format" not in z.files
    x = fields["x"]
    if x.ndim != 2 or x.dtype.kind not in "biuf":
        raise GraphError(
            f"{path}: field x must be a [nodes, features] matrix of numbers, got {x.dtype} {list(x.shape)}"
        )
    try:
        g = load_npz(path, num_nodes=x.shape[0])
    except GraphError as e:
        if counted_by_x and "num_nodes" in str(e):
            raise GraphError(f"{e}: the node count is the rows of field x") from None
        raise
    n = g.num_nodes
    for k in ("x", "y"):  # masks may be index lists (split_mask)
        a = fields[k]
        if a.ndim == 0 or a.shape[0] != n:
            raise GraphError(f"{path}: field {k} has shape {list(a.shape)}, expected {n} rows (the graph's nodes)")
    masks = [split_mask(fields[k], n, f"{path}: field {k}") for k in _NPZ_FEATURES[2:]]
    return NodeDataset(
        path.stem, g, torch.from_numpy(np.asarray(x, np.float32)), labels(fields["y"], f"{path}: field y"), *masks
    )


# ---- PyG Reddit ------------------------------------------------------------------------------------
def reddit_dir(path: Path) -> Optional[Path]:
    """The directory holding reddit_data.npz and reddit_graph.npz: path or path/raw."""
    for d in (path, path / "raw"):
        if (d / "reddit_data.npz").is_file() and (d / "reddit_graph.npz").is_file():
            return d
    return None


@dataclass
class _GraphOnly:
    graph: Graph


def load_reddit(path, features: bool = True):
    """PyG's Reddit raw files (torch_geometric.datasets.Reddit: raw/reddit_data.npz with
    feature, label, node_types 1/2/3 = train/val/test, and raw/reddit_graph.npz, a scipy COO
    matrix), read as PyG's Reddit.process: edge_index = coalesce([row, col]) (duplicates
    dropped, no reverse edges added, self-loops kept), the edge row -> col. features=False
    reads only the graph."""
    d = reddit_dir(Path(path))
    if d is None:
        raise GraphError(f"{path}: no reddit_data.npz and reddit_graph.npz (PyG's Reddit raw layout)")
    gpath = d / "reddit_graph.npz"
    with open_npz(gpath) as z:
        fmt = z["format"].item() if "format" in z.files else b""
        fmt = fmt.decode() if isinstance(fmt, bytes) else str(fmt)
        if fmt != "coo" or not {"row", "col", "shape"} <= set(z.files):
            raise GraphError(
                f"{gpath}: expected a scipy COO matrix (save_npz) with row, col, shape; "
                f"got format {fmt!r}, fields {sorted(z.files)}"
            )
        row, col, shape = z["row"], z["col"], tuple(int(s) for s in z["shape"])
    dpath = d / "reddit_data.npz"
    with open_npz(dpath) as z:
        missing = [k for k in ("feature", "label", "node_types") if k not in z.files]
        if missing:
            raise GraphError(f"{dpath}: missing fields {missing} (PyG's Reddit layout: feature, label, node_types)")
        n = int(z["label"].shape[0])
        if shape != (n, n):
            raise GraphError(f"{gpath}: matrix shape {shape} but {dpath.name} has {n} nodes")
        if row.shape != col.shape:
            raise GraphError(f"{gpath}: {row.size} rows but {col.size} columns")
        for what, a in (("row", row), ("col", col)):
            if a.dtype.kind not in "iu":
                raise GraphError(f"{gpath}: field {what} must be integers, got dtype {a.dtype}")
            bad = np.flatnonzero((a < 0) | (a >= n))
            if bad.size:
                raise GraphError(f"{gpath}: entry {bad[0]} has {what} {a[bad[0]]}, outside [0, {n})")
        src, dst = _coalesce(row, col, n)
        g = Graph.from_edges(src, dst, n, what=str(gpath))
        if not features:
            return _GraphOnly(g)
        x = torch.from_numpy(np.asarray(z["feature"], np.float32))
        y = labels(z["label"], f"{dpath}: field label")
        split = torch.from_numpy(np.asarray(z["node_types"]))
    return NodeDataset("reddit", g, x, y, split == 1, split == 2, split == 3)


def _coalesce(row, col, n: int):
    """Distinct (row, col) pairs in row-major order (torch_geometric.utils.coalesce); a linear
    check first, since a file written coalesced needs no sort."""
    key = row.astype(np.int64) * n + col.astype(np.int64)
    if not (key.size < 2 or bool((key[1:] > key[:-1]).all())):
        key = sorted_unique(key)
    return key // n, key % n


# ---- OGB node-property datasets ------------------------------------------------------------------
# From ogb/nodeproppred/master.csv (ogb 1.3.6): how each dataset's raw files are to be read.
OGB_META = {
    "ogbn-arxiv": dict(add_inverse_edge=False, split="time", binary=False),
    "ogbn-products": dict(add_inverse_edge=True, split="sales_ranking", binary=False),
    "ogbn-proteins": dict(add_inverse_edge=True, split="species", binary=False),
    "ogbn-papers100M": dict(add_inverse_edge=False, split="time", binary=True),
}
OGB_ALIASES = {"arxiv": "ogbn-arxiv", "ogbn-papers100m": "ogbn-papers100M"}


def ogb_root(path: Path) -> Optional[Path]:
    """The dataset directory (the one with raw/ and split/) for path or its raw/ subdirectory."""
    for d in (path, path.parent):
        if (
            (d / "raw" / "edge.csv.gz").is_file()
            or (d / "raw" / "data.npz").is_file()
            or (d / "processed" / "data_processed").is_file()
        ):
            return d
    return None


def ogb_name(root: Path) -> str:
    """ogbn_arxiv -> ogbn-arxiv (OGB's directory naming), ogbn_arxiv_pyg as well."""
    base = re.sub(r"_pyg$", "", root.name)
    name = base.replace("_", "-")
    for k in OGB_META:
        if k.lower() == name.lower():
            return k
    return name


@dataclass
class _OgbRaw:
    edge_index: np.ndarray  # [2, E] int64, inverse edges already added where the dataset says so
    num_nodes: int
    node_feat: Optional[np.ndarray]
    edge_feat: Optional[np.ndarray]
    labels: Optional[np.ndarray]


def load_ogb(path, features: bool = True):
    """An OGB node-property dataset directory as OGB writes it (root/ogbn_NAME/): raw/edge.csv.gz,
    raw/num-node-list.csv.gz, raw/node-feat.csv.gz, raw/node-label.csv.gz (or, for papers100M,
    raw/data.npz and raw/node-label.npz), split/SCHEME/{train,valid,test}.csv.gz, and OGB's cache
    processed/data_processed where present (read with a numpy-only unpickler). Edges as
    ogb.io.read_graph_raw gives them, inverse edges interleaved for the datasets whose
    master.csv says add_inverse_edge (products, proteins); the edge u -> v of edge_index is
    row v gathering u. The split is used as given. ogbn-proteins has no node features: x is
    the mean of each node's incoming edge features (as OGB's proteins examples do); its labels
    are 112 binary tasks. Unlabelled nodes (papers100M's NaN) get label -1."""
    root = ogb_root(Path(path))
    if root is None:
        raise GraphError(
            f"{path}: not an OGB node-property dataset (no raw/edge.csv.gz, raw/data.npz or processed/data_processed)"
        )
    name = ogb_name(root)
    meta = OGB_META.get(name, dict(add_inverse_edge=False, split=None, binary=(root / "raw" / "data.npz").is_file()))
    raw = _ogb_processed(root, features) or _ogb_raw(root, meta, features)
    n = raw.num_nodes
    g = Graph.from_edges(raw.edge_index[0], raw.edge_index[1], n, what=f"{root}/raw")
    if not features:
        return _GraphOnly(g)
    if raw.labels is None:
        raise GraphError(f"{root}/raw: no node-label.csv.gz or node-label.npz")
    y = labels(raw.labels, f"{root}: labels")
    if raw.node_feat is not None:
        x = torch.from_numpy(np.asarray(raw.node_feat, np.float32))
    elif raw.edge_feat is not None:
        ef = torch.from_numpy(np.asarray(raw.edge_feat, np.float32))
        dst = torch.from_numpy(raw.edge_index[1])
        x = torch.zeros(n, ef.size(1)).index_add_(0, dst, ef)
        x /= torch.bincount(dst, minlength=n).clamp(min=1).unsqueeze(1)
    else:
        x = torch.ones(n, 1)
    split_dir = _ogb_split_dir(root, meta["split"])
    masks = [
        mask_of(_read_index(split_dir / f"{k}.csv.gz"), n, str(split_dir / f"{k}.csv.gz"))
        for k in ("train", "valid", "test")
    ]
    return NodeDataset(name, g, x, y, *masks)


def _ogb_split_dir(root: Path, scheme: Optional[str]) -> Path:
    if scheme is not None and (root / "split" / scheme).is_dir():
        return root / "split" / scheme
    have = sorted(d.name for d in (root / "split").iterdir() if d.is_dir()) if (root / "split").is_dir() else []
    if scheme is None and len(have) == 1:
        return root / "split" / have[0]
    raise GraphError(f"{root}/split: no split directory {scheme or ''} (found: {', '.join(have) or 'none'})")


def _read_csv(path: Path, dtype, what: str) -> np.ndarray:
    """A headerless comma-separated .csv.gz of numbers (OGB's raw files), by numpy's C reader;
    a malformed line is named by a second, line-by-line pass."""
    if not path.is_file():
        raise GraphError(f"{path}: missing {what}")
    a, err = _loadtxt_csv(path, dtype)
    if a is not None:
        return a
    width = None
    whole = np.issubdtype(dtype, np.integer)
    for ln, s in text_lines(path):
        t = s.split(",")
        width = width or len(t)
        try:
            [float(v) for v in t]
        except ValueError:
            raise GraphError(f"{path}:{ln}: {what}: non-numeric entry in {s[:80]!r}") from None
        if whole and not all(v.strip().lstrip("+-").isdigit() for v in t):
            raise GraphError(f"{path}:{ln}: {what}: expected integers, got {s[:80]!r}")
        if len(t) != width:
            raise GraphError(f"{path}:{ln}: {what}: expected {width} comma-separated fields, got {len(t)}")
    raise GraphError(f"{path}: {what}: cannot parse ({err})")


def _loadtxt_csv(path: Path, dtype):
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.loadtxt(str(path), dtype=dtype, delimiter=",", ndmin=2), None
    except (ValueError, *UNREADABLE) as e:
        return None, str(e)


def _read_index(path: Path) -> np.ndarray:
    a = _read_csv(path, np.int64, "node indices")
    return a[:, 0]


def _ogb_raw(root: Path, meta: dict, features: bool) -> _OgbRaw:
    raw = root / "raw"
    if meta["binary"]:
        with open_npz(raw / "data.npz") as z:
            ei = z["edge_index"].astype(np.int64, copy=False)
            n = int(z["num_nodes_list"].sum())
            nf = np.asarray(z["node_feat"]) if features and "node_feat" in z.files else None
            ef = np.asarray(z["edge_feat"]) if features and "edge_feat" in z.files else None
        lab = None
        if features and (raw / "node-label.npz").is_file():
            with open_npz(raw / "node-label.npz") as z:
                lab = z["node_label"]
    else:
        e = _read_csv(raw / "edge.csv.gz", np.int64, "edges 'src,dst'")
        if e.size == 0:
            raise GraphError(f"{raw / 'edge.csv.gz'}: no edges")
        if e.shape[1] != 2:
            raise GraphError(f"{raw / 'edge.csv.gz'}: expected 2 columns 'src,dst', got {e.shape[1]}")
        ei = np.ascontiguousarray(e.T)
        n = int(_read_csv(raw / "num-node-list.csv.gz", np.int64, "node count").sum())
        nf = (
            _read_csv(raw / "node-feat.csv.gz", np.float32, "node features")
            if features and (raw / "node-feat.csv.gz").is_file()
            else None
        )
        ef = (
            _read_csv(raw / "edge-feat.csv.gz", np.float32, "edge features")
            if features and (raw / "edge-feat.csv.gz").is_file()
            else None
        )
        lab = None
        if features and (raw / "node-label.csv.gz").is_file():
            lab = _read_csv(raw / "node-label.csv.gz", np.float64, "node labels")
        for f, a, want, whose in (
            ("node-feat", nf, n, "num-node-list.csv.gz says"),
            ("node-label", lab, n, "num-node-list.csv.gz says"),
            ("edge-feat", ef, ei.shape[1], "edge.csv.gz has"),
        ):
            if a is not None and a.shape[0] != want:
                raise GraphError(f"{raw / f}.csv.gz: {a.shape[0]:,} rows, but {whose} {want:,}")
    if meta["add_inverse_edge"]:
        if meta["binary"]:
            raise GraphError(f"{raw}: add_inverse_edge is not defined for the binary layout (as in OGB)")
        ei = np.stack([ei, ei[::-1]], 2).reshape(2, -1)  # (u, v), (v, u) interleaved, as OGB
        ef = None if ef is None else np.repeat(ef, 2, axis=0)
    return _OgbRaw(ei, n, nf, ef, lab)


# OGB caches its reading as processed/data_processed: torch.save({'graph': dict of numpy arrays,
# 'labels': ndarray}). It is read here by a pickle reader that can only build numpy arrays and
# builtin containers, never arbitrary objects.
_SAFE = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("collections", "OrderedDict"),
}


class _NumpyUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _SAFE or (module == "numpy.dtypes" and name.endswith("DType")):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not a numpy array type")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("torch storages are not expected in OGB's numpy cache")


def _ogb_processed(root: Path, features: bool) -> Optional[_OgbRaw]:
    p = root / "processed" / "data_processed"
    if not p.is_file():
        return None
    try:
        with zipfile.ZipFile(p) as zf:
            pkl = next(n for n in zf.namelist() if n.endswith("data.pkl"))
            with zf.open(pkl) as f:
                d = _NumpyUnpickler(f).load()
        gr, lab = d["graph"], d["labels"]
        ei = np.asarray(gr["edge_index"], np.int64)
        n = int(gr["num_nodes"])
    except (
        zipfile.BadZipFile,
        StopIteration,
        pickle.UnpicklingError,
        KeyError,
        TypeError,
        EOFError,
        AttributeError,
        ValueError,
    ) as e:
        print(f"mgg: {p}: not readable as OGB's numpy cache ({e.__class__.__name__}); reading raw/", file=sys.stderr)
        return None
    return _OgbRaw(ei, n, gr.get("node_feat") if features else None, gr.get("edge_feat") if features else None, lab)

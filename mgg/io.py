"""Graph loaders: SNAP-style edge lists, .npz (scipy.sparse or arrays), PyG data, and the
Planetoid raw format. Every error names the file and, where there is one, the line."""
from __future__ import annotations

import pickle
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import scipy.sparse as sp
import torch

from .errors import GraphError
from .graph import Graph

_COMMENT = ("#", "%", "//")


def load_edge_list(path, num_nodes: Optional[int] = None, undirected: bool = False) -> Graph:
    """Lines `src dst [weight]`, any whitespace; blank lines and lines starting with #, % or //
    are skipped. Node ids are non-negative integers."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise GraphError(f"{path}: cannot read edge list ({e.__class__.__name__}: {e})") from None
    lines = text.splitlines()
    keep = [i for i, l in enumerate(lines) if l.strip() and not l.lstrip().startswith(_COMMENT)]
    if not keep:
        raise GraphError(f"{path}: empty graph (no edges)")
    widths = {len(lines[i].split()) for i in keep}
    if len(widths) != 1 or not widths <= {2, 3}:
        for i in keep:
            n = len(lines[i].split())
            if n not in (2, 3) or n != len(lines[keep[0]].split()):
                raise GraphError(f"{path}:{i + 1}: expected 'src dst' or 'src dst weight' like line "
                                 f"{keep[0] + 1}, got {lines[i].strip()!r}")
    width = widths.pop()
    table = " ".join(lines[i] for i in keep).split()
    try:
        arr = np.array(table, dtype=np.float64).reshape(-1, width)
    except ValueError:
        for i in keep:
            try:
                [float(t) for t in lines[i].split()]
            except ValueError:
                raise GraphError(f"{path}:{i + 1}: non-numeric entry in {lines[i].strip()!r}") from None
        raise
    ids = arr[:, :2]
    bad = np.flatnonzero((ids < 0).any(1) | (ids != np.floor(ids)).any(1))
    if bad.size:
        i = keep[int(bad[0])]
        raise GraphError(f"{path}:{i + 1}: node ids must be non-negative integers, got {lines[i].strip()!r}")
    src, dst = ids[:, 0].astype(np.int64), ids[:, 1].astype(np.int64)
    if num_nodes is not None and src.size and max(src.max(), dst.max()) >= num_nodes:
        j = int(np.flatnonzero((src >= num_nodes) | (dst >= num_nodes))[0])
        raise GraphError(f"{path}:{keep[j] + 1}: node id >= num_nodes {num_nodes} in {lines[keep[j]].strip()!r}")
    w = arr[:, 2].astype(np.float32) if width == 3 else None
    if undirected:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        w = None if w is None else np.concatenate([w, w])
    return Graph.from_edges(src, dst, num_nodes, w, what=str(path))


def load_npz(path) -> Graph:
    """A scipy.sparse .npz (save_npz), or an .npz with arrays rowptr+col[+weight] or
    edge_index[+edge_weight, num_nodes]."""
    path = Path(path)
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise GraphError(f"{path}: not a readable .npz file ({e})") from None
    keys = set(z.files)
    if {"indptr", "indices", "format", "shape"} <= keys:
        return Graph.from_scipy(sp.load_npz(path), what=str(path))
    if {"rowptr", "col"} <= keys:
        return Graph.from_csr(z["rowptr"], z["col"], z["weight"] if "weight" in keys else None, what=str(path))
    if "edge_index" in keys:
        ei = z["edge_index"]
        if ei.ndim != 2 or ei.shape[0] != 2:
            raise GraphError(f"{path}: field edge_index must have shape [2, E], got {list(ei.shape)}")
        n = int(z["num_nodes"]) if "num_nodes" in keys else None
        return Graph.from_edges(ei[0], ei[1], n, z["edge_weight"] if "edge_weight" in keys else None, what=str(path))
    raise GraphError(f"{path}: .npz has fields {sorted(keys)}; expected a scipy.sparse matrix, "
                     "rowptr+col, or edge_index")


def from_pyg(data) -> Graph:
    """A torch_geometric Data object (edge_index, optional edge_weight/edge_attr, num_nodes)."""
    w = getattr(data, "edge_weight", None)
    return Graph.from_edge_index(data.edge_index, data.num_nodes, w)


@dataclass
class NodeDataset:
    """A graph with node features, labels and the standard split."""
    name: str
    graph: Graph
    x: torch.Tensor
    y: torch.Tensor
    train_mask: torch.Tensor
    val_mask: torch.Tensor
    test_mask: torch.Tensor

    def __post_init__(self):
        n = self.graph.num_nodes
        for field in ("x", "y", "train_mask", "val_mask", "test_mask"):
            t = getattr(self, field)
            if t.size(0) != n:
                raise GraphError(f"{self.name}: {field} has {t.size(0)} rows but the graph has {n} nodes")

    @property
    def num_classes(self) -> int:
        return int(self.y.max()) + 1


def _read_pickle(path: Path):
    try:
        with open(path, "rb") as f:
            with warnings.catch_warnings():  # old pickles name scipy.sparse.csr
                warnings.simplefilter("ignore", DeprecationWarning)
                return pickle.load(f, encoding="latin1")
    except FileNotFoundError:
        raise GraphError(f"{path}: missing Planetoid file") from None
    except Exception as e:  # a corrupt pickle raises many types
        raise GraphError(f"{path}: not a Planetoid pickle ({e.__class__.__name__}: {e})") from None


def _dense(a, path: Path) -> np.ndarray:
    if sp.issparse(a):
        return np.asarray(a.todense(), dtype=np.float32)
    a = np.asarray(a)
    if a.ndim != 2:
        raise GraphError(f"{path}: expected a 2-D matrix, got shape {a.shape}")
    return a.astype(np.float32)


def load_planetoid(root, name: str) -> NodeDataset:
    """The Planetoid raw format (ind.NAME.{x,tx,allx,y,ty,ally,graph,test.index}) in `root`.

    The format's quirks: Python-2 pickles; row k of tx/ty belongs to the k-th node listed in
    test.index, which is not sorted; the nodes missing from a test range with gaps (Citeseer's
    isolated nodes) get zero feature rows and label 0, outside every mask; duplicate edges and
    self-loops in the adjacency dict are dropped, as PyG does.

    (Kipf's code, and PyG's after it, puts tx at the sorted test positions and then permutes
    rows: x[test_index] = x[sorted(test_index)]. The padding for gaps must therefore use the
    sorted indices too; padding at the listed positions and then permuting scrambled the test
    rows of every gapped set, the bug of issue 10.)"""
    root = Path(root)
    p = {k: root / f"ind.{name.lower()}.{k}" for k in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")}
    if not p["graph"].exists():
        have = sorted({f.name.split(".")[1] for f in root.glob("ind.*.graph")}) if root.is_dir() else []
        raise GraphError(f"{root}: no Planetoid dataset {name!r} (found: {', '.join(have) or 'none'})")
    x, tx, allx = (_dense(_read_pickle(p[k]), p[k]) for k in ("x", "tx", "allx"))
    y, ty, ally = (_dense(_read_pickle(p[k]), p[k]) for k in ("y", "ty", "ally"))
    graph = _read_pickle(p["graph"])
    if not isinstance(graph, dict):
        raise GraphError(f"{p['graph']}: expected a dict of adjacency lists, got {type(graph).__name__}")
    test_index = []
    for ln, line in enumerate(p["test.index"].read_text().splitlines(), 1):
        if line.strip():
            if not re.fullmatch(r"\s*\d+\s*", line):
                raise GraphError(f"{p['test.index']}:{ln}: expected a node index, got {line.strip()!r}")
            test_index.append(int(line))
    test_index = np.asarray(test_index, dtype=np.int64)
    if tx.shape[0] != test_index.size or ty.shape[0] != test_index.size:
        raise GraphError(f"{p['tx']}: {tx.shape[0]} test feature rows and {ty.shape[0]} test labels for "
                         f"{test_index.size} test indices")
    if x.shape[0] != y.shape[0] or allx.shape[0] != ally.shape[0]:
        raise GraphError(f"{p['x']}: feature and label row counts differ ({x.shape[0]}/{y.shape[0]}, "
                         f"{allx.shape[0]}/{ally.shape[0]})")
    order = np.sort(test_index)
    lo, hi = int(order[0]), int(order[-1])
    span = hi - lo + 1
    if span != test_index.size:  # gaps (Citeseer): tx rows go to the sorted indices (permuted below)
        tx_full = np.zeros((span, tx.shape[1]), np.float32)
        ty_full = np.zeros((span, ty.shape[1]), np.float32)
        tx_full[order - lo] = tx
        ty_full[order - lo] = ty
        tx, ty = tx_full, ty_full
    feats = np.vstack([allx, tx])
    labels_1h = np.vstack([ally, ty])
    feats[test_index] = feats[order]  # row k of tx belongs to the k-th listed test node
    labels_1h[test_index] = labels_1h[order]
    n = feats.shape[0]
    src, dst = [], []
    for u, nbrs in graph.items():
        for v in nbrs:
            src.append(u)
            dst.append(v)
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    if src.size and max(src.max(), dst.max()) >= n:
        raise GraphError(f"{p['graph']}: node id {max(src.max(), dst.max())} >= {n} feature rows")
    keep = src != dst
    pairs = np.unique(np.stack([dst[keep], src[keep]], 1), axis=0)  # coalesce: drop duplicates
    g = Graph.from_edges(pairs[:, 1], pairs[:, 0], n, what=str(p["graph"]))

    def mask(idx):
        m = torch.zeros(n, dtype=torch.bool)
        m[torch.as_tensor(idx)] = True
        return m

    ntrain = y.shape[0]
    return NodeDataset(
        name=name, graph=g, x=torch.from_numpy(feats), y=torch.from_numpy(labels_1h.argmax(1)).long(),
        train_mask=mask(np.arange(ntrain)), val_mask=mask(np.arange(ntrain, min(ntrain + 500, n))),
        test_mask=mask(test_index),
    )


def load_graph(spec: str, data_dir=None) -> Graph:
    """A graph from a command-line spec: a file (.npz, or an edge list of any other name), a
    Planetoid name (with data_dir), or a synthetic spec (see mgg.synthetic.from_spec)."""
    from . import synthetic

    if synthetic.is_spec(spec):
        return synthetic.from_spec(spec)
    path = Path(spec)
    if path.exists():
        return load_npz(path) if path.suffix == ".npz" else load_edge_list(path)
    if data_dir is not None and (Path(data_dir) / f"ind.{spec.lower()}.graph").exists():
        return load_planetoid(data_dir, spec).graph
    raise GraphError(f"{spec}: no such file, Planetoid dataset in {data_dir or '(no --data-dir)'}, "
                     f"or synthetic spec ({synthetic.SPEC_HELP})")

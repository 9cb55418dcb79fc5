"""The Planetoid raw format (Cora, CiteSeer, PubMed as Kipf's and PyG's loaders read them)."""

from __future__ import annotations

import pickle
import re
import warnings
from pathlib import Path
from typing import Optional

import numpy as np
import scipy.sparse as sp
import torch

from ..errors import GraphError
from ..graph import Graph
from .formats import text_lines
from .node_dataset import NodeDataset, mask_of


def _adjacency_lists(graph, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of ind.NAME.graph, a dict (checked by the caller) of node id -> list of neighbour
    ids, ids non-negative integers (as Kipf's files and PyG's loader have them); anything else is
    named."""
    src, dst = [], []
    for u, nbrs in graph.items():
        if not isinstance(nbrs, (list, tuple, set, np.ndarray)):
            raise GraphError(f"{path}: node {u!r} has neighbours {nbrs!r:.40}, expected a list of node ids")
        for v in (u, *nbrs):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0:
                raise GraphError(f"{path}: node ids must be non-negative integers, got {v!r} (node {u!r})")
        src.extend([u] * len(nbrs))
        dst.extend(nbrs)
    return np.asarray(src, np.int64), np.asarray(dst, np.int64)


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


def planetoid_dir(root, name: str) -> Optional[Path]:
    """The directory holding ind.NAME.* under root: root itself, or PyG's root/NAME/raw (any
    case: PyG writes CiteSeer, PubMed)."""
    root = Path(root)
    subs = (
        [d / "raw" for d in root.iterdir() if d.is_dir() and d.name.lower() == name.lower()]
        if root.is_dir() and name
        else []
    )
    for d in [root, *subs, root / "raw"]:
        if (d / f"ind.{name.lower()}.graph").is_file():
            return d
    return None


def load_planetoid(root, name: str) -> NodeDataset:
    """The Planetoid raw format (ind.NAME.{x,tx,allx,y,ty,ally,graph,test.index}) in `root` (or
    PyG's root/NAME/raw), read as PyG's read_planetoid_data does.

    The format's quirks: Python-2 pickles; row k of tx/ty belongs to the k-th node listed in
    test.index, which is not sorted; the nodes missing from a test range with gaps (Citeseer's
    isolated nodes) get zero feature rows and label 0, outside every mask; duplicate edges and
    self-loops in the adjacency dict are dropped.

    (Kipf's code, and PyG's after it, puts tx at the sorted test positions and then permutes
    rows: x[test_index] = x[sorted(test_index)]. The padding for gaps must therefore use the
    sorted indices too; padding at the listed positions and then permuting scrambled the test
    rows of every gapped set, the bug of issue 10.)"""
    d = planetoid_dir(root, name)
    if d is None:
        root = Path(root)
        have = sorted({f.name.split(".")[1] for f in root.glob("ind.*.graph")}) if root.is_dir() else []
        raise GraphError(f"{root}: no Planetoid dataset {name!r} (found: {', '.join(have) or 'none'})")
    p = {k: d / f"ind.{name.lower()}.{k}" for k in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")}
    x, tx, allx = (_dense(_read_pickle(p[k]), p[k]) for k in ("x", "tx", "allx"))
    y, ty, ally = (_dense(_read_pickle(p[k]), p[k]) for k in ("y", "ty", "ally"))
    graph = _read_pickle(p["graph"])
    if not isinstance(graph, dict):
        raise GraphError(f"{p['graph']}: expected a dict of adjacency lists, got {type(graph).__name__}")
    test_index = []
    for ln, line in text_lines(p["test.index"]):
        if line:
            if not re.fullmatch(r"\d+", line):
                raise GraphError(f"{p['test.index']}:{ln}: expected a node index, got {line!r}")
            test_index.append(int(line))
    test_index = np.asarray(test_index, dtype=np.int64)
    if test_index.size == 0:
        raise GraphError(f"{p['test.index']}: no test indices")
    if tx.shape[0] != test_index.size or ty.shape[0] != test_index.size:
        raise GraphError(
            f"{p['tx']}: {tx.shape[0]} test feature rows and {ty.shape[0]} test labels for "
            f"{test_index.size} test indices"
        )
    if x.shape[0] != y.shape[0] or allx.shape[0] != ally.shape[0]:
        raise GraphError(
            f"{p['x']}: feature and label row counts differ ({x.shape[0]}/{y.shape[0]}, "
            f"{allx.shape[0]}/{ally.shape[0]})"
        )
    order = np.sort(test_index)
    lo, hi = int(order[0]), int(order[-1])
    if lo != allx.shape[0]:
        raise GraphError(
            f"{p['test.index']}: the smallest test index is {lo}, expected {allx.shape[0]} (the rows of allx)"
        )
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
    src, dst = _adjacency_lists(graph, p["graph"])
    if src.size and max(src.max(), dst.max()) >= n:
        raise GraphError(f"{p['graph']}: node id {max(src.max(), dst.max())} >= {n} feature rows")
    keep = src != dst
    pairs = np.unique(np.stack([dst[keep], src[keep]], 1), axis=0)  # coalesce: drop duplicates
    g = Graph.from_edges(pairs[:, 1], pairs[:, 0], n, what=str(p["graph"]))
    ntrain = y.shape[0]
    return NodeDataset(
        name=name,
        graph=g,
        x=torch.from_numpy(feats),
        y=torch.from_numpy(labels_1h.argmax(1)).long(),
        train_mask=mask_of(np.arange(ntrain), n, name),
        val_mask=mask_of(np.arange(ntrain, min(ntrain + 500, n)), n, name),
        test_mask=mask_of(test_index, n, name),
    )

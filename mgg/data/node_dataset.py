"""A node-classification dataset: the graph, node features, labels and the train/val/test split,
and the readers of labels and splits as the file formats store them (mgg.data.formats,
mgg.data.datasets, mgg.data.planetoid_raw build it)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import GraphError
from ..graph import Graph
from .formats import from_pyg


@dataclass
class NodeDataset:
    """A graph with node features, labels and the standard split. y is [N] class ids (-1 for
    nodes without a label), or [N, T] for multi-label tasks (ogbn-proteins)."""

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

    @staticmethod
    def from_pyg(data, name: str = "pyg") -> "NodeDataset":
        """Any in-memory PyG Data with x, y, the three masks and edge_index (optional
        edge_weight). y of shape [N, 1] is flattened; float labels with NaN (unlabelled) become -1."""
        missing = [k for k in ("x", "y", "edge_index") if getattr(data, k, None) is None]
        if missing:
            raise GraphError(f"{name}: the PyG Data has no {', '.join(missing)}")
        n = int(data.num_nodes)
        masks = []
        for k in ("train_mask", "val_mask", "test_mask"):
            m = getattr(data, k, None)
            if m is None:
                raise GraphError(f"{name}: the PyG Data has no {k} (set train_mask, val_mask and test_mask)")
            masks.append(split_mask(m, n, f"{name}: {k}"))
        return NodeDataset(
            name,
            from_pyg(data),
            torch.as_tensor(data.x).float().cpu(),
            labels(torch.as_tensor(data.y).cpu(), name),
            *masks,
        )


def labels(y, what: str) -> torch.Tensor:
    """Class labels as int64 [N]: [N, 1] is flattened, NaN (unlabelled, as in ogbn-papers100M)
    becomes -1; [N, T] with T > 1 stays (multi-label)."""
    if not isinstance(y, torch.Tensor):
        y = np.asarray(y)
        if y.dtype.kind not in "biuf":
            raise GraphError(f"{what}: labels must be numbers (class ids), got dtype {y.dtype}")
        y = torch.as_tensor(y)
    if y.dim() == 2 and y.size(1) == 1:
        y = y.view(-1)
    if y.is_floating_point():
        nan = torch.isnan(y)
        if y.dim() == 1 and not bool((y[~nan] == y[~nan].round()).all()):
            raise GraphError(f"{what}: labels must be class ids, got non-integer values")
        y = torch.where(nan, torch.full_like(y, -1), y)
    if y.dim() not in (1, 2):
        raise GraphError(f"{what}: labels must have shape [N] or [N, tasks], got {list(y.shape)}")
    return y.long()


def split_mask(split, n: int, what: str) -> torch.Tensor:
    """A split (train, val or test) as a boolean mask over n nodes, from a boolean or uint8 mask
    (older PyG and many .npz files store masks as bytes), a 0/1 mask of n other integers, or node
    indices (OGB's split files). Integers that are all 0 or 1 and repeat one are a mask (as
    indices they would name nodes 0 and 1 over and over): of n entries, or refused. For n <= 2,
    where both readings are plausible, only bool and uint8 are masks."""
    a = split.detach().cpu().numpy() if isinstance(split, torch.Tensor) else np.asarray(split)
    if a.dtype.kind not in "biu":
        raise GraphError(f"{what}: a split must be a boolean mask or integer node indices, got dtype {a.dtype}")
    flat = a.reshape(-1)
    binary = bool(((flat == 0) | (flat == 1)).all())
    if a.dtype in (bool, np.uint8) or (binary and flat.size > 2 and (n > 2 or flat.size != n)):
        if not binary:
            raise GraphError(f"{what}: a {a.dtype} mask must hold only 0 and 1")
        if flat.size != n:
            raise GraphError(f"{what}: a mask of {flat.size} entries for a graph of {n} nodes")
        return torch.from_numpy(flat == 1)
    return mask_of(flat, n, what)


def mask_of(index, n: int, what: str) -> torch.Tensor:
    idx = torch.as_tensor(np.asarray(index, dtype=np.int64)).view(-1)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
        raise GraphError(
            f"{what}: node index {int(idx.max()) if int(idx.max()) >= n else int(idx.min())} outside [0, {n})"
        )
    return torch.zeros(n, dtype=torch.bool).index_fill_(0, idx, True)

"""Graphs and datasets in: graph files (formats) -> datasets (node_dataset, read by planetoid_raw and
datasets) -> one name resolution for every command (resolve); synthetic graphs (synthetic); the
files that ship with mgg (bundled, beside Cora's files in planetoid/)."""

from .bundled import bundled_planetoid_dir
from .formats import from_pyg, load_edge_list, load_mtx, load_npz, read_edge_list
from .node_dataset import NodeDataset
from .planetoid_raw import load_planetoid
from .resolve import Source, available, load_dataset, load_graph, resolve

__all__ = [
    "NodeDataset",
    "Source",
    "available",
    "bundled_planetoid_dir",
    "from_pyg",
    "load_dataset",
    "load_edge_list",
    "load_graph",
    "load_mtx",
    "load_npz",
    "load_planetoid",
    "read_edge_list",
    "resolve",
]

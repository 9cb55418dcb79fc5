"""Where mgg finds graphs and datasets: one resolution function, `resolve(spec, data_dir)`, used
by `mgg train`, `mgg partition`, `mgg tune` and `python -m bench`. A spec is, in this order:

1. a path: a file (edge list, `.mtx[.gz]`, `.npz`; an `.npz` that also holds x, y and masks is a
   dataset, as is Shchur et al.'s Amazon and Coauthor `.npz`) or a directory (a prepared dataset,
   PyG Reddit raw files, an OGB node-property dataset, Planetoid files);
2. a dataset name under `data_dir`: a Planetoid name (`ind.NAME.*` in the directory or PyG's
   `NAME/raw`), `reddit` (PyG's `Reddit/raw`), an OGB name (`ogbn-arxiv` -> `ogbn_arxiv/`, as
   OGB lays it out), or a file name;
3. a synthetic spec (mgg.data.synthetic): `rmat-reddit`, `rmat-products`, `rmat:N:E`, `sbm:N:B:DEG:P_IN`; the old names
   `reddit` and `products` still mean the stand-ins when no real data is found, with a note.

Cora ships with the package (Planetoid raw format, mgg.data.bundled)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from ..errors import GraphError
from ..graph import Graph
from .bundled import bundled_planetoid_dir
from .datasets import (
    OGB_ALIASES,
    _npz_has_features,
    load_npz_dataset,
    load_ogb,
    load_reddit,
    ogb_name,
    ogb_root,
    reddit_dir,
)
from .formats import load_edge_list, load_mtx, load_npz, text_lines
from .node_dataset import NodeDataset
from .planetoid_raw import load_planetoid, planetoid_dir
from .prepared.layout import is_prepared
from .prepared.read import Prepared
from .prepared.sources import Shchur, load_shchur


@dataclass
class Source:
    """What a spec resolved to: a canonical name, its kind, and loaders for its graph alone and
    (where there is one) its dataset with features, labels and split."""

    name: str
    kind: str  # planetoid | reddit | ogb | file | npz-dataset | shchur | prepared | synthetic
    load_graph: Callable[[], Graph]
    load_dataset: Optional[Callable[[], NodeDataset]] = None
    path: Optional[Path] = None  # the file or directory it was found at (None: synthetic)
    _graph: Optional[Graph] = field(default=None, repr=False)

    @property
    def graph(self) -> Graph:
        if self._graph is None:
            self._graph = self.load_graph()
        return self._graph

    def dataset(self) -> NodeDataset:
        if self.load_dataset is None:
            raise GraphError(
                f"{self.name}: a graph without node features, labels or split ({self.kind}); training "
                "needs a dataset: a Planetoid name, a PyG Reddit directory, an OGB directory (ogbn-*), "
                "or an .npz with x, y, train_mask, val_mask, test_mask"
            )
        return self.load_dataset()


def resolve(spec: str, data_dir=None, relabel: bool = False) -> Source:
    """The one place a command-line graph or dataset name becomes a Source (see the module doc)."""
    from . import synthetic

    path = Path(spec)
    if path.exists():
        return _path_source(path, spec, relabel)
    if data_dir is not None:
        found = _named_source(spec, Path(data_dir), relabel)
        if found is not None:
            return found
    if planetoid_dir(bundled_planetoid_dir(), spec) is not None:  # Cora, whatever --data-dir says
        return _planetoid_source(Path(bundled_planetoid_dir()), spec)
    if synthetic.is_spec(spec):
        return Source(synthetic.canonical(spec), "synthetic", lambda: synthetic.from_spec(spec))
    where = (
        f"a dataset in {data_dir} (found there: {', '.join(available(data_dir)) or 'none'})"
        if data_dir is not None
        else "a dataset (no --data-dir given)"
    )
    raise GraphError(f"{spec}: no such file, not {where}, and not a synthetic spec ({synthetic.SPEC_HELP})")


def available(data_dir) -> list[str]:
    """The dataset names resolve() finds in a directory."""
    d = Path(data_dir)
    if not d.is_dir():
        return []
    names = {f.name.split(".")[1] for f in _planetoid_files(d)}
    names |= {f.name.split(".")[1] for f in d.glob("*/raw/ind.*.graph")}
    if any(reddit_dir(x) is not None for x in (d, d / "Reddit", d / "reddit")):
        names.add("reddit")
    names |= {ogb_name(x) for x in d.iterdir() if x.is_dir() and x.name.startswith("ogbn") and ogb_root(x) == x}
    return sorted(names)


def _path_source(path: Path, spec: str, relabel: bool) -> Source:
    found = _kind_source(path, spec, relabel)
    found.path = path
    return found


def _kind_source(path: Path, spec: str, relabel: bool) -> Source:
    if path.is_dir():
        kind = dir_kind(path)
        if kind == "prepared":
            return Source(spec, "prepared", lambda: Prepared(path).graph(), lambda: Prepared(path).dataset())
        if kind == "reddit":
            d = reddit_dir(path)
            return Source(spec, "reddit", lambda: load_reddit(d, features=False).graph, lambda: load_reddit(d))
        if kind == "ogb":
            root = ogb_root(path)
            return Source(ogb_name(root), "ogb", lambda: load_ogb(root, features=False).graph, lambda: load_ogb(root))
        if kind == "planetoid":
            names = sorted({f.name.split(".")[1] for f in _planetoid_files(path)})
            if len(names) != 1:
                raise GraphError(
                    f"{path}: several Planetoid datasets ({', '.join(names)}); pass the name with --data-dir {path}"
                )
            return _planetoid_source(path, names[0])
        if ".partial-" in path.name or (path / ".scratch").is_dir():
            raise GraphError(f"{path}: an interrupted mgg prepare (it has no manifest): remove it and prepare again")
        raise GraphError(
            f"{path}: a directory with no dataset mgg reads (PyG Reddit raw files reddit_data.npz + "
            "reddit_graph.npz, an OGB node-property dataset with raw/ and split/, or Planetoid "
            "ind.* files)"
        )
    name = path.name.lower()
    if name.endswith(".npz"):
        if Shchur.recognises(path):
            return Source(spec, "shchur", lambda: load_shchur(path).graph, lambda: load_shchur(path))
        if _npz_has_features(path):
            return Source(spec, "npz-dataset", lambda: load_npz(path), lambda: load_npz_dataset(path))
        return Source(spec, "file", lambda: load_npz(path))
    if name.endswith((".mtx", ".mtx.gz")) or _is_matrix_market(path):
        return Source(spec, "file", lambda: load_mtx(path))
    return Source(spec, "file", lambda: load_edge_list(path, relabel=relabel))


def _named_source(spec: str, data_dir: Path, relabel: bool) -> Optional[Source]:
    low = spec.lower()
    if planetoid_dir(data_dir, spec) is not None:
        return _planetoid_source(data_dir, spec)
    if low == "reddit":
        for d in (data_dir / "Reddit", data_dir / "reddit", data_dir):
            if reddit_dir(d) is not None:
                return _path_source(d, "reddit", relabel)
    ogb = OGB_ALIASES.get(low, low).lower()
    if ogb.startswith(("ogbn-", "ogbn_")):
        base = ogb.replace("-", "_")
        for d in sorted(data_dir.iterdir()) if data_dir.is_dir() else ():
            if d.is_dir() and d.name.lower() in (base, base + "_pyg", ogb) and ogb_root(d) is not None:
                return _path_source(d, spec, relabel)
    f = data_dir / spec
    if f.exists() and spec not in ("", "."):
        return _path_source(f, spec, relabel)
    return None


def _planetoid_source(root: Path, name: str) -> Source:
    return Source(name, "planetoid", lambda: load_planetoid(root, name).graph, lambda: load_planetoid(root, name))


def _planetoid_files(path: Path):
    return list(path.glob("ind.*.graph")) + list(path.glob("raw/ind.*.graph"))


def _is_matrix_market(path: Path) -> bool:
    try:
        for _, s in text_lines(path):
            return s.startswith("%%MatrixMarket")
    except GraphError:
        return False
    return False


def dir_kind(path: Path) -> Optional[str]:
    if is_prepared(path):
        return "prepared"
    if reddit_dir(path) is not None:
        return "reddit"
    if ogb_root(path) is not None:
        return "ogb"
    if _planetoid_files(path):
        return "planetoid"
    return None


def load_graph(spec: str, data_dir=None, relabel: bool = False) -> Graph:
    """A graph from a command-line spec: a file (edge list, .mtx, .npz), a dataset directory or
    name (Planetoid, PyG Reddit, OGB) under data_dir, or a synthetic spec. See resolve."""
    return resolve(spec, data_dir, relabel=relabel).graph


def load_dataset(spec: str, data_dir=None) -> NodeDataset:
    """A dataset with features, labels and split (for training). See resolve."""
    return resolve(spec, data_dir).dataset()

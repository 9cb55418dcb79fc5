"""`mgg prepare SOURCE OUT --parts P --method M`: a dataset partitioned once, onto disk, so that each
rank of a run reads and holds only its part (mgg.data.prepared: the format and its readers).

`range` and `random` need each node's in-degree and nothing else of the graph, so they stream: the
edges are read in pieces (twice, or three times for a source that coalesces), bucketed by destination
range and sorted a bucket at a time, the feature rows streamed to their parts; the memory held is the
chunk budget plus a few arrays of the node count, whatever the edge count and the feature width.
`metis` and `hypergraph` need the whole graph in memory: the memory they take is estimated first, and
a dataset that cannot fit is refused in one line before anything is allocated."""

from __future__ import annotations

import sys
from typing import Optional

import numpy as np

from ..data import resolve
from ..data.prepared.edges import stream_of
from ..data.prepared.layout import SPLITS, Manifest
from ..data.prepared.sources import InMemory, piece_rows, streaming_source
from ..data.prepared.write import Draft, write_edges, write_nodes
from ..errors import GraphError, MggError
from ..graph import available_memory
from ..version import __version__
from .compute import check, partition
from .methods import METHODS, from_degrees

DEFAULT_BUDGET = 512 << 20  # bytes of edges and feature rows in flight
STREAMED = ("range", "random")
# bytes the in-memory methods hold per edge and per node beyond the features (the dataset's CSR, the
# partitioner's symmetric input or column nets, and the partitioner's own structures): measured on
# R-MAT graphs with mgg.partition, rounded up
IN_MEMORY_BYTES = {
    "metis": (72, 96),
    "hypergraph": (120, 160),
    "metis+vb": (120, 160),  # the refinement's readers, reads and pin counts besides
    "hypergraph+vb": (168, 224),
}


def estimate_bytes(method: str, nodes: int, edges: int, features: int) -> int:
    """The memory the in-memory methods take for a dataset of this size (IN_MEMORY_BYTES)."""
    per_edge, per_node = IN_MEMORY_BYTES[method]
    return per_edge * edges + per_node * nodes + 4 * nodes * features


def prepare(
    spec,
    out,
    parts: int,
    method: str = "range",
    seed: int = 0,
    budget: int = DEFAULT_BUDGET,
    data_dir=None,
    overwrite: bool = False,
    progress: bool = False,
) -> Manifest:
    """Writes the prepared dataset of `spec` (a dataset path or name, as mgg.data.load_dataset takes,
    or a NodeDataset) cut into `parts` parts by `method` into the directory `out`.

    Args:
        spec: the dataset.
        out: the output directory (must not exist unless overwrite).
        parts: P; a run of any rank count dividing P reads it (consecutive parts merged).
        method: range, random (streamed) or metis, hypergraph (in memory, estimated first).
        seed: the method's seed.
        budget: bytes of edges and feature rows held at once by range and random.
        data_dir: where dataset names are looked up.
        overwrite: replace `out` (only once the new directory is complete).
        progress: progress bars.

    Returns:
        The Manifest written.
    """
    if method not in METHODS:
        raise MggError(f"--method must be one of {METHODS}, got {method!r}")
    if not isinstance(parts, (int, np.integer)) or parts < 1:
        raise MggError(f"--parts must be a positive integer, got {parts!r}")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or not 0 <= seed < 2**31:
        raise MggError(f"--seed must be an integer in [0, 2^31), got {seed!r}")
    if budget < (1 << 20):
        raise MggError(f"the chunk budget must be at least 1 MiB, got {budget} bytes")
    source = _source(spec, data_dir, method)
    try:
        if parts > source.num_nodes:
            raise MggError(f"{parts} parts exceed the dataset's {source.num_nodes} nodes")
        if method not in STREAMED and source.streams:  # a streaming source told what it holds: estimate
            need = estimate_bytes(method, source.num_nodes, source.edge_count_hint or 0, source.num_features)
            have = available_memory()
            if have is not None and need > have:
                raise MggError(
                    f"{method} partitions in memory: about {need / 2**30:.1f} GiB for {source.num_nodes:,} nodes, "
                    f"{source.edge_count_hint or 0:,} edges and {source.num_features} features, but "
                    f"{have / 2**30:.1f} GiB are available; prepare with --method range or random (streamed), or "
                    "on a machine with more memory"
                )
            source.close()
            source = InMemory(resolve(str(spec), data_dir).dataset())
        draft = Draft(out, overwrite)
        try:
            manifest = _write(draft, source, parts, method, seed, budget, str(spec), progress)
        except BaseException:
            draft.abandon()
            raise
    finally:
        source.close()
    return manifest


def _source(spec, data_dir, method: str):
    """The dataset as a streaming source where its files stream, else in memory."""
    from ..data import NodeDataset

    if isinstance(spec, NodeDataset):
        return InMemory(spec)
    found = resolve(str(spec), data_dir)
    if found.kind == "prepared":
        raise MggError(f"{spec}: a prepared dataset already (mgg train --dataset {spec} reads it)")
    if found.path is not None:
        s = streaming_source(found.path)
        if s is not None:
            return s
    return InMemory(found.dataset())


def _write(draft: Draft, source, parts: int, method: str, seed: int, budget: int, spec: str, progress: bool):
    cap_edges = max(1024, budget // 96)  # a bucket's records (32 bytes) and the sort's indices
    per_piece = piece_rows(budget, 48)
    if source.streams:
        stream = stream_of(source, per_piece, draft.scratch, cap_edges, progress)
        perm, bounds = from_degrees(method, stream.degrees, parts, seed)
    else:
        ds = source.ds
        check(ds.graph, parts, method, seed)
        part = partition(ds.graph, parts, method, seed)
        stream = stream_of(source, per_piece, draft.scratch, cap_edges, False)
        perm, bounds = (None if part.identity else part.perm), part.bounds
    inv = None
    if perm is not None:
        inv = np.empty_like(perm)
        inv[perm] = np.arange(perm.size, dtype=perm.dtype)
    degrees = stream.degrees if perm is None else stream.degrees[perm]
    write_edges(draft, stream.pieces, inv, bounds, degrees, stream.weight_dtype, cap_edges, progress)
    del degrees
    y = source.labels()
    masks = source.masks()
    for name, m in zip(SPLITS, masks, strict=True):
        if m.shape != (source.num_nodes,):
            raise GraphError(f"{source.name}: the {name} mask has shape {list(m.shape)} for {source.num_nodes} nodes")
    if y.shape[0] != source.num_nodes:
        raise GraphError(f"{source.name}: {y.shape[0]} labels for {source.num_nodes} nodes")
    row_bytes = 4 * max(source.num_features, 1)
    write_nodes(
        draft,
        lambda: source.features(piece_rows(budget, row_bytes)),
        source.num_features,
        perm,
        inv,
        bounds,
        y,
        masks,
        max(budget // 4, 1 << 20),
        progress,
    )
    multi = y.ndim == 2
    manifest = Manifest(
        id="",
        name=source.name,
        source=spec,
        num_nodes=source.num_nodes,
        num_edges=stream.num_edges,
        num_features=source.num_features,
        num_classes=int(y.shape[1]) if multi else int(y.max()) + 1 if y.size else 0,
        label_shape=(int(y.shape[1]),) if multi else (),
        x_dtype="float32",
        weighted=stream.weight_dtype is not None,
        bounds=tuple(int(b) for b in bounds),
        method=method,
        seed=int(seed),
        split_counts={k: int(np.count_nonzero(m)) for k, m in zip(SPLITS, masks, strict=True)},
        mgg_version=_version(),
    )
    done = draft.finish(manifest, progress)
    if progress:
        print(
            f"mgg prepare: {done.num_nodes:,} nodes, {done.num_edges:,} edges in {parts} parts -> {draft.out}",
            file=sys.stderr,
        )
    return done


def _version() -> str:
    return __version__


def default_budget() -> int:
    """DEFAULT_BUDGET, or a quarter of the available memory where that is less."""
    have: Optional[int] = available_memory()
    return DEFAULT_BUDGET if have is None else max(1 << 20, min(DEFAULT_BUDGET, have // 4))

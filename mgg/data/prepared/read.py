"""Reading a prepared directory (layout.py): a rank's rows (its parts of the ids, features, labels,
split and CSR rows), a grid rank's blocks of the adjacency and columns of the features, or the whole
dataset back in the user's order. Every byte read is checked against the manifest's checksums and
counted; a rank reads its parts' files and nothing else (the manifest aside)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ...errors import GraphError
from ...graph import Graph
from ..node_dataset import NodeDataset
from .layout import EDGE_FILES, MANIFEST, NODE_FILES, SPLIT_BITS, Manifest, Reads, part_file


@dataclass
class RankRows:
    """One rank's share of a prepared dataset: the relabelled nodes [row_begin, row_end) and their
    in-edges. `bounds` are the ranks' ranges (consecutive parts merged), the only partition book."""

    manifest: Manifest
    rank: int
    world: int
    bounds: np.ndarray  # int64 [world + 1]
    rowptr: np.ndarray  # int64 [rows + 1]
    col: np.ndarray  # int64 [edges]: relabelled source ids
    weight: Optional[np.ndarray]
    ids: np.ndarray  # int64 [rows]: the user's id of each row
    x: np.ndarray  # float32 [rows, D]
    y: np.ndarray  # int64 [rows] or [rows, T]
    split: np.ndarray  # uint8 [rows]: SPLIT_BITS
    bytes_read: int = 0

    @property
    def row_begin(self) -> int:
        return int(self.bounds[self.rank])

    @property
    def row_end(self) -> int:
        return int(self.bounds[self.rank + 1])

    @property
    def num_rows(self) -> int:
        return self.row_end - self.row_begin

    def mask(self, split: str) -> np.ndarray:
        return (self.split & SPLIT_BITS[split]) != 0


class Prepared:
    """A prepared directory, its manifest read and checked (Manifest.read)."""

    def __init__(self, path):
        self.path = Path(path)
        self.manifest = Manifest.read(self.path)
        self.reads = Reads(self.path, self.manifest)

    @property
    def bounds(self) -> np.ndarray:
        return np.asarray(self.manifest.bounds, np.int64)

    @property
    def parts(self) -> int:
        return self.manifest.parts

    @property
    def bytes_read(self) -> int:
        return self.reads.bytes_read

    def rank_bounds(self, world: int) -> np.ndarray:
        """The ranges of `world` ranks: each takes P / world consecutive parts."""
        if not isinstance(world, (int, np.integer)) or world < 1 or self.parts % world:
            raise GraphError(
                f"{self.path}: prepared for {self.parts} parts, which {world} ranks cannot share (the rank count "
                f"must divide {self.parts}: consecutive parts are merged); prepare it again with --parts a "
                f"multiple of {world}"
            )
        return self.bounds[:: self.parts // world].copy()

    def parts_of(self, rank: int, world: int) -> range:
        k = self.parts // world if self.parts % world == 0 else 0
        self.rank_bounds(world)
        return range(rank * k, (rank + 1) * k)

    def files_of(self, parts, names=NODE_FILES + EDGE_FILES) -> list:
        m = self.manifest
        return [part_file(p, n) for p in parts for n in names if part_file(p, n) in m.files]

    def files_of_ranks(self, ranks, world: int) -> list:
        """What ranks `ranks` of a run of `world` read (the manifest, then their parts' files), relative
        to the directory: what a machine without a shared filesystem needs of it."""
        parts = sorted({p for r in ranks for p in self.parts_of(r, world)})
        return [MANIFEST, *self.files_of(parts)]

    def check_present(self, parts, names=NODE_FILES + EDGE_FILES) -> None:
        """The files of these parts exist with the manifest's sizes (no data read)."""
        for rel in self.files_of(parts, names):
            self.reads.check_present(rel)

    # ---- a rank's rows ---------------------------------------------------------------------------
    def rows(self, rank: int, world: int) -> RankRows:
        """Rank `rank` of `world`'s rows: its parts' files, each read whole and checked."""
        bounds = self.rank_bounds(world)
        parts = self.parts_of(rank, world)
        self.check_present(parts)
        start = self.reads.bytes_read
        lo, hi = int(bounds[rank]), int(bounds[rank + 1])
        ids = np.concatenate([self.reads.array(part_file(p, "ids")) for p in parts])
        y = np.concatenate([self.reads.array(part_file(p, "y")) for p in parts])
        split = np.concatenate([self.reads.array(part_file(p, "split")) for p in parts])
        x = self.features(parts, 0, self.manifest.num_features)
        rowptr, col, weight = self._csr(parts, lo, hi)
        return RankRows(
            self.manifest, rank, world, bounds, rowptr, col, weight, ids, x, y, split, self.reads.bytes_read - start
        )

    def features(self, parts, c0: int, c1: int) -> np.ndarray:
        """Columns [c0, c1) of the features of these (consecutive) parts' rows, C order."""
        b = self.bounds
        lo = int(b[parts[0]]) if len(parts) else 0
        rows = int(b[parts[-1] + 1]) - lo if len(parts) else 0
        x = np.empty((rows, c1 - c0), np.float32)
        for p in parts:
            a, z = int(b[p]) - lo, int(b[p + 1]) - lo
            self.reads.columns_into(part_file(p, "x"), x[a:z], c0, c1)
        return x

    def features_rows(self, part: int, lo: int, hi: int, c0: int, c1: int) -> np.ndarray:
        """Columns [c0, c1) of rows [lo, hi) of one part (offsets into it), C order: the rows' piece of
        each column, one read each (the whole part's rows: the columns' one range)."""
        rel = part_file(part, "x")
        e = self.manifest.files[rel]
        rows = e.shape[0]
        out = np.empty((hi - lo, c1 - c0), np.float32)
        if (lo, hi) == (0, rows):
            self.reads.columns_into(rel, out, c0, c1)
            return out
        item = np.dtype(e.dtype).itemsize
        column = np.empty(hi - lo, np.dtype(e.dtype))
        for c in range(c0, c1):
            at = e.offset + (c * rows + lo) * item
            self.reads.read_into(rel, at, at + (hi - lo) * item, memoryview(column.view(np.uint8)))
            out[:, c - c0] = column
        return out

    def _csr(self, parts, lo: int, hi: int) -> tuple:
        """The CSR of rows [lo, hi) from these parts' edge files: each edge at its row's place."""
        m, b = self.manifest, self.bounds
        sizes = [self.manifest.files[part_file(p, "col")].shape[0] for p in parts]
        col = np.empty(sum(sizes), np.int64)
        weight = np.empty(sum(sizes), np.dtype(m.files[part_file(parts[0], "weight")].dtype)) if m.weighted else None
        rowptr = np.zeros(hi - lo + 1, np.int64)
        at = 0
        for p, e in zip(parts, sizes, strict=True):
            first, rows = int(b[p]) - lo, int(b[p + 1] - b[p])
            row = self.reads.array(part_file(p, "row")).astype(np.int64)  # the part's own rows
            ptr = rowptr[first : first + rows + 1]  # ptr[0] is `at`, where the part before ended
            np.cumsum(np.bincount(row, minlength=rows), out=ptr[1:])
            ptr[1:] += at
            place = self.reads.array(part_file(p, "pos")).astype(np.int64)
            place += ptr[row]
            del row
            col[place] = self.reads.array(part_file(p, "col"))
            if weight is not None:
                weight[place] = self.reads.array(part_file(p, "weight"))
            del place
            at += e
        return rowptr, col, weight

    # ---- a grid rank's blocks ----------------------------------------------------------------------
    def block(self, row_parts, col_parts) -> tuple:
        """The edges whose destination lies in row_parts and source in col_parts (consecutive parts
        each): (dst, src, weight or None) as relabelled ids, each row's edges in their order. Reads
        only that block's range of each part's edge files."""
        m = self.manifest
        if not len(row_parts) or not len(col_parts):
            return np.zeros(0, np.int64), np.zeros(0, np.int64), None
        q0, q1 = col_parts[0], col_parts[-1] + 1
        self.check_present(row_parts, ("row", "col", "pos", "weight", "blocks"))
        dsts, srcs, ws, places = [], [], [], []
        for p in row_parts:
            blocks = self.reads.array(part_file(p, "blocks"))
            e0, e1 = int(blocks[q0]), int(blocks[q1])
            dsts.append(self.reads.array(part_file(p, "row"), e0, e1).astype(np.int64) + int(self.bounds[p]))
            srcs.append(self.reads.array(part_file(p, "col"), e0, e1))
            places.append(self.reads.array(part_file(p, "pos"), e0, e1))
            if m.weighted:
                ws.append(self.reads.array(part_file(p, "weight"), e0, e1))
        dst, src, place = np.concatenate(dsts), np.concatenate(srcs), np.concatenate(places)
        del dsts, srcs, places  # the pieces freed before the sort's copies (a grid rank's peak)
        order = np.lexsort((place, dst))
        del place
        w = np.concatenate(ws)[order] if m.weighted else None
        return dst[order], src[order], w

    # ---- the whole dataset ---------------------------------------------------------------------------
    def dataset(self) -> NodeDataset:
        """The whole dataset in the user's order (one process: `mgg train --dataset DIR`)."""
        r = self.rows(0, 1)
        n = self.manifest.num_nodes
        if not np.array_equal(np.sort(r.ids), np.arange(n)):
            raise GraphError(f"{self.path}: the parts' ids are not the nodes 0..{n - 1} once each")
        dst = np.repeat(r.ids, np.diff(r.rowptr))
        w = None if r.weight is None else torch.from_numpy(r.weight)
        graph = Graph.from_edges(r.ids[r.col], dst, n, w, what=str(self.path))
        order = np.argsort(r.ids)
        masks = [torch.from_numpy(r.mask(s)[order]) for s in SPLIT_BITS]
        return NodeDataset(
            self.manifest.name,
            graph,
            torch.from_numpy(np.ascontiguousarray(r.x[order])),
            torch.from_numpy(r.y[order]),
            *masks,
        )

    def graph(self) -> Graph:
        return self.dataset().graph

"""Writing a prepared directory (layout.py) in bounded memory, given the partition: the edges go into
temporary buckets of destination ranges small enough to sort in memory, each bucket is sorted into
the part's edge files; the feature rows go straight to their part's file (the identity order) or
through buckets of the same kind (a relabelling). Everything is written into a temporary sibling
directory that takes the output's name only when complete (a rename), so an interrupted prepare
leaves nothing that looks finished."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np
from tqdm.auto import tqdm

from ...errors import GraphError
from .layout import SPLIT_BITS, FileEntry, Manifest, crc_chunks, npy_header, part_file


class Draft:
    """A prepared directory being written: OUT.partial-ID beside OUT, renamed to OUT by finish()."""

    def __init__(self, out, overwrite: bool = False):
        self.out = Path(out)
        if self.out.exists() and not overwrite:
            raise GraphError(f"{self.out}: exists; remove it, choose another output, or pass --overwrite")
        if not self.out.parent.is_dir():
            raise GraphError(f"{self.out.parent}: no such directory for the output")
        self.id = uuid.uuid4().hex
        self.dir = self.out.parent / f"{self.out.name}.partial-{self.id[:8]}"
        self.dir.mkdir()
        self.scratch = self.dir / ".scratch"
        self.scratch.mkdir()
        self._files: dict = {}  # rel -> (fd, header bytes, dtype, shape, fortran)

    def create(self, rel: str, dtype, shape: tuple, fortran: bool = False) -> None:
        """A file of the array's full size (its data filled by write)."""
        path = self.dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        header = npy_header(np.dtype(dtype), shape, fortran)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, header)
        size = len(header) + np.dtype(dtype).itemsize * int(np.prod(shape, dtype=np.int64))
        os.ftruncate(fd, size)
        self._files[rel] = (fd, len(header), np.dtype(dtype), tuple(shape), fortran)

    def write(self, rel: str, item: int, values: np.ndarray) -> None:
        """values (as the file's dtype, flattened) at item `item` of the file's data (in its order)."""
        fd, header, dtype, _, _ = self._files[rel]
        data = np.ascontiguousarray(values, dtype).reshape(-1)
        if data.size:
            os.pwrite(fd, memoryview(data.view(np.uint8)), header + item * dtype.itemsize)

    def write_rows(self, rel: str, first: int, rows: np.ndarray) -> None:
        """Rows [first, first + len(rows)) of a Fortran-order [R, D] file: one write per column."""
        _, _, _, shape, _ = self._files[rel]
        cols = np.asfortranarray(rows)
        for c in range(shape[1]):
            self.write(rel, c * shape[0] + first, cols[:, c])

    def finish(self, manifest: Manifest, progress: bool = False) -> Manifest:
        """Closes the files, checksums them, writes the manifest and renames the directory to OUT
        (an OUT being overwritten is removed only once the new one is complete)."""
        files = {}
        for rel, (fd, header, dtype, shape, fortran) in tqdm(
            sorted(self._files.items()), desc="checksums", disable=not progress, leave=False
        ):
            os.fsync(fd)
            os.close(fd)
            path = self.dir / rel
            files[rel] = FileEntry(
                path.stat().st_size,
                header,
                dtype.str,
                tuple(int(s) for s in shape),
                fortran,
                crc_chunks(path, manifest.chunk),
            )
        self._files = {}
        shutil.rmtree(self.scratch)
        done = Manifest(**dict(manifest.__dict__, id=self.id, files=files))
        done.write(self.dir)
        old = None
        if self.out.exists():
            old = self.out.parent / f"{self.out.name}.old-{self.id[:8]}"
            os.replace(self.out, old)
        os.replace(self.dir, self.out)
        if old is not None:
            shutil.rmtree(old)
        return done

    def abandon(self) -> None:
        """Removes what was written (a failed prepare leaves nothing behind)."""
        for fd, *_ in self._files.values():
            os.close(fd)
        self._files = {}
        shutil.rmtree(self.dir, ignore_errors=True)


class Buckets:
    """Temporary files of fixed-size records, one per bucket, appended a piece at a time and read back
    one bucket at a time."""

    def __init__(self, folder: Path, count: int, dtype: np.dtype, name: str):
        self.folder, self.count, self.dtype, self.name = Path(folder), count, np.dtype(dtype), name

    def _path(self, b: int) -> Path:
        return self.folder / f"{self.name}-{b:06d}.bin"

    def add(self, which: np.ndarray, records: np.ndarray) -> None:
        order = np.argsort(which, kind="stable")
        which, records = which[order], records[order]
        cuts = np.flatnonzero(np.diff(which)) + 1
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, which.size], strict=True):
            if hi > lo:
                with open(self._path(int(which[lo])), "ab") as f:
                    f.write(memoryview(np.ascontiguousarray(records[lo:hi]).view(np.uint8)))

    def take(self, b: int) -> np.ndarray:
        """Bucket b's records (in the order they were added); its file is removed."""
        path = self._path(b)
        if not path.exists():
            return np.zeros(0, self.dtype)
        out = np.fromfile(path, self.dtype)
        path.unlink()
        return out


def cuts_of(bounds: np.ndarray, degrees: np.ndarray, cap: int) -> np.ndarray:
    """Node ids cutting the relabelled nodes into ranges of at most `cap` edges (a row of more is a
    range alone), every part bound among them."""
    cum = np.cumsum(degrees, dtype=np.int64)
    total = int(cum[-1]) if cum.size else 0
    inner = np.searchsorted(cum, np.arange(cap, total, cap, dtype=np.int64), side="left") + 1
    cuts = np.union1d(np.asarray(bounds, np.int64), inner[inner < degrees.size])
    return cuts


def write_edges(
    draft: Draft,
    edges: Callable[[], Iterator[tuple]],
    inv: Optional[np.ndarray],
    bounds: np.ndarray,
    degrees: np.ndarray,
    weight_dtype,
    cap: int,
    progress: bool,
) -> list:
    """The edge files of every part, from the edge stream (src, dst, weight or None in the user's ids,
    each row's edges in their order) and each relabelled node's in-degree. inv: the relabelled id of
    each user id (None: the identity). weight_dtype None: unweighted. cap: the edges of a bucket.
    Returns each part's edge count."""
    P = bounds.size - 1
    cuts = cuts_of(bounds, degrees, cap)
    B = cuts.size - 1
    fields = [("dst", np.int64), ("src", np.int64), ("seq", np.int64)]
    if weight_dtype is not None:
        fields.append(("w", weight_dtype))
    buckets = Buckets(draft.scratch, B, np.dtype(fields), "edges")
    counts = np.zeros(B * P, np.int64)
    seq = 0
    total = int(degrees.sum())
    bar = tqdm(total=total, desc="edges to buckets", unit="edge", unit_scale=True, disable=not progress, leave=False)
    for src, dst, w in edges():
        nd = dst if inv is None else inv[dst]
        ns = src if inv is None else inv[src]
        b = np.searchsorted(cuts, nd, side="right") - 1
        q = np.searchsorted(bounds, ns, side="right") - 1
        counts += np.bincount(b * P + q, minlength=B * P)
        rec = np.empty(nd.size, buckets.dtype)
        rec["dst"], rec["src"], rec["seq"] = nd, ns, np.arange(seq, seq + nd.size)
        if weight_dtype is not None:
            rec["w"] = w
        buckets.add(b, rec)
        seq += nd.size
        bar.update(nd.size)
    bar.close()
    if seq != total:
        raise GraphError(f"the edges changed between two reads ({total:,} then {seq:,})")
    counts = counts.reshape(B, P)
    part_of = np.searchsorted(bounds, cuts[:-1], side="right") - 1
    sizes = []
    bar = tqdm(total=total, desc="edges to parts", unit="edge", unit_scale=True, disable=not progress, leave=False)
    for p in range(P):
        mine = np.flatnonzero(part_of == p)
        per_q = counts[mine].sum(0)
        blocks = np.concatenate([[0], np.cumsum(per_q)]).astype(np.int64)
        e_p = int(blocks[-1])
        sizes.append(e_p)
        names = {"row": np.int32, "col": np.int64, "pos": np.int32}
        if weight_dtype is not None:
            names["weight"] = weight_dtype
        for name, dt in names.items():
            draft.create(part_file(p, name), dt, (e_p,))
        draft.create(part_file(p, "blocks"), np.int64, (P + 1,))
        draft.write(part_file(p, "blocks"), 0, blocks)
        written = np.zeros(P, np.int64)
        for b in mine:
            rec = buckets.take(int(b))
            if rec.size:
                rec = rec[np.lexsort((rec["seq"], rec["dst"]))]
                starts = np.r_[0, np.flatnonzero(np.diff(rec["dst"])) + 1]
                pos = np.arange(rec.size) - np.repeat(starts, np.diff(np.r_[starts, rec.size]))
                q = np.searchsorted(bounds, rec["src"], side="right") - 1
                order = np.lexsort((pos, rec["dst"], q))
                rec, pos, q = rec[order], pos[order], q[order]
                row = rec["dst"] - bounds[p]
                qcuts = np.searchsorted(q, np.arange(P + 1), side="left")
                for k in np.flatnonzero(np.diff(qcuts)):
                    lo, hi = qcuts[k], qcuts[k + 1]
                    at = int(blocks[k] + written[k])
                    draft.write(part_file(p, "row"), at, row[lo:hi])
                    draft.write(part_file(p, "col"), at, rec["src"][lo:hi])
                    draft.write(part_file(p, "pos"), at, pos[lo:hi])
                    if weight_dtype is not None:
                        draft.write(part_file(p, "weight"), at, rec["w"][lo:hi])
                    written[k] += hi - lo
                bar.update(rec.size)
        if not np.array_equal(written, per_q):
            raise GraphError(f"part {p}: {int(written.sum()):,} edges written of {e_p:,} (the edges changed)")
    bar.close()
    return sizes


def write_nodes(
    draft: Draft,
    features: Callable[[], Iterator[np.ndarray]],
    num_features: int,
    perm: Optional[np.ndarray],
    inv: Optional[np.ndarray],
    bounds: np.ndarray,
    y: np.ndarray,
    masks: tuple,
    cap_bytes: int,
    progress: bool,
) -> None:
    """Each part's ids, labels, split and features (float32, Fortran order), from the feature rows
    in the user's order. perm[new id] = user id and inv its inverse (None: the identity)."""
    P, n = bounds.size - 1, int(bounds[-1])
    bits = np.zeros(n, np.uint8)
    for k, m in zip(SPLIT_BITS, masks, strict=True):
        bits |= np.asarray(m, bool).astype(np.uint8) * SPLIT_BITS[k]
    for p in range(P):
        lo, hi = int(bounds[p]), int(bounds[p + 1])
        users = np.arange(lo, hi, dtype=np.int64) if perm is None else perm[lo:hi]
        for name, values in (("ids", users), ("y", y[users]), ("split", bits[users])):
            draft.create(part_file(p, name), values.dtype, values.shape)
            draft.write(part_file(p, name), 0, values)
        draft.create(part_file(p, "x"), np.float32, (hi - lo, num_features), fortran=True)
    row_bytes = 4 * max(num_features, 1) + 8
    cap_rows = max(1, cap_bytes // row_bytes)
    bar = tqdm(total=n, desc="features", unit="row", unit_scale=True, disable=not progress, leave=False)
    if perm is None:  # rows arrive in the parts' order: straight to their files
        at = 0
        for piece in features():
            _check_width(piece, num_features)
            _to_parts(draft, bounds, at, piece)
            at += piece.shape[0]
            bar.update(piece.shape[0])
        _check_rows(at, n)
    else:  # through buckets of relabelled ranges, each sorted into its part's rows
        cuts = np.union1d(np.asarray(bounds, np.int64), np.arange(0, n, cap_rows, dtype=np.int64))
        rec_t = np.dtype([("id", np.int64), ("x", np.float32, (num_features,))])
        buckets = Buckets(draft.scratch, cuts.size - 1, rec_t, "rows")
        at = 0
        for piece in features():
            _check_width(piece, num_features)
            ids = inv[at : at + piece.shape[0]]
            rec = np.empty(ids.size, rec_t)
            rec["id"], rec["x"] = ids, piece
            buckets.add(np.searchsorted(cuts, ids, side="right") - 1, rec)
            at += piece.shape[0]
        _check_rows(at, n)
        for b in range(cuts.size - 1):
            rec = buckets.take(b)
            rec = rec[np.argsort(rec["id"], kind="stable")]
            if rec.size:
                _to_parts(draft, bounds, int(cuts[b]), rec["x"])
            bar.update(rec.size)
    bar.close()


def _to_parts(draft: Draft, bounds: np.ndarray, first: int, rows: np.ndarray) -> None:
    """Rows [first, first + len(rows)) of the relabelled nodes into their parts' feature files."""
    last = first + rows.shape[0]
    p = int(np.searchsorted(bounds, first, side="right") - 1)
    while first < last:
        lo, hi = int(bounds[p]), int(bounds[p + 1])
        k = min(hi, last) - first
        draft.write_rows(part_file(p, "x"), first - lo, rows[:k])
        rows, first, p = rows[k:], first + k, p + 1


def _check_width(piece: np.ndarray, d: int) -> None:
    if piece.ndim != 2 or piece.shape[1] != d:
        raise GraphError(f"feature rows of shape {list(piece.shape)}, expected [rows, {d}]")


def _check_rows(got: int, n: int) -> None:
    if got != n:
        raise GraphError(f"{got:,} feature rows for {n:,} nodes")

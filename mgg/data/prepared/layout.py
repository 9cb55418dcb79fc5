"""The prepared dataset's format (`mgg prepare`): a directory of plain .npy arrays cut into P parts,
each a contiguous range of node ids, and a manifest. Nodes are relabelled once so that part p owns
the ids [bounds[p], bounds[p + 1]); the user's id of every node is kept (ids.npy), so a rank holds
O(P) of partition book (the bounds) and never an array of length N or E.

    manifest.json                  this module's Manifest (format, version, counts, bounds, the size
                                   and chunk checksums of every file)
    parts/00003/ids.npy            int64 [rows]: the user's id of each row of part 3
                x.npy              [rows, D] features, Fortran order (a column window is one range,
                                   so a grid rank reads only the feature shard of its place)
                y.npy              int64 [rows] (or [rows, T]): labels, -1 where a node has none
                split.npy          uint8 [rows]: bit 1 train, 2 validation, 4 test
                row.npy            int32 [edges]: the destination of each edge, as a row of the part
                col.npy            int64 [edges]: its source (a relabelled id)
                pos.npy            int32 [edges]: its place among its row's edges (the source order)
                weight.npy         float32 [edges] (weighted graphs only)
                blocks.npy         int64 [P + 1]: the edges whose source lies in part q are
                                   [blocks[q], blocks[q + 1]) (sorted by source part, row, place), so
                                   a block of the adjacency is one range of each edge file

Every file is checksummed in chunks (CRC-32 each; the manifest's `chunk` bytes, CHUNK when written),
so a reader that reads part of a file checks what it read and little more: a range is read out to the
chunks it touches, at most a chunk at each end (version 1 had 1 MiB chunks: a grid rank reading one
range of each edge file per row part read up to 16% more than its blocks at 8 ranks)."""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from ...errors import GraphError

FORMAT = "mgg-prepared"
VERSION = 2  # 2: the chunk size in the manifest (`chunk`); 1: 1 MiB chunks, still read
READS_VERSIONS = {1: 1 << 20, 2: None}  # version -> its chunk size where the manifest has none
MANIFEST = "manifest.json"
CHUNK = 1 << 17  # the checksummed unit of every file a prepare writes
NODE_FILES = ("ids", "x", "y", "split")
EDGE_FILES = ("row", "col", "pos", "weight", "blocks")
SPLIT_BITS = {"train": 1, "val": 2, "test": 4}
SPLITS = tuple(SPLIT_BITS)


def part_file(part: int, name: str) -> str:
    """The path of part `part`'s array `name`, relative to the directory."""
    return f"parts/{part:05d}/{name}.npy"


@dataclass(frozen=True)
class FileEntry:
    """One .npy file: its size, where its data starts, its array's dtype, shape and order, and the
    CRC-32 of each chunk (the manifest's) of the whole file (header included), as 8 hex digits each."""

    bytes: int
    offset: int
    dtype: str
    shape: tuple
    fortran: bool
    crc32: str

    def chunk_crc(self, i: int) -> int:
        return int(self.crc32[8 * i : 8 * i + 8], 16)

    @property
    def chunks(self) -> int:
        return len(self.crc32) // 8


@dataclass(frozen=True)
class Manifest:
    """What a prepared directory holds (manifest.json)."""

    id: str  # this prepare's identity: every rank of a run must read the same
    name: str
    source: str
    num_nodes: int
    num_edges: int
    num_features: int
    num_classes: int
    label_shape: tuple  # () single-label, (T,) multi-label
    x_dtype: str
    weighted: bool
    bounds: tuple  # P + 1 node ids
    method: str
    seed: int
    split_counts: dict  # train, val, test: nodes in each
    files: dict = field(default_factory=dict)  # relative path -> FileEntry
    format: str = FORMAT
    version: int = VERSION
    mgg_version: str = ""
    chunk: int = CHUNK  # the bytes of each checksummed piece of every file

    @property
    def parts(self) -> int:
        return len(self.bounds) - 1

    def write(self, directory: Path) -> None:
        d = asdict(self)
        d["files"] = {k: asdict(v) for k, v in self.files.items()}
        path = Path(directory) / MANIFEST
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(d, indent=1, sort_keys=True))
        os.replace(tmp, path)

    @staticmethod
    def read(directory) -> "Manifest":
        """The manifest of a prepared directory, checked: a missing or unreadable one, another
        format or another version is one GraphError naming the file."""
        path = Path(directory) / MANIFEST
        if not path.is_file():
            raise GraphError(f"{path}: missing (not a directory made by mgg prepare, or an interrupted one)")
        try:
            d = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise GraphError(f"{path}: not readable as a manifest ({e.__class__.__name__}: {e})") from None
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise GraphError(
                f"{path}: not a manifest of mgg prepare (format {d.get('format') if isinstance(d, dict) else d!r})"
            )
        if d.get("version") not in READS_VERSIONS:
            raise GraphError(
                f"{path}: format version {d.get('version')!r}, but this mgg reads versions "
                f"{', '.join(map(str, READS_VERSIONS))}: prepare the dataset again with this mgg"
            )
        if READS_VERSIONS[d["version"]] is not None:
            d.setdefault("chunk", READS_VERSIONS[d["version"]])
        try:
            files = {k: FileEntry(**dict(v, shape=tuple(v["shape"]))) for k, v in d.pop("files").items()}
            m = Manifest(**dict(d, files=files, bounds=tuple(d["bounds"]), label_shape=tuple(d["label_shape"])))
        except (KeyError, TypeError, ValueError) as e:
            raise GraphError(f"{path}: a manifest field is missing or malformed ({e})") from None
        if not isinstance(m.chunk, int) or m.chunk < 1:
            raise GraphError(f"{path}: chunk {m.chunk!r} is not a positive number of bytes")
        b = np.asarray(m.bounds)
        if b.size < 2 or b[0] != 0 or b[-1] != m.num_nodes or np.any(np.diff(b) < 1):
            raise GraphError(f"{path}: bounds {list(m.bounds)[:8]}... do not cut {m.num_nodes} nodes into parts")
        return m


def is_prepared(path) -> bool:
    """Whether `path` is a directory with a prepared dataset's manifest."""
    return Path(path).is_dir() and (Path(path) / MANIFEST).is_file()


def crc_chunks(path: Path, chunk: int = CHUNK) -> str:
    """The CRC-32 of every `chunk` bytes of a file, as 8 hex digits each (read a chunk at a time)."""
    out = []
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            out.append(f"{zlib.crc32(b):08x}")
    return "".join(out)


def npy_header(dtype: np.dtype, shape: tuple, fortran: bool) -> bytes:
    """The .npy header of an array (format 1.0, or 2.0 where 1.0's is too small), padded as numpy
    pads it, so that np.load and np.load(mmap_mode='r') read the file."""
    import io

    buf = io.BytesIO()
    d = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": bool(fortran), "shape": tuple(shape)}
    try:
        np.lib.format.write_array_header_1_0(buf, d)
    except ValueError:
        buf = io.BytesIO()
        np.lib.format.write_array_header_2_0(buf, d)
    return buf.getvalue()


class Reads:
    """Reads byte ranges of a prepared directory's files, checking each chunk it touches against
    the manifest (a missing, truncated or changed file is one GraphError naming it), and counts the
    bytes it read from disk (`bytes_read`). The last chunk read is kept, so reading a file in
    consecutive pieces reads each chunk once."""

    def __init__(self, root: Path, manifest: Manifest):
        self.root, self.manifest = Path(root), manifest
        self.chunk = manifest.chunk
        self.bytes_read = 0
        self._last: tuple = (None, -1, b"")  # (file, chunk, its bytes)

    def entry(self, rel: str) -> FileEntry:
        e = self.manifest.files.get(rel)
        if e is None:
            raise GraphError(f"{self.root / rel}: not in the manifest {self.root / MANIFEST}")
        return e

    def check_present(self, rel: str) -> None:
        """The file exists and has the manifest's size (cheap: no data read)."""
        path, e = self.root / rel, self.entry(rel)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise GraphError(f"{path}: missing (the manifest lists it)") from None
        if size != e.bytes:
            what = "truncated" if size < e.bytes else "longer than written"
            raise GraphError(f"{path}: {what}: {size:,} bytes, the manifest says {e.bytes:,}")

    def read_into(self, rel: str, start: int, stop: int, out: memoryview) -> None:
        """Bytes [start, stop) of a file into `out` (a writable buffer of stop - start bytes), each
        chunk they touch checked; whole chunks are read straight into `out`."""
        if stop <= start:
            return
        e, path = self.entry(rel), self.root / rel
        out = memoryview(out).cast("B")
        with open(path, "rb") as f:
            for i in range(start // self.chunk, (stop - 1) // self.chunk + 1):
                lo, hi = i * self.chunk, min((i + 1) * self.chunk, e.bytes)
                if start <= lo and hi <= stop and self._last[:2] != (rel, i):
                    self._check(f, rel, path, e, i, out[lo - start : hi - start])
                else:
                    b = self._chunk(f, rel, path, e, i)
                    a, z = max(start, lo), min(stop, lo + len(b))
                    out[a - start : z - start] = b[a - lo : z - lo]

    def _chunk(self, f, rel: str, path: Path, e: FileEntry, i: int) -> bytes:
        """Chunk i of a file, checked (the last one read is kept)."""
        if self._last[:2] != (rel, i):
            b = bytearray(min(self.chunk, max(e.bytes - i * self.chunk, 0)))
            self._check(f, rel, path, e, i, memoryview(b))
            self._last = (rel, i, bytes(b))
        return self._last[2]

    def _check(self, f, rel: str, path: Path, e: FileEntry, i: int, into: memoryview) -> None:
        """Reads chunk i into `into` and checks it against the manifest."""
        want = min(self.chunk, e.bytes - i * self.chunk)
        if i >= e.chunks or want <= 0:
            raise GraphError(f"{path}: a read past the {e.bytes:,} bytes the manifest lists")
        f.seek(i * self.chunk)
        got = f.readinto(into[:want])
        self.bytes_read += got
        if got != want:
            raise GraphError(f"{path}: truncated at byte {i * self.chunk + got:,}; the manifest says {e.bytes:,}")
        if zlib.crc32(into[:want]) != e.chunk_crc(i):
            at = i * self.chunk
            raise GraphError(
                f"{path}: changed since it was prepared (the checksum of bytes {at:,}-{at + want:,} "
                "differs from the manifest's: another prepare's file, or damaged)"
            )

    def array(self, rel: str, first: int = 0, stop: Optional[int] = None) -> np.ndarray:
        """Items [first, stop) along the first axis of a C-order array (a 1-D array's elements, a
        2-D array's rows), as a new array."""
        e = self.entry(rel)
        if e.fortran and len(e.shape) > 1:
            raise GraphError(f"{self.root / rel}: a Fortran-order array is read by columns")
        dt = np.dtype(e.dtype)
        stop = e.shape[0] if stop is None else stop
        row = dt.itemsize * int(np.prod(e.shape[1:], dtype=np.int64))
        out = np.empty((stop - first, *e.shape[1:]), dt)
        self.read_into(rel, e.offset + first * row, e.offset + stop * row, memoryview(out.reshape(-1).view(np.uint8)))
        return out

    def columns_into(self, rel: str, out: np.ndarray, c0: int, c1: int) -> None:
        """Columns [c0, c1) of a Fortran-order [rows, D] array into out [rows, c1 - c0] (C order),
        a few columns at a time (the bytes in flight stay under 16 MiB)."""
        e = self.entry(rel)
        rows, dt = e.shape[0], np.dtype(e.dtype)
        col_bytes = rows * dt.itemsize
        step = max(1, (16 << 20) // max(col_bytes, 1))
        buf = np.empty(step * rows, dt)
        for a in range(c0, c1, step):
            b = min(c1, a + step)
            piece = buf[: (b - a) * rows]
            self.read_into(rel, e.offset + a * col_bytes, e.offset + b * col_bytes, memoryview(piece.view(np.uint8)))
            out[:, a - c0 : b - c0] = piece.reshape(b - a, rows).T

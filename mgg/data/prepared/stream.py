"""Reading arrays a piece at a time, so that `mgg prepare` holds a chunk of a file and never the
whole: an array stored in an .npz archive (numpy's .npy inside a zip member, stored or deflated),
and the numbers of a headerless comma-separated .csv.gz (OGB's raw files)."""

from __future__ import annotations

import gzip
import zipfile
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from ...errors import GraphError
from ..formats import UNREADABLE


class NpzArray:
    """One array of an .npz archive, read a piece at a time. dtype, shape and order come from its
    .npy header. An uncompressed member is read in place at any offset, in either order; a
    compressed one in one pass per run of items it is read as (a compressed member in the other
    order than a piece asks for is read whole: numpy's savez_compressed of a transposed array)."""

    def __init__(self, path: Path, name: str):
        self.path, self.name = Path(path), name
        try:
            self._zip = zipfile.ZipFile(self.path)
            self._member = name + ".npy"
            with self._zip.open(self._member) as f:
                self.dtype, self.shape, self.fortran, self.offset = _header(f)
            self._stored_at = _stored_offset(self._zip, self._member)
        except KeyError:
            raise GraphError(f"{path}: no field {name!r}") from None
        except (zipfile.BadZipFile, ValueError, *UNREADABLE) as e:
            raise GraphError(f"{path}: field {name} cannot be read ({e.__class__.__name__}: {e})") from None
        if self.dtype.hasobject:
            raise GraphError(f"{path}: field {name} is an object array (not read: it would need unpickling)")
        # a 2-D array's axis whose items are adjacent in the file: its columns in C order, its rows in Fortran's
        self.by_rows = not (self.fortran and len(self.shape) > 1)

    def __len__(self) -> int:
        return int(self.shape[0]) if self.shape else 1

    def close(self) -> None:
        self._zip.close()

    def whole(self) -> np.ndarray:
        """The whole array (for the small ones: labels, masks, counts)."""
        try:
            with self._zip.open(self._member) as f:
                return np.lib.format.read_array(f, allow_pickle=False)
        except (zipfile.BadZipFile, ValueError, EOFError, *UNREADABLE) as e:
            raise GraphError(f"{self.path}: field {self.name} cannot be read ({e.__class__.__name__}: {e})") from None

    def pieces(self, rows: int, first: int = 0, stop: Optional[int] = None) -> Iterator[np.ndarray]:
        """Rows [first, stop) in pieces of at most `rows` rows (C order)."""
        stop = len(self) if stop is None else stop
        if self.by_rows:
            width = int(np.prod(self.shape[1:], dtype=np.int64))
            for _, run in self._runs(first * width, stop * width, rows * width):
                yield run.reshape((-1, *self.shape[1:]))
            return
        yield from (p.T for p in self._strided(first, stop, rows, self.shape[1], self.shape[0]))

    def items(self, first: int, stop: int, per_piece: int) -> Iterator[np.ndarray]:
        """Items [first, stop) of the data as one flat C-order run, in pieces of at most per_piece
        (a row of edge_index [2, E] is the items [0, E) or [E, 2E))."""
        if self.by_rows:
            for _, run in self._runs(first, stop, per_piece):
                yield run
            return
        rows, cols = self.shape
        r, c0 = divmod(first, cols)
        if (stop - 1) // cols != r:
            raise GraphError(f"{self.path}: field {self.name}: a run across rows of a Fortran-order array")
        for _, run in self._runs(c0 * rows, (c0 + stop - first) * rows, per_piece * rows):  # whole columns
            yield run.reshape(-1, rows)[:, r].copy()

    def columns(self, per_piece: int) -> Iterator[np.ndarray]:
        """A 2-D array's columns in pieces of at most per_piece: [rows, k] each (edge_index [2, E]: k
        edges at a time, whatever the order)."""
        rows, cols = self.shape
        if not self.by_rows:
            for _, run in self._runs(0, rows * cols, rows * per_piece):
                yield run.reshape(-1, rows).T
            return
        readers = [self.items(r * cols, (r + 1) * cols, per_piece) for r in range(rows)]
        yield from (np.stack(piece) for piece in zip(*readers, strict=True))

    def _runs(self, first: int, stop: int, per_piece: int) -> Iterator[tuple]:
        """(start, items) of the flat data [first, stop), per_piece items at a time."""
        item = self.dtype.itemsize
        try:
            if self._stored_at is not None:  # not compressed: read in place
                f = open(self.path, "rb")
                f.seek(self._stored_at + self.offset + first * item)
            else:
                f = self._zip.open(self._member)
                _skip(f, self.offset + first * item)
            with f:
                at = first
                while at < stop:
                    k = min(per_piece, stop - at)
                    b = f.read(k * item)
                    if len(b) != k * item:
                        raise GraphError(f"{self.path}: field {self.name} is shorter than its header says")
                    yield at, np.frombuffer(b, self.dtype)
                    at += k
        except (zipfile.BadZipFile, EOFError, *UNREADABLE) as e:
            raise GraphError(f"{self.path}: field {self.name} cannot be read ({e.__class__.__name__}: {e})") from None

    def _strided(self, first: int, stop: int, per_piece: int, lines: int, length: int) -> Iterator:
        """Of `lines` runs of `length` adjacent items each (a Fortran-order array's columns), the
        positions [first, stop) of every run, per_piece at a time: [lines, k] pieces. In place where
        the member is not compressed, else from the whole array."""
        which = range(lines)
        if self._stored_at is None:
            whole = self.whole()
            flat = whole.T if whole.ndim > 1 else whole
            for a in range(first, stop, per_piece):
                yield np.stack([flat[i][a : min(stop, a + per_piece)] for i in which])
            return
        item = self.dtype.itemsize
        with open(self.path, "rb") as f:
            for a in range(first, stop, per_piece):
                k = min(per_piece, stop - a)
                out = np.empty((len(which), k), self.dtype)
                for j, i in enumerate(which):
                    f.seek(self._stored_at + self.offset + (i * length + a) * item)
                    if f.readinto(memoryview(out[j].view(np.uint8))) != k * item:
                        raise GraphError(f"{self.path}: field {self.name} is shorter than its header says")
                yield out


def _stored_offset(z: zipfile.ZipFile, member: str) -> Optional[int]:
    """Where an uncompressed member's bytes start in the archive file (None: compressed)."""
    info = z.getinfo(member)
    if info.compress_type != zipfile.ZIP_STORED:
        return None
    with open(z.filename, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)
    if len(local) != 30 or local[:4] != b"PK\x03\x04":
        return None
    name_len, extra_len = int.from_bytes(local[26:28], "little"), int.from_bytes(local[28:30], "little")
    return info.header_offset + 30 + name_len + extra_len


def _skip(f, n: int, step: int = 1 << 20) -> None:
    """Reads past n bytes of a compressed member, a MiB at a time (its seek reads 16 MiB at once)."""
    while n > 0:
        got = len(f.read(min(step, n)))
        if not got:
            raise EOFError("the member ends early")
        n -= got


def _header(f) -> tuple:
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    else:
        raise ValueError(f".npy format {version} (mgg reads 1.0 and 2.0 piece by piece)")
    return np.dtype(dtype), tuple(int(s) for s in shape), bool(fortran), f.tell()


def npz_fields(path: Path) -> set:
    """The field names of an .npz archive, without reading any."""
    try:
        with zipfile.ZipFile(path) as z:
            return {n[:-4] for n in z.namelist() if n.endswith(".npy")}
    except (zipfile.BadZipFile, *UNREADABLE) as e:
        raise GraphError(f"{path}: not a readable .npz file ({e.__class__.__name__}: {e})") from None


def csv_pieces(path: Path, dtype, what: str, bytes_per_piece: int) -> Iterator[np.ndarray]:
    """The rows of a headerless comma-separated .csv.gz (or plain .csv) of numbers, as 2-D arrays of
    about bytes_per_piece of text each; a malformed line is one GraphError naming it."""
    if not path.is_file():
        raise GraphError(f"{path}: missing {what}")
    opener = gzip.open if path.name.endswith(".gz") else open
    line = 0
    width = None
    try:
        with opener(path, "rb") as f:
            while True:
                lines = f.readlines(bytes_per_piece)
                if not lines:
                    return
                try:
                    a = np.loadtxt(lines, dtype=dtype, delimiter=",", ndmin=2)
                except ValueError:
                    _name_bad_line(path, lines, line, dtype, what)
                    raise
                if width is None:
                    width = a.shape[1]
                if a.shape[1] != width:
                    raise GraphError(f"{path}:{line + 1}: {what}: expected {width} comma-separated fields")
                line += len(lines)
                yield a
    except (EOFError, *UNREADABLE) as e:
        raise GraphError(f"{path}: cannot be read past line {line} ({e.__class__.__name__}: {e})") from None


def _name_bad_line(path: Path, lines: list, before: int, dtype, what: str) -> None:
    whole = np.issubdtype(dtype, np.integer)
    width = None
    for i, raw in enumerate(lines):
        s = raw.decode("utf-8", "replace").strip()
        t = s.split(",")
        width = width or len(t)
        try:
            [float(v) for v in t]
        except ValueError:
            raise GraphError(f"{path}:{before + i + 1}: {what}: non-numeric entry in {s[:80]!r}") from None
        if whole and not all(v.strip().lstrip("+-").isdigit() for v in t):
            raise GraphError(f"{path}:{before + i + 1}: {what}: expected integers, got {s[:80]!r}")
        if len(t) != width:
            raise GraphError(f"{path}:{before + i + 1}: {what}: expected {width} comma-separated fields, got {len(t)}")

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
    """One array of an .npz archive, read in pieces along its first axis (C order only: a
    Fortran-order member is read whole, `fortran`). dtype and shape come from its .npy header."""

    def __init__(self, path: Path, name: str):
        self.path, self.name = Path(path), name
        try:
            self._zip = zipfile.ZipFile(self.path)
            self._member = name + ".npy"
            with self._zip.open(self._member) as f:
                self.dtype, self.shape, self.fortran, self.offset = _header(f)
        except KeyError:
            raise GraphError(f"{path}: no field {name!r}") from None
        except (zipfile.BadZipFile, ValueError, *UNREADABLE) as e:
            raise GraphError(f"{path}: field {name} cannot be read ({e.__class__.__name__}: {e})") from None
        if self.dtype.hasobject:
            raise GraphError(f"{path}: field {name} is an object array (not read: it would need unpickling)")

    def __len__(self) -> int:
        return int(self.shape[0]) if self.shape else 1

    @property
    def row_items(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64))

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
        """Rows [first, stop) in pieces of at most `rows` rows."""
        if self.fortran and len(self.shape) > 1:
            whole = self.whole()[first:stop]
            for a in range(0, whole.shape[0], rows):
                yield whole[a : a + rows]
            return
        yield from self._run(first, len(self) if stop is None else stop, rows, self.row_items, self.shape[1:])

    def items(self, first: int, stop: int, per_piece: int) -> Iterator[np.ndarray]:
        """Items [first, stop) of the data read as one flat run, in pieces of at most per_piece (a
        row of edge_index [2, E] is the items [0, E) or [E, 2E))."""
        if self.fortran and len(self.shape) > 1:
            flat = self.whole().reshape(-1)[first:stop]
            for a in range(0, flat.size, per_piece):
                yield flat[a : a + per_piece]
            return
        yield from self._run(first, stop, per_piece, 1, ())

    def _run(self, first: int, stop: int, rows: int, per_row: int, row_shape: tuple) -> Iterator[np.ndarray]:
        item = self.dtype.itemsize
        try:
            with self._zip.open(self._member) as f:
                f.seek(self.offset + first * per_row * item)
                at = first
                while at < stop:
                    k = min(rows, stop - at)
                    want = k * per_row * item
                    b = f.read(want)
                    if len(b) != want:
                        raise GraphError(f"{self.path}: field {self.name} is shorter than its header says")
                    yield np.frombuffer(b, self.dtype).reshape((k, *row_shape))
                    at += k
        except (zipfile.BadZipFile, EOFError, *UNREADABLE) as e:
            raise GraphError(f"{self.path}: field {self.name} cannot be read ({e.__class__.__name__}: {e})") from None


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

"""The host heap of a training process: large tables given back to the system when freed.

glibc's malloc serves a block under its mmap threshold from its heap and keeps it there when freed, and
the threshold rises to the size of each mapped block freed (up to 32 MiB): after the first few tables
of an epoch, every feature or gradient table under 32 MiB comes from the heap, and the freed ones stay
resident between them (a rank's peak rises by tens of MiB over what it holds; bench/rank_memory.py
measures it). A fixed threshold maps each larger block on its own and unmaps it when freed. It costs a page
fault per page of each new table. Other C libraries (and macOS) are left as they are; a threshold the
user set (MALLOC_MMAP_THRESHOLD_) wins, and MGG_MMAP_THRESHOLD sets mgg's (bytes; 0 leaves glibc's own)."""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Optional

from .errors import MggError

MMAP_THRESHOLD = 1 << 20  # bytes: larger blocks mapped on their own, and unmapped when freed
MAX_THRESHOLD = 1 << 30  # bytes: mallopt takes a C int
ENV = "MGG_MMAP_THRESHOLD"
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)


def requested_threshold() -> Optional[int]:
    """The threshold map_large_blocks() sets by default: MGG_MMAP_THRESHOLD, else MMAP_THRESHOLD (0:
    glibc's own); None where the user's MALLOC_MMAP_THRESHOLD_ decides."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return None
    value = os.environ.get(ENV, str(MMAP_THRESHOLD))
    try:
        return int(value)
    except ValueError:
        raise MggError(f"{ENV} must be a number of bytes (0: glibc's own threshold), got {value!r}") from None


def map_large_blocks(threshold: Optional[int] = None) -> bool:
    """Fixes glibc's mmap threshold at `threshold` bytes (default: requested_threshold()) for this
    process (training processes: the ranks mgg.distributed.process.init_from_env starts). Returns
    whether it was set: False for 0, on another C library, where the user set MALLOC_MMAP_THRESHOLD_,
    or for a value glibc refuses (past its own maximum)."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    threshold = requested_threshold() if threshold is None else threshold
    if not 0 <= threshold <= MAX_THRESHOLD:
        raise MggError(f"the mmap threshold ({ENV}) must be 0 to {MAX_THRESHOLD} bytes, got {threshold}")
    if threshold == 0 or not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "gnu_get_libc_version"):
        return False
    return libc.mallopt(ctypes.c_int(_M_MMAP_THRESHOLD), ctypes.c_int(threshold)) == 1

"""Partitions kept on disk, keyed by the graph's content hash (Graph.fingerprint()), the rank
count, the method and its seed, so a large graph is partitioned once. One .npz per key, written
atomically; a corrupt file, or one whose contents do not match its key (stale), is ignored
with a warning and replaced by the next result."""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Optional

import numpy as np

from ..graph import Graph
from .assignment import Partition
from .methods import REFINED
from .refine import VERSION as REFINE_VERSION

FORMAT = "mgg-partition/1"


def default_dir() -> Path:
    """$MGG_PARTITION_CACHE, else ~/.cache/mgg/partitions."""
    return Path(os.environ.get("MGG_PARTITION_CACHE", Path.home() / ".cache" / "mgg" / "partitions"))


class PartitionCache:
    """A directory of partitions (default: default_dir())."""

    def __init__(self, directory=None):
        self.dir = Path(directory) if directory else default_dir()

    def path(self, graph: Graph, num_ranks: int, method: str, seed: int) -> Path:
        # a refined method's key names the refinement's version: an earlier one's result is another
        refined = f"-r{REFINE_VERSION}" if method.endswith(REFINED) else ""
        return self.dir / f"{graph.fingerprint()}-p{num_ranks}-{method}{refined}-s{seed}.npz"

    def get(self, graph: Graph, num_ranks: int, method: str, seed: int) -> Optional[Partition]:
        """The cached partition of this key, or None (absent, corrupt or stale: with a warning)."""
        path = self.path(graph, num_ranks, method, seed)
        if not path.exists():
            return None
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                perm, bounds = z["perm"].astype(np.int64), z["bounds"].astype(np.int64)
            want = dict(
                format=FORMAT,
                fingerprint=graph.fingerprint(),
                nodes=graph.num_nodes,
                ranks=num_ranks,
                method=method,
                seed=seed,
            )
            stale = {k: meta.get(k) for k in want if meta.get(k) != want[k]}
            if stale:
                raise ValueError(f"stale: {stale} where { ({k: want[k] for k in stale}) } was expected")
            n = graph.num_nodes
            if perm.shape != (n,) or perm.min() < 0 or perm.max() >= n or np.bincount(perm, minlength=n).max() != 1:
                raise ValueError("perm is not a permutation of the graph's nodes")
            if bounds.shape != (num_ranks + 1,) or bounds[0] != 0 or bounds[-1] != n or np.any(np.diff(bounds) < 1):
                raise ValueError(f"bounds {bounds.tolist()} do not cut {n} nodes into {num_ranks} non-empty ranges")
            return Partition(method, perm, bounds, float(meta.get("seconds", 0.0)), seed, cached=True)
        except Exception as e:  # any corruption: recompute, never crash
            warnings.warn(
                f"mgg: ignoring partition cache file {path}: {e.__class__.__name__}: {e}", RuntimeWarning, stacklevel=3
            )
            return None

    def put(self, graph: Graph, result: Partition) -> Optional[Path]:
        """Writes a result atomically (a crash never leaves half a file); returns its path, or
        None with a warning where the directory cannot be written."""
        path = self.path(graph, result.num_ranks, result.method, result.seed)
        meta = dict(
            format=FORMAT,
            fingerprint=graph.fingerprint(),
            nodes=graph.num_nodes,
            ranks=result.num_ranks,
            method=result.method,
            seed=result.seed,
            seconds=result.seconds,
        )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp.npz")
            os.close(fd)
            np.savez(tmp, perm=result.perm.astype(np.int32), bounds=result.bounds, meta=np.array(json.dumps(meta)))
            os.replace(tmp, path)
        except OSError as e:
            warnings.warn(f"mgg: could not write partition cache file {path}: {e}", RuntimeWarning, stacklevel=3)
            return None
        return path

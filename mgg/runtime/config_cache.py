"""Persistent cache of tuned configs, keyed by graph fingerprint (and node ranges), ranks, GPU
model, D, dtype, backend and fetch policy, so that a second run starts tuned. A corrupt or
foreign file is ignored with a warning."""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Optional

from ..plan import Config

FORMAT = "mgg-config-cache/1"


def default_path() -> Path:
    return Path(os.environ.get("MGG_CACHE", Path.home() / ".cache" / "mgg" / "tuned.json"))


def cache_key(
    fingerprint: str, ranks: int, device_name: str, dim: int, dtype: str, backend: str = "local", fetch: str = "none"
) -> str:
    """The key of one tuned step.

    Args:
        fingerprint: the graph's (and, for several ranks, its node ranges'; targets.plan_fingerprint).
        ranks: P.
        device_name: the GPU model (DeviceLimits.name; 'cpu').
        dim: feature width D.
        dtype: storage type name ('float32').
        backend: 'local' (one rank), 'halo' or 'nvshmem' (torchrun), 'inproc-peers' or
            'inproc-halo' (P ranks in one process).
        fetch: the nvshmem backend's fetch policy, 'direct' in process, else 'none'.

    Returns:
        The key.
    """
    return f"{fingerprint}|{ranks}|{device_name}|{dim}|{dtype}|{backend}|{fetch}"


def parse_key(key: str) -> dict:
    """The fields of a cache key (the inverse of cache_key)."""
    fields = ("fingerprint", "ranks", "device_name", "dim", "dtype", "backend", "fetch")
    parts = key.split("|")
    if len(parts) != len(fields):
        raise ValueError(f"not a cache key: {key!r}")
    out = dict(zip(fields, parts, strict=True))
    out["ranks"], out["dim"] = int(out["ranks"]), int(out["dim"])
    return out


class ConfigCache:
    """The cache file: read again whenever another process or tuner has rewritten it, so entries
    written meanwhile are seen and kept.

    Args:
        path: the file (default: $MGG_CACHE or ~/.cache/mgg/tuned.json).
    """

    def __init__(self, path=None):
        self.path = Path(path) if path else default_path()
        self.entries: dict = {}
        self._stamp = None
        self._load()

    def _load(self):
        try:
            stamp = self.path.stat().st_mtime_ns
        except OSError:
            return
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            data = json.loads(self.path.read_text())
            if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), dict):
                raise ValueError(f"not a {FORMAT} file")
            for v in data["entries"].values():
                Config(*v["config"])  # validates
                float(v["latency_ms"])
            self.entries = data["entries"]
        except Exception as e:  # any corruption: start empty, never crash
            warnings.warn(f"mgg: ignoring config cache {self.path}: {e}", RuntimeWarning, stacklevel=3)
            self.entries = {}

    def get(self, key: str) -> Optional[Config]:
        """The tuned config of `key`, or None."""
        self._load()
        e = self.entries.get(key)
        return Config(*e["config"]) if e else None

    def put(
        self,
        key: str,
        config: Config,
        latency_ms: float,
        table: Optional[dict] = None,
        trajectory: Optional[list] = None,
    ) -> None:
        """Records a tuned config (atomically rewrites the file).

        Args:
            key: cache_key(...).
            config: the chosen config.
            latency_ms: its step time.
            table: every measured config's step time.
            trajectory: the configs in the order measured.
        """
        entry = dict(
            config=list(config.as_tuple()),
            latency_ms=float(latency_ms),
            table={",".join(map(str, c.as_tuple())): t for c, t in (table or {}).items()},
        )
        if trajectory:
            entry["trajectory"] = [list(c.as_tuple()) for c in trajectory]
        self._load()  # keep what others wrote since
        self.entries[key] = entry
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(dict(format=FORMAT, entries=self.entries), f, indent=1)
        os.replace(tmp, self.path)  # atomic: a crash never leaves half a file
        self._stamp = self.path.stat().st_mtime_ns

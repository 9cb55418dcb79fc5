"""Persistent cache of tuned configs, keyed by graph fingerprint, ranks, GPU model, D and dtype,
so that a second run starts tuned. A corrupt or foreign file is ignored with a warning."""
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


def cache_key(fingerprint: str, ranks: int, device_name: str, dim: int, dtype: str) -> str:
    return f"{fingerprint}|{ranks}|{device_name}|{dim}|{dtype}"


class ConfigCache:
    def __init__(self, path=None):
        self.path = Path(path) if path else default_path()
        self.entries: dict = {}
        self._load()

    def _load(self):
        if not self.path.exists():
            return
        try:
            data = json.loads(self.path.read_text())
            if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), dict):
                raise ValueError(f"not a {FORMAT} file")
            for v in data["entries"].values():
                Config(*v["config"])  # validates
                float(v["latency_ms"])
            self.entries = data["entries"]
        except Exception as e:  # any corruption: start empty, never crash
            warnings.warn(f"mgg: ignoring config cache {self.path}: {e}", RuntimeWarning, stacklevel=2)
            self.entries = {}

    def get(self, key: str) -> Optional[Config]:
        e = self.entries.get(key)
        return Config(*e["config"]) if e else None

    def put(self, key: str, config: Config, latency_ms: float, table: Optional[dict] = None) -> None:
        self.entries[key] = dict(config=list(config.as_tuple()), latency_ms=float(latency_ms),
                                 table={",".join(map(str, c.as_tuple())): t for c, t in (table or {}).items()})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(dict(format=FORMAT, entries=self.entries), f, indent=1)
        os.replace(tmp, self.path)  # atomic: a crash never leaves half a file

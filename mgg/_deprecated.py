"""The import paths of mgg 0.1.0 that the package layout moved (ARCHITECTURE.md), kept for one
release: `import mgg.io`, `from mgg.partition import METHODS` and the like still work, and each
name taken through an old path warns (DeprecationWarning) with its new home. No file stands at an
old path (the moved files keep their history); the alias modules are made here when mgg is
imported, and they import the new homes only when a name is taken."""

from __future__ import annotations

import importlib
import sys
import types
import warnings

# old module -> its new homes, searched in order for each name
MOVED = {
    "mgg.io": ("mgg.data.formats", "mgg.data.resolve"),
    "mgg.datasets": ("mgg.data.datasets", "mgg.data.resolve", "mgg.data.bundled"),
    "mgg.synthetic": ("mgg.data.synthetic", "mgg.data.stats", "mgg.data.arrays"),
    "mgg.partition": ("mgg.partitioning.assignment", "mgg.partitioning.methods", "mgg.partitioning.compute"),
    "mgg.partition_cache": ("mgg.partitioning.cache",),
    "mgg.partition_stats": ("mgg.partitioning.stats",),
    "mgg.partitioners": ("mgg.partitioning.methods",),
    "mgg.distributed.halo": ("mgg.distributed.backends.halo",),
    "mgg.distributed.allgather": ("mgg.distributed.backends.allgather",),
    "mgg.runtime.model": ("mgg.runtime.limits",),
    "mgg.runtime.cache": ("mgg.runtime.config_cache",),
    "mgg.nn.graph_cache": ("mgg.nn.plans",),
}
# names that also changed: old module, old name -> new name
RENAMED = {
    ("mgg.io", "_lines"): "text_lines",
    ("mgg.datasets", "_lines"): "text_lines",
    ("mgg.partition", "_from_parts"): "from_parts",
    ("mgg.partition", "_compute"): "compute",
}


def _alias(old: str, homes: tuple[str, ...]) -> types.ModuleType:
    module = types.ModuleType(old, f"Deprecated: moved to {', '.join(homes)}; this alias goes in the next release.")

    def __getattr__(name: str):
        if not name.startswith("__"):
            new = RENAMED.get((old, name), name)
            for home in homes:
                found = importlib.import_module(home)
                if hasattr(found, new):
                    warnings.warn(
                        f"{old}.{name} moved to {home}.{new}; the old path goes in the next release",
                        DeprecationWarning,
                        stacklevel=2,
                    )
                    return getattr(found, new)
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    module.__getattr__ = __getattr__
    return module


def install() -> None:
    """Puts the alias modules in sys.modules (before mgg binds `mgg.partition` to the function, so
    that a later `import mgg.partition` finds the alias and leaves the function in place)."""
    for old, homes in MOVED.items():
        sys.modules.setdefault(old, _alias(old, homes))


def module_attribute(name: str):
    """What `mgg.<name>` gives for an old module name (mgg's own __getattr__), with a warning."""
    old = f"mgg.{name}"
    if old not in MOVED:
        raise AttributeError(f"module 'mgg' has no attribute {name!r}")
    warnings.warn(
        f"{old} moved to {MOVED[old][0]}; the old path goes in the next release", DeprecationWarning, stacklevel=3
    )
    return sys.modules[old]

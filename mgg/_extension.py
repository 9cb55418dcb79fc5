"""Loads mgg._C, the compiled extension, after checking that it was built for the torch that is
installed: an extension built against another torch (pip's build isolation installs the newest
torch in the build environment) fails in obscure ways, so the mismatch is one clear line."""

from __future__ import annotations

import torch

REINSTALL = "reinstall mgg with `pip install --no-build-isolation .` in this environment"


def load():
    """Returns mgg._C, or raises ImportError naming the torch it was built for."""
    try:
        from . import _build
    except ImportError:  # a build that predates the record: the import below decides
        _build = None
    built = getattr(_build, "torch", None)
    if built is not None and built != torch.__version__:
        raise ImportError(f"mgg was built for torch {built} but torch {torch.__version__} is installed: {REINSTALL}")
    try:
        from . import _C
    except ImportError as e:
        if "undefined symbol" in str(e) or "cannot open shared object" in str(e):
            raise ImportError(
                f"mgg's extension does not load with torch {torch.__version__} "
                f"({str(e).splitlines()[0][:200]}): {REINSTALL}"
            ) from None
        raise
    return _C


def build_facts() -> dict:
    """What the extension was built with: torch, CUDA, nvcc, archs, NVSHMEM (empty if unknown)."""
    try:
        from . import _build
    except ImportError:
        return {}
    return {k: getattr(_build, k) for k in ("torch", "cuda", "nvcc", "archs", "nvshmem") if hasattr(_build, k)}

"""Facts about this installation: versions, devices, what the extension was built with."""
from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version

import torch


def _ver(pkg: str) -> str:
    try:
        return version(pkg)
    except PackageNotFoundError:
        return "not installed"


def collect() -> dict:
    from . import _C, __version__
    from ._extension import build_facts

    nvshmem = next((_ver(p) for p in ("nvidia-nvshmem-cu13", "nvidia-nvshmem-cu12") if _ver(p) != "not installed"),
                   "not installed")
    from .distributed.nvshmem import available

    why = available()
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    return {
        "mgg": __version__, "python": platform.python_version(), "torch": torch.__version__,
        "cuda (torch build)": torch.version.cuda or "none", "nvshmem": nvshmem,
        "extension CUDA kernels": bool(_C.with_cuda), "extension NVSHMEM runtime": bool(_C.with_nvshmem),
        **{f"built with {k}": ("none" if v is None else ", ".join(v) if isinstance(v, list) else v)
           for k, v in build_facts().items()},
        "distributed backends": "halo, nvshmem" if why is None else f"halo (nvshmem: {why.split(';')[0]})",
        "torch-geometric": _ver("torch-geometric"), "gpus": gpus or "none",
    }

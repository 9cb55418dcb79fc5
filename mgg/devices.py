"""Which device mgg runs on when the user does not say: the GPU where torch sees one and the
extension was built with CUDA kernels that run on it, else the CPU with a one-line reason. Every
entry point a user starts (`mgg train`, `mgg tune`, `python -m bench`, the examples) asks here and
says which device it chose in its first line of output."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from .errors import MggError


@dataclass(frozen=True)
class DeviceChoice:
    """The device chosen, and why (a phrase: the GPU's name, or why not the GPU)."""

    device: torch.device
    why: str

    def line(self, program: str) -> str:
        """The first line an entry point prints: `mgg train: device cuda (NVIDIA H200)`."""
        return (
            f"{program}: device {self.device} ({self.why})"
            if self.device.index
            else f"{program}: device {self.device.type} ({self.why})"
        )


def runs_on(archs: list, capability: tuple) -> bool:
    """Whether kernels built for `archs` (TORCH_CUDA_ARCH_LIST entries: "8.0", "9.0+PTX", "9.0a")
    run on a GPU of compute capability (major, minor): a cubin runs on the same major at an equal or
    higher minor, PTX on any equal or higher capability (JIT-compiled by the driver)."""
    major, minor = capability
    for entry in archs:
        base, _, ptx = str(entry).partition("+")
        try:
            a_major, a_minor = (int(v) for v in base.rstrip("af").split("."))
        except ValueError:
            continue
        if a_major == major and a_minor <= minor and not base.endswith("a") or (a_major, a_minor) == (major, minor):
            return True
        if ptx and (a_major, a_minor) <= (major, minor):
            return True
    return False


def default_device(index: Optional[int] = None) -> DeviceChoice:
    """CUDA (GPU `index`, default the current one) where torch sees a GPU and mgg's extension has
    CUDA kernels for it; otherwise the CPU, with the reason."""
    from . import _C
    from ._extension import build_facts

    if not torch.cuda.is_available():
        return DeviceChoice(torch.device("cpu"), "no CUDA device")
    index = torch.cuda.current_device() if index is None else index
    name = torch.cuda.get_device_name(index)
    if not _C.with_cuda:
        return DeviceChoice(
            torch.device("cpu"),
            f"{name} present, but mgg was built without CUDA kernels (no nvcc at build time, or MGG_CPU_ONLY=1); "
            "rebuild with nvcc to use it",
        )
    capability = tuple(torch.cuda.get_device_capability(index))
    archs = build_facts().get("archs")
    if archs and not runs_on(archs, capability):
        return DeviceChoice(
            torch.device("cpu"),
            f"{name} is sm_{capability[0]}{capability[1]} but mgg's CUDA kernels were built for {', '.join(archs)}; "
            "rebuild with TORCH_CUDA_ARCH_LIST including it",
        )
    return DeviceChoice(torch.device("cuda", index), name)


def choose_device(requested: Optional[str] = None) -> DeviceChoice:
    """The device an entry point runs on: `requested` (a torch device string) where given, checked
    to be usable; else default_device().

    Raises:
        MggError: `requested` names no device, or a CUDA device that is absent or that the
            extension has no kernels for."""
    if requested is None or requested == "auto":
        return default_device()
    try:
        device = torch.device(requested)
    except (RuntimeError, ValueError):
        raise MggError(f"device {requested!r}: not a device (cpu, cuda, cuda:N)") from None
    if device.type == "cpu":
        return DeviceChoice(device, "as asked")
    if device.type != "cuda":
        raise MggError(f"device {requested!r}: mgg runs on cpu or cuda")
    if torch.cuda.is_available() and device.index is not None and device.index >= torch.cuda.device_count():
        raise MggError(f"device {requested!r}: only {torch.cuda.device_count()} CUDA device(s)")
    choice = default_device(device.index)
    if choice.device.type != "cuda":
        raise MggError(f"device {requested!r} asked for, but {choice.why}")
    return choice

"""Where a table of node embeddings lives, for the comparisons of MGG's evaluation (Figs. 7, 8):
device memory (the default), pinned host memory that GPU kernels read zero-copy through its
device-mapped address (fetch 'uva', as DGL on PyTorch-Direct does), and CUDA managed memory
that pages migrate to the GPU on demand (MGG over unified memory). GPU only: on the CPU these
placements do not exist and are refused with one line."""

from __future__ import annotations

import torch

from .errors import MggError

PLACEMENTS = ("device", "uva", "uvm")


def _need_cuda(what: str) -> None:
    if not torch.cuda.is_available():
        raise MggError(f"{what} needs a CUDA GPU and none is visible")


def pinned_table(t: torch.Tensor) -> torch.Tensor:
    """A copy of t in pinned host memory, which GPU kernels read through its device-mapped
    address (aggregate_peers with fetch 'uva').

    Args:
        t: any tensor.

    Returns:
        The pinned CPU copy.
    """
    _need_cuda("fetch 'uva' (zero-copy reads of pinned host memory)")
    return t.detach().to("cpu").pin_memory()


def managed_table(t: torch.Tensor, device=None, prefetch: bool = True) -> torch.Tensor:
    """A copy of t in CUDA managed (unified) memory, as a CUDA tensor: kernels read it like
    device memory and its pages migrate on demand (cudaMallocManaged through cupy).

    Args:
        t: any tensor.
        device: the GPU that reads it (default: the current one).
        prefetch: advise the GPU as the preferred location and prefetch the pages to it, so that
            the first kernel does not fault them in one by one.

    Returns:
        A CUDA tensor whose storage is managed memory (it keeps the allocation alive).
    """
    _need_cuda("uvm (CUDA managed memory)")
    try:
        import cupy
    except ImportError:
        raise MggError("uvm tables come from cupy's managed allocator: pip install cupy-cuda13x") from None
    device = torch.device(device or f"cuda:{torch.cuda.current_device()}")
    with cupy.cuda.Device(device.index):
        mem = cupy.cuda.malloc_managed(max(t.numel() * t.element_size(), 1))
        arr = cupy.ndarray((t.numel() * t.element_size(),), dtype=cupy.uint8, memptr=mem)
        # through __cuda_array_interface__, which keeps `arr` (and so `mem`) alive: cupy exports
        # managed memory over DLPack as kDLCUDAManaged, which torch 2.11's from_dlpack refuses
        # ("Unsupported device_type: 13", seen on an H200)
        out = torch.as_tensor(arr, device=device).view(t.dtype).view(t.shape)
        if prefetch:
            rt = cupy.cuda.runtime
            rt.memAdvise(mem.ptr, mem.mem.size, rt.cudaMemAdviseSetPreferredLocation, device.index)
            rt.memPrefetchAsync(mem.ptr, mem.mem.size, device.index, torch.cuda.current_stream(device).cuda_stream)
    out.copy_(t)
    return out

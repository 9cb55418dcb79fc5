"""A torchrun rank's process: how it joins the job (init_from_env) and how it leaves it
(exit_rank). Every entry point that runs as a torchrun rank (the CLI, the benchmark and test
workers, the examples) starts and ends through here."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import torch
import torch.distributed as dist


def init_from_env(device: str = "cpu", backend: str = "halo") -> None:
    """torchrun sets RANK/WORLD_SIZE/MASTER_*. The process group is NCCL when every rank has a
    GPU of its own and the halo, node-halo, node-nvshmem (its network stage) or grid backend moves
    the rows; otherwise gloo (the CPU; several ranks sharing a GPU, which NCCL refuses; the nvshmem
    backend, which uses the group only to start NVSHMEM and to all-reduce weight gradients)."""
    if dist.is_initialized():
        return
    cuda = device.startswith("cuda")
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local % torch.cuda.device_count())
    own_gpu = cuda and int(os.environ.get("LOCAL_WORLD_SIZE", 1)) <= torch.cuda.device_count()
    moves_rows = ("halo", "node-halo", "node-nvshmem", "grid", "sa-1.5d", "cagnet-1.5d")
    dist.init_process_group("nccl" if own_gpu and backend in moves_rows else "gloo")


def exit_rank(code: int = 0, meet: bool = True) -> NoReturn:
    """Ends this rank's process with exit status `code`, without the interpreter's teardown.

    With `meet`, every rank first meets at a barrier (no collective is then pending anywhere) and
    NVSHMEM, if this process started it, is finalised (collective). Standard streams are flushed.
    Pass meet=False on an error path, where a peer may never reach the barrier.

    Why not return normally: a gloo worker thread releases its last collective's tensors after
    the caller's wait() has returned, and releasing a tensor Python has seen takes the GIL. When
    that thread asks for the GIL while the interpreter finalises, CPython ends the thread by a
    forced unwind through a noexcept frame and the process aborts ("terminate called without an
    active exception"; seen with torch 2.14.1 under load, core dump: ProcessGroupGloo::runLoop ->
    ~AsyncAllreduceWork -> TensorImpl::decref_pyobject -> take_gil -> pthread_exit).
    destroy_process_group() does not close the window: it leaves the worker threads' last work
    to them. Leaving by os._exit after the barrier skips the teardown, and so the race."""
    if meet and dist.is_initialized():
        dist.barrier()
        from . import nvshmem

        nvshmem.finalize()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

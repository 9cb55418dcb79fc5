"""A torchrun rank's process: how it joins the job (init_from_env) and how it leaves it
(exit_rank). Every entry point that runs as a torchrun rank (the CLI, the benchmark and test
workers, the examples) starts and ends through here.

Joining: the ranks of one launch of the worker group first agree on a name of their own in the job's
store (rank 0 draws it; each rank proves by a nonce of its own that it read this launch's name, not an
earlier one's), and the process group keeps its keys under that name. torchrun's c10d rendezvous shares
its store with the workers and keeps every earlier launch's keys there: without a fresh name, a
restarted group (--max-restarts) reads the dead workers' addresses and cannot form (pytorch issues
135712, 167288; TORCHELASTIC_RESTART_COUNT differs between agents, so it cannot name the launch)."""

from __future__ import annotations

import os
import secrets
import sys
import time
from datetime import timedelta
from typing import NoReturn, Optional

import torch
import torch.distributed as dist

from .. import heap
from ..errors import MggError
from . import watchdog

DEFAULT_TIMEOUT_MIN = 10.0  # a collective that has not completed in this long ends the job (mgg train --timeout)
_LAUNCH_KEY = "mgg/launch"


def init_from_env(device: str = "cpu", backend: str = "halo", timeout_min: Optional[float] = None) -> None:
    """torchrun sets RANK/WORLD_SIZE/MASTER_*. The process group is NCCL when every rank has a
    GPU of its own and the halo, node-halo, node-nvshmem (its network stage) or grid backend moves
    the rows; otherwise gloo (the CPU; several ranks sharing a GPU, which NCCL refuses; the nvshmem
    backend, which uses the group only to start NVSHMEM and to all-reduce weight gradients).

    timeout_min: how long a rank waits for the others (default DEFAULT_TIMEOUT_MIN): the watchdog
    (mgg.distributed.watchdog) ends every rank that waited so long with a line naming the ranks that
    did not arrive; the process group's own timeout is a little longer, so the line comes first."""
    if dist.is_initialized():
        return
    heap.map_large_blocks()  # a rank's freed tables go back to the system (mgg.heap)
    minutes = DEFAULT_TIMEOUT_MIN if timeout_min is None else float(timeout_min)
    if not minutes > 0:
        raise MggError(f"the timeout must be positive minutes, got {timeout_min}")
    cuda = device.startswith("cuda")
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local % torch.cuda.device_count())
    own_gpu = cuda and int(os.environ.get("LOCAL_WORLD_SIZE", 1)) <= torch.cuda.device_count()
    moves_rows = ("halo", "node-halo", "node-nvshmem", "grid", "sa-1.5d", "cagnet-1.5d")
    wait = timedelta(minutes=minutes)
    store, rank, world = next(dist.rendezvous("env://", timeout=wait + watchdog.SLACK))
    launch = _agree_on_launch(store, rank, world, wait)
    dist.init_process_group(
        "nccl" if own_gpu and backend in moves_rows else "gloo",
        store=dist.PrefixStore(f"mgg/{launch}/pg", store),
        rank=rank,
        world_size=world,
        timeout=wait + watchdog.SLACK,
    )
    watchdog.start(dist.PrefixStore(f"mgg/{launch}/watch", store), rank, world, wait.total_seconds())


def _agree_on_launch(store, rank: int, world: int, wait: timedelta) -> str:
    """The name the ranks of this launch share (module docstring). Rank 0 draws it and publishes it;
    every other rank reads it and answers with a nonce of its own under it; rank 0 publishes the
    answers it collected, and a rank that finds its nonce there knows the name is this launch's (a
    name read before rank 0 published, an earlier launch's, never carries it: it reads again)."""
    deadline = time.monotonic() + wait.total_seconds()
    if rank == 0:
        launch = secrets.token_hex(8)
        store.set(_LAUNCH_KEY, launch)
        answers = [f"{launch}/answer/{r}" for r in range(1, world)]
        _wait_for(store, answers, deadline, "the other ranks to join")
        store.set(f"{launch}/answers", ",".join(store.get(k).decode() for k in answers))
        return launch
    nonce = secrets.token_hex(8)
    while True:
        if time.monotonic() > deadline:
            raise MggError(f"rank {rank}: rank 0 did not name this launch within {wait} (is it running?)")
        _wait_for(store, [_LAUNCH_KEY], deadline, "rank 0 to name the launch")
        launch = store.get(_LAUNCH_KEY).decode()
        store.set(f"{launch}/answer/{rank}", nonce)
        while time.monotonic() < deadline:
            if store.check([f"{launch}/answers"]):
                if nonce in store.get(f"{launch}/answers").decode().split(","):
                    return launch
                time.sleep(0.05)
                break  # an earlier launch's name: read the name again
            if store.get(_LAUNCH_KEY).decode() != launch:
                break  # rank 0 of this launch has named it since
            time.sleep(0.05)


def _wait_for(store, keys: list, deadline: float, what: str) -> None:
    while not store.check(keys):
        if time.monotonic() > deadline:
            raise MggError(f"timed out waiting for {what} in the job's store")
        time.sleep(0.05)


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
        watchdog.stop()
        dist.barrier()
        from . import nvshmem

        nvshmem.finalize()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

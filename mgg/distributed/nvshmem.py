"""The `nvshmem` backend: MGG's hybrid placement over NVSHMEM.

Each rank's node embeddings of a layer live in NVSHMEM symmetric memory (a table of the largest
range's rows, the same size on every PE); each rank's plan lives in its private device memory;
the fused kernel (torch.ops.mgg.aggregate_peers) reads local rows from its own table and remote
rows from their owners' tables, by NVSHMEM get or by direct loads through nvshmem_ptr.

NVSHMEM is started from torch.distributed: rank 0 makes a unique id, the process group
broadcasts it, every rank initialises with it (no MPI). Several processes may share one GPU
(NVSHMEM's limited multi-PE-per-GPU mode), which is how this backend is tested on one device.

Ordering (the published artifact races here): a layer's aggregation writes its rows into one
of two symmetric tables (ping-pong per shape), then an on-stream barrier, then the kernel. A
table is rewritten two aggregations later, after another barrier that every PE reaches only
once its earlier kernels finished, so no PE reads rows before they are written for this layer
or after a peer has overwritten them.
"""
from __future__ import annotations

import atexit
import os
from typing import Optional

import torch
import torch.distributed as dist

from ..errors import MggError
from ..ops import run_peers
from ..plan import RankPlan


class Runtime:
    """This process's NVSHMEM: the extension's host API (`lib`: mgg._C.nvshmem) and the
    symmetric tables allocated so far (two per shape, used in turn)."""

    def __init__(self, lib):
        self.lib = lib
        self.tables: dict = {}
        self.turn: dict = {}

    def next_table(self, dim: int, dtype: torch.dtype, range_rows: list[int]) -> "_Table":
        key = (dim, dtype, tuple(range_rows))
        if key not in self.tables:  # collective allocation: every rank reaches it at the same call
            self.tables[key] = [_Table(self.lib, max(range_rows), dim, dtype, range_rows) for _ in range(2)]
            self.turn[key] = 0
        t = self.tables[key][self.turn[key]]
        self.turn[key] ^= 1
        return t

    def free(self) -> None:
        for pair in self.tables.values():
            for t in pair:
                self.lib.free(t.table)
        self.tables.clear()


_runtime: Optional[Runtime] = None


def runtime() -> Runtime:
    if _runtime is None:
        raise MggError("mgg.distributed: NVSHMEM is not initialised (mgg.distributed.nvshmem.init)")
    return _runtime


def available() -> Optional[str]:
    """None if this process can run the nvshmem backend, else why not (one line)."""
    from .. import _C

    if not getattr(_C, "with_nvshmem", False):
        return "this mgg build has no NVSHMEM (it was built without nvcc); use backend 'halo'"
    if not torch.cuda.is_available():
        return "the nvshmem backend needs a CUDA GPU and none is visible; use backend 'halo'"
    return None


def init(group=None) -> None:
    """Starts NVSHMEM over the ranks of `group` (all ranks call it). Selects this rank's GPU
    first (LOCAL_RANK modulo the visible GPUs, so several PEs may share one)."""
    global _runtime
    why = available()
    if why:
        raise MggError(f"mgg.distributed: {why}")
    from .. import _C

    if _runtime is not None:
        return
    if not dist.is_initialized():
        raise MggError("mgg.distributed: torch.distributed is not initialised (launch with torchrun)")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", dist.get_rank(group))) % torch.cuda.device_count())
    torch.cuda.current_stream().synchronize()  # the CUDA context exists before NVSHMEM starts
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    if not _C.nvshmem.initialized():
        box = [_C.nvshmem.unique_id() if rank == 0 else None]
        dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
        try:
            _C.nvshmem.init(box[0], rank, world)
        except RuntimeError as e:
            raise MggError(str(e).splitlines()[0]) from None
    if _C.nvshmem.n_pes() != world or _C.nvshmem.my_pe() != rank:
        raise MggError(f"mgg.distributed: NVSHMEM made this PE {_C.nvshmem.my_pe()} of {_C.nvshmem.n_pes()}, "
                       f"but torch.distributed says rank {rank} of {world}")
    _runtime = Runtime(_C.nvshmem)
    atexit.register(finalize)


def finalize() -> None:
    """Frees the symmetric tables and stops NVSHMEM (collective; also run at exit)."""
    global _runtime
    if _runtime is None:
        return
    torch.cuda.synchronize()
    _runtime.free()
    _runtime.lib.finalize()
    _runtime = None


class _Table:
    """A symmetric table [rows, dim] and this PE's views of every PE's copy of it."""

    def __init__(self, lib, rows: int, dim: int, dtype: torch.dtype, range_rows: list[int]):
        self.table = lib.empty([rows, dim], dtype)
        me = lib.my_pe()
        views = [lib.peer_tensor(self.table, pe) for pe in range(len(range_rows))]
        self.reachable = all(v is not None for v in views)
        # unreachable peers (another node) keep a placeholder of the right shape for the bounds
        # checks: gets address them through this PE's symmetric address
        self.peers = [(v if v is not None else self.table)[:n] for v, n in zip(views, range_rows, strict=True)]
        self.own = self.table[:range_rows[me]]


def _pull(x_own: torch.Tensor, plan: RankPlan, range_rows: list[int], fetch: str,
          deterministic: bool) -> torch.Tensor:
    """One aggregation over the symmetric tables: write this rank's rows into the next table,
    barrier, then the kernel reads its own rows and peers' rows from their tables."""
    rt = runtime()
    t = rt.next_table(x_own.size(1), x_own.dtype, range_rows)
    if fetch == "direct" and not t.reachable:
        raise MggError("fetch 'direct' needs every PE reachable by loads (one node with peer access); "
                       "use fetch 'get-warp'")
    t.own.copy_(x_own)
    rt.lib.barrier_all_on_stream()  # every PE's rows of this layer are written before any PE reads
    return run_peers(t.own, t.peers, rt.lib.my_pe(), plan, fetch, deterministic)


class _Aggregate(torch.autograd.Function):
    """The fused kernel reads peers' rows itself, so the communication is inside the kernel and so
    is its adjoint: the backward is the same pull over the transposed graph's plan, reading
    peers' gradient rows (MGG's design applied to the backward pass)."""

    @staticmethod
    def forward(ctx, x_own, plan, plan_t, range_rows, fetch, deterministic):
        ctx.args = (plan_t, range_rows, fetch, deterministic)
        return _pull(x_own, plan, range_rows, fetch, deterministic)

    @staticmethod
    def backward(ctx, grad):
        return _pull(grad.contiguous(), *ctx.args), None, None, None, None, None


def aggregate(x_own: torch.Tensor, plan: RankPlan, plan_t: RankPlan, range_rows: list[int], fetch: str,
              deterministic: bool) -> torch.Tensor:
    """One rank's aggregation of one layer over the symmetric tables, differentiable in x_own.

    Args:
        x_own: this rank's rows [rows, D].
        plan: this rank's plan of the graph; plan_t: of the transposed graph (the backward's).
        range_rows: every rank's row count.
        fetch: how peers' rows are read (mgg._C.FETCH).
        deterministic: bit-identical results from run to run.

    Returns:
        [rows, D], this rank's output rows.
    """
    return _Aggregate.apply(x_own, plan, plan_t, range_rows, fetch, deterministic)

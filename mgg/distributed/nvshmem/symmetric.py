"""NVSHMEM's runtime for the nvshmem backend: started from torch.distributed through nvshmem4py
(rank 0's unique id broadcast over the process group, every rank calling nvshmem.core.init with
it; no MPI), the extension's attach of NVSHMEM's device state (csrc/nvshmem/attach.cu says why),
and the symmetric tables the steps publish their rows in, two per shape used in turn."""

from __future__ import annotations

import atexit
import os
from typing import Optional

import numpy as np
import torch
import torch.distributed as dist

from ...errors import MggError

EXTRA = "pip install 'mgg[nvshmem]'"


class Nvshmem4pyHeap:
    """The symmetric heap through nvshmem4py, for one PE: what the backend needs of NVSHMEM."""

    def __init__(self, core):
        self.core = core

    def my_pe(self) -> int:
        return self.core.my_pe()

    def n_pes(self) -> int:
        return self.core.n_pes()

    def tensor(self, shape: list, dtype: torch.dtype) -> torch.Tensor:
        """A symmetric tensor (collective: every PE allocates the same shapes in the same order)."""
        try:
            return self.core.tensor(tuple(shape), dtype=dtype)
        except Exception as e:  # nvshmem.core.NvshmemError
            raise MggError(
                f"mgg.distributed: NVSHMEM could not allocate a symmetric table of {list(shape)} {dtype}: "
                f"the symmetric heap is too small (raise NVSHMEM_SYMMETRIC_SIZE, e.g. 8G) ({e})"
            ) from None

    def peer(self, t: torch.Tensor, pe: int) -> Optional[torch.Tensor]:
        """PE pe's copy of t as this device loads it, or None where it is not reachable by loads."""
        if pe == self.my_pe():
            return t  # nvshmem4py's get_peer_tensor of the own PE would keep the table from being freed
        try:
            return self.core.get_peer_tensor(t, pe)
        except Exception:  # NvshmemError: a peer on another node
            return None

    def barrier(self) -> None:
        """All PEs' earlier work on the current stream is done and visible before later work."""
        stream = torch.cuda.current_stream() if torch.cuda.is_available() else None
        self.core.barrier_all(self.core.NvshmemStream(stream))

    def free(self, t: torch.Tensor) -> None:
        self.core.free_tensor(t)


class Runtime:
    """This process's NVSHMEM (in the manner of DeepEP's Buffer): the symmetric heap, the
    extension's attach (`lib`: mgg._C.nvshmem, or None), and the symmetric tables allocated so
    far, two per shape, used in turn. `destroy` undoes it all in the right order."""

    def __init__(self, heap, lib=None, core=None, members: Optional[tuple] = None):
        self.heap, self.lib, self.core = heap, lib, core
        self.members = members  # the global ranks of its PEs (None: not recorded)
        self.tables: dict = {}
        self.turn: dict = {}

    def next_table(self, dim: int, dtype: torch.dtype, range_rows: list[int]) -> "Table":
        key = (dim, dtype, tuple(range_rows))
        if key not in self.tables:  # collective allocation: every rank reaches it at the same call
            self.tables[key] = [Table(self.heap, max(range_rows), dim, dtype, range_rows) for _ in range(2)]
            self.turn[key] = 0
        t = self.tables[key][self.turn[key]]
        self.turn[key] ^= 1
        return t

    def destroy(self) -> None:
        """Frees the tables (collective), detaches the extension, then finalizes nvshmem4py."""
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        for pair in self.tables.values():
            for t in pair:
                self.heap.free(t.table)
        self.tables.clear()
        if self.lib is not None:
            self.lib.detach()
        if self.core is not None:
            self.core.finalize()


_runtime: Optional[Runtime] = None


def runtime() -> Runtime:
    if _runtime is None:
        raise MggError("mgg.distributed: NVSHMEM is not initialised (mgg.distributed.nvshmem.init)")
    return _runtime


def available() -> Optional[str]:
    """None if this process can run the nvshmem backend, else why not (one line)."""
    from ... import _C

    if not getattr(_C, "with_nvshmem", False):
        return "this mgg build has no NVSHMEM (it was built without nvcc); use backend 'halo'"
    if not torch.cuda.is_available():
        return "the nvshmem backend needs a CUDA GPU and none is visible; use backend 'halo'"
    try:
        import nvshmem.core  # noqa: F401
    except ImportError:
        return f"the nvshmem backend needs nvshmem4py ({EXTRA}); use backend 'halo' without it"
    return None


def single_node_defaults(environ=os.environ, one_node: bool = False) -> dict:
    """NVSHMEM settings for PEs that all share one node (torchrun's LOCAL_WORLD_SIZE ==
    WORLD_SIZE, or `one_node`: an NVSHMEM job of one machine's ranks, node-nvshmem's): no network
    transport, the bootstrap over loopback, and a bounded symmetric heap per PE (NVSHMEM reserves
    1 GiB per PE by default, several PEs may share a GPU). What the user set is kept."""
    local, world = int(environ.get("LOCAL_WORLD_SIZE", "1")), int(environ.get("WORLD_SIZE", "1"))
    if local != world and not one_node:
        return {}
    out = {"NVSHMEM_REMOTE_TRANSPORT": "none", "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "lo"}
    if torch.cuda.is_available():
        gpu = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        per_gpu = -(-local // torch.cuda.device_count())
        out["NVSHMEM_SYMMETRIC_SIZE"] = str(min(4 << 30, gpu // (4 * per_gpu)))
    return {k: v for k, v in out.items() if k not in environ}


def check_versions(core, lib) -> None:
    """The NVSHMEM host library nvshmem4py loaded must be the version the extension's device
    library was compiled from (their device-state layout must agree)."""
    host = core.get_version().libnvshmem_version
    device = lib.compiled_version()
    if host != device:
        raise MggError(
            f"mgg.distributed: nvshmem4py loaded NVSHMEM {host} but mgg was built with NVSHMEM {device}: "
            f"install nvidia-nvshmem-cu13=={device} (the version torch pins) or rebuild mgg against {host}"
        )


def _unique_id(core, group) -> object:
    """Rank 0's unique id on every rank (broadcast as its 128 bytes)."""
    import numpy as np

    rank = dist.get_rank(group)
    box = [core.get_unique_id()._data.tobytes() if rank == 0 else None]
    dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
    uid = core.get_unique_id(empty=True)
    uid._data.view(np.uint8)[:] = np.frombuffer(box[0], np.uint8)
    return uid


def init(group=None, one_node: bool = False) -> None:
    """Starts NVSHMEM over the ranks of `group` through nvshmem4py and attaches the extension
    (all ranks call it). Selects this rank's GPU first (LOCAL_RANK modulo the visible GPUs, so
    several PEs may share one). `one_node`: the group's ranks share this machine whatever the
    job spans (node-nvshmem starts one NVSHMEM job per machine)."""
    if _runtime is not None:  # started before: over the same ranks, or refused
        if _runtime.members not in (None, _members(group)):
            raise MggError(
                f"mgg.distributed: this process already runs NVSHMEM over ranks {list(_runtime.members)}, not "
                f"{list(_members(group))}: one process runs one NVSHMEM job (nvshmem and node-nvshmem do not mix)"
            )
        return
    why = available()
    if why:
        raise MggError(f"mgg.distributed: {why}")
    if not dist.is_initialized():
        raise MggError("mgg.distributed: torch.distributed is not initialised (launch with torchrun)")
    import nvshmem.core as core

    from ... import _C

    check_versions(core, _C.nvshmem)
    for k, v in single_node_defaults(one_node=one_node).items():
        os.environ.setdefault(k, v)  # before NVSHMEM reads its environment
    device = int(os.environ.get("LOCAL_RANK", dist.get_rank(group))) % torch.cuda.device_count()
    torch.cuda.set_device(device)
    torch.cuda.current_stream().synchronize()  # the CUDA context exists before NVSHMEM starts
    try:
        from cuda.core import Device
    except ImportError:  # cuda-core before 1.0
        from cuda.core.experimental import Device
    start(core, _C.nvshmem, Device(device), group)


def _members(group) -> tuple:
    """The global ranks of a group's processes (the world's for None)."""
    return tuple(dist.get_process_group_ranks(group) if group is not None else range(dist.get_world_size()))


def start(core, lib, device, group=None) -> None:
    """The NVSHMEM start-up proper, on a selected device: rank 0's unique id to every rank,
    nvshmem.core.init, the check that NVSHMEM really initialised, the extension's attach.

    Args:
        core: nvshmem.core (or a stand-in with its API).
        lib: mgg._C.nvshmem (attach/detach), or a stand-in.
        device: the cuda.core Device of this rank's GPU.
        group: the torch.distributed group of the PEs.
    """
    global _runtime
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    try:
        core.init(device=device, uid=_unique_id(core, group), rank=rank, nranks=world, initializer_method="uid")
    except Exception as e:
        raise MggError(
            f"mgg.distributed: NVSHMEM failed to start on rank {rank} of {world} ({e}): no peer access "
            "between the GPUs, or a symmetric heap larger than the GPU allows (NVSHMEM_SYMMETRIC_SIZE); "
            "NVSHMEM_DEBUG=INFO tells which. The halo backend (--backend halo) needs neither"
        ) from None
    if core.init_status() < core.InitStatus.STATUS_IS_INITIALIZED:  # NVSHMEM swallows some setup errors
        raise MggError(
            f"mgg.distributed: NVSHMEM only bootstrapped on rank {rank} (status {core.init_status()}); "
            "NVSHMEM_DEBUG=INFO tells why"
        )
    lib.attach()
    heap = Nvshmem4pyHeap(core)
    if heap.n_pes() != world or heap.my_pe() != rank:
        raise MggError(
            f"mgg.distributed: NVSHMEM made this PE {heap.my_pe()} of {heap.n_pes()}, "
            f"but torch.distributed says rank {rank} of {world}"
        )
    _runtime = Runtime(heap, lib, core, _members(group))
    atexit.register(finalize)


def finalize() -> None:
    """Frees the symmetric tables and stops NVSHMEM (collective; also run at exit)."""
    global _runtime
    if _runtime is None:
        return
    rt, _runtime = _runtime, None
    rt.destroy()


class Table:
    """A symmetric table [rows, dim] and this PE's views of every PE's copy of it."""

    def __init__(self, heap, rows: int, dim: int, dtype: torch.dtype, range_rows: list[int]):
        self.table = heap.tensor([max(rows, 1), dim], dtype)  # never empty: NVSHMEM refuses 0 bytes
        me = heap.my_pe()
        views = [heap.peer(self.table, pe) for pe in range(len(range_rows))]
        self.reachable = all(v is not None for v in views)
        # unreachable peers (another node) keep a placeholder of the right shape; publish refuses
        # such a table (mgg's gets cannot reach them yet)
        self.peers = [(v if v is not None else self.table)[:n] for v, n in zip(views, range_rows, strict=True)]
        self.own = self.table[: range_rows[me]]


def offsets(range_rows: list[int]) -> list[int]:
    """The global id of each PE's first row, then the end (the rank bounds)."""
    return [0, *(int(o) for o in np.cumsum(range_rows))]


def publish(rt: "Runtime", rows: torch.Tensor, range_rows: list[int], fetch: str, barrier: bool = True) -> "Table":
    """Writes this rank's rows into the next symmetric table of their shape (and meets the
    other PEs at the barrier, unless the caller publishes more first)."""
    t = reserve(rt, rows.size(1), rows.dtype, range_rows, fetch)
    t.own.copy_(rows)
    if barrier:
        rt.heap.barrier()
    return t


def reserve(rt: "Runtime", dim: int, dtype: torch.dtype, range_rows: list[int], fetch: str) -> "Table":
    """The next symmetric table of this shape, its peers readable by `fetch`; nothing written (the
    caller writes its rows, in parts if it likes, and meets the other PEs before they read)."""
    t = rt.next_table(dim, dtype, range_rows)
    if not t.reachable:  # checked again by the op (ops/cuda/sources.cu), naming the PE
        raise MggError(
            f"fetch '{fetch}' needs every PE reachable by loads (one node with NVLink or PCIe peer access): "
            "mgg's NVSHMEM gets land rows in shared memory, which a network transport cannot write; "
            "across nodes use node-halo, halo or allgather, or node-nvshmem where each machine's GPUs reach each other"
        )
    return t

"""The `nvshmem` backend: MGG's hybrid placement over NVSHMEM.

Each rank's node embeddings of a layer live in NVSHMEM symmetric memory (a table of the largest
range's rows, the same size on every PE); each rank's plan lives in its private device memory;
the fused kernel (mgg.ops.aggregate_peers) reads local rows from its own table and remote
rows from their owners' tables, by NVSHMEM get or by direct loads through nvshmem_ptr.

NVSHMEM's runtime is nvshmem4py (PyPI nvshmem4py-cu13, module nvshmem.core; `pip install
mgg[nvshmem]`), started from torch.distributed: rank 0's unique id is broadcast over the process
group and every rank calls nvshmem.core.init with it (no MPI). Symmetric tables, peer views and
the on-stream barrier are nvshmem4py's; the extension only attaches its own copy of NVSHMEM's
device state (csrc/nvshmem/attach.cu says why) and detaches it before nvshmem4py finalizes.
Several processes may share one GPU (NVSHMEM's limited multi-PE-per-GPU mode), which is how
this backend is tested on one device.

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

import numpy as np
import torch
import torch.distributed as dist

from .. import ops
from ..errors import MggError
from ..plan import RankPlan, check_remote_reads

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

    def __init__(self, heap, lib=None, core=None):
        self.heap, self.lib, self.core = heap, lib, core
        self.tables: dict = {}
        self.turn: dict = {}

    def next_table(self, dim: int, dtype: torch.dtype, range_rows: list[int]) -> "_Table":
        key = (dim, dtype, tuple(range_rows))
        if key not in self.tables:  # collective allocation: every rank reaches it at the same call
            self.tables[key] = [_Table(self.heap, max(range_rows), dim, dtype, range_rows) for _ in range(2)]
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
    from .. import _C

    if not getattr(_C, "with_nvshmem", False):
        return "this mgg build has no NVSHMEM (it was built without nvcc); use backend 'halo'"
    if not torch.cuda.is_available():
        return "the nvshmem backend needs a CUDA GPU and none is visible; use backend 'halo'"
    try:
        import nvshmem.core  # noqa: F401
    except ImportError:
        return f"the nvshmem backend needs nvshmem4py ({EXTRA}); use backend 'halo' without it"
    return None


def single_node_defaults(environ=os.environ) -> dict:
    """NVSHMEM settings for PEs that all share one node (torchrun's LOCAL_WORLD_SIZE ==
    WORLD_SIZE): no network transport, the bootstrap over loopback, and a bounded symmetric heap
    per PE (NVSHMEM reserves 1 GiB per PE by default, several PEs may share a GPU). What the user
    set is kept."""
    local, world = int(environ.get("LOCAL_WORLD_SIZE", "1")), int(environ.get("WORLD_SIZE", "1"))
    if local != world:
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


def init(group=None) -> None:
    """Starts NVSHMEM over the ranks of `group` through nvshmem4py and attaches the extension
    (all ranks call it). Selects this rank's GPU first (LOCAL_RANK modulo the visible GPUs, so
    several PEs may share one)."""
    why = available()
    if why:
        raise MggError(f"mgg.distributed: {why}")
    if _runtime is not None:
        return
    if not dist.is_initialized():
        raise MggError("mgg.distributed: torch.distributed is not initialised (launch with torchrun)")
    import nvshmem.core as core

    from .. import _C

    check_versions(core, _C.nvshmem)
    for k, v in single_node_defaults().items():
        os.environ.setdefault(k, v)  # before NVSHMEM reads its environment
    device = int(os.environ.get("LOCAL_RANK", dist.get_rank(group))) % torch.cuda.device_count()
    torch.cuda.set_device(device)
    torch.cuda.current_stream().synchronize()  # the CUDA context exists before NVSHMEM starts
    try:
        from cuda.core import Device
    except ImportError:  # cuda-core before 1.0
        from cuda.core.experimental import Device
    start(core, _C.nvshmem, Device(device), group)


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
    _runtime = Runtime(heap, lib, core)
    atexit.register(finalize)


def finalize() -> None:
    """Frees the symmetric tables and stops NVSHMEM (collective; also run at exit)."""
    global _runtime
    if _runtime is None:
        return
    rt, _runtime = _runtime, None
    rt.destroy()


class _Table:
    """A symmetric table [rows, dim] and this PE's views of every PE's copy of it."""

    def __init__(self, heap, rows: int, dim: int, dtype: torch.dtype, range_rows: list[int]):
        self.table = heap.tensor([max(rows, 1), dim], dtype)  # never empty: NVSHMEM refuses 0 bytes
        me = heap.my_pe()
        views = [heap.peer(self.table, pe) for pe in range(len(range_rows))]
        self.reachable = all(v is not None for v in views)
        # unreachable peers (another node) keep a placeholder of the right shape; _publish refuses
        # such a table (mgg's gets cannot reach them yet)
        self.peers = [(v if v is not None else self.table)[:n] for v, n in zip(views, range_rows, strict=True)]
        self.own = self.table[: range_rows[me]]


def _pull(
    x_own: torch.Tensor,
    plan: RankPlan,
    range_rows: list[int],
    fetch: str,
    deterministic: bool,
    remote_reads: str = "per-edge",
) -> torch.Tensor:
    """One aggregation over the symmetric tables: write this rank's rows into the next table,
    barrier, then the kernel reads its own rows and peers' rows from their tables, once per
    edge (MGG's fused kernel, RankPlan.aggregate_peers) or each remote row once
    (RankPlan.aggregate_peers_once)."""
    rt = runtime()
    t = _publish(rt, x_own, range_rows, fetch)  # every PE's rows of this layer are written before any PE reads
    read = plan.aggregate_peers_once if remote_reads == "once" else plan.aggregate_peers
    return read(t.own, t.peers, rt.heap.my_pe(), fetch, deterministic)


class _Aggregate(torch.autograd.Function):
    """The fused kernel reads peers' rows itself, so the communication is inside the kernel and so
    is its adjoint: the backward is the same pull over the transposed graph's plan, reading
    peers' gradient rows (MGG's design applied to the backward pass), in the same remote mode."""

    @staticmethod
    def forward(ctx, x_own, plan, plan_t, range_rows, fetch, deterministic, remote_reads):
        ctx.args = (plan_t, range_rows, fetch, deterministic, remote_reads)
        return _pull(x_own, plan, range_rows, fetch, deterministic, remote_reads)

    @staticmethod
    def backward(ctx, grad):
        return _pull(grad.contiguous(), *ctx.args), None, None, None, None, None, None


def aggregate(
    x_own: torch.Tensor,
    plan: RankPlan,
    plan_t: RankPlan,
    range_rows: list[int],
    fetch: str,
    deterministic: bool,
    remote_reads: str = "per-edge",
) -> torch.Tensor:
    """One rank's aggregation of one layer over the symmetric tables, differentiable in x_own.

    Args:
        x_own: this rank's rows [rows, D].
        plan: this rank's plan of the graph; plan_t: of the transposed graph (the backward's).
        range_rows: every rank's row count.
        fetch: how peers' rows are read (mgg._C.FETCH).
        deterministic: bit-identical results from run to run.
        remote_reads: 'per-edge' (MGG: a remote row is read once per edge that names it) or
            'once' (each of the rank's halo rows read once, then aggregated from a local table;
            the same sums in the same order).

    Returns:
        [rows, D], this rank's output rows.
    """
    check_remote_reads(remote_reads)
    return _Aggregate.apply(x_own, plan, plan_t, range_rows, fetch, deterministic, remote_reads)


class _Attend(torch.autograd.Function):
    """GAT's attention over the symmetric tables. Forward: publish this rank's source rows (per
    head its features and source term), barrier, attend reading peers' rows in place. Backward:
    publish the source rows again (a later layer may have reused the forward's table) and this
    rank's output-row terms (attention_terms: the gradient, a_dst and the softmax statistics),
    barrier once, then two kernels that read peers' tables: d a_dst over this rank's in-edges,
    and the source rows' gradients over the transposed graph's in-edges, whose terms live on the
    destinations' owners. The dropout masks are a function of (seed, global edge, head), so the
    backward's equal the forward's on every rank (the layer gives every rank one seed)."""

    @staticmethod
    def forward(ctx, table_own, a_dst_own, plan, plan_t, range_rows, fetch, heads, slope, dropout, seed, once):
        rt = runtime()
        t = _publish(rt, table_own, range_rows, fetch)
        offsets = _offsets(range_rows)
        me = rt.heap.my_pe()
        ctx.once = once
        if once is not None:  # each halo row's source terms once, then the attention over [own | halo] rows
            halo, ids = plan.gather_halo(t.own, t.peers, me, fetch), _source_ids(plan, t.own.device)
            args, params = plan.op_args(t.own.device, transposed=False)
            out, stats = ops.attend(t.own, halo, a_dst_own, args, params, heads, slope, dropout, seed, ids, offsets[me])
            ctx.halo = halo
        else:
            args, params = plan.op_args(table_own.device, peers=True, transposed=False)
            out, stats = ops.attend_peers(
                t.peers, me, a_dst_own, args, params, heads, slope, dropout, seed, offsets, ops.fetch_code(fetch)
            )
        ctx.save_for_backward(table_own, a_dst_own, out, stats)
        ctx.args = (plan, plan_t, range_rows, fetch, heads, slope, dropout, seed)
        return out

    @staticmethod
    def backward(ctx, grad):
        if ctx.once is not None:
            return (*_attend_once_backward(ctx, grad.contiguous()), *([None] * 9))
        table_own, a_dst_own, out, stats = ctx.saved_tensors
        plan, plan_t, range_rows, fetch, heads, slope, dropout, seed = ctx.args
        rt = runtime()
        me, offsets = rt.heap.my_pe(), _offsets(range_rows)
        terms = ops.attention_terms(grad.contiguous(), out, a_dst_own, stats, heads)
        x = _publish(rt, table_own, range_rows, fetch, barrier=False)
        tt = rt.next_table(terms.size(1), terms.dtype, range_rows)
        tt.own.copy_(terms)
        rt.heap.barrier()  # every PE's source rows and terms are written before any PE reads
        args, params = plan.op_args(table_own.device, peers=True, transposed=False)
        d_dst = ops.attend_peers_dst(
            x.peers, me, tt.own, args, params, heads, slope, dropout, seed, offsets, ops.fetch_code(fetch)
        )
        args_t, params_t = plan_t.op_args(table_own.device, peers=True, transposed=False)
        d_table = ops.attend_peers_src(
            x.own, tt.peers, me, args_t, params_t, heads, slope, dropout, seed, offsets, ops.fetch_code(fetch)
        )
        return d_table, d_dst, None, None, None, None, None, None, None, None, None


def _source_ids(plan: RankPlan, device) -> torch.Tensor:
    """Global ids of [own rows | halo rows] (the dropout mask is a function of them, so the once
    mode's masks are the per-edge path's)."""
    return torch.from_numpy(plan.shard.source_ids()).to(device)


def _attend_once_backward(ctx, grad: torch.Tensor) -> tuple:
    """The once mode's attention backward, each row still moved once: attend_backward over
    [own | halo] rows (the forward's gathered halo table) gives this rank's d a_dst, its own rows'
    gradient from its own edges, and its halo rows' gradient; each rank writes the latter to a
    symmetric outbox (rows in its halo order), meets the others, and adds what every peer wrote
    for its rows (Plan.halo_return through aggregate_peers: each such row read once)."""
    table_own, a_dst_own, out, stats = ctx.saved_tensors
    plan, _, range_rows, fetch, heads, slope, dropout, seed = ctx.args
    back, halo_counts = ctx.once
    rt = runtime()
    me, dev = rt.heap.my_pe(), table_own.device
    args, params = plan.op_args(dev, transposed=True)
    d_own, d_halo, d_dst = ops.attend_backward(
        grad,
        table_own,
        ctx.halo,
        a_dst_own,
        out,
        stats,
        args,
        params,
        heads,
        slope,
        dropout,
        seed,
        _source_ids(plan, dev),
        _offsets(range_rows)[me],
    )
    box = rt.next_table(d_halo.size(1), d_halo.dtype, halo_counts)
    box.own.copy_(d_halo)
    rt.heap.barrier()  # every PE's outbox is written before any PE reads
    if back.remote is not None and back.remote.num_edges:
        returned = ops.aggregate_peers(box.own, box.peers, me, *back.op_args(dev), ops.fetch_code(fetch), False)
        d_own = d_own + returned
    return d_own, d_dst


def _offsets(range_rows: list[int]) -> list[int]:
    """The global id of each PE's first row, then the end (the rank bounds)."""
    return [0, *(int(o) for o in np.cumsum(range_rows))]


def _publish(rt: "Runtime", rows: torch.Tensor, range_rows: list[int], fetch: str, barrier: bool = True) -> "_Table":
    """Writes this rank's rows into the next symmetric table of their shape (and meets the
    other PEs at the barrier, unless the caller publishes more first)."""
    t = rt.next_table(rows.size(1), rows.dtype, range_rows)
    if not t.reachable:  # checked again by the op (ops/cuda/sources.cu), naming the PE
        raise MggError(
            f"fetch '{fetch}' needs every PE reachable by loads (one node with NVLink or PCIe peer access): "
            "mgg's NVSHMEM gets land rows in shared memory, which a network transport cannot write; "
            "across nodes use the halo or allgather backend"
        )
    t.own.copy_(rows)
    if barrier:
        rt.heap.barrier()
    return t


def attend(
    table_own: torch.Tensor,
    a_dst_own: torch.Tensor,
    plan: RankPlan,
    plan_t: RankPlan,
    range_rows: list[int],
    fetch: str,
    heads: int,
    negative_slope: float,
    dropout: float,
    seed: int,
    remote_reads: str = "per-edge",
    halo_return: Optional[tuple] = None,
) -> torch.Tensor:
    """One rank's GAT attention over the symmetric tables, differentiable in table_own and
    a_dst_own. remote_reads='once' reads each halo row once: the forward gathers the halo rows
    of the source table, the backward returns their gradients through outboxes
    (_attend_once_backward; halo_return: (Plan.halo_return's step of this rank, every rank's
    halo row count)); 'per-edge' reads peers' rows, and in the backward their terms, per edge.

    Args:
        table_own: this rank's source rows [rows, H * (C + 1)] (mgg.ops.attention_table).
        a_dst_own: this rank's destination terms [rows, H].
        plan, plan_t: this rank's plans of the graph and of its transpose (the backward's).
        range_rows: every rank's row count.
        fetch: how peers' rows are read (mgg._C.FETCH).
        heads, negative_slope, dropout, seed: as GATConv's; every rank passes the same seed.

    Returns:
        [rows, H * C].
    """
    check_remote_reads(remote_reads)
    if remote_reads == "once" and halo_return is None:
        raise MggError(
            "nvshmem.attend: remote_reads='once' needs halo_return (Plan.halo_return, every rank's halo rows)"
        )
    once = halo_return if remote_reads == "once" else None
    return _Attend.apply(
        table_own, a_dst_own, plan, plan_t, range_rows, fetch, heads, negative_slope, dropout, seed, once
    )

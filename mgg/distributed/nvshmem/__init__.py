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

from .steps import aggregate, attend
from .symmetric import (
    EXTRA,
    Nvshmem4pyHeap,
    Runtime,
    available,
    check_versions,
    finalize,
    init,
    runtime,
    single_node_defaults,
    start,
)

__all__ = [
    "EXTRA",
    "Nvshmem4pyHeap",
    "Runtime",
    "aggregate",
    "attend",
    "available",
    "check_versions",
    "finalize",
    "init",
    "runtime",
    "single_node_defaults",
    "start",
]

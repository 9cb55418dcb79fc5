"""The partitioning methods (METHODS), `compute` runs one:
- `range` (the default and the reference): MGG Algorithm 1 (ranges.split_ranges) on the graph's
  own order; the permutation is the identity.
- `random`: a seeded permutation, then Algorithm 1 on the relabelled graph (the seed papers'
  baseline: what a graph without useful order gives).
- `metis` and `hypergraph`, the partitioners of the seed papers: each takes an mgg graph and
  gives every node a part in [0, P), made a Partition by assignment.from_parts. Both packages are
  optional (the `partition` extra: pip install mgg[partition]).
- `metis+vb` and `hypergraph+vb`: those partitions refined to lower the busiest part's send volume
  at nearly the same total (refine.py: Graph-VB's objective, which no package optimises).

A part's nodes keep their relative order; rank r owns part r. Parts the partitioner leaves empty
(it can on tiny graphs) get a node from the largest part.

- `metis_parts`: METIS k-way (pymetis) on the symmetrised simple graph A + A^T (METIS needs a
  symmetric graph without self-loops or duplicate entries, and checks none of it), an edge's
  weight being the number of directed edges between its two nodes, so the cut METIS minimises
  is exactly the number of remote edges; vertex weights in-degree + 1 balance the ranks by
  edges (the work), not nodes.
- `hypergraph_parts`: Mt-KaHyPar (mtkahypar) on the column-net hypergraph: a net per node v
  whose pins are v and the nodes that read v; its connectivity-minus-one objective (km1) is
  exactly the number of rows the ranks exchange (mgg.plan.stats' halo_rows). The
  DETERMINISTIC preset (bit-identical across runs, processes and thread counts), seeded, with
  three speed settings (mgg/data/mtkahypar-deterministic.ini).

Inputs are checked here (ids in range, k <= n, weights positive and of the right length):
METIS crashes or returns garbage on bad input rather than raising.
"""

from __future__ import annotations

import importlib
import os
import tempfile
import time
import warnings

import numpy as np
import scipy.sparse as sp

from ..data.bundled import MTKAHYPAR_INI
from ..errors import MissingPackageError, PlanError
from ..graph import Graph
from ..plan.ranges import split_ranges
from .assignment import Partition, from_parts, range_partition
from .refine import refine

METHODS = ("range", "random", "metis", "hypergraph", "metis+vb", "hypergraph+vb")
CACHED = ("metis", "hypergraph", "metis+vb", "hypergraph+vb")  # the methods worth keeping on disk
REFINED = "+vb"  # a method's suffix: its partition refined for the busiest sender (refine.py)
_RANDOM_STREAM = 0x72616E646F6D  # 'random': the random method's seed sequence is (seed, this)

EXTRA = "pip install mgg[partition]"
PACKAGES = {"metis": "pymetis", "hypergraph": "mtkahypar"}
IMBALANCE = 0.03  # allowed imbalance of the balanced weight (METIS ufactor 30, Mt-KaHyPar epsilon)
_INI = MTKAHYPAR_INI
_mtk = None  # mtkahypar's Initializer: one per process (its thread pool is fixed at the first call)


def require(method: str):
    """The package behind a method, imported; MissingPackageError naming the pip extra if it is
    missing."""
    name = PACKAGES[method.removesuffix(REFINED)]
    try:
        return importlib.import_module(name)
    except ImportError:
        raise MissingPackageError(f"partition method '{method}' needs the {name} package: {EXTRA}") from None


def node_weights(graph: Graph) -> np.ndarray:
    """In-degree + 1 per node: a rank's weight is its edges plus its nodes (its work)."""
    return graph.degree().numpy().astype(np.int64) + 1


def _binary(graph: Graph) -> sp.csr_matrix:
    """The adjacency with entry (v, u) = the number of edges u -> v (duplicates counted)."""
    n = graph.num_nodes
    a = sp.csr_matrix((np.ones(graph.num_edges, np.int64), graph.col.numpy(), graph.rowptr.numpy()), shape=(n, n))
    a.sum_duplicates()
    return a


def metis_input(graph: Graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The symmetric simple graph METIS partitions: A + A^T without the diagonal or duplicate
    entries, entry (u, v) weighted by the number of directed edges between u and v.

    Args:
        graph: the graph.

    Returns:
        (xadj, adjncy, eweights), int64 (pymetis' idx_t, passed without a copy).
    """
    a = _binary(graph)
    s = (a + a.T).tocsr()
    s.setdiag(0)
    s.eliminate_zeros()
    s.sort_indices()
    return s.indptr.astype(np.int64), s.indices.astype(np.int64), s.data.astype(np.int64)


METIS_OBJECTIVES = {"cut": 0, "volume": 1}  # METIS_OBJTYPE_CUT, METIS_OBJTYPE_VOL


def metis_parts(graph: Graph, num_parts: int, seed: int = 0, objective: str = "cut") -> np.ndarray:
    """METIS k-way partition of the graph, balanced by node_weights, minimising remote edges.

    Args:
        graph: the graph.
        num_parts: P, 2 <= P <= nodes.
        seed: METIS' random seed (same input and seed: the same partition).
        objective: "cut" (the remote edges: the `metis` method) or "volume" (METIS's total
            communication volume, on the symmetrised graph: what bench.strategies' floor uses).

    Returns:
        int64 [nodes]: each node's part (some part may be empty on tiny graphs).
    """
    if objective not in METIS_OBJECTIVES:
        raise PlanError(f"metis: objective {objective!r} is not one of {', '.join(METIS_OBJECTIVES)}")
    pymetis = require("metis")
    _check_parts(graph, num_parts)
    xadj, adjncy, eweights = metis_input(graph)
    vweights = node_weights(graph)
    opts = pymetis.Options(seed=int(seed), ufactor=int(IMBALANCE * 1000))
    if objective != "cut":  # the default's options as they were (the cached partitions stay valid)
        opts.objtype = METIS_OBJECTIVES[objective]
    r = pymetis.part_graph(
        int(num_parts),
        adjacency=pymetis.CSRAdjacency(adj_starts=xadj, adjacent=adjncy),
        vweights=vweights,
        eweights=eweights,
        recursive=False,
        options=opts,
    )
    return np.asarray(r.vertex_part, dtype=np.int64)


def column_nets(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """The column-net hypergraph: a net per node v, its pins v and every node that reads v
    (column v of the adjacency, plus v), without duplicates. Nets of one pin (nodes nobody else
    reads) never cross ranks and are left out.

    Args:
        graph: the graph.

    Returns:
        (net_ptr, pins): the pins of net i are pins[net_ptr[i]:net_ptr[i + 1]].
    """
    n = graph.num_nodes
    a = _binary(graph)
    t = (a.T + sp.identity(n, dtype=np.int64, format="csr")).tocsr()  # row v: readers of v, and v
    t.sum_duplicates()
    size = np.diff(t.indptr)
    keep = size >= 2
    ptr = np.zeros(int(keep.sum()) + 1, np.int64)
    np.cumsum(size[keep], out=ptr[1:])
    pins = t.indices[np.repeat(keep, size)].astype(np.int64)
    return ptr, pins


def mtkahypar():
    """This process's mtkahypar Initializer, made on first use with a thread per available core
    (mtkahypar fixes its thread pool once per process; the deterministic preset gives the same
    partition whatever the count)."""
    global _mtk
    if _mtk is None:
        _mtk = require("hypergraph").initialize(max(1, len(os.sched_getaffinity(0))), False)
    return _mtk


def _context(mk, mtk, num_parts: int, seed: int):
    """The seeded DETERMINISTIC context with mgg's speed settings; the built-in preset (seed 0,
    stock settings) with a warning where this mtkahypar refuses the file."""
    fd, path = tempfile.mkstemp(suffix=".ini", prefix="mgg-mtkahypar-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(_INI.read_text() + f"seed={int(seed)}\n")
        ctx = mtk.context_from_file(path)
    except Exception as e:  # another mtkahypar version: other keys
        warnings.warn(
            f"mgg: mtkahypar {getattr(mk, '__version__', '?')} refused mgg's settings ({e}); using its "
            "DETERMINISTIC preset (seed ignored, slower)",
            RuntimeWarning,
            stacklevel=3,
        )
        ctx = mtk.context_from_preset(mk.PresetType.DETERMINISTIC)
    finally:
        os.unlink(path)
    ctx.set_partitioning_parameters(int(num_parts), IMBALANCE, mk.Objective.KM1)
    ctx.logging = False
    return ctx


def hypergraph_parts(graph: Graph, num_parts: int, seed: int = 0) -> np.ndarray:
    """Mt-KaHyPar partition of the column-net hypergraph, balanced by node_weights, minimising
    the connectivity-minus-one volume (the rows the ranks exchange).

    Args:
        graph: the graph.
        num_parts: P, 2 <= P <= nodes.
        seed: the deterministic preset's seed (same input and seed: the same partition, whatever
            the thread count).

    Returns:
        int64 [nodes]: each node's part (some part may be empty on tiny graphs).
    """
    mk = require("hypergraph")
    _check_parts(graph, num_parts)
    n = graph.num_nodes
    weights = node_weights(graph)
    if int(weights.sum()) >= 2**31:
        raise PlanError(
            f"hypergraph: the node weights sum to {int(weights.sum()):,}, past Mt-KaHyPar's int32 weights (use metis)"
        )
    mtk = mtkahypar()
    ctx = _context(mk, mtk, num_parts, seed)
    ptr, pins = column_nets(graph)
    nets = np.split(pins.astype(np.uint32), ptr[1:-1]) if ptr.size > 1 else []
    hg = mtk.create_hypergraph(ctx, n, len(nets), nets, weights.tolist(), [1] * len(nets))
    return np.asarray(hg.partition(ctx).get_partition(), dtype=np.int64)


def _check_parts(graph: Graph, num_parts: int) -> None:
    if not 2 <= num_parts <= graph.num_nodes:
        raise PlanError(f"partition: {num_parts} parts for {graph.num_nodes} nodes (need 2 <= parts <= nodes)")


def from_degrees(method: str, degrees: np.ndarray, num_ranks: int, seed: int) -> tuple:
    """`range` and `random` from each node's in-degree alone (what `mgg prepare` has before it reads
    the edges a second time): (perm, bounds), perm None for the identity. The same as compute()."""
    perm = None
    if method == "random":
        # a stream of its own: default_rng(seed)'s first permutation is the one mgg.data.synthetic's
        # generators scramble ids with, and applying it would restore their generation order
        perm = np.random.default_rng((seed, _RANDOM_STREAM)).permutation(degrees.size).astype(np.int64)
    elif method != "range":
        raise PlanError(f"only range and random partition from the degrees alone, not {method!r}")
    rowptr = np.zeros(degrees.size + 1, np.int64)
    np.cumsum(degrees if perm is None else degrees[perm], out=rowptr[1:])
    return perm, split_ranges(rowptr, num_ranks)


def compute(graph: Graph, num_ranks: int, method: str, seed: int) -> Partition:
    t0 = time.perf_counter()
    if method == "range":
        return range_partition(graph, num_ranks, seconds=time.perf_counter() - t0, seed=seed)
    if method == "random":
        perm, bounds = from_degrees(method, graph.degree().numpy(), num_ranks, seed)
        return Partition(method, perm, bounds, time.perf_counter() - t0, seed)
    base = method.removesuffix(REFINED)
    parts = metis_parts if base == "metis" else hypergraph_parts
    part = parts(graph, num_ranks, seed)
    if method.endswith(REFINED):
        part, _ = refine(graph, part, num_ranks, node_weights(graph))
    return from_parts(method, part, num_ranks, node_weights(graph), time.perf_counter() - t0, seed)

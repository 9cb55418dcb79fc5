"""A graph distributed over the ranks of a torch.distributed group, MGG-style: every rank loads
the same input graph and keeps its range (MGG Algorithm 1) and its plan; aggregation reads
peers' rows through the backend:

- `nvshmem` (MGG's path): embeddings in NVSHMEM symmetric memory, the fused kernel reads peers'
  rows by NVSHMEM get or peer loads (backends/nvshmem.py over the NVSHMEM runtime in nvshmem/symmetric.py);
- `halo`: a sparsity-aware all-to-all over torch.distributed (NCCL or gloo) brings each rank
  exactly the peer rows its plan reads, then the same op runs on the halo buffer. The op's own
  autograd gives the gradients of the rank's rows and of the halo rows; the exchange's adjoint
  returns the halo rows' gradients to their owners.
- `allgather` (CAGNET 1D): every rank gathers all rows each layer and aggregates its own rows
  from the whole table (backends/allgather.py); its adjoint reduce-scatters the table's gradient.
- `node-halo`: across machines (g = gpus_per_node consecutive ranks each), each remote row
  crosses the network once per machine that reads it, then reaches the machine's ranks that read
  it inside the machine (backends/node_halo.py); the graph is split between machines first.
- `node-nvshmem`: node-halo's network stage, then MGG's fused kernel inside each machine (one
  NVSHMEM job per machine) reading the machine's own and received rows in place
  (backends/node_nvshmem.py).

The same model code runs on both. Which nodes a rank owns is a partition (mgg.partition): by
default MGG's ranges of the graph's own order, or a relabelling that cuts communication
(METIS, hypergraph); users see their own node order either way.

A bipartite graph (N_src sources, N_dst destinations; DistGraph(..., size=(N_src, N_dst))) is
held as the square graph of max(N_src, N_dst) nodes, as on one process (mgg.nn.graph_input.bipartite_plan):
rank r's range [b_r, b_r+1) of that index space names the sources and the destinations it owns,
the layers pad its sources with zero rows to the range and keep its destinations' rows of the
output, and the backends move rows of the square graph as they do for any other."""

from __future__ import annotations

from typing import Callable, Optional, Union

import numpy as np
import torch
import torch.distributed as dist

from ..errors import MggError
from ..graph import Graph
from ..ops import attention_table
from ..partitioning import CACHED, METHODS, Partition
from ..partitioning import partition as partition_nodes
from ..partitioning.nodes import best_method, node_partition
from ..plan import Config, Plan, check_remote_reads
from ..runtime.remote_reads import AUTO
from .backends import BACKENDS as _KINDS
from .backends.node_halo import gpus_per_node as _gpus_per_node
from .backends.onefive import RUNS_ON, Replicas
from .comm import all_gather_rows
from .onefive.layout import Layout, column_graph
from .prepared import Part

BACKENDS = tuple(_KINDS)  # the backends' names (mgg.distributed.backends)


class DistPlan:
    """One normalised graph over the group: this rank's plan and what its backend needs. It
    speaks the protocol of a one-rank Plan (mgg.plan.Aggregation: aggregate, attend), so layers
    and the tuner run either without asking which."""

    distributed = True

    def __init__(
        self,
        graph: Graph,
        rank: int,
        bounds,
        group=None,
        backend: str = "halo",
        fetch: str = "get-warp",
        remote_reads: str = "per-edge",
        gpus_per_node: int = 1,
        replicas=None,
    ):
        self.rank, self.world, self.group = rank, len(bounds) - 1, group
        self.gpus_per_node = gpus_per_node  # ranks per machine (the node-halo backend's stages)
        self.backend, self.fetch = backend, fetch
        self.remote_reads = remote_reads  # the nvshmem backend's: per-edge (MGG) or once (steps.REMOTE_READS)
        self.replicas = replicas  # a 1.5D backend's layout and row and column groups (backends.onefive.Replicas)
        kind = _KINDS[backend]
        gathered = kind.gathered
        if replicas is not None and hasattr(kind, "window"):  # cagnet-1.5d: the chunk's table
            gathered = kind.window(replicas.layout, bounds)
        # the ranges of the DistGraph, whatever the normalisation (a 1.5D backend's: its blocks)
        self.plan = Plan(graph, bounds=bounds, gathered=gathered)
        self.range_rows = [int(b) for b in np.diff(bounds)]
        self.transport = kind(self, graph)
        # the fetch policy that decides how peers' rows are read ("none" where the backend has none)
        self.fetch_policy = fetch if kind.uses_fetch else "none"

    @property
    def num_rows(self) -> int:
        """The rows this rank's op reads and writes: its range."""
        return self.range_rows[self.rank]

    def _check_rows(self, x_own: torch.Tensor) -> None:
        p = self.plan.shard(self.rank)
        if x_own.dim() != 2 or x_own.size(0) != p.num_rows:
            raise MggError(
                f"rank {self.rank}: x has {tuple(x_own.shape)} rows but owns {p.num_rows} nodes "
                f"[{p.row_begin}, {p.row_end})"
            )

    def aggregate(
        self, x_own: torch.Tensor, config: Optional[Config] = None, deterministic: bool = False
    ) -> torch.Tensor:
        """This rank's output rows, differentiable in x_own (this rank's rows)."""
        self._check_rows(x_own)
        config = config or Config()
        return self.transport.aggregate(
            x_own.contiguous(), self.plan.rank_plan(self.rank, config), config, deterministic
        )

    def aggregate_extreme(self, x_own: torch.Tensor, reduce: str, config: Optional[Config] = None) -> torch.Tensor:
        """This rank's output rows of the max or min aggregation (RankPlan.aggregate_extreme) over an
        unweighted graph, differentiable in x_own. Ties go to the lowest row of the rank's
        [own rows | remote rows]: with the halo backend its own rows come first, so a tie between
        an own and a remote row may resolve otherwise than in one process (values never differ)."""
        self._check_rows(x_own)
        config = config or Config()
        return self.transport.aggregate_extreme(
            x_own.contiguous(), self.plan.rank_plan(self.rank, config), config, reduce
        )

    def attend(
        self,
        h: torch.Tensor,
        a_src: torch.Tensor,
        a_dst: torch.Tensor,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        seed: int = 0,
        config: Optional[Config] = None,
    ) -> torch.Tensor:
        """GAT's attention for this rank's output rows (RankPlan.attend), differentiable in h,
        a_src (this rank's source rows) and a_dst [rows, heads].

        The dropout mask is drawn from global node ids of the (relabelled) graph, so every
        backend and every rank count draw the same mask on the same partition.

        Returns:
            [rows, heads, C].
        """
        p = self.plan.shard(self.rank)
        heads = h.size(1)
        table_own, a_dst_own = attention_table(h, a_src), a_dst.contiguous()
        if table_own.dim() != 2 or table_own.size(0) != p.num_rows or a_dst_own.shape != (p.num_rows, heads):
            raise MggError(
                f"rank {self.rank}: the attention inputs {tuple(table_own.shape)}, "
                f"{tuple(a_dst_own.shape)} do not match its {p.num_rows} rows and {heads} heads"
            )
        config = config or Config()
        out = self.transport.attend(
            table_own,
            a_dst_own,
            self.plan.rank_plan(self.rank, config),
            config,
            (heads, negative_slope, dropout, seed),
            p.row_begin,
        )
        return out.view(-1, heads, h.size(2))

    def __getattr__(self, name: str):
        """What the backend built for this plan (the halo exchange, the nvshmem backend's
        transposed plan `plan_t`, ...), read through the DistPlan."""
        if name == "transport":
            raise AttributeError(name)
        return getattr(self.transport, name)

    def drop(self, config: Config) -> None:
        """Forgets this rank's schedules under `config` (the tuner, once a config lost)."""
        self.plan.drop(self.rank, config)
        self.transport.drop(config)


class DistGraph:
    """What a distributed model passes to mgg layers in place of edge_index.

    Args:
        graph: the graph, in the user's node order; every rank passes the same one.
        group: the torch.distributed group (default: the world).
        backend: 'halo', 'nvshmem', 'allgather', 'node-halo' or 'node-nvshmem' (module docstring).
        fetch: how the nvshmem backend reads peers' rows (mgg._C.FETCH).
        partition: which nodes each rank owns: a method of mgg.partition ('range', MGG
            Algorithm 1 on the graph's order; 'random', 'metis', 'hypergraph') or a
            precomputed mgg.Partition of this graph for this many ranks. Rank 0 partitions (or
            reads the disk cache) and the others receive its result, so all ranks agree. With
            'node-halo' and 'node-nvshmem' a method splits the graph between machines, and each
            machine's part goes to its ranks by MGG's ranges (mgg.partitioning.nodes). None (the
            default): 'range', and for those two (of a square graph) the installed method that
            cuts the least inter-node volume.
        seed: the partitioning method's seed.
        size: (N_src, N_dst) of a bipartite graph (module docstring), whose `graph` holds its
            edges over max(N_src, N_dst) nodes: mgg.Graph.from_edge_index(edge_index, max(size))
            (rows are destinations, columns sources). The ranks split that index space by range
            (partition 'range' or an identity mgg.Partition): rank r owns the sources and the
            destinations whose ids fall in [b_r, b_r+1). Default: the square graph's (N, N).
        remote_reads: how often the nvshmem backend reads a remote row per aggregation:
            'per-edge' (MGG's fused kernel: once per edge that names it) or 'once' (each of the
            rank's halo rows read once into a local table while its local edges are aggregated,
            RankPlan.aggregate_peers_once; on dense graphs many times fewer bytes over NVLink) or
            'auto' (each layer's shape measured at its first step in the modes the cost model
            keeps, the faster kept: mgg.runtime.remote_reads). Other backends move each row once anyway.
        gpus_per_node: the ranks of one machine (consecutive ranks; default torchrun's
            LOCAL_WORLD_SIZE): the machines of node-halo and node-nvshmem.
        replication: c, the replicas of each block of the 1.5D backends ('sa-1.5d', 'cagnet-1.5d';
            c divides the ranks, 1 by default): the graph is cut into P / c blocks (by `partition`)
            and rank r holds block r // c; the other backends take none.
        stage_rule: how a 1.5D backend's columns share the blocks: 'balanced' (the default) or
            'cagnet' (CAGNET's code: P / c^2 each, the last column the rest; mgg.distributed.onefive).

    The ranks own contiguous ranges of the relabelled graph, but every tensor a user hands in
    or gets back is in the user's node order: `local(t)` takes a per-node tensor and gives this
    rank's rows, `global_ids` names them, `gather(rows)` assembles every rank's rows. Over a
    bipartite graph `local_src`/`local_dst` and `gather_src`/`gather_dst` do so for each node set
    (over a square one they are local and gather); a layer takes this rank's pair
    (local_src(x_src), local_dst(x_dst)) and gives its destinations' rows."""

    def __init__(
        self,
        graph: Graph,
        group=None,
        backend: str = "halo",
        fetch: str = "get-warp",
        partition: Union[str, Partition, None] = None,
        seed: int = 0,
        size: Optional[tuple] = None,
        remote_reads: str = "per-edge",
        gpus_per_node: Optional[int] = None,
        replication: Optional[int] = None,
        stage_rule: str = "balanced",
    ):
        if backend not in BACKENDS:
            raise MggError(f"backend must be one of {BACKENDS}, got {backend!r}")
        replicated = _KINDS[backend].replicated
        if replication not in (None, 1) and not replicated:
            one_five = ", ".join(b for b, k in _KINDS.items() if k.replicated)
            raise MggError(f"replication applies to the 1.5D backends ({one_five}), not {backend}")
        self.gpus_per_node = _gpus_per_node(gpus_per_node)
        by_machine = _KINDS[backend].by_machine
        self.part = graph if isinstance(graph, Part) else None
        if self.part is not None:
            _check_part(self.part, partition, size)
            graph, partition = self.part.graph, PartBook(self.part.manifest, self.part.graph.bounds)
        if partition is None:
            partition = best_method() if by_machine and size is None else "range"
        if remote_reads != AUTO:
            check_remote_reads(remote_reads)
        if not dist.is_initialized():
            raise MggError("mgg.distributed: torch.distributed is not initialised (launch with torchrun)")
        self.size = _bipartite_size(graph, size, partition)
        self.graph, self.group, self.backend, self.fetch = graph, group, backend, fetch
        self.remote_reads = remote_reads
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        if self.world > graph.num_nodes:
            raise MggError(f"{self.world} ranks exceed the graph's {graph.num_nodes} nodes")
        if by_machine and self.world % self.gpus_per_node:
            raise MggError(
                f"backend {backend}: {self.world} ranks do not form machines of {self.gpus_per_node} ranks "
                "(gpus_per_node, or torchrun's LOCAL_WORLD_SIZE)"
            )
        _KINDS[backend].start(group, fetch, self.gpus_per_node)
        self.replicas = _replicas(group, self.world, self.rank, replication or 1, stage_rule) if replicated else None
        blocks = self.world if self.replicas is None else self.replicas.layout.blocks
        if self.part is not None:
            if replicated:
                raise MggError(f"the {backend} backend reads the dataset whole; a prepared one trains on {RUNS_ON}")
            self.partition = partition
        else:
            machines = self.world // self.gpus_per_node
            compute = (
                (lambda method: node_partition(graph, machines, self.gpus_per_node, method, seed))
                if by_machine
                else (lambda method: partition_nodes(graph, blocks, method, seed))
            )
            self.partition = _agree(graph, blocks, self.rank, group, partition, compute)
        self.bounds = self.partition.bounds
        # this rank's place among the bounds: its rank, or a 1.5D backend's block (its rows: the block's)
        self.place = self.rank if self.replicas is None else self.replicas.layout.block
        self.row_begin, self.row_end = int(self.bounds[self.place]), int(self.bounds[self.place + 1])
        # the ranges of the sources and of the destinations: the rows of each range below N_src, N_dst
        self.src_bounds, self.dst_bounds = (np.minimum(self.bounds, n) for n in self.size)
        self.global_ids = (
            self.part.global_ids
            if self.part is not None
            else torch.from_numpy(self.partition.rank_nodes(self.place).copy())
        )
        self._ids: dict = {}
        self._plans: dict[str, DistPlan] = {}

    @property
    def reduce_group(self):
        """The group over which weight gradients and whole-graph sums add up: the process column of a
        1.5D backend (each block once; the world would count each block c times), else the group."""
        return self.group if self.replicas is None else self.replicas.column

    @property
    def bipartite(self) -> bool:
        """Whether the graph has two node sets of different sizes (size=(N_src, N_dst))."""
        return self.size[0] != self.size[1]

    @property
    def num_rows(self) -> int:
        """The number of nodes this rank owns (of the square graph: its range)."""
        return self.row_end - self.row_begin

    @property
    def num_src_rows(self) -> int:
        """The number of sources this rank owns: the first rows of its range."""
        return int(self.src_bounds[self.place + 1] - self.src_bounds[self.place])

    @property
    def num_dst_rows(self) -> int:
        """The number of destinations this rank owns (its output rows): the first rows of its range."""
        return int(self.dst_bounds[self.place + 1] - self.dst_bounds[self.place])

    def _ids_on(self, device) -> torch.Tensor:
        key = str(device)
        if key not in self._ids:
            self._ids[key] = self.global_ids.to(device)
        return self._ids[key]

    def _square(self, what: str) -> None:
        if self.bipartite:
            raise MggError(
                f"DistGraph.{what}: the graph is bipartite {self.size} (two node sets); use {what}_src for "
                f"sources and {what}_dst for destinations"
            )

    def local(self, t: torch.Tensor) -> torch.Tensor:
        """This rank's rows of a per-node tensor given in the user's node order (features,
        labels, masks), in the rank's row order: rows global_ids of t (a view for 'range')."""
        self._square("local")
        return self._local(t, self.bounds, "nodes")

    def local_src(self, t: torch.Tensor) -> torch.Tensor:
        """This rank's rows of a per-source tensor [N_src, ...] (x_src), as local()."""
        return self._local(t, self.src_bounds, "sources")

    def local_dst(self, t: torch.Tensor) -> torch.Tensor:
        """This rank's rows of a per-destination tensor [N_dst, ...] (x_dst, labels), as local()."""
        return self._local(t, self.dst_bounds, "destinations")

    def _local(self, t: torch.Tensor, bounds: np.ndarray, what: str) -> torch.Tensor:
        """local() over the ranges `bounds` of `what` (a relabelled partition is square: bounds are its own)."""
        n = int(bounds[-1])
        if t.size(0) != n:
            raise MggError(f"a per-node tensor has {t.size(0)} rows but the graph has {n} {what}")
        if self.partition.identity:
            return t[int(bounds[self.place]) : int(bounds[self.place + 1])]
        return t[self._ids_on(t.device)]  # a prepared dataset's ranks: the user's ids of the rows

    def gather(self, rows: torch.Tensor) -> torch.Tensor:
        """Every rank's rows of a per-node tensor (outputs, gradients), assembled in the user's
        node order on every rank. A collective; the result is detached.

        Args:
            rows: this rank's rows [num_rows, ...], in the rank's row order (as local() gives).

        Returns:
            [nodes, ...] in the user's node order, on rows' device.
        """
        self._square("gather")
        return self._gather(rows, self.bounds, "nodes")

    def gather_src(self, rows: torch.Tensor) -> torch.Tensor:
        """Every rank's rows of a per-source tensor (x_src's gradient) [N_src, ...], as gather()."""
        return self._gather(rows, self.src_bounds, "sources")

    def gather_dst(self, rows: torch.Tensor) -> torch.Tensor:
        """Every rank's rows of a per-destination tensor (outputs) [N_dst, ...], as gather()."""
        return self._gather(rows, self.dst_bounds, "destinations")

    def _gather(self, rows: torch.Tensor, bounds: np.ndarray, what: str) -> torch.Tensor:
        """gather() over the ranges `bounds` of `what`."""
        sizes = [int(b) for b in np.diff(bounds)]
        if rows.size(0) != sizes[self.place]:
            raise MggError(f"rank {self.rank}: {rows.size(0)} rows given but it owns {sizes[self.place]} {what}")
        rows = all_gather_rows(rows.detach(), sizes, self.reduce_group)  # a 1.5D backend's column: each block once
        if self.part is not None:  # the user's id of every row, from the ranks that hold them
            ids = all_gather_rows(self.global_ids.view(-1, 1).to(rows.device), sizes, self.group).view(-1)
            out = torch.empty_like(rows)
            out[ids] = rows
            return out
        return rows if self.partition.identity else self.partition.to_user(rows)

    def plan_for(self, tag: str, make: Callable[[Graph], Graph]) -> DistPlan:
        """The DistPlan of make(graph) (a layer's normalisation, in the user's order, then
        relabelled into the ranks' order), built once per tag."""
        if tag not in self._plans:
            g = make(self.graph) if self.part is not None else self.partition.relabel(make(self.graph))
            group = self.group
            if self.replicas is not None:  # the edges this rank's column multiplies, over the column
                g = column_graph(g, self.bounds, self.replicas.layout.chunk)
                group = self.replicas.column
            self._plans[tag] = DistPlan(
                g,
                self.place,
                self.bounds,
                group,
                self.backend,
                self.fetch,
                self.remote_reads,
                self.gpus_per_node,
                self.replicas,
            )
        return self._plans[tag]


def _replicas(group, world: int, rank: int, c: int, rule: str) -> Replicas:
    """A 1.5D DistGraph's layout and its process row and column groups (Plexus's GridShape(P / c, c, 1)
    over the world's DeviceMesh)."""
    from .grid import Grid, GridShape

    layout = Layout(world, c, rank, rule)
    if group is not None:
        raise MggError("the 1.5D backends run over the world's ranks (group=None)")
    if c not in _ROW_COLUMN:  # new groups are collective: made once per replication
        grid = Grid(GridShape(layout.blocks, c, 1))
        _ROW_COLUMN[c] = (grid.group["y"], grid.group["x"])
    return Replicas(layout, *_ROW_COLUMN[c])


_ROW_COLUMN: dict = {}  # replication -> (process row, process column) groups of this process


class PartBook:
    """The partition of a prepared dataset's ranks: its bounds and the prepare's method and seed
    (the O(P) book a rank keeps; no node permutation)."""

    identity = False

    def __init__(self, manifest, bounds):
        self.method, self.seed, self.bounds = manifest.method, manifest.seed, np.asarray(bounds, np.int64)
        self.num_nodes = int(self.bounds[-1])

    @property
    def num_ranks(self) -> int:
        return self.bounds.size - 1


def _check_part(part: Part, partition, size) -> None:
    if partition not in (None, part.manifest.method):
        raise MggError(
            f"DistGraph: a prepared dataset is partitioned already (by {part.manifest.method}, when it was "
            f"prepared), not by {getattr(partition, 'method', partition)!r}; prepare it again to change that"
        )
    if size is not None:
        raise MggError("DistGraph: a prepared dataset's graph is square (size does not apply)")


def _bipartite_size(graph: Graph, size: Optional[tuple], partition: Union[str, Partition]) -> tuple[int, int]:
    """(N_src, N_dst) of a DistGraph's `size` argument, checked against its graph: max(size)
    nodes, no source at or past N_src, no destination at or past N_dst, and a range partition
    (a relabelling would mix the two node sets' ranges)."""
    n = graph.num_nodes
    if size is None:
        return n, n
    if (
        not isinstance(size, (tuple, list))
        or len(size) != 2
        or not all(isinstance(s, (int, np.integer)) and s > 0 for s in size)
    ):
        raise MggError(f"DistGraph: size must be a pair of positive ints (N_src, N_dst), got {size!r}")
    n_src, n_dst = int(size[0]), int(size[1])
    if n != max(n_src, n_dst):
        raise MggError(
            f"DistGraph: a bipartite graph of size {(n_src, n_dst)} is held over max(N_src, N_dst) = "
            f"{max(n_src, n_dst)} nodes (Graph.from_edge_index(edge_index, max(size))), got {n}"
        )
    if graph.num_edges and int(graph.col.max()) >= n_src:
        raise MggError(f"DistGraph: an edge names source {int(graph.col.max())}, but size has {n_src} sources")
    if int(graph.rowptr[n_dst]) != graph.num_edges:
        raise MggError(f"DistGraph: an edge names a destination >= {n_dst}, but size has {n_dst} destinations")
    by_range = partition == "range" or (isinstance(partition, Partition) and partition.identity)
    if n_src != n_dst and not by_range:
        raise MggError(
            f"DistGraph: a bipartite graph is split by range (partition 'range' or an identity "
            f"mgg.Partition), got {getattr(partition, 'method', partition)!r}"
        )
    return n_src, n_dst


def _agree(
    graph: Graph, world: int, rank: int, group, partition: Union[str, Partition], compute: Callable[[str], Partition]
) -> Partition:
    """The ranks' common partition: a given one (checked), one computed alike on every rank
    ('range', 'random'), or rank 0's result (read from its disk cache or computed) sent to all;
    an error on rank 0 is raised on every rank. compute(method) computes one."""
    if isinstance(partition, Partition):
        if partition.num_nodes != graph.num_nodes or partition.num_ranks != world:
            raise MggError(
                f"the partition is of {partition.num_nodes} nodes over {partition.num_ranks} ranks, but "
                f"the graph has {graph.num_nodes} nodes and the group {world} ranks"
            )
        return partition
    if not isinstance(partition, str) or partition not in METHODS:
        raise MggError(f"partition must be one of {METHODS} or an mgg.Partition, got {partition!r}")
    if partition not in CACHED:
        return compute(partition)
    box: list = [None]
    if rank == 0:
        try:
            box[0] = compute(partition)
        except Exception as e:  # every rank raises it: none waits for a result that never comes
            box[0] = str(e) if isinstance(e, MggError) else f"rank 0 could not partition: {e.__class__.__name__}: {e}"
    dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
    if isinstance(box[0], str):
        raise MggError(box[0])
    return box[0]

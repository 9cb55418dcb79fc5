"""One model for every strategy (`mgg train --backend auto`): the flat halo (1D), the node-level halo,
the 1.5D backends for every replication c (sa-1.5d, cagnet-1.5d) and Plexus's 3D grids, ranked by the
predicted epoch of a GNN on a described cluster, from the bytes each rank moves as the runs count
them at their collectives (halo: HaloExchange's rows; node-halo: NodeRoutes'; 1.5D: onefive.volume;
grid: grid.model's), each at the rate of the link it crosses: inside a machine the GPU's NVLink rate,
between machines the machine's network rate shared by its GPUs (mgg.runtime.cluster_model). Each
rank's aggregation is timed at both ends of the range kernel's bandwidth bound; a strategy's epoch is
a band. The dense GEMMs and the weights' all-reduce are alike for the row-partitioned strategies and
left out, as in Plexus's model. Every time here is predicted."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..errors import MggError
from ..graph import Graph
from ..partitioning import partition as partition_nodes
from ..partitioning.nodes import node_partition
from ..plan import Plan
from ..plan.stats import volume_matrix
from ..runtime import kernel_model as km
from ..runtime.cluster_model import Cluster
from .grid.comm_sizes import ring_bytes
from .grid.model import GraphStats, Network, rank_grids
from .node_routes import NodeRoutes
from .onefive.layout import Layout
from .onefive.volume import rank_bytes as onefive_bytes

ROW_PARTITIONED = ("halo", "node-halo", "sa-1.5d", "cagnet-1.5d")


@dataclass(frozen=True)
class Strategy:
    """A backend and its shape: replication for the 1.5D backends, a grid for the grid."""

    backend: str
    replication: int = 1
    grid: Optional[str] = None

    def __str__(self) -> str:
        if self.grid:
            return f"grid {self.grid}"
        return f"{self.backend} c={self.replication}" if self.backend.endswith("1.5d") else self.backend

    def train_args(self) -> list:
        """Its `mgg train` options."""
        if self.grid:
            return ["--backend", "grid", "--grid", self.grid]
        extra = ["--replication", str(self.replication)] if self.backend.endswith("1.5d") else []
        return ["--backend", self.backend, *extra]


@dataclass
class Prediction:
    """A strategy's predicted epoch (seconds, a band) and the busiest machine's network and GPU's
    NVLink bytes of an epoch's aggregations (the grid: its busiest rank's bytes per axis)."""

    strategy: Strategy
    low_s: float
    high_s: float
    network_bytes: float
    nvlink_bytes: float
    per_rank: dict = field(default_factory=dict)  # what each rank's collectives count (checks, bench)

    @property
    def mid_s(self) -> float:
        return (self.low_s + self.high_s) / 2


@dataclass
class _Link:
    """One collective step's bytes per rank, split by the link they cross."""

    network: np.ndarray  # bytes each rank receives from other machines
    nvlink: np.ndarray  # bytes each rank receives inside its machine


def _time(links: list, cluster: Cluster) -> float:
    """Steps one after the other: each the busiest machine's network bytes at its rate plus the
    busiest GPU's NVLink bytes at its rate."""
    total = 0.0
    for ln in links:
        machines = ln.network.reshape(cluster.nodes, cluster.gpus_per_node).sum(axis=1)
        total += float(machines.max(initial=0)) / (cluster.inter_gbps * 1e9)
        total += float(ln.nvlink.max(initial=0)) / (cluster.intra_gbps * 1e9)
    return total


def _aggregate_s(edges: np.ndarray, rows: np.ndarray, width: int, elem: int, gpu: km.Gpu) -> float:
    row = km.row_bytes(width, elem)
    stream = edges * 8.0 + rows * (8.0 + row)
    return max(
        (km.bandwidth_s(s, e * float(row), row, s + e * row, gpu) for s, e in zip(stream, edges, strict=True)),
        default=0.0,
    )


def _band(links_per_width, edges, rows, widths, cluster: Cluster, elem: int) -> tuple:
    """(low, high) of forward and backward aggregations at each width: the communication, then each
    rank's aggregation at both ends of the kernel band."""
    ends = km.band(km.gpu_named(cluster.gpu))
    comm = sum(_time(links_per_width(w), cluster) for w in widths)
    agg = {
        k: sum(2 * _aggregate_s(edges, rows, w, elem, ends[k]) for w in widths) for k in ("optimistic", "pessimistic")
    }
    out = sorted(comm + a for a in agg.values())
    return out[0], out[1]


def _machine(ranks, g: int):
    return np.asarray(ranks) // g


def _split(volume: np.ndarray, machine_of: np.ndarray) -> tuple:
    """From a volume matrix (volume[q, r]: rows q sends r) over ranks: each rank's rows received
    forward and backward (the gradients of the rows it sent), from other machines and from its own."""
    same = machine_of[:, None] == machine_of[None, :]
    inside = np.where(same, volume, 0)
    np.fill_diagonal(inside, 0)
    across = np.where(same, 0, volume)
    return (across.sum(0), inside.sum(0)), (across.sum(1), inside.sum(1))


def halo(graph: Graph, cluster: Cluster, widths: list, method: str, seed: int, elem: int) -> Prediction:
    """The flat halo: each rank receives its halo rows from their owners (forward), and the
    gradients of the rows it sent (backward)."""
    world, g = cluster.nodes * cluster.gpus_per_node, cluster.gpus_per_node
    part = partition_nodes(graph, world, method, seed)
    relabelled = part.relabel(graph)
    volume, _ = volume_matrix(relabelled, part.bounds)
    fwd, bwd = _split(volume, np.arange(world) // g)
    rp = relabelled.rowptr.numpy()
    edges, rows = rp[part.bounds[1:]] - rp[part.bounds[:-1]], np.diff(part.bounds)

    def links(w):
        rb = w * elem
        return [_Link(fwd[0] * rb, fwd[1] * rb), _Link(bwd[0] * rb, bwd[1] * rb)]

    low, high = _band(links, edges, rows, widths, cluster, elem)
    # counted as HaloExchange counts: rows received and sent, forward and backward
    per_rank = {r: 2.0 * float(volume[:, r].sum() + volume[r].sum()) * sum(widths) * elem for r in range(world)}
    return _prediction(Strategy("halo"), low, high, links, widths, per_rank)


def node_halo(graph: Graph, cluster: Cluster, widths: list, method: str, seed: int, elem: int) -> Prediction:
    """The node-level halo: each row over the network once per machine that reads it, then inside;
    backward, the same routes reversed."""
    world, g = cluster.nodes * cluster.gpus_per_node, cluster.gpus_per_node
    part = node_partition(graph, cluster.nodes, g, method, seed)
    plan = Plan(part.relabel(graph), bounds=part.bounds)
    routes = NodeRoutes(plan, g)
    f_inter, f_intra, b_inter, b_intra = (np.zeros(world) for _ in range(4))
    for r in range(world):
        rr = routes.rank(r)
        f_inter[r] = rr.num_node_halo
        f_intra[r] = sum(n for p, n in enumerate(rr.recv2_counts) if p != r)
        b_inter[r] = sum(rr.send1_counts)
        b_intra[r] = sum(n for p, n in enumerate(rr.send2_counts) if p != r)
    rp = plan.graph.rowptr.numpy()
    edges, rows = rp[part.bounds[1:]] - rp[part.bounds[:-1]], np.diff(part.bounds)

    def links(w):
        rb = w * elem
        return [_Link(f_inter * rb, f_intra * rb), _Link(b_inter * rb, b_intra * rb)]

    low, high = _band(links, edges, rows, widths, cluster, elem)
    # counted as node-halo counts: the rows it sends, forward and backward (its received ones go back)
    per_rank = {r: (f_inter[r] + f_intra[r] + b_inter[r] + b_intra[r]) * sum(widths) * elem for r in range(world)}
    return _prediction(Strategy("node-halo"), low, high, links, widths, per_rank)


def one_five(
    graph: Graph, cluster: Cluster, widths: list, algorithm: str, c: int, method: str, seed: int, elem: int
) -> Prediction:
    """A 1.5D backend: its column's exchange or broadcasts (onefive.volume's bytes, each pair's on the
    link between their machines), then its row collective (inside a machine where the c ranks of a row
    are, else over the network), then its partial product."""
    world, g = cluster.nodes * cluster.gpus_per_node, cluster.gpus_per_node
    b = world // c
    part = partition_nodes(graph, b, method, seed)
    relabelled = part.relabel(graph)
    volume, _ = volume_matrix(relabelled, part.bounds)
    sizes = np.diff(part.bounds)
    lays = [Layout(world, c, r) for r in range(world)]
    # rows received per rank, forward (its chunk's, from their owners) and backward (the gradients of
    # those it served), by the link they cross
    f_inter, f_intra, b_inter, b_intra = (np.zeros(world) for _ in range(4))
    for r, lay in enumerate(lays):
        for k in range(*lay.chunk):
            if k == lay.block:
                continue
            n_rows = volume[k, lay.block] if algorithm == "sa-1.5d" else sizes[k]
            sender = lay.rank_of(k, lay.column)
            if sender // g == r // g:
                f_intra[r] += n_rows
                b_intra[sender] += n_rows
            else:
                f_inter[r] += n_rows
                b_inter[sender] += n_rows
    row_inside = all(len({q // g for q in range(i * c, (i + 1) * c)}) == 1 for i in range(b))
    # each block row's edges from each block: a rank multiplies its row's by its chunk's
    block_of = np.repeat(np.arange(b), sizes)
    pairs = block_of[relabelled.rows().numpy()] * b + block_of[relabelled.col.numpy()]
    nnz = np.bincount(pairs, minlength=b * b).reshape(b, b)
    edges = np.array([nnz[lay.block, slice(*lay.chunk)].sum() for lay in lays], dtype=np.float64)
    rows = np.array([sizes[lay.block] for lay in lays])

    def links(w):
        rb = elem * w
        forward, backward = _Link(f_inter * rb, f_intra * rb), _Link(b_inter * rb, b_intra * rb)
        row_f = np.array([ring_bytes("all_reduce", sizes[lay.block] * rb, c) for lay in lays])
        row_b = np.array([ring_bytes("broadcast", sizes[lay.block] * rb, c) for lay in lays])
        zero = np.zeros(world)
        rows_f = _Link(zero, row_f) if row_inside else _Link(row_f, zero)
        rows_b = _Link(zero, row_b) if row_inside else _Link(row_b, zero)
        return [forward, rows_f, backward, rows_b]

    low, high = _band(links, edges, rows, widths, cluster, elem)
    per_rank = {}
    for r, lay in enumerate(lays):
        total = 0.0
        for w in widths:
            by = onefive_bytes(algorithm, lay, volume, sizes, w, elem)
            total += sum(by[d][k] for d in by for k in by[d])
        per_rank[r] = total
    return _prediction(Strategy(algorithm, c), low, high, links, widths, per_rank)


def _prediction(strategy: Strategy, low: float, high: float, links, widths: list, per_rank: dict) -> Prediction:
    network = sum(float(ln.network.max(initial=0)) for w in widths for ln in links(w))
    nvlink = sum(float(ln.nvlink.max(initial=0)) for w in widths for ln in links(w))
    return Prediction(strategy, low, high, network, nvlink, per_rank)


def rank_strategies(
    graph: Graph,
    cluster: Cluster,
    dims: list,
    conv: str = "gcn",
    method: str = "random",
    seed: int = 0,
    elem: int = 4,
    replications: Optional[list] = None,
) -> list:
    """Every strategy on `cluster` for a model of widths `dims` (input, hidden..., classes) of `conv`,
    fastest predicted epoch first (the band's middle). The row-partitioned strategies partition the
    graph by `method`; replications: the 1.5D backends' c (default: every divisor of the ranks)."""
    world = cluster.nodes * cluster.gpus_per_node
    if world < 1 or cluster.intra_gbps <= 0 or cluster.inter_gbps <= 0:
        raise MggError(f"a cluster needs machines, GPUs and positive rates, got {cluster}")
    if world > graph.num_nodes:
        raise MggError(f"{world} ranks exceed the graph's {graph.num_nodes} nodes")
    widths = aggregation_widths(conv, dims)
    out = [halo(graph, cluster, widths, method, seed, elem)]
    if cluster.nodes > 1:
        out.append(node_halo(graph, cluster, widths, method, seed, elem))
    for c in replications or [d for d in range(2, world + 1) if world % d == 0]:
        if world % c == 0 and conv in ("gcn", "sage", "gin"):
            for algorithm in ("sa-1.5d", "cagnet-1.5d"):
                out.append(one_five(graph, cluster, widths, algorithm, c, method, seed, elem))
    if conv in ("gcn", "sage"):
        stats = GraphStats("graph", graph.num_nodes, graph.num_edges + graph.num_nodes, tuple(dims), conv)
        net = Network(cluster.gpus_per_node, cluster.intra_gbps, cluster.inter_gbps)
        for p in rank_grids(world, stats, net, cluster.gpu, elem):
            if p.fits:
                network, nvlink = _grid_links(p, net)
                out.append(
                    Prediction(
                        Strategy("grid", grid=str(p.shape)), p.low_s, p.high_s, network, nvlink, dict(p.bytes_axis)
                    )
                )
    return sorted(out, key=lambda p: (p.mid_s, str(p.strategy)))


def _grid_links(p, net: Network) -> tuple:
    """A grid's (busiest machine's network bytes, busiest GPU's NVLink bytes): an axis inside a machine
    crosses NVLink; one across machines, the network, shared by the machine's GPUs on that axis (the
    ones Network.axis_bytes_per_s divides its rate among)."""
    network = nvlink = 0.0
    for axis, b in p.bytes_axis.items():
        if p.shape.inside_node(axis, net.gpus_per_node):
            nvlink += b
        else:
            network += b * net.inter_gbps / (net.axis_bytes_per_s(p.shape, axis) / 1e9)
    return network, nvlink


def aggregation_widths(conv: str, dims: list) -> list:
    """The width of each layer's aggregation as mgg.nn's layers run it: GCN aggregates after its linear
    map; SAGE (mean) after it where that narrows the rows (W agg(x) = agg(W x) for sums), else before;
    GIN and GAT before."""
    pairs = list(zip(dims[:-1], dims[1:], strict=True))
    if conv == "gcn":
        return [o for _, o in pairs]
    if conv == "sage":
        return [min(i, o) for i, o in pairs]
    return [i for i, _ in pairs]

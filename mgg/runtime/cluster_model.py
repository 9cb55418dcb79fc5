"""A training epoch's predicted time on a cluster, per distributed backend, as a band: what each
rank's exchange moves (rows in from other machines over the network, rows in from its machine's
ranks over NVLink) at the bandwidths the user gives, plus each rank's aggregation at both ends of
the range kernel's bandwidth bound (kernel_model.band). The exchange comes before the op in the
halo backends, so the two add (node-nvshmem's network and NVLink traffic may hide behind its op);
an epoch is, per layer, a forward and a backward pass of each. The dense GEMMs and the weights'
all-reduce are alike for every backend here and left out."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import kernel_model as km


@dataclass(frozen=True)
class Cluster:
    """nodes machines of gpus_per_node GPUs; intra_gbps: one GPU's NVLink rate (GB/s, one way);
    inter_gbps: one machine's network rate (GB/s, one way, all its NICs); gpu: a GPU name
    (kernel_model.gpu_named)."""

    nodes: int
    gpus_per_node: int
    intra_gbps: float
    inter_gbps: float
    gpu: str = "h100"


@dataclass
class RankTraffic:
    """One aggregation's work per rank (arrays over the ranks): rows received from other machines
    and from the rank's own machine, and the edges and output rows its op has."""

    inter_rows: np.ndarray
    intra_rows: np.ndarray
    edges: np.ndarray
    rows: np.ndarray


def network_s(t: RankTraffic, c: Cluster, row_bytes: int) -> float:
    """The busiest machine's inbound network bytes at its network rate."""
    per_machine = t.inter_rows.reshape(c.nodes, c.gpus_per_node).sum(axis=1)
    return float(per_machine.max(initial=0)) * row_bytes / (c.inter_gbps * 1e9)


def nvlink_s(t: RankTraffic, c: Cluster, row_bytes: int) -> float:
    """The busiest GPU's inbound NVLink bytes at its NVLink rate."""
    return float(t.intra_rows.max(initial=0)) * row_bytes / (c.intra_gbps * 1e9)


def aggregate_s(t: RankTraffic, dim: int, elem: int, gpu: km.Gpu) -> float:
    """The slowest rank's aggregation at the range kernel's bandwidth bound on `gpu`: per edge its
    column id and weight streamed and a row gathered, per row its pointer and its output row."""
    row = km.row_bytes(dim, elem)
    stream = t.edges * 8.0 + t.rows * (8.0 + row)
    gathered = t.edges * float(row)
    times = [km.bandwidth_s(s, g, row, s + g, gpu) for s, g in zip(stream, gathered, strict=True)]
    return max(times, default=0.0)


def epoch_band(t: RankTraffic, c: Cluster, dims: list, elem: int = 4, fused: bool = False) -> tuple[float, float]:
    """(low, high) seconds of an epoch whose layers aggregate at widths `dims`: forward and backward
    of each; the network's exchange, then the machine's (NVLink), then the op, at both ends of the
    GPU's band. `fused` (node-nvshmem: the kernel sums the machine's own rows while the network
    brings the others, and reads the machine's rows over NVLink while it sums): at the low end the
    three overlap perfectly (their max), at the high end not at all (their sum)."""
    ends = km.band(km.gpu_named(c.gpu))
    out = []
    for end in ("optimistic", "pessimistic"):
        total = 0.0
        for d in dims:
            row = d * elem
            parts = (network_s(t, c, row), nvlink_s(t, c, row), aggregate_s(t, d, elem, ends[end]))
            total += 2 * (max(parts) if fused and end == "optimistic" else sum(parts))
        out.append(total)
    return min(out), max(out)

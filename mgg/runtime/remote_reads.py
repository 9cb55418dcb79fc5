"""The choice between the nvshmem backend's remote-read modes (issue 34): `per-edge` (MGG's fused
kernel reads a remote row once per edge that names it, overlapped with local work) and `once`
(each halo row gathered once from its owner while the local edges are aggregated, then the
remote edges aggregated from that local table). Which is faster depends on the graph, D and P:
on a dense graph the per-edge mode moves many times the bytes over NVLink; on a sparse one the
once mode's extra pass over the halo rows and its second kernel cost more than they save.

The bytes each mode moves come from the plan (`remote_read_bytes`), and a time estimate from
them and the H100 SXM's published bandwidths (`estimate_ms`): the cost model's term. As the
config search does (cost.py), a mode the model puts beyond SLACK times the other's estimate is
not measured; the others are, and the choice comes from their measured step times. Every rank
runs the same modes the same number of times (the steps are collective; the estimates are the
slowest rank's, agreed before), times its own steps after a barrier, the step time is the
slowest rank's (coordination.py), and every rank takes the mode of the smallest, so all ranks
agree."""

from __future__ import annotations

from functools import partial
from typing import Callable, Optional

import torch

from ..plan import REMOTE_READS, RankShard
from .coordination import Coordinator
from .cost import SLACK
from .hardware import H100_SXM
from .timing import time_once

AUTO = "auto"  # DistGraph(remote_reads="auto"): chosen by choose_remote_reads at a layer's first step
HBM_BYTES_PER_S = H100_SXM.hbm_bytes_per_s
NVLINK_BYTES_PER_S = H100_SXM.nvlink_bytes_per_s


def remote_read_bytes(shard: RankShard, dim: int, element_size: int) -> dict:
    """Per mode, the bytes of one forward aggregation of a rank: (read from peers, moved in this
    device's memory while they are read, moved after). per-edge: a remote row per remote edge
    from its owner, beside the local edges' rows (MGG's fused kernel overlaps them). once: each
    halo row once from its owner and written to the halo table, beside the local edges' rows
    (RankPlan.aggregate_peers_once's overlapped path), then the remote edges' rows from the halo table.

    Args:
        shard: the rank's shard of a plan.
        dim, element_size: the feature width and the bytes of one element.

    Returns:
        {mode: (peer_bytes, overlapped_local_bytes, after_bytes)}.
    """
    row = dim * element_size
    local, remote, halo = shard.num_local_edges, shard.num_remote_edges, shard.num_halo
    return {"per-edge": (remote * row, local * row, 0), "once": (halo * row, (local + halo) * row, remote * row)}


def estimate_ms(
    shard: RankShard,
    dim: int,
    element_size: int,
    link_bytes_per_s: float = NVLINK_BYTES_PER_S,
    memory_bytes_per_s: float = HBM_BYTES_PER_S,
) -> dict:
    """Per mode, a lower bound on one forward aggregation's time (ms) from remote_read_bytes: the
    peer reads overlapped with what moves meanwhile, then what moves after."""
    out = {}
    for mode, (peer, during, after) in remote_read_bytes(shard, dim, element_size).items():
        out[mode] = 1e3 * (max(peer / link_bytes_per_s, during / memory_bytes_per_s) + after / memory_bytes_per_s)
    return out


def choose_remote_reads(
    step: Callable[[str], object],
    device,
    coordinator: Optional[Coordinator] = None,
    reps: int = 3,
    timer: Optional[Callable] = None,
    estimates: Optional[dict] = None,
    slack: float = SLACK,
) -> tuple[str, dict]:
    """The faster remote-read mode of one step, from measured step times (the modes the cost
    model keeps).

    Args:
        step: runs the step in a mode (collective over the coordinator's ranks).
        device: where the step runs (for the timer and the barrier).
        coordinator: how ranks agree (default: one process).
        reps: timed runs per mode, after one warm-up run; the median counts.
        timer: (fn, device) -> (result, ms) (default: time_once); fn is partial(step, mode).
        estimates: this rank's {mode: estimated ms} (estimate_ms), or None: measure every mode.
        slack: a mode estimated beyond slack x the best estimate is not measured.

    Returns:
        (the mode, {mode: step ms} of the modes measured).
    """
    coordinator, timer = coordinator or Coordinator(), timer or time_once
    modes = list(REMOTE_READS)
    if estimates is not None:
        agreed = {m: coordinator.slowest(estimates[m]) for m in REMOTE_READS}  # the same on every rank
        best = min(agreed.values())
        modes = [m for m in REMOTE_READS if agreed[m] <= slack * best]
    if len(modes) == 1:
        return modes[0], {}
    times = {}
    for mode in modes:  # the same order on every rank
        step(mode)  # warm-up: plans, schedules and tables are built outside the timing
        samples = []
        for _ in range(reps):
            coordinator.sync(torch.device(device))
            _, ms = timer(partial(step, mode), device)
            samples.append(coordinator.slowest(ms))
        times[mode] = sorted(samples)[len(samples) // 2]
    return min(modes, key=lambda m: times[m]), times

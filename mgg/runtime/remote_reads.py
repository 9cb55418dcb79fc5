"""The choice between the nvshmem backend's remote-read modes (issue 34): `per-edge` (MGG's fused
kernel reads a remote row once per edge that names it, overlapped with local work) and `once`
(each halo row gathered once from its owner while the local edges are aggregated, then the
remote edges aggregated from that local table). Which is faster depends on the graph, D and P:
on a dense graph the per-edge mode moves many times the bytes over NVLink; on a sparse one the
once mode's extra pass over the halo rows and its second kernel cost more than they save.

The bytes each mode moves come from the plan (`remote_read_bytes`, the cost model's term); the
choice comes from measured step times: every rank runs each mode the same number of times (the
steps are collective), times its own steps after a barrier, the step time is the slowest rank's
(coordination.py), and every rank takes the mode of the smallest, so all ranks agree."""

from __future__ import annotations

from functools import partial
from typing import Callable, Optional

import torch

from ..plan import RankShard
from ..steps import REMOTE_READS
from .coordination import Coordinator
from .timing import time_once

AUTO = "auto"  # DistGraph(remote_reads="auto"): chosen by choose_remote_reads at a layer's first step


def remote_read_bytes(shard: RankShard, dim: int, element_size: int) -> dict:
    """Per mode, the bytes of one forward aggregation of a rank: (read from peers, moved in this
    device's memory while they are read, moved after). per-edge: a remote row per remote edge
    from its owner, beside the local edges' rows (MGG's fused kernel overlaps them). once: each
    halo row once from its owner and written to the halo table, beside the local edges' rows
    (run_peers_once's overlapped path), then the remote edges' rows from the halo table.

    Args:
        shard: the rank's shard of a plan.
        dim, element_size: the feature width and the bytes of one element.

    Returns:
        {mode: (peer_bytes, overlapped_local_bytes, after_bytes)}.
    """
    row = dim * element_size
    local, remote, halo = shard.num_local_edges, shard.num_remote_edges, shard.num_halo
    return {"per-edge": (remote * row, local * row, 0), "once": (halo * row, (local + halo) * row, remote * row)}


def choose_remote_reads(
    step: Callable[[str], object],
    device,
    coordinator: Optional[Coordinator] = None,
    reps: int = 3,
    timer: Optional[Callable] = None,
) -> tuple[str, dict]:
    """The faster remote-read mode of one step, from measured step times.

    Args:
        step: runs the step in a mode (collective over the coordinator's ranks).
        device: where the step runs (for the timer and the barrier).
        coordinator: how ranks agree (default: one process).
        reps: timed runs per mode, after one warm-up run; the median counts.
        timer: (fn, device) -> (result, ms) (default: time_once); fn is partial(step, mode).

    Returns:
        (the mode, {mode: step ms}).
    """
    coordinator, timer = coordinator or Coordinator(), timer or time_once
    times = {}
    for mode in REMOTE_READS:  # the same order on every rank
        step(mode)  # warm-up: plans, schedules and tables are built outside the timing
        samples = []
        for _ in range(reps):
            coordinator.sync(torch.device(device))
            _, ms = timer(partial(step, mode), device)
            samples.append(coordinator.slowest(ms))
        times[mode] = sorted(samples)[len(samples) // 2]
    return min(REMOTE_READS, key=lambda m: times[m]), times

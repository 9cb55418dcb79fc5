"""`mgg train --backend auto`: the strategy the one model ranks first for this job (mgg.distributed.
strategy), on the cluster torchrun's job is (its machines and GPUs each) at the rates the user gives.
Rank 0 ranks the strategies and the others take its choice, so every rank runs the same."""

from __future__ import annotations

import os
from typing import Optional

import torch.distributed as dist

from ..data import NodeDataset
from ..distributed.strategy import Prediction, Strategy, rank_strategies
from ..errors import MggError
from ..partitioning.nodes import best_method
from ..runtime.cluster_model import Cluster
from .loop import TrainConfig

DEFAULT_NVLINK_GBPS = 450.0  # a DGX H100's NVLink, one way per GPU


def cluster_of_job(nvlink_gbps: Optional[float], network_gbps: Optional[float], gpu: str = "h100") -> Cluster:
    """The job's cluster: torchrun's WORLD_SIZE ranks in machines of LOCAL_WORLD_SIZE; the network's
    rate is needed where the job spans machines."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    nodes = max(1, world // max(local, 1))
    if nodes > 1 and network_gbps is None:
        raise MggError(
            f"--backend auto: the job spans {nodes} machines; give the network's rate per machine "
            "(--network-gbps, GB/s one way, e.g. 400 for 8 x 400 Gb/s) and NVLink's (--nvlink-gbps)"
        )
    return Cluster(nodes, local, nvlink_gbps or DEFAULT_NVLINK_GBPS, network_gbps or 1.0, gpu)


def rank_for(ds: NodeDataset, cfg: TrainConfig, cluster: Cluster, partition: Optional[str]) -> list:
    """The strategies that train cfg's model, ranked (mgg.distributed.strategy)."""
    dims = [ds.x.size(1)] + [cfg.hidden] * (cfg.layers - 1) + [ds.num_classes]
    method = partition or ("range" if cluster.nodes == 1 else best_method())
    found = rank_strategies(ds.graph, cluster, dims, cfg.model, method)
    trains = [p for p in found if p.strategy.backend != "grid" or cfg.model in ("gcn", "sage")]
    if cfg.model == "gat":
        trains = [p for p in trains if p.strategy.backend in ("halo", "node-halo")]
    return trains


def choose(ds: NodeDataset, cfg: TrainConfig, cluster: Cluster, partition: Optional[str]) -> tuple:
    """(the chosen Strategy, the line that says so): rank 0 ranks, every rank gets its choice."""
    box: list = [None]
    if dist.get_rank() == 0:
        try:
            ranked = rank_for(ds, cfg, cluster, partition)
            box[0] = (ranked[0].strategy, line(ranked, cluster))
        except MggError as e:
            box[0] = str(e)
    dist.broadcast_object_list(box, src=0)
    if isinstance(box[0], str):
        raise MggError(box[0])
    return box[0]


def line(ranked: list, cluster: Cluster) -> str:
    def band(p: Prediction) -> str:
        return f"{p.low_s * 1e3:.3g}-{p.high_s * 1e3:.3g} ms/epoch"

    first = ranked[0]
    second = f", runner-up {ranked[1].strategy} ({band(ranked[1])})" if len(ranked) > 1 else ""
    return (
        f"mgg train: backend auto: {first.strategy} (predicted {band(first)}){second}; {cluster.nodes} machine(s) x "
        f"{cluster.gpus_per_node} GPUs, NVLink {cluster.intra_gbps:g} GB/s, network {cluster.inter_gbps:g} GB/s"
    )


__all__ = ["Strategy", "choose", "cluster_of_job", "line", "rank_for"]

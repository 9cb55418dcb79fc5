"""Full-graph training across the ranks of a torch.distributed group: each rank computes the
logits of its own nodes with the same training loop as one process (mgg.training.loop), the loss being
the global mean over training nodes, so the all-reduced weight gradients equal those of the
single-process run."""

from __future__ import annotations

import torch

from ..data import NodeDataset
from ..distributed.backends import BACKENDS
from ..distributed.graph import DistGraph
from ..distributed.process import init_from_env
from ..errors import MggError
from .loop import TrainConfig, summarize, train_once


def train(
    ds: NodeDataset,
    cfg: TrainConfig,
    backend: str = "halo",
    progress: bool = True,
    fetch: str = "get-warp",
    partition=None,
    remote_reads: str = "per-edge",
) -> dict:
    """Trains once per seed over the ranks of the torchrun job; every rank returns the summary.
    `partition` (a method of mgg.partition or an mgg.Partition) decides which nodes each rank
    owns; features, labels and masks stay in the dataset's node order; `remote_reads` is the
    nvshmem backend's mode (DistGraph)."""
    if BACKENDS[backend].starts_nvshmem and not cfg.device.startswith("cuda"):
        alternative = "node-halo" if BACKENDS[backend].by_machine else "halo"
        raise MggError(f"the {backend} backend runs on GPUs: add --device cuda (or use --backend {alternative})")
    if BACKENDS[backend].starts_nvshmem:
        from ..distributed import nvshmem

        why = nvshmem.available()
        if why:
            raise MggError(why)
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise MggError(f"--device {cfg.device} but no CUDA GPU is visible")
    init_from_env(cfg.device, backend)
    dg = DistGraph(ds.graph, backend=backend, fetch=fetch, partition=partition, remote_reads=remote_reads)
    runs = [train_once(ds, cfg, s, progress, dg) for s in cfg.seeds]
    return dict(summarize(ds, cfg, runs), rank=dg.rank, world=dg.world, partition=dg.partition.method)

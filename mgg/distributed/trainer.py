"""Full-graph training across the ranks of a torch.distributed group: each rank computes the
logits of its own nodes with the same training loop as one process (mgg.train), the loss being
the global mean over training nodes, so the all-reduced weight gradients equal those of the
single-process run."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from ..data import NodeDataset
from ..errors import MggError
from ..train import TrainConfig, summarize, train_once
from .comm import all_reduce, allreduce_grads  # noqa: F401  (their home before comm.py)
from .graph import DistGraph


def init_from_env(device: str = "cpu", backend: str = "halo") -> None:
    """torchrun sets RANK/WORLD_SIZE/MASTER_*. The process group is NCCL when every rank has a
    GPU of its own and the halo backend moves the rows; otherwise gloo (the CPU; several ranks
    sharing a GPU, which NCCL refuses; the nvshmem backend, which uses the group only to start
    NVSHMEM and to all-reduce weight gradients)."""
    if dist.is_initialized():
        return
    cuda = device.startswith("cuda")
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local % torch.cuda.device_count())
    own_gpu = cuda and int(os.environ.get("LOCAL_WORLD_SIZE", 1)) <= torch.cuda.device_count()
    dist.init_process_group("nccl" if own_gpu and backend == "halo" else "gloo")


def train(
    ds: NodeDataset,
    cfg: TrainConfig,
    backend: str = "halo",
    progress: bool = True,
    fetch: str = "get-warp",
    partition="range",
) -> dict:
    """Trains once per seed over the ranks of the torchrun job; every rank returns the summary.
    `partition` (a method of mgg.partition or an mgg.Partition) decides which nodes each rank
    owns; features, labels and masks stay in the dataset's node order."""
    if backend == "nvshmem" and not cfg.device.startswith("cuda"):
        raise MggError("the nvshmem backend runs on GPUs: add --device cuda (or use --backend halo)")
    if backend == "nvshmem":
        from . import nvshmem

        why = nvshmem.available()
        if why:
            raise MggError(why)
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise MggError(f"--device {cfg.device} but no CUDA GPU is visible")
    init_from_env(cfg.device, backend)
    dg = DistGraph(ds.graph, backend=backend, fetch=fetch, partition=partition)
    runs = [train_once(ds, cfg, s, progress, dg) for s in cfg.seeds]
    return dict(summarize(ds, cfg, runs), rank=dg.rank, world=dg.world)

"""Full-graph training across the ranks of a torch.distributed group: each rank computes the
logits of its own nodes with the same training loop as one process (mgg.training.loop), the loss being
the global mean over training nodes, so the all-reduced weight gradients equal those of the
single-process run. The dataset is either loaded whole by every rank (a NodeDataset), or a prepared
directory (`mgg prepare`) of which each rank reads only its part."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

import torch

from ..data import NodeDataset
from ..distributed.backends import BACKENDS
from ..distributed.graph import DistGraph
from ..distributed.prepared import Part, read_part
from ..distributed.process import init_from_env
from ..errors import MggError
from .checkpoint import Checkpoints, dataset_identity, identity, partition_identity
from .loop import TrainConfig, normalize_features_, summarize, train_once, train_seeds


def train(
    ds: Union[NodeDataset, str, Path],
    cfg: TrainConfig,
    backend: str = "halo",
    progress: bool = True,
    fetch: str = "get-warp",
    partition=None,
    remote_reads: str = "per-edge",
    replication: Optional[int] = None,
    stage_rule: str = "balanced",
    checkpoint: Optional[Union[str, Path]] = None,
    checkpoint_every: int = 10,
    timeout_min: Optional[float] = None,
) -> dict:
    """Trains once per seed over the ranks of the torchrun job; every rank returns the summary.
    `ds`: a NodeDataset every rank holds, or the path of a prepared dataset, each rank reading its
    part (mgg.distributed.read_part). `partition` (a method of mgg.partition or an mgg.Partition)
    decides which nodes each rank owns (a prepared dataset's is its own); features, labels and masks
    stay in the dataset's node order; `remote_reads` is the nvshmem backend's mode, `replication` and
    `stage_rule` the 1.5D backends' (DistGraph). `checkpoint`: a directory every rank sees, saved
    into every `checkpoint_every` epochs and resumed from (mgg.training.checkpoint); `timeout_min`:
    how long a rank waits for the others before the job ends naming them (mgg.distributed.watchdog)."""
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
    init_from_env(cfg.device, backend, timeout_min)
    if not isinstance(ds, NodeDataset):
        ds = read_part(ds)
        if ds.manifest.label_shape:
            raise MggError(f"{ds.name}: {ds.num_classes} labels per node (multi-label); mgg train does single-label")
        normalize_features_(ds.x)  # in place, once: the rank keeps one copy of its features
        ds.normalized = True
    graph = ds if isinstance(ds, Part) else ds.graph
    dg = DistGraph(
        graph,
        backend=backend,
        fetch=fetch,
        partition=partition,
        remote_reads=remote_reads,
        replication=replication,
        stage_rule=stage_rule,
    )
    saver = None
    if checkpoint is not None:
        perm = getattr(dg.partition, "perm", None)
        saver = Checkpoints(
            checkpoint,
            checkpoint_every,
            identity(
                dataset_identity(ds),
                cfg,
                backend=backend,
                world=dg.world,
                partition=f"{dg.partition.method}:{partition_identity(dg.bounds, perm)}",
                replication=replication or 1,
                stage_rule=stage_rule,
            ),
        )

    def one_seed(seed, index, saved, runs):
        return train_once(ds, cfg, seed, progress, dg, checkpoints=saver, seed_index=index, saved=saved, runs=runs)

    runs = train_seeds(one_seed, cfg.seeds, saver, progress=False)
    return dict(summarize(ds, cfg, runs), rank=dg.rank, world=dg.world, partition=dg.partition.method)

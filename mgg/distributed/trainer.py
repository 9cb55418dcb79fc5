"""Full-graph training across the ranks of a torch.distributed group: each rank computes the
logits of its own nodes; the loss is the global mean over training nodes, so the all-reduced
weight gradients equal those of the single-process run."""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import replace

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..errors import MggError
from ..io import NodeDataset
from ..train import RunResult, TrainConfig, build_model, normalize_features, summarize
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


def all_reduce(t: torch.Tensor, group=None) -> None:
    """In-place sum over the group; CUDA tensors travel through host memory under gloo."""
    if t.is_cuda and dist.get_backend(group) == "gloo":
        host = t.cpu()
        dist.all_reduce(host, group=group)
        t.copy_(host)
    else:
        dist.all_reduce(t, group=group)


def allreduce_grads(model: torch.nn.Module, group=None) -> None:
    for p in model.parameters():
        if p.grad is not None:
            all_reduce(p.grad, group)


def global_loss(logits_own, y_own, mask_own, total: int) -> torch.Tensor:
    """This rank's share of the mean cross-entropy over all `total` masked nodes."""
    return F.cross_entropy(logits_own[mask_own], y_own[mask_own], reduction="sum") / total


def train_once(ds: NodeDataset, dg: DistGraph, cfg: TrainConfig, seed: int, progress: bool) -> RunResult:
    torch.manual_seed(seed)
    dev = torch.device(cfg.device)
    x = dg.local(normalize_features(ds.x)).to(dev)
    y = dg.local(ds.y).to(dev)
    masks = [dg.local(m).to(dev) for m in (ds.train_mask, ds.val_mask, ds.test_mask)]
    totals = [int(m.sum()) for m in (ds.train_mask, ds.val_mask, ds.test_mask)]
    model = build_model(replace(cfg, autotune=False), x.size(1), ds.num_classes).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    torch.manual_seed(seed * 1000 + dg.rank)  # dropout masks differ per rank, as per node
    best, times = (-1.0, 0.0, 0), []
    bar = tqdm(range(cfg.epochs), desc=f"seed {seed}", disable=not progress or dg.rank != 0, leave=False)
    for epoch in bar:
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad()
        global_loss(model(x, dg), y, masks[0], totals[0]).backward()
        allreduce_grads(model, dg.group)
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
        model.eval()
        with torch.no_grad():
            pred = model(x, dg).argmax(1)
        correct = torch.tensor([float((pred[m] == y[m]).sum()) for m in masks[1:]])
        dist.all_reduce(correct, group=dg.group)
        val, test = (correct / torch.tensor(totals[1:], dtype=torch.float32)).tolist()
        if val > best[0]:
            best = (val, test, epoch)
    return RunResult(seed, best[1], best[0], best[2], statistics.median(times))


def train(ds: NodeDataset, cfg: TrainConfig, backend: str = "halo", progress: bool = True,
          fetch: str = "get-warp") -> dict:
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
    dg = DistGraph(ds.graph, backend=backend, fetch=fetch)
    runs = [train_once(ds, dg, cfg, s, progress) for s in cfg.seeds]
    return dict(summarize(ds, cfg, runs), rank=dg.rank, world=dg.world)

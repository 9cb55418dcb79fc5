"""Full-graph training of a GCN or GraphSAGE on Plexus's 3D grid (mgg.distributed.grid) under torchrun, or in
one process (a 1x1x1 grid): the protocol of mgg.training.loop (features normalised, Adam, weight
decay as the model's protocol has it, dropout where mgg.nn.models puts it, test accuracy at the best validation
epoch), so that every grid trains the same epochs (the dropout mask is the grid's keep_mask, the
same for every grid) as the 1x1x1 grid in one process."""

from __future__ import annotations

import os
import statistics
import time

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from ..data import NodeDataset
from ..distributed.grid import Grid, GridNet, GridShape
from ..distributed.grid.model import GraphStats, Network, rank_grids
from ..distributed.grid.shards import roles
from ..distributed.process import init_from_env
from ..errors import MggError
from .loop import RunResult, TrainConfig, build_optimizer, normalize_features, summarize

# the models of mgg.nn.models whose layers GridNet runs as they are (its GIN has one linear layer, theirs an MLP)
TRAINS = ("gcn", "sage")
# grid="auto" without a cluster description: a DGX H100's rates (NVLink 450 GB/s per GPU, 8 x 400 Gb/s per node)
AUTO_INTRA_GBPS, AUTO_INTER_GBPS = 450.0, 400.0


def dims_of(ds: NodeDataset, cfg: TrainConfig) -> list:
    return [ds.x.size(1)] + [cfg.hidden] * (cfg.layers - 1) + [ds.num_classes]


def choose_shape(grid: str, world: int, ds: NodeDataset, cfg: TrainConfig, gpus_per_node: int) -> GridShape:
    """`grid` as GXxGYxGZ, or 'auto': the first of mgg.distributed.grid.model's ranking for this graph."""
    if grid != "auto":
        shape = GridShape.parse(grid)
        shape.check_world(world)
        return shape
    nnz = ds.graph.num_edges + ds.graph.num_nodes
    stats = GraphStats(ds.name, ds.graph.num_nodes, nnz, tuple(dims_of(ds, cfg)), cfg.model)
    return rank_grids(world, stats, Network(gpus_per_node, AUTO_INTRA_GBPS, AUTO_INTER_GBPS))[0].shape


def _start_group(device: str) -> torch.device:
    """Joins the torchrun job (NCCL where every rank has a GPU of its own, else gloo), or makes a
    group of one; returns the device this rank computes on (its local GPU under torchrun)."""
    if "WORLD_SIZE" in os.environ:
        init_from_env(device, backend="grid")
    elif not dist.is_initialized():  # one process: a group of one
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    if device == "cuda":  # under torchrun: the GPU init_from_env chose
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device(device)


def _accuracies(model: GridNet, x_shard, ds: NodeDataset) -> tuple:
    model.eval()
    with torch.no_grad():
        pred = model(x_shard).argmax(1).cpu()
    nodes = torch.from_numpy(model.output_nodes())
    right = (pred == ds.y[nodes]).double()
    counts = torch.tensor([float((right * m[nodes]).sum()) for m in (ds.val_mask, ds.test_mask)], dtype=torch.float64)
    counts = model.grid.on_comm(counts)
    c_last = roles(len(model.shards) - 1)[2]
    if model.grid.extent(c_last) > 1:
        dist.all_reduce(counts, group=model.grid.group[c_last])
    counts = counts.cpu()
    totals = torch.tensor([float(ds.val_mask.sum()), float(ds.test_mask.sum())], dtype=torch.float64)
    val, test = (counts / totals.clamp(min=1)).tolist()
    return val, test


def train_once(
    grid: Grid, ds: NodeDataset, cfg: TrainConfig, seed: int, progress: bool, device: torch.device
) -> RunResult:
    x = normalize_features(ds.x.float())
    # GCN: dropout on every layer's input; SAGE: between layers only (mgg.nn.models places them so)
    model = GridNet(
        grid,
        ds.graph,
        dims_of(ds, cfg),
        seed=seed,
        dropout=cfg.dropout,
        conv=cfg.model,
        input_dropout=cfg.model == "gcn",
    ).to(device)
    opt = build_optimizer(model, cfg, first_layer=[model.weights[0], *model.biases[:1]])
    x_shard = model.input_shard(x).to(device)
    y, train_mask = ds.y.to(device), ds.train_mask.to(device)
    best, times = (-1.0, 0.0, 0), []
    bar = tqdm(range(cfg.epochs), desc=f"seed {seed}", disable=not progress or grid.rank != 0, leave=False)
    for epoch in bar:
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad()
        loss = model.loss(model(x_shard), y, train_mask)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - t0) * 1e3)
        whole = model.whole_loss(loss)
        val, test = _accuracies(model, x_shard, ds)
        if val > best[0]:
            best = (val, test, epoch)
        bar.set_postfix(loss=f"{whole:.4f}", val=f"{val:.3f}", test=f"{best[1]:.3f}")
    return RunResult(seed, best[1], best[0], best[2], statistics.median(times), len(times))


def train(ds: NodeDataset, cfg: TrainConfig, grid: str = "auto", progress: bool = True) -> dict:
    """Trains once per seed on the grid `grid` (GXxGYxGZ or 'auto') over the torchrun job's ranks
    (or one process); every rank returns the summary."""
    if cfg.model not in TRAINS:
        raise MggError(
            f"mgg train --backend grid trains {' and '.join(TRAINS)} (from Python, mgg.distributed.grid.GridNet "
            f"also runs a one-linear GIN); {cfg.model} trains on --backend halo, node-halo, allgather or nvshmem"
        )
    if ds.y.dim() != 1:
        raise MggError("the grid backend trains single-label node classification (y of [N] class ids)")
    device = _start_group(cfg.device)
    world = dist.get_world_size()
    gpus_per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    shape = choose_shape(grid, world, ds, cfg, gpus_per_node)
    g = Grid(shape)
    runs = [train_once(g, ds, cfg, s, progress, device) for s in cfg.seeds]
    return dict(
        summarize(ds, cfg, runs),
        rank=g.rank,
        world=world,
        grid=str(shape),
        y_inside_node=_y_inside_node(g, gpus_per_node),
    )


def _y_inside_node(g: Grid, gpus_per_node: int) -> bool:
    """Whether every Y group's ranks run on one node: the node each rank was launched on (torchrun's
    GROUP_RANK, the agent), gathered over Y; every rank gets the answer of all."""
    node = int(os.environ.get("GROUP_RANK", g.rank // gpus_per_node))
    nodes = [None] * g.extent("y")
    dist.all_gather_object(nodes, node, group=g.group["y"])
    inside = g.on_comm(torch.tensor([float(len(set(nodes)) == 1)]))
    dist.all_reduce(inside, op=dist.ReduceOp.MIN)
    return bool(inside.item())

"""Full-graph training of a GCN or GraphSAGE on Plexus's 3D grid (mgg.distributed.grid) under torchrun, or in
one process (a 1x1x1 grid): the protocol of mgg.training.loop (features normalised, Adam, weight
decay as the model's protocol has it, dropout where mgg.nn.models puts it, test accuracy at the best validation
epoch), so that every grid trains the same epochs (the dropout mask drawn by node, the same for
every grid) as the 1x1x1 grid in one process. The dataset is loaded whole by every rank, or
is a prepared directory (`mgg prepare`) of which each rank reads only the blocks and the feature
shard of its place (mgg.distributed.grid.blocks.PreparedBlocks)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import torch
import torch.distributed as dist

from ..data import NodeDataset
from ..data.prepared import Prepared
from ..data.prepared.layout import SPLIT_BITS
from ..distributed.grid import Grid, GridNet, GridShape
from ..distributed.grid.blocks import PreparedBlocks, sum_over_axis
from ..distributed.grid.model import GraphStats, Network, rank_grids
from ..distributed.grid.shards import roles
from ..distributed.prepared import agree
from ..distributed.process import init_from_env
from ..errors import MggError
from .checkpoint import Checkpoints, dataset_identity, identity
from .loop import TrainConfig, build_model, build_optimizer, normalize_features, run_epochs, summarize, train_seeds
from .record import Progress, RunResult

# the models of mgg.nn.models whose layers GridNet runs as they are (its GIN has one linear layer, theirs an MLP)
TRAINS = ("gcn", "sage")
# grid="auto" without a cluster description: a DGX H100's rates (NVLink 450 GB/s per GPU, 8 x 400 Gb/s per node)
AUTO_INTRA_GBPS, AUTO_INTER_GBPS = 450.0, 400.0


def dims_of(in_dim: int, num_classes: int, cfg: TrainConfig) -> list:
    return [in_dim] + [cfg.hidden] * (cfg.layers - 1) + [num_classes]


def choose_shape(grid: str, world: int, stats: GraphStats, gpus_per_node: int) -> GridShape:
    """`grid` as GXxGYxGZ, or 'auto': the first of mgg.distributed.grid.model's ranking for this graph."""
    if grid != "auto":
        shape = GridShape.parse(grid)
        shape.check_world(world)
        return shape
    return rank_grids(world, stats, Network(gpus_per_node, AUTO_INTRA_GBPS, AUTO_INTER_GBPS))[0].shape


def _start_group(device: str, timeout_min: Optional[float] = None) -> torch.device:
    """Joins the torchrun job (NCCL where every rank has a GPU of its own, else gloo), or makes a
    group of one; returns the device this rank computes on (its local GPU under torchrun)."""
    if "WORLD_SIZE" in os.environ:
        init_from_env(device, backend="grid", timeout_min=timeout_min)
    elif not dist.is_initialized():  # one process: a group of one
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    if device == "cuda":  # under torchrun: the GPU init_from_env chose
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device(device)


@dataclass
class GridData:
    """What one grid rank trains on: its input shard (normalised features) and the labels and split
    of its output rows (GridNet.output_nodes), with each split's size over the whole graph."""

    x_shard: torch.Tensor
    y: torch.Tensor
    masks: list  # train, val, test over the output rows
    totals: list  # train, val, test over the graph


def whole_data(model: GridNet, ds: NodeDataset) -> GridData:
    nodes = torch.from_numpy(model.output_nodes())
    masks = [ds.train_mask, ds.val_mask, ds.test_mask]
    return GridData(
        model.input_shard(normalize_features(ds.x.float())),
        ds.y[nodes],
        [m[nodes] for m in masks],
        [int(m.sum()) for m in masks],
    )


def prepared_data(model: GridNet, source: PreparedBlocks) -> GridData:
    """The feature shard (rows normalised by their sums over every column: partial sums added over
    layer 0's column axis) and the output rows' labels and split, read from the prepared parts."""
    problem, data = None, None
    try:
        x = torch.from_numpy(source.features(model.input_span(), *model.input_columns()))
        last = model.shards[-1].row_span
        y, split = source.rows_of("y", last), source.rows_of("split", last)
        data = (x, y, split)
    except MggError as e:
        problem = str(e)
    agree(problem)
    x, y, split = data
    b = roles(0)[1]
    sums = torch.from_numpy(sum_over_axis(model.grid, x.sum(1, keepdim=True).numpy(), b))
    counts = source.prepared.manifest.split_counts
    return GridData(
        x.div_(sums.clamp(min=1e-12)),  # in place: the rank keeps one copy of its shard
        torch.from_numpy(y),
        [torch.from_numpy((split & bit) != 0) for bit in SPLIT_BITS.values()],
        [int(counts[k]) for k in SPLIT_BITS],
    )


def _accuracies(model: GridNet, data: GridData) -> tuple:
    model.eval()
    with torch.no_grad():
        pred = model(data.x_shard).argmax(1).cpu()
    right = (pred == data.y).double()
    counts = torch.tensor([float((right * m).sum()) for m in data.masks[1:]], dtype=torch.float64)
    counts = model.grid.on_comm(counts)
    c_last = roles(len(model.shards) - 1)[2]
    if model.grid.extent(c_last) > 1:
        dist.all_reduce(counts, group=model.grid.group[c_last])
    counts = counts.cpu()
    totals = torch.tensor([float(t) for t in data.totals[1:]], dtype=torch.float64)
    val, test = (counts / totals.clamp(min=1)).tolist()
    return val, test


def load_model_weights(model: GridNet, cfg: TrainConfig, dims: list, seed: int) -> None:
    """The weights every other backend of mgg train starts from (mgg.training.loop.build_model after
    torch.manual_seed(seed)), this rank's pieces of them: the grid trains the same model."""
    torch.manual_seed(seed)
    ref = build_model(cfg, dims[0], dims[-1], seed)
    if cfg.model == "gcn":
        model.load_weights([c.lin.weight.T for c in ref.convs], [c.bias for c in ref.convs])
    else:  # sage: lin_l (with the bias) over the mean, lin_r over the node's own row
        model.load_weights(
            [c.lin_l.weight.T for c in ref.convs],
            [c.lin_l.bias for c in ref.convs],
            [c.lin_r.weight.T for c in ref.convs],
        )


def train_once(
    grid: Grid,
    source,
    dims: list,
    cfg: TrainConfig,
    seed: int,
    progress: bool,
    device: torch.device,
    checkpoints=None,
    seed_index: int = 0,
    saved=None,
    runs: tuple = (),
) -> RunResult:
    """One seed over `source`: a NodeDataset every rank holds, or a PreparedBlocks; with
    `checkpoints`, each rank saves its shard of the weights (and resumes from `saved`)."""
    whole = isinstance(source, NodeDataset)
    # GCN: dropout on every layer's input; SAGE: between layers only (mgg.nn.models places them so)
    model = GridNet(
        grid,
        source.graph if whole else source,
        dims,
        seed=seed,
        dropout=cfg.dropout,
        conv=cfg.model,
        input_dropout=cfg.model == "gcn",
    )
    load_model_weights(model, cfg, dims, seed)
    model = model.to(device)
    opt = build_optimizer(model, cfg, first_layer=[model.weights[0], *model.biases[:1]])
    data = whole_data(model, source) if whole else prepared_data(model, source)
    x_shard, y, train_mask = data.x_shard.to(device), data.y.to(device), data.masks[0].to(device)
    record = Progress(seed)
    if saved is not None:
        checkpoints.restore(saved, model, opt)
        record = saved.progress

    def epoch() -> tuple:
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad()
        loss = model.rows_loss(model(x_shard), y, train_mask, data.totals[0])
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - t0
        return (seconds, model.whole_loss(loss), *_accuracies(model, data))

    def save(p: Progress) -> None:
        if checkpoints is not None and checkpoints.due(p, cfg.epochs):
            checkpoints.save(seed_index, p, list(runs), model, opt)

    run_epochs(record, cfg.epochs, epoch, progress and grid.rank == 0, after=save)
    return record.result()


def train(
    ds: Union[NodeDataset, str, Path],
    cfg: TrainConfig,
    grid: str = "auto",
    progress: bool = True,
    checkpoint: Optional[Union[str, Path]] = None,
    checkpoint_every: int = 10,
    timeout_min: Optional[float] = None,
) -> dict:
    """Trains once per seed on the grid `grid` (GXxGYxGZ or 'auto') over the torchrun job's ranks
    (or one process); every rank returns the summary. ds: a NodeDataset every rank holds, or the
    path of a prepared dataset, each rank reading only its blocks and feature shard. `checkpoint`,
    `checkpoint_every`, `timeout_min`: as mgg.training.torchrun.train's (each rank saves its shard)."""
    if cfg.model not in TRAINS:
        raise MggError(
            f"mgg train --backend grid trains {' and '.join(TRAINS)} (from Python, mgg.distributed.grid.GridNet "
            f"also runs a one-linear GIN); {cfg.model} trains on --backend halo, node-halo, allgather or nvshmem"
        )
    device = _start_group(cfg.device, timeout_min)
    world = dist.get_world_size()
    gpus_per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if isinstance(ds, NodeDataset):
        if ds.y.dim() != 1:
            raise MggError("the grid backend trains single-label node classification (y of [N] class ids)")
        name, in_dim, classes = ds.name, ds.x.size(1), ds.num_classes
        nodes, nnz = ds.graph.num_nodes, ds.graph.num_edges + ds.graph.num_nodes
        prepared = None
    else:
        prepared = _open(ds, world)
        m = prepared.manifest
        if m.label_shape:
            raise MggError("the grid backend trains single-label node classification (y of [N] class ids)")
        name, in_dim, classes = m.name, m.num_features, m.num_classes
        nodes, nnz = m.num_nodes, m.num_edges + m.num_nodes
    dims = dims_of(in_dim, classes, cfg)
    shape = choose_shape(grid, world, GraphStats(name, nodes, nnz, tuple(dims), cfg.model), gpus_per_node)
    g = Grid(shape)
    saver = None
    if checkpoint is not None:
        data_id = dataset_identity(ds) if prepared is None else f"{name}:prepared:{prepared.manifest.id}"
        saver = Checkpoints(
            checkpoint,
            checkpoint_every,
            identity(data_id, cfg, backend="grid", world=world, grid=str(shape)),
            sharded=True,
        )

    def one_seed(seed, index, saved, runs):
        source = ds if prepared is None else PreparedBlocks(prepared, g, cfg.model, torch.float32)
        return train_once(g, source, dims, cfg, seed, progress, device, saver, index, saved, runs)

    runs = train_seeds(one_seed, cfg.seeds, saver, progress=False)
    return dict(
        summarize(name, cfg, runs),
        rank=g.rank,
        world=world,
        grid=str(shape),
        y_inside_node=_y_inside_node(g, gpus_per_node),
    )


def _open(path, world: int) -> Prepared:
    """The prepared directory, opened alike by every rank (each rank's problem ends every rank)."""
    prepared, problem = None, None
    try:
        prepared = Prepared(path)
        prepared.rank_bounds(world)
    except MggError as e:
        problem = str(e)
    agree(problem)
    ids: list = [None] * world
    dist.all_gather_object(ids, prepared.manifest.id)
    if len(set(ids)) != 1:
        raise MggError(f"{path}: the ranks read different prepares (manifest ids {sorted(set(ids))})")
    return prepared


def _y_inside_node(g: Grid, gpus_per_node: int) -> bool:
    """Whether every Y group's ranks run on one node: the node each rank was launched on (torchrun's
    GROUP_RANK, the agent), gathered over Y; every rank gets the answer of all."""
    node = int(os.environ.get("GROUP_RANK", g.rank // gpus_per_node))
    nodes = [None] * g.extent("y")
    dist.all_gather_object(nodes, node, group=g.group["y"])
    inside = g.on_comm(torch.tensor([float(len(set(nodes)) == 1)]))
    dist.all_reduce(inside, op=dist.ReduceOp.MIN)
    return bool(inside.item())

"""Full-graph node-classification training (Kipf & Welling's protocol): one training loop for
one process and for the ranks of a torch.distributed group (mgg.training.torchrun), so that
torchrun reproduces the single-process run's model, optimiser set-up and loss."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..data import NodeDataset
from ..devices import default_device
from ..errors import MggError
from ..nn import models
from ..plan import Config
from .record import Progress, RunResult


@dataclass
class TrainConfig:
    """What to train and how. hidden, epochs, lr, weight_decay and dropout left None follow the
    model's protocol (mgg.nn.models.PROTOCOLS); conv_module=torch_geometric.nn trains the same
    model with PyG's layers (one process only)."""

    model: str = "gcn"
    hidden: Optional[int] = None
    layers: int = 2
    epochs: Optional[int] = None
    lr: Optional[float] = None
    weight_decay: Optional[float] = None
    dropout: Optional[float] = None
    seeds: tuple = (0, 1, 2, 3, 4)
    device: str = "auto"  # auto: mgg.devices.default_device() (the GPU where mgg's CUDA kernels run)
    config: Config = field(default_factory=Config)
    autotune: bool = False
    deterministic: bool = False
    conv_module: Optional[object] = None

    def __post_init__(self):
        if self.device == "auto":
            self.device = default_device().device.type
        if self.model not in models.PROTOCOLS:
            raise MggError(f"model must be one of {tuple(models.PROTOCOLS)}, got {self.model!r}")
        p = models.PROTOCOLS[self.model]
        for name in ("hidden", "epochs", "lr", "weight_decay", "dropout"):
            if getattr(self, name) is None:
                setattr(self, name, getattr(p, name))


def normalize_features(x: torch.Tensor) -> torch.Tensor:
    """Row-normalise features to sum 1 (Kipf & Welling; PyG's NormalizeFeatures)."""
    s = x.sum(1, keepdim=True)
    return x / s.clamp(min=1e-12)


def normalize_features_(x: torch.Tensor) -> torch.Tensor:
    """normalize_features in place (the same values): a rank holding its part keeps one copy."""
    return x.div_(x.sum(1, keepdim=True).clamp(min=1e-12))


def build_model(cfg: TrainConfig, in_dim: int, num_classes: int, seed: int = 0) -> torch.nn.Module:
    """The model of a training config, with mgg's layers (or cfg.conv_module's). Its dropout is drawn
    by node (mgg.nn.dropout, seeded by `seed`): every rank count, launch and backend of mgg train,
    the grid included, drops the same elements as one process, and so trains the same model."""
    mgg_kw = dict(config=cfg.config, autotune=cfg.autotune, deterministic=cfg.deterministic)
    return models.build(
        cfg.model,
        in_dim,
        num_classes,
        cfg.hidden,
        conv_module=cfg.conv_module,
        num_layers=cfg.layers,
        dropout=cfg.dropout,
        masks="node",
        dropout_seed=seed,
        **(mgg_kw if cfg.conv_module is None else {}),
    )


def build_optimizer(model: torch.nn.Module, cfg: TrainConfig, first_layer=None) -> torch.optim.Optimizer:
    """Adam; weight decay on the first layer only where the protocol says so (GCN: Kipf &
    Welling), else on every parameter. first_layer: that layer's parameters (default:
    model.convs[0]'s)."""
    if models.PROTOCOLS[cfg.model].decay_first_layer_only:
        first = list(model.convs[0].parameters() if first_layer is None else first_layer)
        rest = [p for p in model.parameters() if all(p is not q for q in first)]
        return torch.optim.Adam(
            [dict(params=first, weight_decay=cfg.weight_decay), dict(params=rest, weight_decay=0.0)], lr=cfg.lr
        )
    return torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)


def summarize(name, cfg: TrainConfig, runs: list) -> dict:
    """The runs' summary; name: the dataset's (or the dataset, whose name it takes)."""
    accs = [r.test_acc for r in runs]
    return dict(
        dataset=name if isinstance(name, str) else name.name,
        model=cfg.model,
        runs=runs,
        mean=statistics.mean(accs),
        std=statistics.pstdev(accs),
        epoch_ms=statistics.median(r.epoch_ms for r in runs),
    )


class Nodes:
    """The nodes one process trains on: all of them, or (with a DistGraph) its rank's range.

    Args:
        ds: the dataset, or this rank's Part of a prepared one (mgg.distributed.read_part: its
            tensors are the rank's rows already).
        dg: an mgg.distributed.DistGraph, or None for one process.
    """

    def __init__(self, ds, dg=None):
        self.dg = dg
        self.graph = ds.graph if dg is None else dg  # what the model's layers receive
        self.rank = 0 if dg is None else dg.rank
        self.held = hasattr(ds, "split_counts")  # a Part: the rank holds its rows and nothing else

    def own(self, t: torch.Tensor) -> torch.Tensor:
        """This process's rows of a per-node tensor."""
        return t if self.dg is None or self.held else self.dg.local(t)

    def totals(self, ds) -> torch.Tensor:
        """The train, validation and test node counts over all processes."""
        if self.held:
            return torch.tensor([float(ds.split_counts[k]) for k in ("train", "val", "test")])
        return torch.tensor([float(m.sum()) for m in (ds.train_mask, ds.val_mask, ds.test_mask)])

    def sum(self, t: torch.Tensor) -> torch.Tensor:
        """t summed over the processes (in place; a 1.5D backend's replicas counted once)."""
        if self.dg is not None:
            from ..distributed.comm import all_reduce

            all_reduce(t, self.dg.reduce_group)
        return t

    def sync_grads(self, model: torch.nn.Module) -> None:
        """Weight gradients summed over the processes (a 1.5D backend's: over its process column)."""
        if self.dg is not None:
            from ..distributed.comm import allreduce_grads

            allreduce_grads(model, self.dg.reduce_group)


@dataclass
class Session:
    """One seed's model, optimiser and this process's share of the data, on the device."""

    model: torch.nn.Module
    opt: torch.optim.Optimizer
    nodes: Nodes
    x: torch.Tensor  # normalised features of this process's nodes
    y: torch.Tensor
    masks: list  # train, validation, test masks of this process's nodes
    totals: torch.Tensor  # train, validation, test node counts over all processes
    graph: object  # what the model's layers receive
    device: torch.device


def start(ds: NodeDataset, cfg: TrainConfig, seed: int, dg=None) -> Session:
    """Builds the model (seeded), its optimiser, and moves this process's data to the device.

    Args:
        ds: the dataset.
        cfg: the training config.
        seed: seeds the initial weights and the dropout masks.
        dg: an mgg.distributed.DistGraph (this rank's share), or None for one process.

    Returns:
        The Session.
    """
    if cfg.conv_module is not None and dg is not None:
        raise MggError("train: conv_module (another library's layers) trains in one process, not over a DistGraph")
    nodes = Nodes(ds, dg)
    torch.manual_seed(seed)
    dev = (
        torch.device(cfg.device, torch.cuda.current_device())
        if cfg.device.startswith("cuda") and dg is not None
        else torch.device(cfg.device)
    )
    model = build_model(cfg, ds.x.size(1), ds.num_classes, seed).to(dev)
    opt = build_optimizer(model, cfg)
    masks = [nodes.own(m).to(dev) for m in (ds.train_mask, ds.val_mask, ds.test_mask)]
    graph = nodes.graph if cfg.conv_module is None else ds.graph.edge_index().to(dev)
    totals = nodes.totals(ds)
    return Session(
        model,
        opt,
        nodes,
        (nodes.own(ds.x) if getattr(ds, "normalized", False) else normalize_features(nodes.own(ds.x))).to(dev),
        nodes.own(ds.y).to(dev),
        masks,
        totals,
        graph,
        dev,
    )


def train_step(s: Session) -> torch.Tensor:
    """One full-graph step: forward, the mean cross-entropy over all training nodes, backward,
    weight gradients summed over the processes, optimiser step; returns when the device is done.

    Args:
        s: the Session.

    Returns:
        The loss (detached).
    """
    s.model.train()
    s.opt.zero_grad()
    logits = s.model(s.x, s.graph)
    train = s.masks[0]
    loss = F.cross_entropy(logits[train], s.y[train], reduction="sum") / s.totals[0]
    loss.backward()
    s.nodes.sync_grads(s.model)
    s.opt.step()
    if s.device.type == "cuda":
        torch.cuda.synchronize(s.device)
    return loss.detach()


@torch.no_grad()
def evaluate(s: Session) -> tuple[float, float]:
    """Full-graph validation and test accuracy (over all processes).

    Args:
        s: the Session.

    Returns:
        (validation accuracy, test accuracy).
    """
    s.model.eval()
    pred = s.model(s.x, s.graph).argmax(1)
    correct = torch.stack([(pred[m] == s.y[m]).sum().to(torch.float64) for m in s.masks[1:]])
    correct = s.nodes.sum(correct).cpu()  # on the device: an NCCL group sums CUDA tensors
    val, test = (correct / s.totals[1:].to(torch.float64)).tolist()
    return val, test


def run_epochs(
    progress: Progress,
    epochs: int,
    epoch: Callable[[], tuple],
    show: bool,
    on_epoch: Optional[Callable[[int, float, float, float], bool]] = None,
    after: Optional[Callable[[Progress], None]] = None,
) -> None:
    """The epochs of one seed from progress.epoch on, for every trainer (this loop and the grid's):
    `epoch()` runs one and returns (training-step seconds, loss over all training nodes, validation
    accuracy, test accuracy); each is recorded in `progress`, beats this rank's watchdog and is
    shown on a progress bar (`show`); `after(progress)` follows each (a checkpoint's save);
    on_epoch(epoch, seconds, val, test) returning True ends the run. A collective failing because a
    peer is gone ends this rank with the line naming it (mgg.distributed.watchdog)."""
    from ..distributed import watchdog

    bar = tqdm(
        range(progress.epoch, epochs),
        initial=progress.epoch,
        total=epochs,
        desc=f"seed {progress.seed}",
        disable=not show,
        leave=False,
    )
    try:
        for e in bar:
            watchdog.beat(e)
            seconds, loss, val, test = epoch()
            progress.add(seconds * 1e3, loss, val, test)
            bar.set_postfix(loss=f"{loss:.4f}", val=f"{val:.3f}", test=f"{progress.best[1]:.3f}")
            if after is not None:
                after(progress)
            if on_epoch is not None and on_epoch(e, seconds, val, test):
                break
    except Exception as exc:
        watchdog.on_peer_failure(exc)
        raise
    finally:
        watchdog.pause()


def train_once(
    ds: NodeDataset,
    cfg: TrainConfig,
    seed: int,
    progress: bool = True,
    dg=None,
    on_epoch: Optional[Callable[[int, float, float, float], bool]] = None,
    checkpoints=None,
    seed_index: int = 0,
    saved=None,
    runs: tuple = (),
) -> RunResult:
    """One seed: trains for cfg.epochs; test accuracy is taken at the epoch of best validation
    accuracy. The loss is the mean cross-entropy over all training nodes, whichever process owns
    them, so the summed weight gradients equal one process's.

    Args:
        ds: the dataset.
        cfg: the training config.
        seed: seeds the initial weights and dropout.
        progress: a progress bar on rank 0.
        dg: an mgg.distributed.DistGraph (this rank's share), or None for one process.
        on_epoch: called after each epoch's evaluation with (epoch, seconds of the training step
            (forward, backward, gradient sum, optimiser step; evaluation excluded), validation
            accuracy, test accuracy); returning True ends the run.
        checkpoints: an mgg.training.checkpoint.Checkpoints to save into (None: no checkpoints).
        seed_index: the seed's index in the run's seeds (a checkpoint's name).
        saved: the checkpoint (Saved) of this seed to resume from.
        runs: the RunResults of the seeds before it (a checkpoint records them).

    Returns:
        The run's RunResult.
    """
    s = start(ds, cfg, seed, dg)
    record = Progress(seed)
    if saved is not None:
        checkpoints.restore(saved, s.model, s.opt)
        record = saved.progress

    def epoch() -> tuple:
        t0 = time.perf_counter()
        loss = train_step(s)
        seconds = time.perf_counter() - t0
        whole = float(s.nodes.sum(loss.reshape(1).to(torch.float64)))  # every process's share (on the device: NCCL)
        val, test = evaluate(s)
        return seconds, whole, val, test

    def save(p: Progress) -> None:
        if checkpoints is not None and checkpoints.due(p, cfg.epochs):
            checkpoints.save(seed_index, p, list(runs), s.model, s.opt)

    run_epochs(record, cfg.epochs, epoch, progress and s.nodes.rank == 0, on_epoch, save)
    return record.result(tuning_of(s.model))


def tuning_of(model: torch.nn.Module) -> list:
    """Each tuned layer's OnlineTuner.summary()."""
    return [m.tuner.summary() for m in model.modules() if getattr(m, "tuner", None) is not None]


def train_seeds(one_seed: Callable, seeds: tuple, checkpoints=None, progress: bool = True) -> list:
    """Every seed's RunResult: one_seed(seed, seed_index, saved, runs) per seed, from the checkpoint
    `checkpoints` holds where it holds one (the seeds it had finished are not run again)."""
    saved = checkpoints.latest() if checkpoints is not None else None
    runs = list(saved.runs) if saved is not None else []
    for i in tqdm(
        range(len(runs), len(seeds)), desc="seeds", disable=not progress, initial=len(runs), total=len(seeds)
    ):
        here = saved if saved is not None and saved.seed_index == i else None
        runs.append(one_seed(seeds[i], i, here, tuple(runs)))
    return runs


def train(ds: NodeDataset, cfg: TrainConfig, progress: bool = True, dg=None, checkpoints=None) -> dict:
    """Trains once per seed (see train_once) and summarises the test accuracy; with `checkpoints`
    (mgg.training.checkpoint.Checkpoints), saves as it goes and resumes from the newest it holds."""

    def one_seed(seed, index, saved, runs):
        return train_once(
            ds, cfg, seed, progress, dg, checkpoints=checkpoints, seed_index=index, saved=saved, runs=runs
        )

    return summarize(ds, cfg, train_seeds(one_seed, cfg.seeds, checkpoints, progress and dg is None))

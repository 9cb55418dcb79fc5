"""Full-graph node-classification training (Kipf & Welling's protocol) on one process."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .io import NodeDataset
from .nn import models
from .plan import Config


@dataclass
class TrainConfig:
    model: str = "gcn"
    hidden: Optional[int] = None
    layers: int = 2
    epochs: int = 200
    lr: float = 0.01
    weight_decay: float = 5e-4
    dropout: float = 0.5
    seeds: tuple = (0, 1, 2, 3, 4)
    device: str = "cpu"
    config: Config = field(default_factory=Config)
    autotune: bool = False
    deterministic: bool = False


@dataclass
class RunResult:
    seed: int
    test_acc: float
    val_acc: float
    best_epoch: int
    epoch_ms: float


def normalize_features(x: torch.Tensor) -> torch.Tensor:
    """Row-normalise features to sum 1 (Kipf & Welling; PyG's NormalizeFeatures)."""
    s = x.sum(1, keepdim=True)
    return x / s.clamp(min=1e-12)


def build_model(cfg: TrainConfig, in_dim: int, num_classes: int) -> torch.nn.Module:
    return models.build(cfg.model, in_dim, num_classes, cfg.hidden, num_layers=cfg.layers, dropout=cfg.dropout,
                        config=cfg.config, autotune=cfg.autotune, deterministic=cfg.deterministic)


def summarize(ds: NodeDataset, cfg: TrainConfig, runs: list) -> dict:
    accs = [r.test_acc for r in runs]
    return dict(dataset=ds.name, model=cfg.model, runs=runs, mean=statistics.mean(accs),
                std=statistics.pstdev(accs), epoch_ms=statistics.median(r.epoch_ms for r in runs))


def _accuracy(logits, y, mask) -> float:
    return float((logits[mask].argmax(1) == y[mask]).float().mean())


def train_once(ds: NodeDataset, cfg: TrainConfig, seed: int, progress: bool = True) -> RunResult:
    torch.manual_seed(seed)
    dev = torch.device(cfg.device)
    x = normalize_features(ds.x).to(dev)
    y = ds.y.to(dev)
    masks = [m.to(dev) for m in (ds.train_mask, ds.val_mask, ds.test_mask)]
    model = build_model(cfg, x.size(1), ds.num_classes).to(dev)
    if cfg.model == "gcn":  # weight decay on the first layer only, as in Kipf & Welling
        first = list(model.convs[0].parameters())
        rest = [p for p in model.parameters() if all(p is not q for q in first)]
        opt = torch.optim.Adam([dict(params=first, weight_decay=cfg.weight_decay),
                                dict(params=rest, weight_decay=0.0)], lr=cfg.lr)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    graph = ds.graph
    best = (-1.0, 0.0, 0)
    times = []
    bar = tqdm(range(cfg.epochs), desc=f"seed {seed}", disable=not progress, leave=False)
    for epoch in bar:
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad()
        loss = F.cross_entropy(model(x, graph)[masks[0]], y[masks[0]])
        loss.backward()
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        times.append((time.perf_counter() - t0) * 1e3)
        model.eval()
        with torch.no_grad():
            logits = model(x, graph)
        val, test = _accuracy(logits, y, masks[1]), _accuracy(logits, y, masks[2])
        if val > best[0]:
            best = (val, test, epoch)
        bar.set_postfix(loss=f"{loss.item():.3f}", val=f"{val:.3f}", test=f"{best[1]:.3f}")
    return RunResult(seed, best[1], best[0], best[2], statistics.median(times))


def train(ds: NodeDataset, cfg: TrainConfig, progress: bool = True) -> dict:
    """Trains once per seed; test accuracy is taken at the epoch of best validation accuracy."""
    runs = [train_once(ds, cfg, s, progress) for s in tqdm(cfg.seeds, desc="seeds", disable=not progress)]
    return summarize(ds, cfg, runs)

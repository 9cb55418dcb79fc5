"""The `tta` suite: time to a target validation accuracy. One model, one target, trained
(a) full-graph with mgg's layers, (b) full-graph with PyG's layers, both through mgg.training.loop's
step (start, train_step), and (c) mini-batch with PyG's layers on sampled neighborhoods
from PyG's NeighborLoader: with pyg-lib's or torch-sparse's sampler where one is installed (impl
`pyg-neighborloader`), else with mgg's (mgg.sampling.pyg, the same semantics in plain torch; impl
`pyg-neighborloader(mgg-sampler)`); fan-outs [25, 10] for 2 layers (PyG examples/reddit.py; [10] per
layer otherwise, examples/ogbn_train.py), batch size 1024 (both examples), the loss over each
batch's seeds.

After every epoch the full-graph validation accuracy is evaluated; a run stops at the first
epoch that reaches the target (or after the epoch limit). Time counts the training steps only
(forward, backward, optimiser step and, for mini-batch, sampling and gathering the batch's
rows; for mgg the plan built by the first forward), not model construction, moving the dataset
to the device, or evaluation. Peak memory is that of the training steps above what the run had
allocated at its start: on a GPU, torch.cuda.max_memory_allocated (reset before each step); on
the CPU, the process's peak RSS (VmHWM, reset through /proc/self/clear_refs before each step,
after malloc_trim) minus its RSS at the start of the run.

Rows: median/p10/p90 of the epoch time, target_acc, epochs, time_to_target_s (the training time
up to the epoch that reached the target; empty if it did not), reached, best_val_acc, and
val_curve ('seconds:accuracy' after each epoch, ';'-separated) for the plot."""

from __future__ import annotations

import ctypes
import gc
import itertools
import math
import statistics
import time
from typing import Iterator

import torch
import torch.nn.functional as F

from mgg.runtime.timing import Timing

from ..memory import peak_rss_bytes, reset_peak_rss, rss_bytes
from .common import result_row, within_budget

DEFAULT_MODELS = ["gcn", "sage", "gat"]
DEFAULT_TARGETS = {"gcn": 0.78, "sage": 0.78, "gat": 0.78, "gin": 0.75}
BATCH_SIZE = 1024


def fanouts(layers: int) -> list:
    """PyG examples' fan-outs: [25, 10] for 2 layers, else 10 per layer."""
    return [25, 10] if layers == 2 else [10] * layers


PYG_SAMPLER, MGG_SAMPLER = "pyg-neighborloader", "pyg-neighborloader(mgg-sampler)"


def minibatch_impl() -> str:
    """PyG's NeighborLoader with PyG's own sampler where pyg-lib or torch-sparse can sample here,
    else with mgg's."""
    from torch_geometric import typing as t

    return PYG_SAMPLER if (t.WITH_PYG_LIB or t.WITH_TORCH_SPARSE) else MGG_SAMPLER


def _trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # freed memory back to the OS: RSS follows live memory
    except (OSError, AttributeError):
        pass


class PeakMemory:
    """Peak memory of a run's training steps above what the run had at its start (MB).

    Args:
        device: the run's device.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.peak = 0
        self.base = 0
        self.ok = True

    def begin(self) -> None:
        gc.collect()
        if self.cuda:
            torch.cuda.synchronize(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
        else:
            _trim()
            self.base = rss_bytes()

    def before_step(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
            return
        _trim()
        self.ok &= reset_peak_rss()

    def after_step(self) -> None:
        now = torch.cuda.max_memory_allocated(self.device) if self.cuda else peak_rss_bytes()
        self.peak = max(self.peak, now - self.base)

    @property
    def mb(self) -> float:
        return self.peak / 2**20 if self.ok else float("nan")


def _run(step, val_acc, max_epochs: int, target: float, mem: PeakMemory) -> dict:
    """Epochs until val_acc() reaches target: the training step timed, evaluation not."""
    mem.begin()
    times, curve = [], []
    for _ in range(max_epochs):
        mem.before_step()
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
        mem.after_step()
        curve.append((sum(times), val_acc()))
        if curve[-1][1] >= target:
            break
    reached = curve[-1][1] >= target
    return dict(
        times=times,
        curve=curve,
        reached=reached,
        peak_mb=mem.mb,
        time_to_target=sum(times) if reached else float("nan"),
    )


def _minibatch_step(s, ds, impl: str, seed: int, layers: int):
    """One epoch of mini-batch steps over the training nodes (the sampler built in the first)."""
    state = {}
    fan = fanouts(layers)
    train_nodes = ds.train_mask.nonzero().view(-1)

    def loader():
        if "loader" not in state:
            from torch_geometric.data import Data
            from torch_geometric.loader import NeighborLoader

            torch.manual_seed(seed)
            data = Data(x=s.x.cpu(), y=s.y.cpu(), edge_index=s.graph.cpu(), num_nodes=ds.graph.num_nodes)
            sampler = None
            if impl == MGG_SAMPLER:
                from mgg.sampling.pyg import PygNeighborSampler

                sampler = PygNeighborSampler(data, fan)
            state["loader"] = NeighborLoader(
                data,
                input_nodes=train_nodes,
                num_neighbors=fan,
                batch_size=BATCH_SIZE,
                shuffle=True,
                neighbor_sampler=sampler,
            )
        for b in state["loader"]:
            yield b.n_id, b.edge_index, b.batch_size

    def step():
        s.model.train()
        for n_id, edge_index, batch_size in loader():
            n_id = n_id.to(s.device)
            s.opt.zero_grad()
            out = s.model(s.x[n_id], edge_index.to(s.device))[:batch_size]
            F.cross_entropy(out, s.y[n_id[:batch_size]]).backward()
            s.opt.step()
        if s.device.type == "cuda":
            torch.cuda.synchronize(s.device)

    return step


def train_to_target(
    ds, model: str, impl: str, seed: int, target: float, max_epochs: int, device: torch.device, layers: int = 2
) -> dict:
    """One run: trains until the full-graph validation accuracy reaches target.

    Args:
        ds: the NodeDataset.
        model: a model name (mgg.nn.models.PROTOCOLS), trained with its protocol.
        impl: 'mgg', 'pyg' (full-graph) or minibatch_impl()'s name.
        seed: seeds the weights, dropout and sampling.
        target: the validation accuracy to reach.
        max_epochs: the epoch limit.
        device: where to train.
        layers: the model's layers.

    Returns:
        dict(times (s per epoch), curve [(training s so far, val acc)], reached, time_to_target,
        peak_mb, prep_s).
    """
    from mgg.nn import graph_input
    from mgg.training import loop as train

    conv_module = None
    if impl != "mgg":
        import torch_geometric.nn as conv_module
    cfg = train.TrainConfig(model=model, layers=layers, device=str(device), conv_module=conv_module)
    graph_input.clear()  # mgg plans the graph within the run, as a fresh process would
    t0 = time.perf_counter()
    s = train.start(ds, cfg, seed)
    prep_s = time.perf_counter() - t0
    step = (lambda: train.train_step(s)) if impl in ("mgg", "pyg") else _minibatch_step(s, ds, impl, seed, layers)
    res = _run(step, lambda: train.evaluate(s)[0], max_epochs, target, PeakMemory(device))
    return dict(res, prep_s=prep_s)


def _curve(curve: list) -> str:
    return ";".join(f"{t:.4f}:{a:.4f}" for t, a in curve)


def tta(opt) -> Iterator[dict]:
    from mgg.data import load_dataset

    from ..accuracy import layers_available

    datasets = opt.tta_datasets or ["cora"]
    models = opt.tta_models or DEFAULT_MODELS
    targets = dict(DEFAULT_TARGETS, **(opt.tta_targets or {}))
    impls = ["mgg", "pyg", minibatch_impl()]
    loaded = {}
    cases = list(itertools.product(datasets, models, impls, range(opt.tta_seeds)))
    for name, model, impl, seed in within_budget(opt, "tta", cases, lambda c: f"{c[0]} {c[1]} {c[2]} seed {c[3]}"):
        t0 = time.perf_counter()
        why = layers_available("mgg" if impl == "mgg" else "pyg", model)
        if why:
            opt.budget.skipped.append(f"tta {name} {model} {impl} seed {seed} ({why})")
            continue
        if name not in loaded:
            loaded[name] = load_dataset(name, opt.data_dir)
        ds = loaded[name]
        res = train_to_target(ds, model, impl, seed, targets[model], opt.tta_max_epochs, opt.device)
        ms = [t * 1e3 for t in res["times"]]
        row = result_row(
            "tta",
            f"{ds.name}/{model}/seed{seed}",
            ds.name,
            ds.graph,
            ds.x.size(1),
            opt,
            impl,
            1,
            opt.config if impl == "mgg" else None,
            "train",
            Timing.of(ms),
            res["peak_mb"],
            prep_s=res["prep_s"],
        )
        tt = res["time_to_target"]
        yield dict(
            row,
            dtype="float32",
            target_acc=targets[model],
            epochs=len(ms),
            time_to_target_s="" if math.isnan(tt) else round(tt, 4),
            reached=res["reached"],
            best_val_acc=round(max(a for _, a in res["curve"]), 4),
            val_curve=_curve(res["curve"]),
        )
        opt.budget.done("tta", time.perf_counter() - t0)


def summary_lines(rows: list[dict]) -> list[str]:
    """The markdown section: per dataset, model and impl, time to target over the seeds."""
    sel = [r for r in rows if r["suite"] == "tta"]
    if not sel:
        return []
    groups: dict = {}
    for r in sel:
        groups.setdefault((r["graph"], r["case"].split("/")[1], r["impl"]), []).append(r)
    cpu = str(sel[0].get("device", "")).startswith("cpu")
    mem = (
        "peak RSS of the training steps above the run's start (VmHWM reset before each step)"
        if cpu
        else "torch.cuda.max_memory_allocated during the training steps above the run's start"
    )
    lines = [
        "## tta: time to the target validation accuracy",
        "",
        "Training steps only (evaluation excluded); full-graph validation accuracy after every epoch; "
        f"peak memory: {mem}. Mini-batch: fan-outs [25, 10], batch size {BATCH_SIZE}.",
        "",
        "| dataset | model | impl | target | reached | time to target s | epochs | ms/epoch | peak MB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (g, model, impl), rs in groups.items():
        hit = [r for r in rs if str(r["reached"]) == "True"]
        tt = [float(r["time_to_target_s"]) for r in hit]
        ep = [int(r["epochs"]) for r in hit]
        t = f"{statistics.mean(tt):.3f} ± {statistics.pstdev(tt):.3f}" if tt else "-"
        e = f"{statistics.mean(ep):.1f}" if ep else "-"
        ms = statistics.median(float(r["median_ms"]) for r in rs)
        peak = max(float(r["peak_mem_mb"]) for r in rs)
        lines.append(
            f"| {g} | {model} | {impl} | {float(rs[0]['target_acc']):.3f} | {len(hit)}/{len(rs)} | {t} | "
            f"{e} | {ms:.2f} | {peak:.1f} |"
        )
    return lines + [""]


def plot(rows: list[dict], path) -> None:
    """Left: time to target per impl (mean over the seeds that reached it, min-max bars); right:
    validation accuracy against training time, one line per run, with the targets dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sel = [r for r in rows if r["suite"] == "tta"]
    impls = list(dict.fromkeys(r["impl"] for r in sel))
    keys = list(dict.fromkeys((r["graph"], r["case"].split("/")[1]) for r in sel))
    fig, (bars, curves) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / max(len(impls), 1)
    for j, impl in enumerate(impls):
        means, lo, hi = [], [], []
        for g, m in keys:
            tt = [
                float(r["time_to_target_s"])
                for r in sel
                if r["impl"] == impl
                and r["graph"] == g
                and r["case"].split("/")[1] == m
                and str(r["reached"]) == "True"
            ]
            mean = statistics.mean(tt) if tt else 0.0
            means.append(mean)
            lo.append(mean - min(tt) if tt else 0.0)
            hi.append(max(tt) - mean if tt else 0.0)
        bars.bar(
            [i + j * width for i in range(len(keys))], means, width, yerr=[lo, hi], capsize=2, color=f"C{j}", label=impl
        )
    bars.set_xticks([i + width * (len(impls) - 1) / 2 for i in range(len(keys))], [f"{g} {m}" for g, m in keys])
    bars.set_ylabel("training seconds to target (mean, min-max)")
    bars.legend(fontsize=7)
    styles = ["-", "--", ":", "-."]
    for r in sel:
        pts = [tuple(map(float, p.split(":"))) for p in r["val_curve"].split(";") if p]
        k = keys.index((r["graph"], r["case"].split("/")[1]))
        curves.plot(
            [t for t, _ in pts], [a for _, a in pts], styles[k % 4], color=f"C{impls.index(r['impl'])}", lw=1, alpha=0.8
        )
    for k, (g, m) in enumerate(keys):
        tgt = next(float(r["target_acc"]) for r in sel if (r["graph"], r["case"].split("/")[1]) == (g, m))
        curves.axhline(tgt, color="gray", ls=styles[k % 4], lw=0.8, label=f"{g} {m} target {tgt:.2f}")
    for j, impl in enumerate(impls):
        curves.plot([], [], color=f"C{j}", label=impl)
    curves.set_xlabel("training seconds")
    curves.set_ylabel("validation accuracy")
    curves.legend(fontsize=7)
    fig.suptitle(f"tta — {sel[0]['device'] if sel else ''}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

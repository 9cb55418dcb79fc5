"""Worker for the multi-process tests (test_distributed.py on CPU with gloo, test_nvshmem.py on
one GPU with several NVSHMEM PEs). Run alone it computes the single-process reference; under
torchrun each rank computes its rows and rank 0 writes the assembled result.

    python dist_worker.py KIND OUT --single [--device cuda]
    torchrun --standalone --nproc-per-node N dist_worker.py KIND OUT [--backend nvshmem] [--partition metis] ...
    [torchrun ...] dist_worker.py --batch RUNS.json

With --partition the ranks own the nodes of a relabelled graph (mgg.partition); the worker still
hands DistGraph tensors in the user's node order and gathers the results back into it. --batch runs
the runs RUNS.json lists ([{"argv": [KIND, OUT, ...], "env": {NAME: VALUE}}, ...]) one after the
other in one process group (or one process, all --single), each under its environment variables: one
start of torch per rank, however many runs (test_distributed.py's launches).
"""

import argparse
import json
import os
import pickle
import sys
from contextlib import contextmanager

import torch
import torch.distributed as dist

import mgg
from mgg.data import bundled_planetoid_dir, load_planetoid
from mgg.distributed import DistGraph
from mgg.distributed.comm import all_reduce
from mgg.distributed.process import exit_rank
from mgg.nn.models import build
from mgg.testing import random_graph

MODEL_ARGS = {"gat": dict(heads=2, attention_dropout=0.5)}  # the same attention mask on every rank count


def case(kind):
    """(graph, features, model, hidden) of a kind: cora-MODEL, or directed-MODEL[-AGGR] (a
    directed graph with hub rows and continuous features: max/min without ties between rows)."""
    if kind in ("cora-gcn", "cora-sage", "cora-gat"):
        ds = load_planetoid(bundled_planetoid_dir(), "cora")
        return ds.graph, ds.x[:, :64].contiguous(), kind.split("-")[1], 16
    g = random_graph(300, 3000, seed=11, skew=0.6)  # directed: the backward needs the transposed plan
    return g, torch.randn(300, 12, generator=torch.Generator().manual_seed(1)), kind.split("-")[1], 8


def model_args(kind: str, model_kind: str) -> dict:
    """The model's keyword arguments: MODEL_ARGS, and the aggregation a kind names (directed-sage-max)."""
    extra = {"aggr": kind.split("-")[2]} if kind.count("-") == 2 else {}
    return dict(MODEL_ARGS.get(model_kind, {}), **extra)


def step(model, x, graph, y, n, dg):
    model.zero_grad()
    x = x.detach().clone().requires_grad_()
    logits = model(x, graph)
    loss = torch.nn.functional.cross_entropy(logits, y, reduction="sum") / n
    loss.backward()
    if dg is not None:
        for p in model.parameters():
            all_reduce(p.grad, dg.group)
    return logits.detach().cpu(), x.grad.cpu(), {k: p.grad.cpu().clone() for k, p in model.named_parameters()}


def run(args, dg=None):
    g, x, model_kind, hidden = case(args.kind)
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype or ("float64" if args.device == "cpu" else "float32"))
    model = build(
        model_kind,
        x.size(1),
        5,
        hidden,
        num_layers=2,
        dropout=0.0,
        deterministic=args.deterministic,
        **model_args(args.kind, model_kind),
    ).to(args.device, dtype)
    x = x.to(dtype)
    y = torch.arange(g.num_nodes) % 5
    if dg is not None:
        x, y = dg.local(x), dg.local(y)
    x, y, graph = x.to(args.device), y.to(args.device), (g if dg is None else dg)
    first = step(model, x, graph, y, g.num_nodes, dg)
    identical = True
    for _ in range(args.repeat - 1):  # deterministic mode: every repetition bit-identical
        again = step(model, x, graph, y, g.num_nodes, dg)
        identical &= (
            torch.equal(again[0], first[0])
            and torch.equal(again[1], first[1])
            and all(torch.equal(again[2][k], v) for k, v in first[2].items())
        )
    return first, identical


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind")
    ap.add_argument("out")
    ap.add_argument("--single", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--backend", default="halo")
    ap.add_argument(
        "--fetch",
        default="get-warp",
        help="fetch policies, comma-separated: one run each, "
        "written to OUT.FETCH when there are several (one NVSHMEM start-up serves them all)",
    )
    ap.add_argument(
        "--dtype",
        choices=["float32", "float64"],
        help="default float64 on the CPU (so ranks and one process agree to 1e-10 on every CPU), "
        "float32 on CUDA (the kernels' widest storage)",
    )
    ap.add_argument("--remote-reads", default="per-edge", help="the nvshmem backend's mode (DistGraph)")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--partition", default="range", help="a method of mgg.partition")
    ap.add_argument("--gpus-per-node", type=int, help="the node-halo backend's machines (default LOCAL_WORLD_SIZE)")
    ap.add_argument(
        "--precomputed", action="store_true", help="partition here (seed 5) and hand DistGraph the mgg.Partition"
    )
    return ap


def run_and_write(args):
    """One run: the single process's result, or (in the process group) every rank's, written by rank 0."""
    if args.single:
        (res, identical) = run(args)
        pickle.dump((*res, identical), open(args.out, "wb"))
        return
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    g = case(args.kind)[0]
    part = (
        mgg.partition(g, dist.get_world_size(), args.partition, seed=5, cache=False)
        if args.precomputed
        else args.partition
    )
    fetches = args.fetch.split(",")
    for fetch in fetches:
        dg = DistGraph(
            g,
            backend=args.backend,
            fetch=fetch,
            partition=part,
            remote_reads=args.remote_reads,
            gpus_per_node=args.gpus_per_node,
        )
        assert not args.precomputed or dg.partition is part
        (logits, xgrad, wgrads), identical = run(args, dg)
        logits, xgrad = dg.gather(logits), dg.gather(xgrad)  # every rank's rows, in the user's node order
        flags = [None] * dg.world
        dist.all_gather_object(flags, identical)
        if dg.rank == 0:
            out = args.out if len(fetches) == 1 else f"{args.out}.{fetch}"
            with open(out, "wb") as f:
                pickle.dump((logits, xgrad, wgrads, all(flags)), f)
        dist.barrier()


@contextmanager
def environment(env: dict):
    """os.environ with `env` set, as it was afterwards."""
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v


def main():
    argv = sys.argv[1:]
    runs = [{"argv": argv}] if argv[:1] != ["--batch"] else json.loads(open(argv[1]).read())
    ap = parser()
    for r in runs:
        with environment(r.get("env", {})):
            run_and_write(ap.parse_args(r["argv"]))


if __name__ == "__main__":
    main()
    exit_rank()  # the ranks meet, NVSHMEM (if started) is finalised, no gloo teardown

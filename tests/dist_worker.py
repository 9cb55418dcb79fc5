"""Worker for the multi-process tests (test_distributed.py on CPU with gloo, test_nvshmem.py on
one GPU with several NVSHMEM PEs). Run alone it computes the single-process reference; under
torchrun each rank computes its rows and rank 0 writes the assembled result.

    python dist_worker.py KIND OUT --single [--device cuda]
    torchrun --standalone --nproc-per-node N dist_worker.py KIND OUT [--backend nvshmem] ...
"""
import argparse
import pickle

import torch
import torch.distributed as dist

from mgg.datasets import bundled_planetoid_dir
from mgg.distributed import DistGraph
from mgg.distributed.trainer import all_reduce
from mgg.io import load_planetoid
from mgg.nn.models import build
from mgg.testing import random_graph


def case(kind):
    if kind in ("cora-gcn", "cora-sage"):
        ds = load_planetoid(bundled_planetoid_dir(), "cora")
        return ds.graph, ds.x[:, :64].contiguous(), kind.split("-")[1], 16
    g = random_graph(300, 3000, seed=11, skew=0.6)  # directed: the backward needs the transposed plan
    return g, torch.randn(300, 12, generator=torch.Generator().manual_seed(1)), "gin", 8


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
    model = build(model_kind, x.size(1), 5, hidden, num_layers=2, dropout=0.0,
                  deterministic=args.deterministic).to(args.device)
    y = torch.arange(g.num_nodes) % 5
    if dg is not None:
        x, y = dg.local(x), dg.local(y)
    x, y, graph = x.to(args.device), y.to(args.device), (g if dg is None else dg)
    first = step(model, x, graph, y, g.num_nodes, dg)
    identical = True
    for _ in range(args.repeat - 1):  # deterministic mode: every repetition bit-identical
        again = step(model, x, graph, y, g.num_nodes, dg)
        identical &= torch.equal(again[0], first[0]) and torch.equal(again[1], first[1]) and all(
            torch.equal(again[2][k], v) for k, v in first[2].items())
    return first, identical


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind")
    ap.add_argument("out")
    ap.add_argument("--single", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--backend", default="halo")
    ap.add_argument("--fetch", default="get-warp", help="fetch policies, comma-separated: one run each, "
                    "written to OUT.FETCH when there are several (one NVSHMEM start-up serves them all)")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    if args.single:
        (res, identical) = run(args)
        pickle.dump((*res, identical), open(args.out, "wb"))
        return
    dist.init_process_group("gloo")
    fetches = args.fetch.split(",")
    for fetch in fetches:
        dg = DistGraph(case(args.kind)[0], backend=args.backend, fetch=fetch)
        (logits, xgrad, wgrads), identical = run(args, dg)
        parts = [None] * dg.world
        dist.all_gather_object(parts, (dg.row_begin, logits, xgrad, identical))
        if dg.rank == 0:
            parts.sort(key=lambda p: p[0])
            out = args.out if len(fetches) == 1 else f"{args.out}.{fetch}"
            pickle.dump((torch.cat([p[1] for p in parts]), torch.cat([p[2] for p in parts]), wgrads,
                         all(p[3] for p in parts)), open(out, "wb"))
        dist.barrier()
    if args.backend == "nvshmem":
        from mgg.distributed import nvshmem
        nvshmem.finalize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

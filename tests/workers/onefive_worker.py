"""Under torchrun (gloo): the 1.5D backends (sa-1.5d, cagnet-1.5d) for every replication c dividing the
world, both stage rules, GCN, SAGE and GIN of 2 and 3 layers (tests/distributed/grid_case.py's weights
and directed graph), one forward and backward of the mean cross entropy with mgg.nn's layers over a
DistGraph; rank 0 writes per case the whole logits, input gradient and weight gradients (gathered in
the user's order), whether the replicas of every block agree bit for bit, and every rank's bytes
counted at the collectives beside the formulas' (mgg.distributed.onefive.volume).

    torchrun --nproc-per-node=P tests/workers/onefive_worker.py OUT [--partition random] [--halo]
"""

import argparse
import os
import pickle
import sys

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from mgg.distributed import DistGraph  # noqa: E402
from mgg.distributed.comm import allreduce_grads  # noqa: E402
from mgg.distributed.onefive.layout import Layout  # noqa: E402
from mgg.distributed.onefive.volume import rank_bytes  # noqa: E402
from mgg.distributed.process import exit_rank  # noqa: E402
from mgg.distributed.strategy import aggregation_widths  # noqa: E402
from mgg.plan.stats import volume_matrix  # noqa: E402
from tests.distributed.grid_case import CONVS, DEPTHS, case, one_layer  # noqa: E402

ALGORITHMS = ("sa-1.5d", "cagnet-1.5d")


def run_case(algorithm: str, c: int, rule: str, conv: str, layers: int, partition: str) -> dict:
    graph, x, labels, mask, weights, biases, roots = case(layers)
    made = [one_layer(conv, w, b, r) for w, b, r in zip(weights, biases, roots, strict=True)]
    one_five = algorithm != "halo"  # halo: the 1D baseline sa-1.5d's c = 1 must equal
    extra = dict(replication=c, stage_rule=rule) if one_five else {}
    dg = DistGraph(graph, backend=algorithm, partition=partition, seed=2, **extra)
    xs = dg.local(x).clone().requires_grad_(True)
    h = xs
    for i, m in enumerate(made):
        h = m[0](h, dg)
        if i < len(made) - 1:
            h = torch.relu(h)
    keep = dg.local(mask)
    loss = torch.nn.functional.cross_entropy(h[keep], dg.local(labels)[keep], reduction="sum") / int(mask.sum())
    loss.backward()
    for m in made:
        allreduce_grads(m[0], dg.reduce_group)
    grads = [tuple(None if t is None else t.grad.detach().clone() for t in m[1:]) for m in made]
    # the formulas, from the relabelled graph's block partition
    relabelled = dg.partition.relabel(graph)
    volume, _ = volume_matrix(relabelled, dg.bounds)
    sizes = np.diff(dg.bounds)
    dims = [x.size(1)] + [w.size(1) for w in weights]
    want = {d: {k: 0.0 for k in ("recv", "send", "row")} for d in ("forward", "backward")}
    layout = dg.replicas.layout if one_five else Layout(dg.world, 1, dg.rank)
    for f in aggregation_widths(conv, dims):
        b = rank_bytes("sa-1.5d" if algorithm == "halo" else algorithm, layout, volume, sizes, f, 8)
        for d in want:
            for k in want[d]:
                want[d][k] += b[d][k]
    counted = dg.replicas.traffic if one_five else _summed([p.transport.traffic for p in dg._plans.values()])
    mine = dict(
        rank=dg.rank,
        block=dg.place,
        logits=h.detach(),
        x_grad=xs.grad,
        grads=grads,
        counted={d: dict(v) for d, v in counted.items()},
        want=want,
        loss_share=float(loss.detach()),
    )
    logits, x_grad = dg.gather(h.detach()), dg.gather(xs.grad)
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    by_block = {}
    for m in every:
        by_block.setdefault(m["block"], []).append(m)
    agree = all(
        torch.equal(ms[0]["logits"], m["logits"]) and torch.equal(ms[0]["x_grad"], m["x_grad"])
        for ms in by_block.values()
        for m in ms
    )
    return dict(
        logits=logits,
        x_grad=x_grad,
        w_grads=[g[0].T for g in grads],
        b_grads=[g[1] for g in grads],
        r_grads=[g[2].T for g in grads if g[2] is not None],
        copies_agree=agree,
        loss=sum(ms[0]["loss_share"] for ms in by_block.values()),
        bytes=[(m["rank"], m["counted"], m["want"]) for m in every],
        same_grads_everywhere=all(
            all(
                torch.equal(a, b)
                for ga, gb in zip(every[0]["grads"], m["grads"], strict=True)
                for a, b in zip(ga, gb, strict=True)
                if a is not None
            )
            for m in every
        ),
    )


def _summed(traffics: list) -> dict:
    return {d: {k: sum(t[d][k] for t in traffics) for k in ("recv", "send", "row")} for d in ("forward", "backward")}


def _same(a: list, b: list) -> bool:
    """Every gradient of two ranks' layers bit for bit the same."""
    return all(
        torch.equal(x, y) for ga, gb in zip(a, b, strict=True) for x, y in zip(ga, gb, strict=True) if x is not None
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--partition", default="range")
    ap.add_argument("--cases", default="all", help="all, or one ALGORITHM:C:RULE:CONV:LAYERS")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    cases = [
        (a, c, rule, conv, layers)
        for a in ALGORITHMS
        for c in [d for d in range(1, world + 1) if world % d == 0]
        for rule in ("balanced", "cagnet")
        for conv in CONVS
        for layers in DEPTHS
        if rule == "balanced" or (conv == "gcn" and layers == 2)  # CAGNET's rule: one model suffices
    ] + [("halo", 1, "balanced", conv, 2) for conv in CONVS]
    if args.cases != "all":
        a, c, rule, conv, layers = args.cases.split(":")
        cases = [(a, int(c), rule, conv, int(layers))]
    results = {}
    for key in cases:
        results[key] = run_case(*key, args.partition)
    if dist.get_rank() == 0:
        with open(args.out, "wb") as f:
            pickle.dump(results, f)
    exit_rank(0)


if __name__ == "__main__":
    main()

"""torchrun worker of test_bipartite_dist.py: each rank passes its shard (local_src(x_src),
local_dst(x_dst)) of a bipartite graph (sources != destinations) to mgg's SAGEConv, GINConv and
GATConv over a bipartite DistGraph (gloo, CPU, float64) and computes PyG's own layer on the
whole graph in one process beside it; rank 0 writes, per case, each compared tensor as (mgg's,
PyG's): the destinations' outputs and the gradients of x_src and x_dst (assembled in the user's
order) and of every parameter (summed over ranks), for each backend; and the one-line messages
of wrong inputs, each raised on every rank before any collective. One launch serves every case.

    torchrun --standalone --nproc-per-node N tests/workers/bipartite_worker.py OUT
"""

import argparse
import copy
import pickle
import warnings

import torch
import torch.distributed as dist

import mgg
import mgg.nn as mnn
from mgg.distributed import DistGraph
from mgg.distributed.comm import all_reduce
from mgg.distributed.process import exit_rank
from mgg.errors import MggError

with warnings.catch_warnings():  # PyG's modules call torch.jit.script at import (torch 2.14 warns)
    warnings.simplefilter("ignore", FutureWarning)
    import torch_geometric.nn as pyg_nn

F64 = torch.float64
BACKENDS = ("halo", "allgather")  # nvshmem: the same square plans, on GPUs (test_nvshmem.py's machines)
# (N_src, N_dst): each count ends inside a rank's range on 2 and 4 ranks (a rank pads part of its
# range), and on 4 ranks with more destinations the last rank owns no source
SHAPES = {"more-sources": (37, 23), "more-destinations": (23, 41)}
SRC_WIDTH, DST_WIDTH = 6, 4
# layer case -> (mgg layer, PyG layer, whether x_dst is None (size=(N_src, N_dst) instead)),
# built alike: the same seed, then PyG's state_dict loaded into mgg's
LAYERS = {
    "sage-mean": lambda: (mnn.SAGEConv((6, 4), 5), pyg_nn.SAGEConv((6, 4), 5), False),
    "sage-max": lambda: (mnn.SAGEConv((6, 4), 5, aggr="max"), pyg_nn.SAGEConv((6, 4), 5, aggr="max"), False),
    "sage-min": lambda: (mnn.SAGEConv((6, 4), 5, aggr="min"), pyg_nn.SAGEConv((6, 4), 5, aggr="min"), False),
    "gin-add": lambda: _gin("add"),
    "gin-max": lambda: _gin("max"),
    "gat": lambda: (mnn.GATConv((6, 4), 5, heads=2), pyg_nn.GATConv((6, 4), 5, heads=2), False),
    "gat-x-none": lambda: (mnn.GATConv(6, 5, heads=2), pyg_nn.GATConv(6, 5, heads=2), True),
}


def _gin(aggr: str):
    mlp = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    return (
        mnn.GINConv(copy.deepcopy(mlp), eps=0.2, train_eps=True, aggr=aggr),
        pyg_nn.GINConv(mlp, eps=0.2, train_eps=True, aggr=aggr),
        False,
    )


def bipartite_edges(n_src: int, n_dst: int, seed: int = 3) -> torch.Tensor:
    """Sources < n_src, destinations < n_dst, with duplicates, edges i -> i (GAT replaces them by
    its loops) and three destinations without in-edges."""
    gen = torch.Generator().manual_seed(seed)
    src, dst = torch.randint(0, n_src, (150,), generator=gen), torch.randint(0, n_dst - 3, (150,), generator=gen)
    ei = torch.stack([src, dst])
    k = min(n_src, n_dst - 3)
    loops = torch.arange(0, k, 4)
    return torch.cat([ei, torch.stack([loops, loops]), ei[:, :5]], 1)


def inputs(n_src: int, n_dst: int, x_dst_width: int):
    """x_src, x_dst and the loss's weights on the outputs: continuous (no ties for max and min)."""
    gen = torch.Generator().manual_seed(n_src * 100 + n_dst)
    x_src = torch.randn(n_src, SRC_WIDTH, dtype=F64, generator=gen)
    x_dst = torch.randn(n_dst, x_dst_width, dtype=F64, generator=gen)
    return x_src, x_dst, torch.randn(n_dst, 10, dtype=F64, generator=gen)


def run_case(layer: str, shape: str, backend: str) -> dict:
    """name -> (mgg's, PyG's) of one layer on one graph (every rank returns it; rank 0's is written)."""
    n_src, n_dst = SHAPES[shape]
    torch.manual_seed(0)
    ours, ref, x_dst_none = LAYERS[layer]()
    ours, ref = ours.double(), ref.double()
    ours.load_state_dict(ref.state_dict())
    ei = bipartite_edges(n_src, n_dst)
    x_src, x_dst, weights = inputs(n_src, n_dst, SRC_WIDTH if layer.startswith(("gin", "gat-x")) else DST_WIDTH)
    dg = DistGraph(mgg.Graph.from_edge_index(ei, max(n_src, n_dst)), backend=backend, size=(n_src, n_dst))

    def loss_of(out, w):
        return (out * w[:, : out.size(1)]).sum()

    xs, xd = dg.local_src(x_src).clone().requires_grad_(), dg.local_dst(x_dst).clone().requires_grad_()
    out = ours((xs, None if x_dst_none else xd), dg, **({"size": dg.size} if x_dst_none else {}))
    loss_of(out, dg.local_dst(weights)).backward()
    for p in ours.parameters():
        if p.grad is not None:  # GAT's att_dst has none without x_dst (nor has PyG's)
            all_reduce(p.grad, dg.group)

    rs, rd = x_src.clone().requires_grad_(), x_dst.clone().requires_grad_()
    kw = {"size": (n_src, n_dst)} if x_dst_none else {}
    out_ref = ref((rs, None if x_dst_none else rd), ei, **kw)
    loss_of(out_ref, weights).backward()

    got = {"out": (dg.gather_dst(out), out_ref.detach()), "x_src.grad": (dg.gather_src(xs.grad), rs.grad)}
    if not x_dst_none:
        got["x_dst.grad"] = (dg.gather_dst(xd.grad), rd.grad)
    theirs = dict(ref.named_parameters())
    for name, p in ours.named_parameters():
        got[f"{name}.grad"] = (p.grad, theirs[name].grad)
    return got


def errors() -> dict:
    """what -> the message of an MggError (or None if nothing was raised)."""
    n_src, n_dst = SHAPES["more-sources"]
    ei = bipartite_edges(n_src, n_dst)
    g = mgg.Graph.from_edge_index(ei, n_src)
    x_src, x_dst, _ = inputs(n_src, n_dst, DST_WIDTH)
    dg = DistGraph(g, size=(n_src, n_dst))
    square = DistGraph(mgg.Graph.from_edge_index(ei, n_src))
    xs, xd, own = dg.local_src(x_src), dg.local_dst(x_dst), square.local(x_src)
    torch.manual_seed(0)
    sage = mnn.SAGEConv((6, 4), 5).double()
    attempts = {
        "size-not-a-pair": lambda: DistGraph(g, size=(n_src,)),
        "size-other-nodes": lambda: DistGraph(g, size=(n_src + 1, n_dst)),
        "source-past-size": lambda: DistGraph(g, size=(n_src - 6, n_src)),
        "destination-past-size": lambda: DistGraph(g, size=(n_src, 10)),
        "partition-not-range": lambda: DistGraph(g, size=(n_src, n_dst), partition="random"),
        "local-of-bipartite": lambda: dg.local(x_src),
        "gather-of-bipartite": lambda: dg.gather(xs),
        "local-src-rows": lambda: dg.local_src(x_dst),
        "gather-dst-rows": lambda: dg.gather_dst(x_dst[: dg.num_dst_rows + 1]),
        "x-src-shard-rows": lambda: sage((x_src[: dg.num_src_rows + 1], xd), dg),
        "x-dst-shard-rows": lambda: sage((xs, x_dst[: dg.num_dst_rows + 1]), dg),
        "size-not-the-graphs": lambda: sage((xs, xd), dg, size=(n_src, n_dst + 1)),
        "square-graph-pair": lambda: sage((own, own[1:, :DST_WIDTH]), square),
        "gat-attention-weights": lambda: mnn.GATConv((6, 4), 5).double()((xs, xd), dg, return_attention_weights=True),
    }
    found = {}
    for what, attempt in attempts.items():
        try:
            attempt()
            found[what] = None
        except MggError as e:
            found[what] = str(e)
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    cases = {
        (backend, layer, shape): run_case(layer, shape, backend)
        for backend in args.backends.split(",")
        for shape in SHAPES
        for layer in LAYERS
    }
    result = {"cases": cases, "errors": errors()}
    if dist.get_rank() == 0:
        with open(args.out, "wb") as f:
            pickle.dump(result, f)


if __name__ == "__main__":
    main()
    exit_rank()

"""Under torchrun (gloo): for every grid of the world's ranks, each convolution (GCN, SAGE, GIN) and
2 and 3 layers, a GridNet with the weights of tests/distributed/test_grid.py's reference on its
random graph, one forward and backward of the mean cross entropy; rank 0 writes the whole logits,
gradients (input, weights, biases, root weights), loss and the bytes moved per axis (summed over
ranks) to OUT (a pickle keyed by (grid, conv, layers)).

    torchrun --nproc-per-node=G tests/workers/grid_worker.py OUT [--no-permute] [--grids 2x2x1 ...]
        [--device cuda] [--dropout P]

--device cuda: float32 CUDA tensors on the one GPU the ranks share (gloo, staged through the
host); the results come back to the CPU as float32. --dropout P: every layer's input dropped (by node:
the one process draws the same, tests/distributed/test_grid.py's reference)."""

import argparse
import os
import pickle
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from mgg.distributed.grid import Grid, GridNet, GridShape, factorizations  # noqa: E402
from tests.distributed.grid_case import CONVS, DEPTHS, EPS, case  # noqa: E402


def assemble(pieces, shape, dtype):
    """The whole tensor from (rows, (first column, end), values) pieces; NaN where none wrote."""
    out = torch.full(shape, float("nan"), dtype=dtype)
    for rows, (c0, c1), values in pieces:
        out[rows, c0:c1] = values
    return out


def run(shape: GridShape, permute: bool, device: str, dropout: float = 0.0) -> dict:
    grid = Grid(shape)
    results = {}
    dtype = torch.float64 if device == "cpu" else torch.float32  # mgg's CUDA kernels take no float64
    for layers, conv in [(n, c) for n in DEPTHS for c in CONVS]:
        graph, x, labels, mask, weights, biases, roots = case(layers)
        x, weights, biases, roots = x.to(dtype), [w.to(dtype) for w in weights], [b.to(dtype) for b in biases], roots
        dims = [x.size(1)] + [w.size(1) for w in weights]
        model = GridNet(grid, graph, dims, permute=permute, dtype=dtype, conv=conv, eps=EPS, dropout=dropout)
        model.load_weights(weights, biases, roots if conv == "sage" else None)
        model.to(device)
        grid.reset_counts()
        x_shard = model.input_shard(x).to(device).requires_grad_(True)
        logits = model(x_shard)
        loss = model.loss(logits, labels.to(device), mask.to(device))
        loss.backward()
        mine = dict(
            out_nodes=torch.from_numpy(model.output_nodes()),
            logits=logits.detach(),
            x_piece=(torch.from_numpy(model.input_nodes()), model.input_columns(), x_shard.grad),
            w_pieces=[
                (torch.arange(*model.weight_span(i)[0]), model.weight_span(i)[1], w.grad)
                for i, w in enumerate(model.weights)
            ],
            r_pieces=[
                (torch.arange(*model.weight_span(i)[0]), model.weight_span(i)[1], w.grad)
                for i, w in enumerate(model.root_weights)
            ],
            b_pieces=[
                (torch.zeros(1, dtype=torch.long), model.bias_span(i), b.grad[None]) for i, b in enumerate(model.biases)
            ],
            moved=dict(grid.moved),
            loss=model.whole_loss(loss),
        )
        mine = on_cpu(mine)
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, mine)
        if dist.get_rank() == 0:
            results[(str(shape), conv, layers)] = combine(every, x, weights, biases)
    return results


def on_cpu(value):
    """value with every tensor in it on the CPU (what all_gather_object pickles)."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: on_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(on_cpu(v) for v in value)
    return value


def combine(every, x, weights, biases):
    dt = x.dtype
    logits = assemble(
        [(e["out_nodes"], (0, weights[-1].size(1)), e["logits"]) for e in every], (x.size(0), weights[-1].size(1)), dt
    )
    return dict(
        logits=logits,
        # the ranks that hold the same rows hold the same logits
        copies_agree=all(torch.equal(logits[e["out_nodes"]], e["logits"]) for e in every),
        x_grad=assemble([e["x_piece"] for e in every], tuple(x.shape), dt),
        w_grads=[assemble([e["w_pieces"][i] for e in every], tuple(w.shape), dt) for i, w in enumerate(weights)],
        r_grads=[
            assemble([e["r_pieces"][i] for e in every], tuple(w.shape), dt)
            for i, w in enumerate(weights)
            if every[0]["r_pieces"]
        ],
        b_grads=[assemble([e["b_pieces"][i] for e in every], (1, b.numel()), dt)[0] for i, b in enumerate(biases)],
        losses=[e["loss"] for e in every],
        moved={a: sum(e["moved"][a] for e in every) for a in "xyz"},
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--no-permute", action="store_true")
    p.add_argument("--grids", nargs="*")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dropout", type=float, default=0.0)
    args = p.parse_args()
    dist.init_process_group("gloo")
    shapes = [GridShape.parse(s) for s in args.grids] if args.grids else factorizations(dist.get_world_size())
    results = {}
    for shape in shapes:
        results.update(run(shape, not args.no_permute, args.device, args.dropout))
    if dist.get_rank() == 0:
        with open(args.out, "wb") as f:
            pickle.dump(results, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

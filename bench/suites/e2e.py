"""The e2e suite: training epochs of the models end to end."""

from __future__ import annotations

import itertools
import time
from typing import Iterator

import torch

from mgg import Graph

from .. import cache
from .common import (
    Options,
    features,
    result_row,
    timed,
    within_budget,
)


def _epoch_fn(model, optimizer, x, graph_arg, y):
    def epoch():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x, graph_arg), y).backward()
        optimizer.step()

    return epoch


def e2e(opt: Options) -> Iterator[dict]:
    """Epoch time (forward, backward, optimizer step) of a 2-layer GCN (hidden 16) and a 5-layer
    GIN (hidden 64): mgg layers against PyG's, same data, same initial weights."""
    try:
        import torch_geometric.nn as pyg_nn
    except ImportError:
        return
    from mgg.nn.models import build

    models = [("gcn2-h16", "gcn", 16, 2), ("gin5-h64", "gin", 64, 5)]
    cases = list(itertools.product(opt.graphs, opt.dims, models))
    named = lambda c: f"{c[0]} D={c[1]} {c[2][0]}"  # noqa: E731
    for spec, dim, (name, kind, hidden, layers) in within_budget(opt, "e2e", cases, named):
        t0 = time.perf_counter()
        g, _ = cache.graph(spec, opt.data_dir)
        torch.manual_seed(0)
        x = features(g.num_nodes, dim, str(opt.device), torch.float32)
        y = torch.randint(0, 8, (g.num_nodes,), device=opt.device)
        plain = Graph(g.rowptr, g.col)  # layers normalise themselves
        ei = plain.edge_index().to(opt.device)
        ref = build(kind, dim, 8, hidden, conv_module=pyg_nn, num_layers=layers).to(opt.device)
        ours = build(kind, dim, 8, hidden, num_layers=layers, config=opt.config).to(opt.device)
        ours.load_state_dict(ref.state_dict())
        prep_s = time.perf_counter() - t0
        for impl, model, graph_arg in (("mgg", ours, plain), ("pyg", ref, ei)):
            epoch = _epoch_fn(model, torch.optim.Adam(model.parameters(), lr=0.01), x, graph_arg, y)
            t, peak = timed(opt, epoch)
            yield result_row(
                "e2e",
                f"{spec}/d{dim}/{name}",
                spec,
                g,
                dim,
                opt,
                impl,
                1,
                opt.config if impl == "mgg" else None,
                "epoch",
                t,
                peak,
                prep_s=prep_s,
            )
        opt.budget.done("e2e", time.perf_counter() - t0)

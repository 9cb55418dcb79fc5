"""Under torchrun (gloo): mgg train's loop (mgg.training.torchrun.train, mgg.training.grid.train) on Cora
for every backend given and GCN and SAGE, each run's per-epoch (loss over all training nodes,
validation and test accuracy) and its best epoch; rank 0 writes them as JSON. One process (no
torchrun): the reference.

    [torchrun ...] tests/workers/curve_worker.py OUT EPOCHS BACKEND[:C] ...
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import torch.distributed as dist  # noqa: E402

from mgg.data import load_dataset  # noqa: E402
from mgg.distributed.process import exit_rank  # noqa: E402
from mgg.training import TrainConfig  # noqa: E402
from mgg.training import train as train_one  # noqa: E402


def main():
    out, epochs, specs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    ds = load_dataset("cora")
    curves = {}
    for model in ("gcn", "sage"):
        cfg = TrainConfig(model=model, epochs=epochs, seeds=(0,), device="cpu", deterministic=True)
        for spec in specs:
            backend, _, c = spec.partition(":")
            if backend == "one":
                res = train_one(ds, cfg, progress=False)
            elif backend == "grid":
                from mgg.training.grid import train as train_grid

                res = train_grid(ds, cfg, c or "auto", progress=False)
            else:
                from mgg.training.torchrun import train as train_ranks

                res = train_ranks(ds, cfg, backend, progress=False, replication=int(c) if c else None)
            run = res["runs"][0]
            curves[f"{spec}/{model}"] = dict(curve=run.curve, best=run.best_epoch, test=run.test_acc)
    if not dist.is_initialized() or dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(curves, f)
    if dist.is_initialized():
        exit_rank(0)


if __name__ == "__main__":
    main()

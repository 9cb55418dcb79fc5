"""A small case for compute-sanitizer (memcheck, racecheck, synccheck): every kernel of the
mgg ops on a skewed graph with cut rows, all storage types, a dim that is not a multiple of
32, deterministic mode and the in-process peers path. Exits non-zero on a wrong result.

    compute-sanitizer --tool racecheck python -m bench.sanitize_case
"""
import sys

import numpy as np
import torch

import mgg
from mgg import Config, Graph, Plan
from mgg.ops import run_peers


def main() -> int:
    rng = np.random.default_rng(0)
    n, e = 400, 6000
    dst = np.r_[np.zeros(1500, np.int64), rng.integers(0, n, e - 1500)]  # row 0: a hub cut across blocks
    g = Graph.from_edges(rng.integers(0, n, e), dst, n, rng.uniform(0.1, 1, e).astype(np.float32))
    ref = g.to_torch_sparse().cuda()
    bad = 0
    for dim in (7, 40):
        x = torch.randn(n, dim, device="cuda")
        want = torch.sparse.mm(ref, x)
        for cfg in (Config(4, 2, 2), Config(16, 1, 4), Config(0, 1, 2)):
            for det in (False, True):
                for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 3e-2)):
                    out = mgg.aggregate(x.to(dtype), Plan(g), cfg, deterministic=det).float()
                    bad += not torch.allclose(out, want, rtol=tol, atol=tol * 10)
            plan = Plan(g, 2)
            tables = [x[int(plan.bounds[r]):int(plan.bounds[r + 1])] for r in range(2)]
            out = torch.cat([run_peers(tables[r], tables, r, plan.rank_plan(r, cfg), "direct") for r in range(2)])
            bad += not torch.allclose(out, want, rtol=1e-4, atol=1e-4)
        xg = x.clone().requires_grad_()
        mgg.aggregate(xg, Plan(g)).sum().backward()
        bad += not torch.allclose(xg.grad, torch.sparse.mm(g.transpose().to_torch_sparse().cuda(), torch.ones_like(x)),
                                  rtol=1e-4, atol=1e-4)
    torch.cuda.synchronize()
    print(f"sanitize case: {bad} wrong results")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

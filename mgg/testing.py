"""Helpers for tests of mgg and of models built on it: generated graphs, a float64 reference
with a tolerance that scales with each row's degree, and one test body for every device (in the
manner of pyg-lib's withCUDA)."""
from __future__ import annotations

import numpy as np
import torch

from .graph import Graph

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# unit roundoff of each storage type (half the machine epsilon)
UNIT_ROUNDOFF = {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.float16: 2.0**-11,
                 torch.bfloat16: 2.0**-8}


def with_devices(fn):
    """Runs a test once per available device, passing `device` ('cpu', and 'cuda' where there is
    a GPU); the CUDA case is marked `gpu`."""
    import pytest

    params = [pytest.param(d, marks=[pytest.mark.gpu] if d == "cuda" else []) for d in DEVICES]
    return pytest.mark.parametrize("device", params)(fn)


try:
    import pytest as _pytest

    # a mark (for pytestmark lists) and a decorator: skipped where no CUDA device is visible
    requires_cuda = _pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
except ImportError:  # pytest is a test dependency only
    requires_cuda = None


def random_graph(n: int, e: int, seed: int = 0, weighted: bool = False, skew: float = 0.0) -> Graph:
    """A random directed multigraph of n nodes and e edges (duplicates and self-loops kept);
    skew > 0 concentrates destinations on a few rows (hub rows)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, e)
    if skew > 0:
        p = rng.pareto(1.0 / skew, n) + 1e-3
        dst = rng.choice(n, e, p=p / p.sum())
    else:
        dst = rng.integers(0, n, e)
    w = rng.uniform(0.1, 2.0, e).astype(np.float32) if weighted else None
    return Graph.from_edges(src, dst, n, w)


def dense_reference(g: Graph, x: torch.Tensor) -> torch.Tensor:
    """A @ x in float64 on the CPU (x as stored, so rounding of the inputs is not an error)."""
    return g.to_torch_sparse(torch.float64) @ x.detach().cpu().double()


def assert_matches_reference(out: torch.Tensor, g: Graph, x: torch.Tensor, acc_dtype=torch.float32) -> None:
    """out equals A @ x within the worst-case error of summing each row in acc_dtype (Higham:
    |fl(sum) - sum| <= (deg + 2) u sum |w x|) plus the final rounding to out's storage type. The
    bound scales with each row's degree, so hub rows of thousands of edges pass at D of thousands
    while any misplaced or missing term (far above it) fails."""
    ref = dense_reference(g, x)
    a = g.to_torch_sparse(torch.float64)
    bound = torch.sparse_csr_tensor(a.crow_indices(), a.col_indices(), a.values().abs(), a.shape,
                                    check_invariants=False) @ x.detach().cpu().double().abs()
    deg = g.degree().double().unsqueeze(1)
    u_acc = UNIT_ROUNDOFF[acc_dtype if out.dtype != torch.float64 else torch.float64]
    fi = torch.finfo(out.dtype)  # below the smallest normal, rounding is absolute: a subnormal step
    tol = (deg + 2) * u_acc * bound + UNIT_ROUNDOFF[out.dtype] * ref.abs() + fi.tiny * fi.eps
    err = (out.detach().cpu().double() - ref).abs()
    bad = err > tol
    if bool(bad.any()):
        r, c = (int(i) for i in bad.nonzero()[0])
        out = out.detach()
        raise AssertionError(f"out[{r}, {c}] = {float(out[r, c])} but A @ x = {float(ref[r, c])} (row degree "
                             f"{int(deg[r])}, tolerance {float(tol[r, c]):.3g}); {int(bad.sum())} entries off")

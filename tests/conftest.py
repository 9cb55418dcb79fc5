import numpy as np
import pytest
import torch

from mgg.datasets import bundled_planetoid_dir
from mgg.graph import Graph

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def random_graph(n: int, e: int, seed: int = 0, weighted: bool = False, skew: float = 0.0) -> Graph:
    """A random directed multigraph; skew > 0 concentrates destinations on a few rows."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, e)
    if skew > 0:
        p = rng.pareto(1.0 / skew, n) + 1e-3
        dst = rng.choice(n, e, p=p / p.sum())
    else:
        dst = rng.integers(0, n, e)
    w = rng.uniform(0.1, 2.0, e).astype(np.float32) if weighted else None
    return Graph.from_edges(src, dst, n, w)


@pytest.fixture(scope="session")
def cora():
    from mgg.io import load_planetoid

    return load_planetoid(bundled_planetoid_dir(), "cora")

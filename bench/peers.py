"""The implementations a suite compares: mgg and its peers. Each prepares once per (graph, x)
and returns callables for the forward and the backward (gradient w.r.t. the features)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

import mgg
from mgg import Config, Graph, Plan


@dataclass
class Prepared:
    fwd: Callable[[], object]
    bwd: Optional[Callable[[], object]]


def _autograd_pair(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> Prepared:
    """fwd: f(x); bwd: the gradient of f at x for a fixed random output gradient (the forward
    that records the graph runs on the first bwd call, outside the timed repetitions' warm-up)."""
    state = {}

    def bwd():
        if not state:
            xg = x.detach().requires_grad_()
            out = f(xg)
            state.update(xg=xg, out=out, g=torch.randn_like(out))
        return torch.autograd.grad(state["out"], state["xg"], state["g"], retain_graph=True)

    return Prepared(lambda: f(x), bwd)


def prepare_mgg(graph: Graph, x: torch.Tensor, config: Config = Config(), plan: Optional[Plan] = None,
                deterministic: bool = False) -> Prepared:
    plan = plan or Plan(graph)
    plan.rank_plan(0, config).op_args(x.device)  # device copies made and checked outside the timing
    return _autograd_pair(lambda t: mgg.aggregate(t, plan, config, deterministic=deterministic), x)


_MATRICES: dict = {}


def _matrices(graph: Graph, dtype: torch.dtype, device: torch.device):
    """A and A^T as torch sparse CSR on the device, made once per graph for every dim."""
    key = (id(graph), dtype, str(device))
    if key not in _MATRICES:
        a = graph.to_torch_sparse(dtype).to(device)
        at = a if graph.symmetric else graph.transpose().to_torch_sparse(dtype).to(device)
        _MATRICES[key] = (graph, a, at)  # holding graph keeps id(graph) unique
    return _MATRICES[key][1:]


def prepare_torch_sparse(graph: Graph, x: torch.Tensor, **_) -> Prepared:
    """torch.sparse.mm on CSR (cuSPARSE on a GPU); backward is A^T @ grad, as autograd does it."""
    a, at = _matrices(graph, x.dtype, x.device)
    g = torch.randn(graph.num_nodes, x.size(1), device=x.device, dtype=x.dtype)
    return Prepared(lambda: torch.sparse.mm(a, x), lambda: torch.sparse.mm(at, g))


def prepare_cupy(graph: Graph, x: torch.Tensor, **_) -> Optional[Prepared]:
    """cupyx.scipy.sparse (cuSPARSE through cupy), sharing memory with torch via DLPack."""
    if x.device.type != "cuda":
        return None
    try:
        import cupy
        import cupyx.scipy.sparse as csp
    except ImportError:
        return None
    def mat(m: torch.Tensor):  # the torch CSR's arrays on the device, shared through DLPack
        return csp.csr_matrix((cupy.asarray(m.values()), cupy.asarray(m.col_indices().int()),
                               cupy.asarray(m.crow_indices().int())), shape=tuple(m.shape))

    a, at = (mat(m) for m in _matrices(graph, x.dtype, x.device))
    xc = cupy.asarray(x)
    gc = cupy.asarray(torch.randn_like(x))
    return Prepared(lambda: a @ xc, lambda: at @ gc)


def prepare_pyg(graph: Graph, x: torch.Tensor, **_) -> Optional[Prepared]:
    """PyG's message passing: gather x[src], scale by the edge weight, scatter-add at dst."""
    try:
        from torch_geometric.utils import scatter
    except ImportError:
        return None
    src, dst = graph.col.to(x.device), graph.rows().to(x.device)
    w = None if graph.weight is None else graph.weight.to(x.device, x.dtype).unsqueeze(1)
    n = graph.num_nodes

    def f(t):
        msg = t[src] if w is None else t[src] * w
        return scatter(msg, dst, 0, n, reduce="sum")

    return _autograd_pair(f, x)


PEERS = {"mgg": prepare_mgg, "torch.sparse": prepare_torch_sparse, "cupy": prepare_cupy, "pyg": prepare_pyg}

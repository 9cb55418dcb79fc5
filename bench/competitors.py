"""The implementations a suite compares: mgg and its competitors. Each prepares once per (graph, x)
and returns callables for the forward and the backward (gradient w.r.t. the features), and
`verify` checks both results before anything is timed (a wrong result is never reported).

The check is mgg.testing.assert_matches_reference (A @ x in float64, at the error bound of fp32
accumulation) on a sample of rows: the rows of highest in-degree (where rows are cut across
blocks and fixed up; at most HUBS of them and HUB_EDGES edges in all, the top hub always) and
SAMPLE more drawn at random; on a graph of at most HUBS + SAMPLE rows, every row. The sampled rows
and their in-edges become a small graph of their own (the rows, then one node per distinct
source), so the float64 reference on the CPU costs the sampled edges, not the graph's; and as
columns are independent, at most COLUMNS of them are compared, spread over D (the first and the
last always): a hub of 300k edges at D = 256 is checked in about a second."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Callable, Optional

import torch

import mgg
from mgg import Config, Graph, Plan
from mgg.testing import assert_matches_reference

HUBS, HUB_EDGES, SAMPLE, COLUMNS = 32, 100_000, 1024, 16


@dataclass
class Prepared:
    fwd: Callable[[], object]
    bwd: Optional[Callable[[], object]]
    grad_out: Optional[torch.Tensor] = None  # the output gradient bwd propagates


def _autograd_pair(f: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> Prepared:
    """fwd: f(x); bwd: the gradient of f at x for a fixed random output gradient (the forward
    that records the graph runs on the first bwd call, outside the timed repetitions' warm-up)."""
    state = {}
    grad_out = torch.randn_like(x)  # an aggregation's output has x's shape

    def bwd():
        if not state:
            xg = x.detach().requires_grad_()
            state.update(xg=xg, out=f(xg))
        return torch.autograd.grad(state["out"], state["xg"], grad_out, retain_graph=True)

    return Prepared(lambda: f(x), bwd, grad_out)


def prepare_mgg(
    graph: Graph, x: torch.Tensor, config: Config = Config(), plan: Optional[Plan] = None, deterministic: bool = False
) -> Prepared:
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


def prepare_torch_sparse(graph: Graph, x: torch.Tensor, **_) -> Optional[Prepared]:
    """torch.sparse.mm on CSR (cuSPARSE on a GPU); backward is A^T @ grad, as autograd does it.
    None where the backend has no kernel for x's dtype (bf16 on the CPU's MKL path)."""
    if not sparse_mm_supports(x.dtype, x.device):
        return None
    a, at = _matrices(graph, x.dtype, x.device)
    g = torch.randn_like(x)
    return Prepared(lambda: torch.sparse.mm(a, x), lambda: torch.sparse.mm(at, g), g)


@functools.lru_cache(maxsize=None)
def sparse_mm_supports(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether torch.sparse.mm has a CSR x dense kernel for dtype on device (a 1 x 1 probe)."""
    one = torch.ones(1, 1, dtype=dtype, device=device)
    try:
        torch.sparse.mm(one.to_sparse_csr(), one)
    except (NotImplementedError, RuntimeError):
        return False
    return True


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
        return csp.csr_matrix(
            (cupy.asarray(m.values()), cupy.asarray(m.col_indices().int()), cupy.asarray(m.crow_indices().int())),
            shape=tuple(m.shape),
        )

    a, at = (mat(m) for m in _matrices(graph, x.dtype, x.device))
    xc = cupy.asarray(x)
    g = torch.randn_like(x)
    gc = cupy.asarray(g)
    return Prepared(lambda: a @ xc, lambda: at @ gc, g)


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


IMPLEMENTATIONS = {"mgg": prepare_mgg, "torch.sparse": prepare_torch_sparse, "cupy": prepare_cupy, "pyg": prepare_pyg}


def sample_rows(graph: Graph, seed: int = 0) -> torch.Tensor:
    """The rows a result is checked on: every row of a small graph, else the rows of highest
    in-degree (at most HUBS, at most HUB_EDGES edges, at least one) and SAMPLE random ones."""
    n = graph.num_nodes
    if n <= HUBS + SAMPLE:
        return torch.arange(n)
    top = torch.topk(graph.degree(), HUBS)
    hubs = top.indices[: max(1, int((torch.cumsum(top.values, 0) <= HUB_EDGES).sum()))]
    rest = torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:SAMPLE]
    return torch.unique(torch.cat([hubs, rest]))


def _as_tensor(result) -> torch.Tensor:
    """A result as one tensor: a gradient tuple's tensor, ranks' rows concatenated, a cupy array."""
    if isinstance(result, (tuple, list)):
        return result[0] if len(result) == 1 else torch.cat(list(result))
    return result if isinstance(result, torch.Tensor) else torch.as_tensor(result, device="cuda")


def check(result, graph: Graph, x: torch.Tensor) -> None:
    """Raises AssertionError (naming the row, the values and the tolerance) unless result = A @ x
    on sample_rows within mgg.testing.assert_matches_reference's bound."""
    out = _as_tensor(result)
    if not bool(torch.isfinite(out).all()):  # a NaN passes any `error > tolerance` test: refused here
        raise AssertionError(f"{int((~torch.isfinite(out)).sum())} non-finite entries of {out.numel()}")
    rows = sample_rows(graph)
    dim = x.size(1)
    cols = torch.linspace(0, dim - 1, min(dim, COLUMNS)).round().long().unique()
    out, x = out[:, cols.to(out.device)], x[:, cols.to(x.device)]
    k = rows.numel()
    try:
        if k == graph.num_nodes:
            return assert_matches_reference(out, graph, x)
        start, count = graph.rowptr[rows], graph.degree()[rows]
        ends = torch.cumsum(count, 0)
        edges = torch.repeat_interleave(start - (ends - count), count) + torch.arange(int(ends[-1]))
        sources, col = torch.unique(graph.col[edges], return_inverse=True)
        rowptr = torch.cat([torch.zeros(1, dtype=torch.int64), ends, ends[-1].repeat(sources.numel())])
        sub = Graph.from_csr(rowptr, col + k, None if graph.weight is None else graph.weight[edges])
        xs = torch.cat([x.new_zeros((k, x.size(1))), x[sources.to(x.device)]]).cpu()
        outs = torch.cat([out[rows.to(out.device)], out.new_zeros((sources.numel(), out.size(1)))]).cpu()
        assert_matches_reference(outs, sub, xs)
    except AssertionError as e:  # name the entry of the result, not of the sample
        m = re.match(r"out\[(\d+), (\d+)\]", str(e))
        where = f"that is out[{int(rows[int(m.group(1))])}, {int(cols[int(m.group(2))])}]; " if m else ""
        raise AssertionError(f"{e} ({where}{k} rows and {cols.numel()} columns checked)") from None


def check_run(run, graph: Graph, x: torch.Tensor) -> None:
    """check() of what run() returns; run may be a list of callables, each giving a rank's rows."""
    check([f() for f in run] if isinstance(run, list) else run(), graph, x)


_TRANSPOSED: dict = {}


def transposed(graph: Graph) -> Graph:
    """A^T, made once per graph (the graph itself when symmetric): the backward's matrix."""
    if id(graph) not in _TRANSPOSED:
        _TRANSPOSED[id(graph)] = (graph, graph if graph.symmetric else graph.transpose())
    return _TRANSPOSED[id(graph)][1]


def verify(prep: Prepared, graph: Graph, x: torch.Tensor) -> None:
    """The forward equals A @ x and the backward A^T @ grad_out (see check), or AssertionError
    saying which is wrong."""
    for name, fn, m, t in (("forward", prep.fwd, graph, x), ("backward", prep.bwd, None, prep.grad_out)):
        if fn is None:
            continue
        try:
            check(fn(), m or transposed(graph), t)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None

"""Helpers for tests of mgg and of models built on it: generated graphs, the oracles every kernel
is judged by (float64 references with exact and realistic tolerances, for the aggregation and for
GAT's attention), tolerances written down once, and one test body for every device (in the manner
of pyg-lib's withCUDA).

Two kinds of case, two oracles:
- exact cases (`exact_inputs`): features and weights are small multiples of a power of two, so
  every partial sum is exact in fp32 whatever the order of summation; the result must equal the
  float64 reference rounded once to the output's storage type, bit for bit.
- random cases: a tolerance from the realistic rounding error of a sum (√degree scaling, see
  `summation_tolerance`), not Higham's worst case, which grows as degree² in a hub row and hides
  a dropped or doubled edge.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .graph import Graph
from .plan import Config

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# unit roundoff of each storage type (half the machine epsilon)
UNIT_ROUNDOFF = {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
# The same formula computed two ways in float64 (mgg's layers against PyG's, a kernel against
# torch): summation order changes a result of n terms by about √n·u·Σ|terms| (u = 2^-53), far
# below this for any n a test uses; a wrong term, a wrong index or a missing normalisation is
# far above it. Unlike an fp32 tolerance it holds whichever BLAS kernel (AVX2, AVX-512, SSE)
# the CPU runs.
SAME_FORMULA_RTOL = 1e-10

# The configs every kernel test runs (ps, dist, wpb): the tuner's smallest, a middle one, its
# largest, and neighbour partitioning off (ps = 0: one partition per row, whatever its degree).
CONFIGS = (Config(1, 1, 1), Config(4, 3, 2), Config(32, 16, 16), Config(0, 2, 4))


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


def quirky_edges(n: int = 120, e: int = 900, seed: int = 0) -> torch.Tensor:
    """A [2, E] edge_index with duplicate edges, self-loops (some nodes twice) and isolated
    nodes (the last 10 have no edges at all)."""
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n - 10, (2, e), generator=g)
    loops = torch.tensor([[3, 3, 7], [3, 3, 7]])
    return torch.cat([ei, ei[:, :40], loops], 1)


def _abs_float64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().double().abs()


def assert_same_formula(actual: torch.Tensor, expected: torch.Tensor, msg: str | None = None) -> None:
    """actual equals expected where both compute the same formula in float64 (an mgg layer against
    PyG's, an op against torch): within SAME_FORMULA_RTOL of the larger of |expected| and the
    tensor's largest entry (so entries that cancel to about zero are not held to a relative
    bound). Refuses anything but float64, where a tolerance would depend on the CPU."""
    for name, t in (("actual", actual), ("expected", expected)):
        if t.dtype != torch.float64:
            raise TypeError(f"assert_same_formula compares float64 results; {name} is {t.dtype}")
    scale = float(_abs_float64(expected).max()) if expected.numel() else 0.0
    torch.testing.assert_close(
        actual.detach().cpu(),
        expected.detach().cpu(),
        rtol=SAME_FORMULA_RTOL,
        atol=SAME_FORMULA_RTOL * max(scale, 1e-300),
        msg=msg,
    )


def summation_tolerance(terms, magnitude, acc_dtype=torch.float32):
    """How far a sum of `terms` products, accumulated in acc_dtype in any order, may be from the
    exact value, given `magnitude` = Σ|product| (tensors broadcast). The derivation: summing
    s_k = s_{k-1} + t_k rounds each partial sum, so the error is Σ_k δ_k s_k with |δ_k| <= u, plus
    u|t_k| per product. The δ_k of a sum in any order (sequential, warp trees, block reductions,
    fixups) behave as independent zero-mean errors, so the sum's error has a standard deviation of
    at most u·√(terms/3)·max|s_k| <= u·√(terms/3)·Σ|t|. Six such deviations, plus the products'
    u·Σ|t|, give u·(3.5·√(terms + 2) + 1)·Σ|t|; for short sums Higham's worst case
    (terms + 2)·u·Σ|t| is smaller and is used. In a hub row of 5,000 edges the bound is 1/20 of
    the worst case, so one edge more or less (|w x| ~ Σ|t| / deg, in some column) exceeds it."""
    u = UNIT_ROUNDOFF[acc_dtype]
    terms = torch.as_tensor(terms, dtype=torch.float64)
    factor = torch.minimum(terms + 2, 3.5 * (terms + 2).sqrt() + 1)
    return u * factor * torch.as_tensor(magnitude, dtype=torch.float64)


def dense_reference(g: Graph, x: torch.Tensor) -> torch.Tensor:
    """A @ x in float64 on the CPU (x as stored, so rounding of the inputs is not an error)."""
    return g.to_torch_sparse(torch.float64) @ x.detach().cpu().double()


def _first_bad(out, ref, tol, deg, what):
    got = out.detach().cpu().double()
    bad = ~(((got - ref).abs() <= tol) | (got == ref))  # NaN fails; equal infinities pass
    if bool(bad.any()):
        r, c = (int(i) for i in bad.nonzero()[0])
        raise AssertionError(
            f"out[{r}, {c}] = {float(out.detach()[r, c])} but {what} = {float(ref[r, c])} (row "
            f"degree {int(deg[r])}, tolerance {float(tol[r, c]):.3g}); {int(bad.sum())} entries off"
        )


def assert_matches_reference(out: torch.Tensor, g: Graph, x: torch.Tensor, acc_dtype=torch.float32) -> None:
    """out equals A @ x (float64, from x as stored) within `summation_tolerance` of each row's
    degree and Σ|w x| in acc_dtype, plus one rounding to out's storage type (and a subnormal step).
    A dropped, doubled or misplaced edge in any row of degree up to thousands fails at D >= 16
    (tests/core/test_oracle.py shows it for every config); exact cases should use
    `assert_exact_reference`, which holds for any D."""
    ref = dense_reference(g, x)
    a = g.to_torch_sparse(torch.float64)
    magnitude = torch.sparse_csr_tensor(
        a.crow_indices(), a.col_indices(), a.values().abs(), a.shape, check_invariants=False
    ) @ _abs_float64(x)
    deg = g.degree().double().unsqueeze(1)
    fi = torch.finfo(out.dtype)  # below the smallest normal, rounding is absolute: a subnormal step
    acc = acc_dtype if out.dtype != torch.float64 else torch.float64
    tol = summation_tolerance(deg, magnitude, acc) + UNIT_ROUNDOFF[out.dtype] * ref.abs() + fi.tiny * fi.eps
    _first_bad(out, ref, tol, deg, "A @ x")


def exact_inputs(g: Graph, dim: int, dtype=torch.float32, seed: int = 0, device="cpu"):
    """An exact case on g's edges: (g with weights in {0.5, 1, 1.5, 2}, x of nonzero integers in
    [-8, 8] in dtype; column 0 holds odd values up to ±255, distinct for nodes apart by less than
    256, so an edge moved to another source changes it): every product is a multiple of 1/2 of at
    most 510, so every partial sum of a row of degree up to 2^14 stays below 2^23 and is exact in
    fp32 (and in float64); fp16 and bf16 hold the features exactly."""
    rng = np.random.default_rng(seed)
    if g.num_nodes and int(g.degree().max()) > 2**14:
        raise ValueError("exact_inputs: a row of more than 2^14 edges is not exact in fp32")
    w = rng.integers(1, 5, g.num_edges).astype(np.float32) / 2
    exact = Graph.from_csr(g.rowptr, g.col, w)
    vals = rng.integers(1, 9, (g.num_nodes, dim)) * rng.choice([-1, 1], (g.num_nodes, dim))
    if dim:
        odd = 2 * (np.arange(g.num_nodes) % 128) + 1  # 1, 3, ..., 255: distinct for 128 nodes in a row
        vals[:, 0] = odd * np.where(np.arange(g.num_nodes) % 256 < 128, 1, -1)
    return exact, torch.as_tensor(vals, dtype=dtype, device=device)


def assert_exact_reference(out: torch.Tensor, g: Graph, x: torch.Tensor) -> None:
    """For an exact case (`exact_inputs`): out equals A @ x computed in float64 and rounded once to
    out's storage type (through fp32, as the kernels store an fp32 accumulator), bit for bit."""
    ref = dense_reference(g, x)
    want = ref if out.dtype == torch.float64 else ref.float().to(out.dtype).double()
    _first_bad(out, want, torch.zeros_like(want), g.degree().unsqueeze(1), "A @ x (exact)")


# GAT's attention (mgg.attend): the plain torch reference and its oracle.


def attention_reference(h, a_src, a_dst, src, dst, slope, keep=None):
    """out_i = Σ_e alpha_e h_src(e) with alpha the softmax of leaky_relu(a_src + a_dst, slope)
    over each destination's edges (times the dropout mask `keep`), in plain torch, in h's dtype."""
    n = h.size(0)
    e = F.leaky_relu(a_src[src] + a_dst[dst], slope)
    top = e.new_full((n, h.size(1)), float("-inf")).scatter_reduce_(0, dst[:, None].expand_as(e), e, "amax")
    w = (e - top[dst]).exp()
    alpha = w / e.new_zeros((n, h.size(1))).index_add_(0, dst, w)[dst]
    if keep is not None:
        alpha = alpha * keep.to(alpha)
    return h.new_zeros(h.shape).index_add_(0, dst, alpha.unsqueeze(-1) * h[src])


def assert_attention_matches_reference(
    out, h, a_src, a_dst, src, dst, slope, keep=None, acc_dtype=torch.float32
) -> None:
    """out [N, heads, C] equals `attention_reference` in float64 (from the inputs as stored).
    Tolerance: the weighted sum's `summation_tolerance` over each row's degree and Σ alpha|h|,
    plus the softmax weights' own relative error, u·(8 + 2·max|e|) per weight (exp of a rounded
    score: u·|e - max e| <= 2u·max|e|; exp, the row sum's share and the division: a few u more),
    plus one rounding to out's storage type."""
    as64 = [t.detach().cpu().double() for t in (h, a_src, a_dst)]
    src, dst = src.cpu(), dst.cpu()
    ref = attention_reference(*as64, src, dst, slope, None if keep is None else keep.cpu())
    if keep is None:
        weights = attention_reference(as64[0].abs(), *as64[1:], src, dst, slope)  # Σ alpha |h|
    else:
        weights = attention_reference(as64[0].abs(), *as64[1:], src, dst, slope, keep.cpu())
    n = ref.size(0)
    deg = torch.bincount(dst, minlength=n).double()[:, None, None]
    score = F.leaky_relu(as64[1][src] + as64[2][dst], slope).abs()
    top = score.new_zeros(n, score.size(1)).scatter_reduce_(0, dst[:, None].expand_as(score), score, "amax")
    acc = acc_dtype if out.dtype != torch.float64 else torch.float64
    u = UNIT_ROUNDOFF[acc]
    fi = torch.finfo(out.dtype)
    tol = (
        summation_tolerance(deg, weights, acc)
        + u * (8 + 2 * top.unsqueeze(-1)) * weights
        + UNIT_ROUNDOFF[out.dtype] * ref.abs()
        + fi.tiny * fi.eps
    )
    flat = lambda t: t.reshape(n, -1)  # noqa: E731
    _first_bad(flat(out), flat(ref), flat(tol), deg.reshape(n, 1), "attention reference")


def assert_attention_gradients_match_reference(
    grads, h, a_src, a_dst, src, dst, slope, grad_out, keep=None, acc_dtype=torch.float32
) -> None:
    """grads = (dh, da_src, da_dst) of mgg.attend against autograd through `attention_reference`
    in float64 (inputs and grad_out as stored). With s = leaky_relu'(score), the gradients are
    dh_j = Σ_{e: j->i} alpha_e g_i and d a_{src j}, d a_{dst i} = Σ_e alpha_e s_e (<g_i, h_j> -
    <g_i, out_i>). The backward reads out_i as stored, so it carries out's rounding:
    K_i = u_s <|g_i|, |out_i|> per edge (u_s: the storage type's unit roundoff); the sums carry
    `summation_tolerance` over (degree + channels) terms of magnitude M = Σ alpha (<|g|, |h|> +
    <|g|, |out|>) with alpha's relative error u·(8 + 2 max|score|) plus the summation error of
    the destination's softmax sum (relative, over its in-degree: large into hub rows); the result
    is rounded once to storage. da_src gathers its terms over each source's out-edges."""
    as64 = [t.detach().cpu().double().requires_grad_() for t in (h, a_src, a_dst)]
    src, dst = src.cpu(), dst.cpu()
    g64 = grad_out.detach().cpu().double()
    kp = None if keep is None else keep.cpu()
    out = attention_reference(*as64, src, dst, slope, kp)
    refs = torch.autograd.grad(out, as64, g64)
    with torch.no_grad():
        h64, s64, d64 = (t.detach() for t in as64)
        n, heads = h64.size(0), h64.size(1)
        score = s64[src] + d64[dst]
        e = F.leaky_relu(score, slope)
        top = e.new_full((n, heads), float("-inf")).scatter_reduce_(0, dst[:, None].expand_as(e), e, "amax")
        w = (e - top[dst]).exp()
        alpha = w / e.new_zeros((n, heads)).index_add_(0, dst, w)[dst]  # before dropout
        kf = kp.to(alpha) if kp is not None else torch.ones_like(alpha)
        acc = acc_dtype if grads[0].dtype != torch.float64 else torch.float64
        u_s, u = UNIT_ROUNDOFF[grads[0].dtype], UNIT_ROUNDOFF[acc]
        go_out = (g64.abs() * out.detach().abs()).sum(-1)  # <|g_i|, |out_i|> [N, heads]
        go_h = (g64[dst].abs() * h64[src].abs()).sum(-1)  # <|g_i|, |h_j|> per edge
        top_abs = e.abs().new_zeros((n, heads)).scatter_reduce_(0, dst[:, None].expand_as(e), e.abs(), "amax")
        in_deg = torch.bincount(dst, minlength=n).double()[:, None]
        # alpha's relative error per edge: its exponential and division, and the softmax sum of the
        # destination's in-edges (positive terms of at most 1), which dominates into hub rows
        a_err = u * (8 + 2 * top_abs[dst]) + summation_tolerance(in_deg[dst], 1.0, acc)
        channels = h64.size(2)
        out_deg = torch.bincount(src, minlength=n).double()[:, None]
        per_edge = alpha * (kf * go_h + go_out[dst])  # M's terms: alpha (keep <g, h> - <g, out>)
        m_dst = per_edge.new_zeros((n, heads)).index_add_(0, dst, per_edge)
        m_src = per_edge.new_zeros((n, heads)).index_add_(0, src, per_edge)
        k_edge = alpha * 2 * u_s * go_out[dst]  # out's rounding, per edge
        tol_dst = e.new_zeros((n, heads)).index_add_(0, dst, k_edge + a_err * per_edge) + summation_tolerance(
            in_deg + channels, m_dst, acc_dtype
        )
        tol_src = e.new_zeros((n, heads)).index_add_(0, src, k_edge + a_err * per_edge) + summation_tolerance(
            out_deg + channels, m_src, acc_dtype
        )
        ag = (alpha * kf).unsqueeze(-1) * g64[dst].abs()  # dh's terms: the kept alpha
        m_h = h64.new_zeros(h64.shape).index_add_(0, src, ag)
        tol_h = summation_tolerance(out_deg[..., None], m_h, acc_dtype) + h64.new_zeros(h64.shape).index_add_(
            0, src, a_err.unsqueeze(-1) * ag
        )
        for name, got, ref, tol, deg in (
            ("dh", grads[0], refs[0], tol_h, out_deg),
            ("d a_src", grads[1], refs[1], tol_src, out_deg),
            ("d a_dst", grads[2], refs[2], tol_dst, in_deg),
        ):
            fi = torch.finfo(got.dtype)
            full = tol + u_s * ref.abs() + fi.tiny * fi.eps
            try:
                _first_bad(got.reshape(n, -1), ref.reshape(n, -1), full.reshape(n, -1), deg, f"the reference {name}")
            except AssertionError as err:
                raise AssertionError(f"{name}: {err}") from None

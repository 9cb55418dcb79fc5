"""A small case for compute-sanitizer (memcheck, racecheck, synccheck): every mgg kernel that one
process launches, on a skewed graph whose hub row is cut across blocks, in fp32, fp16 and bf16
storage, at dims that are not multiples of 32, in deterministic mode too:

- aggregate, forward and backward (the block, row and fixup kernels);
- aggregate_peers, peers' rows read in place: device tables (direct), pinned host tables (uva),
  managed memory (uvm, direct loads);
- attend, forward and backward (the score/softmax/sum kernel, then d a_dst and the source rows'
  gradients), with and without dropout; attend_peers, attend_peers_dst and attend_peers_src (two
  ranks reading each other's rows and terms in place, direct loads).

Not here: the NVSHMEM gets (get-thread, get-warp, get-block and its block-get kernel), which need
NVSHMEM PEs (tests/test_nvshmem.py runs them).

Every result is compared with a value, and must be finite: the aggregations by
mgg.testing.assert_matches_reference; attention with mgg.attend on the CPU in float64 on the same
stored inputs (tests/test_gat.py holds that executor to a plain torch reference), within
`attention_tolerance`. Exits non-zero on a wrong result. `--device cpu` runs the same checks on
the CPU executors (tests/test_bench.py).

    compute-sanitizer --tool racecheck --kernel-name kns=mgg python -m bench.sanitize_case
"""
import argparse
import sys

import numpy as np
import torch

import mgg
from mgg import Config, Graph, Plan, memory, ops
from mgg.ops import FETCH, attention_graph, attention_table, run_peers
from mgg.testing import UNIT_ROUNDOFF, assert_matches_reference

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
CONFIGS = (Config(4, 2, 2), Config(16, 1, 4), Config(0, 1, 2))
SLOPE, SEED = 0.2, 3


def attention_tolerance(want: torch.Tensor, terms: int, dtype: torch.dtype, stored=0.0) -> torch.Tensor:
    """How far an attention result (output or gradient) stored in `dtype` may be from the float64
    result on the same stored inputs. The kernels compute the scores, the online softmax and every
    sum in fp32: an entry is a sum of at most `terms` products (the row's edges, times the channels
    where a gradient sums over them), each with the error of a few fp32 roundings (the score, its
    exponent, the normaliser: 16 covers them for scores of N(0, 1) terms). So its error is below
    (terms + 16) u_fp32 times the terms' magnitude, for which the largest |entry| of the float64
    result stands in. The result is rounded once to its storage type: u_dtype |want|. `stored` is
    the magnitude through which an intermediate kept in storage type enters the entry (the
    backward reads the forward's output as stored): it adds u_dtype times that."""
    u32 = UNIT_ROUNDOFF[torch.float32]
    return (terms + 16) * u32 * want.abs().max() + UNIT_ROUNDOFF[dtype] * (want.abs() + stored)


def assert_attention_close(got: torch.Tensor, want: torch.Tensor, terms: int, dtype: torch.dtype,
                           stored=0.0) -> None:
    got = got.detach().cpu().double()
    bad = ~((got - want).abs() <= attention_tolerance(want, terms, dtype, stored))  # NaN is bad too
    if bool(bad.any()):
        i = tuple(int(k) for k in bad.nonzero()[0])
        tol = attention_tolerance(want, terms, dtype, stored)
        raise AssertionError(f"entry {i} = {float(got[i])} but the float64 result is {float(want[i])} (tolerance "
                             f"{float(tol[i]):.3g}); {int(bad.sum())} entries off")


class Checks:
    """Runs each check, printing and counting the wrong results."""

    def __init__(self):
        self.wrong = self.done = 0

    def __call__(self, what: str, check, *args) -> None:
        """check(*args); args[0], the result, must also be finite (a NaN is never within a bound)."""
        self.done += 1
        try:
            assert bool(torch.isfinite(args[0]).all()), f"{int((~torch.isfinite(args[0])).sum())} non-finite entries"
            check(*args)
        except AssertionError as e:
            self.wrong += 1
            print(f"WRONG {what}: {e}")


def aggregation(checks: Checks, g: Graph, device: str) -> None:
    n, plan, plan2 = g.num_nodes, Plan(g), Plan(g, 2)
    b = [int(v) for v in plan2.bounds]
    placements = [("direct", "direct", None)]
    if device == "cuda":
        placements += [("uva", "uva", memory.pinned_table), ("uvm", "direct", memory.managed_table)]
    for dim in (7, 40):
        x = torch.randn(n, dim, device=device)
        for cfg in CONFIGS:
            for det in (False, True):
                for dtype in DTYPES:
                    xs = x.to(dtype)
                    checks(f"aggregate D={dim} {cfg} deterministic={det} {dtype}", assert_matches_reference,
                           mgg.aggregate(xs, plan, cfg, deterministic=det), g, xs)
            own = [x[b[r]:b[r + 1]] for r in range(2)]
            for name, fetch, place in placements:
                outs = [run_peers(own[r], [t if q == r or place is None else place(t) for q, t in enumerate(own)], r,
                                  plan2.rank_plan(r, cfg), fetch) for r in range(2)]
                checks(f"aggregate_peers {name} D={dim} {cfg}", assert_matches_reference, torch.cat(outs), g, x)
        for dtype in DTYPES:
            xg = x.detach().to(dtype).requires_grad_()
            grad = torch.randn_like(xg)
            mgg.aggregate(xg, plan).backward(grad)
            checks(f"aggregate backward D={dim} {dtype}", assert_matches_reference, xg.grad, g.transpose(), grad)


def attention(checks: Checks, g: Graph, device: str) -> None:
    ga = attention_graph(g)  # unweighted, one self-loop per node
    n, plan, plan2 = ga.num_nodes, Plan(ga), Plan(ga, 2)
    plans = (plan2, Plan(ga.transpose(), bounds=plan2.bounds))  # two ranks: the graph's plan, the backward's
    deg_in, deg_out = int(ga.degree().max()), int(ga.transpose().degree().max())
    cases = [(heads, channels, dtype, dropout) for heads, channels in ((2, 7), (1, 40)) for dtype in DTYPES
             for dropout in (0.0, 0.3)]
    for i, (heads, channels, dtype, dropout) in enumerate(cases):
        cfg = CONFIGS[i % len(CONFIGS)]  # warps per block is what attention takes from a config
        what = f"H={heads} C={channels} {dtype} dropout={dropout} wpb={cfg.wpb}"
        stored = [torch.randn(*s, device=device).to(dtype) for s in ((n, heads, channels), (n, heads), (n, heads))]
        ref = [t.detach().cpu().double().requires_grad_() for t in stored]
        want = ops.attend(*ref, ga, SLOPE, dropout, SEED)
        got_in = [t.clone().requires_grad_() for t in stored]
        got = ops.attend(*got_in, plan, SLOPE, dropout, SEED, config=cfg)
        grad = torch.randn_like(got)
        got.backward(grad)
        want.backward(grad.cpu().double())
        checks(f"attend {what}", assert_attention_close, got, want.detach(), deg_in, dtype)
        # the score gradients read the forward's output as stored, through g_i . out_i: per
        # destination s_i = sum_c |g_ic| |out_ic|, per source the softmax-weighted sum of its
        # destinations' s_i (the backward of the same attention, with s as the output gradient)
        s_dst = (grad.cpu().double().abs() * want.detach().abs()).sum(-1)
        h_s = ref[0].detach().clone().requires_grad_()
        ops.attend(h_s, *(r.detach() for r in ref[1:]), ga, SLOPE, dropout, SEED).backward(
            s_dst.unsqueeze(-1).expand(n, heads, channels))
        s_src = h_s.grad[..., 0]
        for name, t, r, terms, kept in zip(("h", "a_src", "a_dst"), got_in, ref,
                                           (deg_out, deg_out * channels, deg_in * channels), (0.0, s_src, s_dst),
                                           strict=True):
            checks(f"attend backward d {name} {what}", assert_attention_close, t.grad, r.grad, terms, dtype, kept)
        got_peers = peers_attention(stored, grad, plans, cfg, heads, dropout)
        for name, t, r, terms, kept in zip(("out", "d h", "d a_src", "d a_dst"), got_peers, [want] + ref,
                                           (deg_in, deg_out, deg_out * channels, deg_in * channels),
                                           (0.0, 0.0, s_src, s_dst), strict=True):
            checks(f"attend_peers direct {name} {what}", assert_attention_close, t,
                   (r if name == "out" else r.grad).detach(), terms, dtype, kept)


def peers_attention(stored: list, grad: torch.Tensor, plans: tuple, cfg: Config, heads: int, dropout: float):
    """Two ranks' attention in one process, each reading the other's rows in place (attend_peers,
    direct loads), and its backward as mgg.distributed.nvshmem runs it: every rank's output-row
    terms, then d a_dst over each rank's in-edges and the source rows' gradients over the
    transposed graph's in-edges, reading the peers' terms. Returns out, d h, d a_src, d a_dst."""
    plan, plan_t = plans
    h, a_src, a_dst = stored
    n, channels, device = h.size(0), h.size(2), h.device
    b, ranks, fetch = [int(v) for v in plan.bounds], range(2), FETCH["direct"]
    table = attention_table(h, a_src)
    tables = [table[b[r]:b[r + 1]] for r in ranks]
    dst = [a_dst[b[r]:b[r + 1]].contiguous() for r in ranks]
    grads = [grad.reshape(n, -1)[b[r]:b[r + 1]].contiguous() for r in ranks]
    op_args = [plan.rank_plan(r, cfg).op_args(device, peers=True, transposed=False) for r in ranks]
    op_args_t = [plan_t.rank_plan(r, cfg).op_args(device, peers=True, transposed=False) for r in ranks]
    rest = (heads, SLOPE, dropout, SEED, b, fetch)
    fwd = [torch.ops.mgg.attend_peers(tables, r, dst[r], *op_args[r], *rest) for r in ranks]
    terms = [torch.ops.mgg.attention_terms(grads[r], *fwd[r][:1], dst[r], fwd[r][1], heads) for r in ranks]
    d_dst = [torch.ops.mgg.attend_peers_dst(tables, r, terms[r], *op_args[r], *rest) for r in ranks]
    d_table = torch.cat([torch.ops.mgg.attend_peers_src(tables[r], terms, r, *op_args_t[r], *rest) for r in ranks])
    d_table = d_table.view(n, heads, channels + 1)
    return (torch.cat([out for out, _ in fwd]).view(n, heads, channels), d_table[..., :channels],
            d_table[..., channels], torch.cat(d_dst))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sanitize_case", description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda (the sanitizer's case) or cpu (the same checks)")
    device = ap.parse_args(argv).device
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    n, e = 400, 6000
    dst = np.r_[np.zeros(1500, np.int64), rng.integers(0, n, e - 1500)]  # row 0: a hub cut across blocks
    g = Graph.from_edges(rng.integers(0, n, e), dst, n, rng.uniform(0.1, 1, e).astype(np.float32))
    checks = Checks()
    aggregation(checks, g, device)
    attention(checks, g, device)
    if device == "cuda":
        torch.cuda.synchronize()
    print(f"sanitize case: {checks.done} results checked, {checks.wrong} wrong")
    return 1 if checks.wrong else 0


if __name__ == "__main__":
    sys.exit(main())

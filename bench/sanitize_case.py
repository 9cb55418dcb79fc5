"""A small case for compute-sanitizer (memcheck, racecheck, synccheck): every mgg kernel that one
process launches, on a skewed graph whose hub row is cut across blocks, in fp32, fp16 and bf16
storage, at dims that are not multiples of 32, in deterministic mode too:

- aggregate, forward and backward (the block, row and fixup kernels);
- aggregate_peers, peers' rows read in place: device tables (direct), pinned host tables (uva),
  managed memory (uvm, direct loads);
- attend, forward and backward (the score/softmax/sum kernel, then d a_dst and the source rows'
  gradients), with and without dropout; attend_peers' forward, direct.

Not here: the NVSHMEM gets (get-thread, get-warp, get-block and its block-get kernel) and
attend_peers' backward, which need NVSHMEM PEs (tests/test_nvshmem.py runs them).

Every result is compared with a value: the aggregations by mgg.testing.assert_matches_reference;
attention with mgg.attend on the CPU in float64 on the same stored inputs (tests/test_gat.py
holds that executor to a plain torch reference), within `attention_tolerance`. Exits non-zero on
a wrong result. `--device cpu` runs the same checks on the CPU executors (tests/test_bench.py).

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
    err = (got - want).abs()
    tol = attention_tolerance(want, terms, dtype, stored)
    if bool((err > tol).any()):
        i = tuple(int(k) for k in (err > tol).nonzero()[0])
        raise AssertionError(f"entry {i} = {float(got[i])} but the float64 result is {float(want[i])} (tolerance "
                             f"{float(tol[i]):.3g}); {int((err > tol).sum())} entries off")


class Checks:
    """Runs each check, printing and counting the wrong results."""

    def __init__(self):
        self.wrong = self.done = 0

    def __call__(self, what: str, check, *args) -> None:
        self.done += 1
        try:
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
    b = [int(v) for v in plan2.bounds]
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
        table = attention_table(*stored[:2])
        tables = [table[b[r]:b[r + 1]] for r in range(2)]
        outs = []
        for r in range(2):
            args, params = plan2.rank_plan(r, cfg).op_args(device, peers=True, transposed=False)
            out, _ = torch.ops.mgg.attend_peers(tables, r, stored[2][b[r]:b[r + 1]].contiguous(), args, params, heads,
                                                SLOPE, dropout, SEED, b, FETCH["direct"])
            outs.append(out)
        checks(f"attend_peers direct {what}", assert_attention_close, torch.cat(outs).view(n, heads, channels),
               want.detach(), deg_in, dtype)


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

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
NVSHMEM PEs (tests/distributed/test_nvshmem.py runs them).

Every result is compared with a value by the oracles of the tests (a NaN fails them): the
aggregations by mgg.testing.assert_matches_reference, attention's output and gradients by
assert_attention_matches_reference and assert_attention_gradients_match_reference (float64
references on the same stored inputs, tolerances derived from the storage and fp32 rounding).
Exits non-zero on a wrong result. `--device cpu` runs the same checks on
the CPU executors (tests/bench/test_bench.py).

    compute-sanitizer --tool racecheck --kernel-name kns=mgg python -m bench.sanitize_case
"""

import argparse
import sys

import numpy as np
import torch

import mgg
from mgg import Config, Graph, Plan, memory, ops
from mgg.functional import attend, attention_graph
from mgg.testing import (
    assert_attention_gradients_match_reference,
    assert_attention_matches_reference,
    assert_matches_reference,
)

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
CONFIGS = (Config(4, 2, 2), Config(16, 1, 4), Config(0, 1, 2))
SLOPE, SEED = 0.2, 3


class Checks:
    """Runs each check, printing and counting the wrong results."""

    def __init__(self):
        self.wrong = self.done = 0

    def __call__(self, what: str, check, *args) -> None:
        """check(*args), an oracle of mgg.testing (which fails on a NaN)."""
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
                    checks(
                        f"aggregate D={dim} {cfg} deterministic={det} {dtype}",
                        assert_matches_reference,
                        mgg.aggregate(xs, plan, cfg, deterministic=det),
                        g,
                        xs,
                    )
            own = [x[b[r] : b[r + 1]] for r in range(2)]
            for name, fetch, place in placements:
                outs = [
                    plan2.rank_plan(r, cfg).aggregate_peers(
                        own[r], [t if q == r or place is None else place(t) for q, t in enumerate(own)], r, fetch
                    )
                    for r in range(2)
                ]
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
    src, dst = ga.edge_index()
    cases = [
        (heads, channels, dtype, dropout)
        for heads, channels in ((2, 7), (1, 40))
        for dtype in DTYPES
        for dropout in (0.0, 0.3)
    ]
    for i, (heads, channels, dtype, dropout) in enumerate(cases):
        cfg = CONFIGS[i % len(CONFIGS)]  # warps per block is what attention takes from a config
        what = f"H={heads} C={channels} {dtype} dropout={dropout} wpb={cfg.wpb}"
        stored = [torch.randn(*s, device=device).to(dtype) for s in ((n, heads, channels), (n, heads), (n, heads))]
        keep = ops.attention_keep(dst, src, heads, SEED, dropout) if dropout else None
        got_in = [t.clone().requires_grad_() for t in stored]
        got = attend(*got_in, plan, SLOPE, dropout, SEED, config=cfg)
        grad = torch.randn_like(got)
        got.backward(grad)
        reference = (*stored, src, dst, SLOPE)
        checks(f"attend {what}", assert_attention_matches_reference, got, *reference, keep)
        checks(
            f"attend backward {what}",
            assert_attention_gradients_match_reference,
            [t.grad for t in got_in],
            *reference,
            grad,
            keep,
        )
        out, *grads = peers_attention(stored, grad, plans, cfg, heads, dropout)
        checks(f"attend_peers direct {what}", assert_attention_matches_reference, out, *reference, keep)
        checks(
            f"attend_peers direct backward {what}",
            assert_attention_gradients_match_reference,
            grads,
            *reference,
            grad,
            keep,
        )


def peers_attention(stored: list, grad: torch.Tensor, plans: tuple, cfg: Config, heads: int, dropout: float):
    """Two ranks' attention in one process, each reading the other's rows in place (attend_peers,
    direct loads), and its backward as mgg.distributed.nvshmem runs it: every rank's output-row
    terms, then d a_dst over each rank's in-edges and the source rows' gradients over the
    transposed graph's in-edges, reading the peers' terms. Returns out, d h, d a_src, d a_dst."""
    plan, plan_t = plans
    h, a_src, a_dst = stored
    n, channels, device = h.size(0), h.size(2), h.device
    b, ranks, fetch = [int(v) for v in plan.bounds], range(2), ops.fetch_code("direct")
    table = ops.attention_table(h, a_src)
    tables = [table[b[r] : b[r + 1]] for r in ranks]
    dst = [a_dst[b[r] : b[r + 1]].contiguous() for r in ranks]
    grads = [grad.reshape(n, -1)[b[r] : b[r + 1]].contiguous() for r in ranks]
    op_args = [plan.rank_plan(r, cfg).op_args(device, peers=True, transposed=False) for r in ranks]
    op_args_t = [plan_t.rank_plan(r, cfg).op_args(device, peers=True, transposed=False) for r in ranks]
    rest = (heads, SLOPE, dropout, SEED, b, fetch)
    fwd = [ops.attend_peers(tables, r, dst[r], *op_args[r], *rest) for r in ranks]
    terms = [ops.attention_terms(grads[r], *fwd[r][:1], dst[r], fwd[r][1], heads) for r in ranks]
    d_dst = [ops.attend_peers_dst(tables, r, terms[r], *op_args[r], *rest) for r in ranks]
    d_table = torch.cat([ops.attend_peers_src(tables[r], terms, r, *op_args_t[r], *rest) for r in ranks])
    d_table = d_table.view(n, heads, channels + 1)
    return (
        torch.cat([out for out, _ in fwd]).view(n, heads, channels),
        d_table[..., :channels],
        d_table[..., channels],
        torch.cat(d_dst),
    )


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

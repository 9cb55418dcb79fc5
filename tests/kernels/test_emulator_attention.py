"""GAT's attention kernels' own CUDA source (csrc/kernels/attention_kernel.cuh) run by the SIMT
emulator (simt/emulator.py): the forward pass, d a_dst and the source-gradient pass, for every
source (halo table, peer pointers, NVSHMEM get at thread, warp and block scope, completed over
loads/stores or by a proxy), fp32/fp16/bf16, P = 1, 2, 4 from real mgg.Plan objects, against the
CPU executor in float64 on the same plan lists."""

import pytest
import torch

from mgg import Config, Plan
from mgg.functional import attention_graph
from mgg.testing import UNIT_ROUNDOFF, random_graph
from simt import emulator
from simt.emulated_ops import SOURCES, attention

pytestmark = pytest.mark.skipif(emulator.available() is not None, reason=str(emulator.available()))

MODES = [(s, "loadstore") for s in SOURCES] + [(s, "proxy") for s in SOURCES if s.startswith("get")]


def assert_close(name, got, ref, deg, storage, channels):
    """|got - ref| within fp32 accumulation over the row's edges and each edge's per-head dot
    product of `channels` terms (and __expf's few ulps), scaled by the row's largest entry (at
    least 1: the backward's terms cancel), plus the rounding to the storage type."""
    got, ref = got.double(), ref.double()
    scale = ref.abs().amax(1, keepdim=True).clamp_min(1.0)
    u = UNIT_ROUNDOFF[torch.float32]
    tol = (deg.unsqueeze(1) + 2) * (channels + 2) * 4 * u * scale + 2 * UNIT_ROUNDOFF[storage] * ref.abs()
    err = (got - ref).abs()
    bad = ~(err <= tol)  # NaN is bad
    if bool(bad.any()):
        r, c = (int(i) for i in bad.nonzero()[0])
        raise AssertionError(
            f"{name}[{r}, {c}] = {float(got[r, c])}, reference {float(ref[r, c])} (degree "
            f"{int(deg[r])}, tolerance {float(tol[r, c]):.3g}); {int(bad.sum())} entries off"
        )


def run(
    tmp_path,
    n,
    e,
    ranks,
    heads,
    channels,
    dtype,
    source,
    completion,
    wpb=4,
    dropout=0.0,
    seed=0,
    gseed=0,
    self_loops=True,
):
    g = attention_graph(random_graph(n, e, seed=gseed, skew=0.4), add_self_loops=self_loops)
    gen = torch.Generator().manual_seed(gseed)
    h = torch.randn(n, heads, channels, generator=gen).to(dtype)
    a_src, a_dst = (torch.randn(n, heads, generator=gen).to(dtype) for _ in range(2))
    grad = torch.randn(n, heads * channels, generator=gen).to(dtype)
    plan = Plan(g, ranks)
    plan_t = Plan(g.transpose(), bounds=plan.bounds)
    for name, got, ref, deg in attention(
        tmp_path, plan, plan_t, h, a_src, a_dst, grad, Config(4, 2, wpb), source, completion, dropout, seed
    ):
        assert_close(name, got, ref, deg, got.dtype, channels)


@pytest.mark.parametrize("ranks", [1, 2, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("source,completion", MODES)
def test_every_pass_source_dtype_and_rank_count(tmp_path, source, completion, dtype, ranks):
    run(tmp_path, 160, 1200, ranks, 3, 5, dtype, source, completion, dropout=0.3, seed=ranks)


SHAPES = {  # name -> (nodes, edges, heads, channels, wpb, self-loops)
    "one-channel-many-heads": (120, 900, 40, 1, 2, True),
    "heads-over-one-slice": (100, 700, 5, 100, 3, True),  # 500 columns: two grid.y slices of whole heads
    "wide-head": (100, 600, 1, 256, 16, True),
    "single-warp-blocks": (150, 1500, 2, 31, 1, True),
    "empty-rows": (300, 250, 2, 8, 4, False),  # most rows without an edge: written as 0
    "hub-rows": (200, 4000, 2, 16, 8, True),  # skewed: rows of hundreds of edges, many landing chunks
}


@pytest.mark.parametrize(
    "source,completion",
    [
        ("table", "loadstore"),
        ("direct", "loadstore"),
        ("get-thread", "proxy"),
        ("get-block", "proxy"),
        ("get-thread", "loadstore"),  # the copies: whole 16-byte runs where a shape's rows allow
        ("get-warp", "loadstore"),
    ],
)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_attention_shapes(tmp_path, shape, source, completion):
    n, e, heads, channels, wpb, self_loops = SHAPES[shape]
    run(
        tmp_path,
        n,
        e,
        2,
        heads,
        channels,
        torch.float32,
        source,
        completion,
        wpb=wpb,
        dropout=0.2,
        self_loops=self_loops,
    )


@pytest.mark.parametrize("source,completion", [("table", "loadstore"), ("get-warp", "proxy")])
def test_attention_is_bit_identical_across_schedules(tmp_path, source, completion):
    """A warp owns its row and walks its edges in plan order: no schedule changes a bit."""
    g = attention_graph(random_graph(150, 1500, seed=3, skew=0.5))
    gen = torch.Generator().manual_seed(3)
    h, a_src, a_dst = (
        torch.randn(150, 2, 9, generator=gen),
        torch.randn(150, 2, generator=gen),
        torch.randn(150, 2, generator=gen),
    )
    grad = torch.randn(150, 18, generator=gen)
    plan = Plan(g, 2)
    plan_t = Plan(g.transpose(), bounds=plan.bounds)
    runs = [
        attention(
            tmp_path / str(s), plan, plan_t, h, a_src, a_dst, grad, Config(4, 2, 4), source, completion, 0.1, seed=s
        )
        for s in (1, 2)
    ]
    for (name, a, _, _), (_, b, _, _) in zip(*runs, strict=True):
        assert torch.equal(a, b), name

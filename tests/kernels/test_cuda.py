"""What the CUDA path shows beyond the device-parametrised tests of test_op.py: column-tile
narrowing under the shared-memory limit, the launch limits, and errors that leave the CUDA
context healthy. Each test runs on the GPU ("cuda", skipped without one; run on the H100/H200 by
bench/gpu_verify.sh) and emulated ("emu": the same op calls on CPU tensors through the CUDA
host code and kernels under the SIMT emulator, simt/emulator.py), except what needs a GPU's
memory or context (marked cuda only)."""

import pytest
import torch

from mgg import Config, Plan
from mgg.plan import STEP_FIELDS
from mgg.testing import assert_matches_reference, random_graph, requires_cuda
from simt import emulator
from simt.emulator import gpu_and_emulated

F = {name: i for i, name in enumerate(STEP_FIELDS)}


@gpu_and_emulated
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_halo_and_peers_agree_and_large_blocks_tile_columns(dtype, device):
    """wpb = 16 with D = 2100: shared memory forces narrower column tiles. Halo and peer sources
    agree bit for bit in deterministic mode (the fixups' atomics make the other mode's sums
    order-dependent: the emulator's shuffled block order showed it); emulated on a smaller graph
    unless MGG_EMU_FULL=1."""
    n, e = (1500, 30000) if device == "cuda" or emulator.FULL else (300, 4000)
    g = random_graph(n, e, seed=8, skew=0.5)
    x = torch.randn(n, 2100, device=device).to(dtype)
    plan = Plan(g, 2)
    cfg = Config(32, 16, 16)
    tables = [x[int(plan.bounds[r]) : int(plan.bounds[r + 1])] for r in range(2)]
    outs, fast = [], []
    for r in range(2):
        rp = plan.rank_plan(r, cfg)
        halo = x[torch.from_numpy(rp.shard.halo_nodes).to(device)].contiguous()
        a = rp.aggregate(tables[r].contiguous(), halo, deterministic=True)
        b = rp.aggregate_peers(tables[r], tables, r, "direct", deterministic=True)
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # the same kernel schedule, bit for bit
        outs.append(a)
        fast.append(rp.aggregate_peers(tables[r], tables, r, "direct"))
    assert_matches_reference(torch.cat(outs), g, x)
    assert_matches_reference(torch.cat(fast), g, x)


@gpu_and_emulated
def test_bad_schedule_is_an_error_on_the_gpu(device):
    g = random_graph(200, 3000, seed=3)
    args, params = Plan(g).rank_plan(0, Config(4, 2, 2)).op_args(device)
    x = torch.randn(200, 8, device=device)
    bad = list(args)
    bad[F["ranges"]] = args[F["ranges"]].clone()
    bad[F["ranges"]][1, 0] += 50  # warp 1 claims rows it does not hold
    with pytest.raises(RuntimeError, match=r"ranges\[1\]\.row is \d+ but ps = 4 and dist = 2 give"):
        torch.ops.mgg.aggregate(x, x.new_empty((0, 8)), bad, params, False)
    bad = list(args)
    bad[F["local_col"]] = args[F["local_col"]].clone()
    bad[F["local_col"]][5] = 10**6  # local_col out of range
    with pytest.raises(RuntimeError, match=r"local_col\[5\] = 1000000 is outside \[0, 200\)"):
        torch.ops.mgg.aggregate(x, x.new_empty((0, 8)), bad, params, False)
    if device == "cuda":
        torch.cuda.synchronize()  # the context is still healthy


@gpu_and_emulated
def test_bad_input_is_an_error_not_a_crash(device):
    g = random_graph(100, 500)
    args, params = Plan(g).rank_plan(0, Config()).op_args(device)
    x = torch.randn(100, 8, device=device)
    with pytest.raises(RuntimeError, match="float64 is supported on the CPU only"):
        torch.ops.mgg.aggregate(x.double(), x.new_empty((0, 8)).double(), args, params, False)
    if device != "cuda":  # CPU tensors cannot be on a wrong device, and are refused NVSHMEM gets earlier
        return
    bad = list(args)
    bad[0] = bad[0].cpu()  # a plan tensor on the wrong device
    with pytest.raises(RuntimeError, match="every plan tensor must be on cuda"):
        torch.ops.mgg.aggregate(x, x.new_empty((0, 8)), bad, params, False)
    with pytest.raises(RuntimeError, match="NVSHMEM is not initialised|not in NVSHMEM's symmetric heap"):
        Plan(g, 2).rank_plan(0, Config()).aggregate_peers(x, [x, x], 0, "get-warp")
    torch.cuda.synchronize()  # the context is still healthy


@gpu_and_emulated
def test_every_config_of_the_search_space_launches(device):
    """The kernels are compiled for the widest block a config asks for (__launch_bounds__), so
    every (ps, dist, wpb) of the tuner's lattice launches at D 16 and 2100 (emulated: the ps
    extremes on a smaller graph, unless MGG_EMU_FULL=1)."""
    from mgg.runtime.limits import DIST_STEPS, PS_STEPS, WPB_STEPS

    full = device == "cuda" or emulator.FULL
    n, e = (500, 8000) if full else (120, 1200)
    g = random_graph(n, e, seed=4, weighted=True, skew=0.7)
    plan = Plan(g)
    for dim in (16, 2100):
        x = torch.randn(n, dim, device=device)
        for ps in PS_STEPS if full else (PS_STEPS[0], PS_STEPS[-1]):
            for dist in (DIST_STEPS[0], DIST_STEPS[-1]):
                for wpb in (WPB_STEPS[0], WPB_STEPS[-1]):
                    rp = plan.rank_plan(0, Config(ps, dist, wpb))
                    assert_matches_reference(rp.aggregate(x, x.new_empty((0, dim))), g, x)


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("placement", ["uva", "uvm"])
def test_peer_tables_in_host_or_managed_memory(placement):
    """uva: peers' rows in pinned host memory read zero-copy; uvm: in managed memory, read by
    direct loads. Both equal the reference, forward and backward (the host tables' gradients
    land on the host)."""
    from mgg import memory

    g = random_graph(2000, 30000, seed=6, weighted=True, skew=0.6)
    x = torch.randn(2000, 48, device="cuda")
    plan = Plan(g, 3)
    b = plan.bounds
    own = [x[int(b[r]) : int(b[r + 1])] for r in range(3)]
    out = []
    for r in range(3):
        make = memory.pinned_table if placement == "uva" else memory.managed_table
        peers = [t if q == r else make(t) for q, t in enumerate(own)]
        out.append(
            plan.rank_plan(r, Config(8, 2, 4)).aggregate_peers(
                own[r], peers, r, "uva" if placement == "uva" else "direct"
            )
        )
    assert_matches_reference(torch.cat(out), g, x)
    # rank 0's step with its own rows on the device and both peers' in pinned host memory: the
    # gradient of sum(y) is A^T G, G one on rank 0's rows and zero elsewhere, every row of it
    # (own rows through x, peers' rows landing on the host)
    mine = own[0].clone().requires_grad_()
    hosts = [memory.pinned_table(own[q]).requires_grad_() for q in (1, 2)]
    y = plan.rank_plan(0, Config()).aggregate_peers(mine, [mine.detach(), *hosts], 0, "uva")
    y.sum().backward()
    assert all(h.grad is not None and h.grad.device.type == "cpu" for h in hosts)
    ones = torch.zeros(2000, 48)
    ones[: int(b[1])] = 1
    assert_matches_reference(torch.cat([mine.grad.cpu(), *(h.grad for h in hosts)]), g.transpose(), ones)

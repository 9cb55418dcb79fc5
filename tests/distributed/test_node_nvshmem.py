"""The node-nvshmem backend (mgg.distributed.backends.node_nvshmem) on the CPU: threads as ranks,
machines of g threads. Stage 1 (the network) is a stand-in all-to-all between the threads;
inside each machine, the threads are the PEs of one NVSHMEM job over a fake symmetric heap
(test_nvshmem_runtime's), and each PE's fused kernel reads its machine's tables in place, run by
the CPU kernels or, emulated, by the CUDA host code and kernels under the SIMT emulator. Every
rank's rows and gradients, put together, equal one process's (A x, A^T g; GAT with dropout; max);
the bytes that cross the network are the distinct (row, machine) pairs, forward and backward.
On a GPU: tests/distributed/test_nvshmem.py (bench/gpu_verify.sh nvshmem)."""

import threading

import numpy as np
import pytest
import torch

import mgg
from mgg import Config, MggError, functional
from mgg.distributed import nvshmem
from mgg.distributed.backends import node_halo, node_nvshmem
from mgg.distributed.comm import Pending
from mgg.distributed.graph import DistPlan
from mgg.distributed.node_routes import NodeRoutes
from mgg.distributed.part_graph import PartGraph
from mgg.partitioning.nodes import node_partition
from mgg.testing import assert_matches_reference, random_graph
from simt import emulator
from tests.distributed.test_nvshmem_runtime import _FakeHeap, _FakeWorld, run_pes

CONFIG = Config(4, 2, 2)


class _Logged(Pending):
    """Rows that arrived at once (the stand-in network is synchronous), noting when they are awaited."""

    def __init__(self, rows, events):
        super().__init__(rows)
        self.events = events

    def wait(self):
        if self.events is not None:
            self.events.append("wait")
        return super().wait()


class _ThreadNet:
    """The network between W threads: all_to_all_rows' stand-in (each thread's rank in `local`)."""

    def __init__(self, world: int, local: threading.local):
        self.world, self.local = world, local
        self.barrier = threading.Barrier(world, timeout=60)
        self.box: dict = {}

    def all_to_all_rows(self, send, rows, out_counts, in_counts, group=None, async_op=False):
        got = self._exchange(send, rows, out_counts, in_counts)
        if not async_op:
            return got
        events = getattr(self.local, "events", None)
        if events is not None:
            events.append("start")
        return _Logged(got, events)

    def _exchange(self, send, rows, out_counts, in_counts):
        me = self.local.rank
        starts = np.concatenate([[0], np.cumsum(out_counts)])
        for p in range(self.world):
            self.box[(me, p)] = send[int(starts[p]) : int(starts[p + 1])].clone()
        self.barrier.wait()
        got = torch.cat([self.box[(p, me)] for p in range(self.world)])
        assert got.size(0) == rows and [self.box[(p, me)].size(0) for p in range(self.world)] == list(in_counts)
        self.barrier.wait()  # every thread has read its blocks before any writes the next exchange's
        return got


class ThreadExchange:
    """mgg.distributed.comm.Exchange between `world` threads (each's place from `place()`)."""

    def __init__(self, world: int, place):
        self.world, self.place = world, place
        self.barrier = threading.Barrier(world, timeout=60)
        self.box: dict = {}

    def __call__(self, send):
        me = self.place()
        for p in range(self.world):
            self.box[(me, p)] = np.array(send[p], copy=True)
        self.barrier.wait()
        got = [self.box[(p, me)] for p in range(self.world)]
        self.barrier.wait()
        return got

    def all_true(self, flag: bool) -> bool:
        return all(self([np.array([bool(flag)])] * self.world)[p][0] for p in range(self.world))


def _run(
    monkeypatch, graph, machines, g, rank_main, fetch="direct", remote_reads="per-edge", local=None, rows_only=False
):
    """Runs rank_main(dist_plan, rows) on machines x g threads (node_partition's ranges of `graph`,
    relabelled: rows are the relabelled graph's), each machine one fake NVSHMEM job. Returns the
    relabelled graph, the partition, {rank: rank_main's result} and how often each machine's PEs
    met (checked alike for all PEs of a machine). `local`: the threads' threading.local, where the
    network notes when rows start and are awaited (in local.events, if rank_main sets it).
    rows_only: each rank holds its own rows alone (a PartGraph, as a prepared dataset's rank), and
    learns the rest from the others over thread exchanges (the world's, and its machine's)."""
    world = machines * g
    part = node_partition(graph, machines, g, "range")
    relabelled = part.relabel(graph)
    local, results = local if local is not None else threading.local(), {}
    net = _ThreadNet(world, local)
    jobs = [_FakeWorld(g) for _ in range(machines)]
    monkeypatch.setattr(nvshmem.symmetric, "runtime", lambda: local.rt)
    monkeypatch.setattr(node_halo, "all_to_all_rows", net.all_to_all_rows)
    exchange = ThreadExchange(world, lambda: local.rank)
    inside = [ThreadExchange(g, lambda: local.rank % g) for _ in range(machines)]
    monkeypatch.setattr(node_nvshmem, "machine_exchange", lambda group: inside[local.rank // g])

    def main(rank):
        local.rank = rank
        local.rt = nvshmem.Runtime(_FakeHeap(jobs[rank // g], rank % g))
        lo, hi = int(part.bounds[rank]), int(part.bounds[rank + 1])
        held = relabelled
        if rows_only:
            held = PartGraph(*relabelled.row_slice(lo, hi), part.bounds, rank, exchange, "threads")
        dp = DistPlan(held, rank, part.bounds, None, "node-nvshmem", fetch, remote_reads, g)
        results[rank] = rank_main(dp, slice(lo, hi))

    barriers = [net.barrier, exchange.barrier, *(e.barrier for e in inside), *(j.barrier for j in jobs)]
    run_pes(world, main, *barriers)
    for j in jobs:
        assert len(set(j.barriers)) == 1
    return relabelled, part, results, [j.barriers[0] for j in jobs]


def _aggregate_case(
    monkeypatch, machines, g, dtype, fetch="direct", remote_reads="per-edge", deterministic=False, rows_only=False
):
    graph = random_graph(240, 3000, seed=21, weighted=True, skew=0.6)  # directed: the transpose differs
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(240, 8, dtype=torch.float64, generator=gen)
    grad = torch.randn(240, 8, dtype=torch.float64, generator=gen)

    def rank_main(dp, rows):
        mine = x[rows].to(dtype).requires_grad_()
        y = dp.aggregate(mine, CONFIG, deterministic)
        y.backward(grad[rows].to(dtype))
        return y.detach(), mine.grad, dict(dp.traffic)

    relabelled, part, res, meetings = _run(
        monkeypatch, graph, machines, g, rank_main, fetch, remote_reads, rows_only=rows_only
    )
    world = machines * g
    y = torch.cat([res[r][0] for r in range(world)])
    gx = torch.cat([res[r][1] for r in range(world)])
    return relabelled, part, res, x.to(dtype), grad.to(dtype), y, gx, meetings


@pytest.mark.parametrize("remote_reads", ["per-edge", "once"])
@pytest.mark.parametrize("machines,g", [(2, 2), (2, 3), (3, 1), (1, 3)])
def test_sums_and_gradients_equal_one_process(monkeypatch, machines, g, remote_reads):
    """Forward A x and backward A^T g (float64, the tight oracle) on machines of g threads, the
    network stage moving each (row, machine) pair once each way (bytes counted at the exchange).
    Each machine's PEs meet twice in the forward (own rows, then received ones) and once in the
    backward; one machine alone receives nothing and meets once each way."""
    relabelled, part, res, x, grad, y, gx, meetings = _aggregate_case(
        monkeypatch, machines, g, torch.float64, remote_reads=remote_reads
    )
    assert_matches_reference(y, relabelled, x, acc_dtype=torch.float64)
    assert_matches_reference(gx, relabelled.transpose(), grad, acc_dtype=torch.float64)
    pairs = NodeRoutes(mgg.Plan(relabelled, bounds=part.bounds), g).inter_node_rows()
    inter = sum(res[r][2]["inter_node"] for r in res)
    assert (pairs > 0) == (machines > 1) and inter == 2 * pairs * x.size(1) * 8  # forward and backward
    assert all(res[r][2]["intra_node"] == 0 for r in res)  # inside a machine the kernel reads in place
    assert meetings == [3 if machines > 1 else 2] * machines


@pytest.mark.parametrize("remote_reads", ["per-edge", "once"])
@pytest.mark.parametrize("machines,g", [(2, 2), (3, 2)])
def test_ranks_holding_their_rows_alone_equal_ranks_holding_the_graph(monkeypatch, machines, g, remote_reads):
    """A rank that holds its own rows only (a prepared dataset's: PartGraph) builds the machine's plans
    from what its machine's ranks tell it, and gives the same rows and gradients, bit for bit, and
    moves the same bytes over the network, as a rank that holds the whole graph."""
    whole = _aggregate_case(monkeypatch, machines, g, torch.float64, remote_reads=remote_reads)
    alone = _aggregate_case(monkeypatch, machines, g, torch.float64, remote_reads=remote_reads, rows_only=True)
    assert torch.equal(whole[5], alone[5]) and torch.equal(whole[6], alone[6])
    assert [whole[2][r][2] for r in sorted(whole[2])] == [alone[2][r][2] for r in sorted(alone[2])]
    assert whole[7] == alone[7]


def test_the_network_travels_while_the_kernel_sums(monkeypatch):
    """The overlap, step by step on every rank: forward, the received rows start over the network,
    the kernel sums the machine's own rows, then the rows are awaited and the kernel sums them;
    backward, the kernel sums the received rows' gradients, they start home, the kernel sums the
    own rows' gradients, then they are awaited."""
    from mgg.plan.rank_plan import RankPlan

    kernel, local = RankPlan.aggregate_peers, threading.local()

    def logged(self, *args):
        local.events.append("kernel")
        return kernel(self, *args)

    monkeypatch.setattr(RankPlan, "aggregate_peers", logged)
    graph = random_graph(160, 1600, seed=5, skew=0.5)
    x = torch.randn(160, 4, dtype=torch.float64)

    def rank_main(dp, rows):
        local.events = []
        mine = x[rows].clone().requires_grad_()
        y = dp.aggregate(mine, CONFIG)
        local.events.append("backward")
        y.sum().backward()
        return local.events

    _, _, res, _ = _run(monkeypatch, graph, 2, 2, rank_main, local=local)
    for events in res.values():
        assert events == ["start", "kernel", "wait", "kernel", "backward", "kernel", "start", "kernel", "wait"]


def test_deterministic_mode_is_bit_identical(monkeypatch):
    first = _aggregate_case(monkeypatch, 2, 2, torch.float64, deterministic=True)
    again = _aggregate_case(monkeypatch, 2, 2, torch.float64, deterministic=True)
    assert torch.equal(first[5], again[5]) and torch.equal(first[6], again[6])


@pytest.mark.skipif(emulator.available() is not None, reason=str(emulator.available()))
@pytest.mark.parametrize("fetch,remote_reads", [("direct", "per-edge"), ("get-warp", "per-edge"), ("get-warp", "once")])
def test_fused_kernel_emulated(monkeypatch, fetch, remote_reads):
    """The same with each PE's fused kernel run by the CUDA host code and kernels under the SIMT
    emulator, fp32: peers' tables (their own and their received rows) read by loads or NVSHMEM gets."""
    before = emulator.CALLS["aggregate_peers"]
    with emulator.emulated_ops(seed=4):
        relabelled, _, _, x, grad, y, gx, _ = _aggregate_case(monkeypatch, 2, 2, torch.float32, fetch, remote_reads)
    assert emulator.CALLS["aggregate_peers"] > before  # the fused kernels ran emulated
    assert_matches_reference(y, relabelled, x)
    assert_matches_reference(gx, relabelled.transpose(), grad)


def test_attention_with_dropout_equals_one_process(monkeypatch):
    """GAT's attention with dropout: the masks are drawn from the graph's ids, not the machine
    tables', so every rank's rows and the gradients of h, a_src and a_dst are one process's."""
    heads, c, n = 2, 5, 150
    graph = functional.attention_graph(random_graph(n, 1500, seed=4, skew=0.5))
    gen = torch.Generator().manual_seed(0)
    shapes = ((n, heads, c), (n, heads), (n, heads))
    h, a_src, a_dst = (torch.randn(*s, dtype=torch.float64, generator=gen) for s in shapes)
    w = torch.randn(n, heads, c, dtype=torch.float64, generator=gen)

    def rank_main(dp, rows):
        mine = [t[rows].clone().requires_grad_() for t in (h, a_src, a_dst)]
        out = dp.attend(*mine, 0.2, 0.5, 11, CONFIG)
        (out * w[rows]).sum().backward()
        return out.detach(), [t.grad for t in mine]

    relabelled, _, res, _ = _run(monkeypatch, graph, 2, 2, rank_main)
    _, _, alone, _ = _run(monkeypatch, graph, 2, 2, rank_main, rows_only=True)
    for r in range(4):  # a rank of its own rows alone: the same, bit for bit
        assert torch.equal(alone[r][0], res[r][0]) and all(
            torch.equal(a, b) for a, b in zip(alone[r][1], res[r][1], strict=True)
        )
    ref = [t.clone().requires_grad_() for t in (h, a_src, a_dst)]
    out = mgg.Plan(relabelled).attend(*ref, 0.2, 0.5, 11)
    (out * w).sum().backward()
    torch.testing.assert_close(torch.cat([res[r][0] for r in range(4)]), out.detach())
    for k, t in enumerate(ref):
        torch.testing.assert_close(torch.cat([res[r][1][k] for r in range(4)]), t.grad)


def test_max_runs_on_the_node_halo_exchange(monkeypatch):
    """max and min (the fused kernel sums only) run over node-halo's two all-to-alls: one process's."""
    graph = random_graph(200, 2000, seed=9, skew=0.5)
    x = torch.randn(200, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    def rank_main(dp, rows):
        return dp.aggregate_extreme(x[rows], "max", CONFIG)

    relabelled, _, res, _ = _run(monkeypatch, graph, 2, 2, rank_main)
    ref = mgg.Plan(relabelled).aggregate_extreme(x, "max")
    torch.testing.assert_close(torch.cat([res[r] for r in range(4)]), ref)


def test_without_a_gpu_it_is_refused_in_one_line():
    """On this machine (no NVSHMEM, or no GPU) DistGraph refuses the backend before any plan."""
    why = nvshmem.available()
    if why is None:
        pytest.skip("this machine can run NVSHMEM")
    from mgg.distributed.backends.node_nvshmem import NodeNvshmem

    with pytest.raises(MggError) as e:
        NodeNvshmem.start(None, "get-warp", 2)
    assert "\n" not in str(e.value) and "halo" in str(e.value)


def test_training_on_the_cpu_names_the_backend_that_runs_there():
    """`mgg train --backend node-nvshmem` without --device cuda: one line, before any process group."""
    from mgg.training.loop import TrainConfig
    from mgg.training.torchrun import train

    with pytest.raises(MggError) as e:
        train(None, TrainConfig(device="cpu"), backend="node-nvshmem")
    assert str(e.value) == "the node-nvshmem backend runs on GPUs: add --device cuda (or use --backend node-halo)"


@pytest.mark.parametrize("machines,g", [(2, 2), (3, 2)])
def test_machine_graph_halves_split_the_edges(machines, g):
    """Without processes: the 'own' and 'received' halves of each machine graph hold its edges once
    each, in its edge order with their weights, the own half's sources in the tables' own rows and
    the received half's in their received rows."""
    graph = random_graph(300, 3000, seed=7, skew=0.6, weighted=True)
    part = node_partition(graph, machines, g, "range")
    routes = NodeRoutes(mgg.Plan(part.relabel(graph), bounds=part.bounds), g)
    for n in range(machines):
        sizes, _ = routes.machine_table(n)
        start = np.concatenate([[0], np.cumsum(sizes)])
        received = np.zeros(start[-1], bool)
        for i, q in enumerate(range(n * g, (n + 1) * g)):
            received[start[i] + part.bounds[q + 1] - part.bounds[q] : start[i + 1]] = True
        whole = routes.machine_graph(n)
        halves = {h: routes.machine_graph(n, h) for h in ("own", "received")}
        assert halves["received"].num_edges > 0 and halves["own"].num_edges > 0
        assert sum(h.num_edges for h in halves.values()) == whole.num_edges
        for half, h in halves.items():
            assert (received[h.col.numpy()] == (half == "received")).all()
        for v in range(whole.num_nodes):  # row by row: the whole's edges, each in one half, in order
            e = slice(int(whole.rowptr[v]), int(whole.rowptr[v + 1]))
            col, w = whole.col[e].numpy(), whole.weight[e].numpy()
            for half, h in halves.items():
                mine = received[col] == (half == "received")
                f = slice(int(h.rowptr[v]), int(h.rowptr[v + 1]))
                assert np.array_equal(h.col[f].numpy(), col[mine]) and np.array_equal(h.weight[f].numpy(), w[mine])
    with pytest.raises(MggError, match="sources must be"):
        routes.machine_graph(0, "remote")


def test_a_machine_spanning_hosts_is_refused_in_one_line():
    from mgg.distributed.backends.node_nvshmem import check_one_host

    check_one_host(2, {"LOCAL_WORLD_SIZE": "4"})
    check_one_host(2, {})  # no torchrun: the caller's gpus_per_node is believed
    with pytest.raises(MggError, match="would span hosts") as e:
        check_one_host(4, {"LOCAL_WORLD_SIZE": "2"})
    assert "\n" not in str(e.value)

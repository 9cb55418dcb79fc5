"""The nvshmem backend's Python side on the CPU, with stand-ins for what needs a GPU: threads as
PEs over a fake symmetric heap (the layer protocol: ping-pong tables, barriers, reads in place),
and a fake nvshmem.core that checks the start-up and shutdown order against nvshmem4py's rules.
The same code runs on a GPU with nvshmem4py (tests/distributed/test_nvshmem.py)."""

import threading

import numpy as np
import pytest
import torch
import torch.distributed as dist

import mgg
from mgg import Config, MggError, functional, ops
from mgg.distributed import nvshmem
from mgg.testing import assert_matches_reference, random_graph
from simt import emulator
from tests.distributed.test_distributed import PARTITIONS


class _FakeWorld:
    """P PEs as threads of one process: a 'symmetric heap' holds each allocation once per PE."""

    def __init__(self, pes: int):
        self.pes, self.heap, self.lock = pes, [], threading.Lock()
        self.barrier = threading.Barrier(pes, timeout=60)
        self.barriers = [0] * pes


class _FakeHeap:
    """nvshmem.Nvshmem4pyHeap's interface for one PE of a _FakeWorld."""

    def __init__(self, world: _FakeWorld, pe: int):
        self.world, self.pe, self.allocs, self.freed = world, pe, 0, 0

    def my_pe(self):
        return self.pe

    def n_pes(self):
        return self.world.pes

    def tensor(self, shape, dtype):
        k, self.allocs = self.allocs, self.allocs + 1
        with self.world.lock:
            while len(self.world.heap) <= k:
                self.world.heap.append([None] * self.world.pes)
            self.world.heap[k][self.pe] = torch.full(shape, float("nan"), dtype=dtype)
        self.world.barrier.wait()  # symmetric allocation is collective
        return self.world.heap[k][self.pe]

    def peer(self, t, pe):
        (k,) = [k for k, per_pe in enumerate(self.world.heap) if per_pe[self.pe] is t]
        return self.world.heap[k][pe]

    def barrier(self):
        self.world.barriers[self.pe] += 1
        self.world.barrier.wait()

    def free(self, t):
        self.freed += 1


def run_pes(pes: int, pe_main, *barriers: threading.Barrier) -> None:
    """Runs pe_main(pe) on one thread per PE; an error on one aborts the barriers the others may
    wait at, and is raised here."""
    errors = []

    def guarded(pe):
        try:
            pe_main(pe)
        except Exception as e:  # surfaced below
            errors.append(e)
            for b in barriers:
                b.abort()

    threads = [threading.Thread(target=guarded, args=(pe,)) for pe in range(pes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.parametrize("partition", PARTITIONS)
def test_layer_protocol_with_threads_as_pes(monkeypatch, tmp_path, partition):
    """P threads stand in for P PEs. Each layer writes its rows into the next of two tables,
    meets the others at the barrier, then reads peers' rows in place (aggregate_peers, direct
    loads). Four layers of one shape reuse the two tables in turn; every layer's result, put
    back in the user's node order, must equal the global one (for every partition method: the
    plan is of the relabelled graph, as DistGraph builds it); destroy frees both tables."""
    _layer_protocol(monkeypatch, tmp_path, partition, torch.float64)


FETCHES = ["direct", "get-thread", "get-warp", "get-block"]


@pytest.mark.skipif(emulator.available() is not None, reason=str(emulator.available()))
@pytest.mark.parametrize("fetch,p2p", [(f, False) for f in FETCHES] + [("get-warp", True), ("get-block", True)])
def test_layer_protocol_with_threads_as_pes_emulated(monkeypatch, tmp_path, fetch, p2p):
    """The same protocol with each PE's aggregate_peers run by the CUDA host code and kernels
    under the SIMT emulator (simt/emulator.py), fp32, on the metis partition, reading peers' rows
    directly or by NVSHMEM gets (the PEs' tables as symmetric heaps; a get lands at the quiet),
    or, with every PE reachable by loads (p2p, as on one node), by the kernels' own copies."""
    before = emulator.CALLS["aggregate_peers"]
    with emulator.emulated_ops(seed=2, p2p=p2p):
        partition = "metis" if "metis" in PARTITIONS else PARTITIONS[0]
        # p2p at D = 12: rows on the 16-byte grid, so the copies are 16-byte asynchronous ones
        _layer_protocol(monkeypatch, tmp_path, partition, torch.float32, fetch, dim=12 if p2p else 9)
    assert emulator.CALLS["aggregate_peers"] - before == 3 * 4  # every PE's every layer ran emulated


def _layer_protocol(monkeypatch, tmp_path, partition, dtype, fetch="direct", dim=9):
    pes, layers = 3, 4
    g = random_graph(200, 3000, seed=12, weighted=True, skew=0.5)
    part = mgg.partition(g, pes, partition, cache=str(tmp_path))
    plan = part.plan(g)
    perm = torch.from_numpy(part.perm)
    b = plan.bounds
    range_rows = [int(n) for n in np.diff(b)]
    xs = [torch.randn(200, dim, dtype=torch.float64).to(dtype) for _ in range(layers)]
    world, local, results = _FakeWorld(pes), threading.local(), {}
    monkeypatch.setattr(nvshmem.symmetric, "runtime", lambda: local.rt)

    def pe_main(pe):
        local.rt = nvshmem.Runtime(_FakeHeap(world, pe))
        rp = plan.rank_plan(pe, Config(4, 2, 2))
        results[pe] = [nvshmem.aggregate(x[perm][b[pe] : b[pe + 1]], rp, rp, range_rows, fetch, False) for x in xs]
        assert len(local.rt.tables) == 1 and len(next(iter(local.rt.tables.values()))) == 2
        local.rt.destroy()
        assert local.rt.heap.freed == 2

    run_pes(pes, pe_main, world.barrier)
    assert world.barriers == [layers] * pes
    for i, x in enumerate(xs):
        got = part.to_user(torch.cat([results[pe][i] for pe in range(pes)]))
        torch.testing.assert_close(
            got.double(),
            g.to_torch_sparse(torch.float64) @ x.double(),
            **({} if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)),
        )


def test_attention_protocol_with_threads_as_pes(monkeypatch):
    """GAT's attention on the nvshmem backend, 3 threads as PEs: the forward reads peers' source
    rows in place; the backward publishes the source rows and the output rows' terms, meets the
    others once, then computes d a_dst over its in-edges and its source rows' gradients over the
    transposed graph's in-edges, reading the destinations' terms on their owners. Two calls with
    attention dropout 0.5 (two seeds) share the tables; outputs and gradients of h, a_src and
    a_dst must equal one process's mgg.attend with the same seeds (the same masks)."""
    _attention_protocol(monkeypatch, torch.float64)


@pytest.mark.skipif(emulator.available() is not None, reason=str(emulator.available()))
@pytest.mark.parametrize("fetch,p2p", [(f, False) for f in FETCHES] + [("get-warp", True)])
def test_attention_protocol_with_threads_as_pes_emulated(monkeypatch, fetch, p2p):
    """The same protocol with each PE's attend_peers, attend_peers_dst and attend_peers_src run by
    the CUDA host code and kernels under the SIMT emulator (simt/emulator.py), fp32, against the
    float64 reference of the CPU kernels, reading peers' rows directly or by NVSHMEM gets (over
    the proxy, or over loads: p2p)."""
    names = ("attend_peers", "attend_peers_dst", "attend_peers_src")
    before = [emulator.CALLS[n] for n in names]
    with emulator.emulated_ops(seed=3, p2p=p2p):
        _attention_protocol(monkeypatch, torch.float32, fetch)
    assert [emulator.CALLS[n] - b for n, b in zip(names, before, strict=True)] == [3 * 2] * 3  # every PE, both calls


def test_attention_with_halo_rows_read_once_with_threads_as_pes(monkeypatch):
    """remote_reads='once' (issue 34) for GAT: the forward gathers each halo row of the source
    table once, then attends over [own | halo] rows with their global ids (so the dropout masks
    are the per-edge path's); the backward computes the halo rows' gradients where they were
    read and returns them to their owners through outboxes, each row once. Outputs and
    gradients equal one process's, as above."""
    _attention_protocol(monkeypatch, torch.float64, remote_reads="once")


@pytest.mark.skipif(emulator.available() is not None, reason=str(emulator.available()))
@pytest.mark.parametrize("fetch", ["direct", "get-warp"])
def test_attention_with_halo_rows_read_once_emulated(monkeypatch, fetch):
    """The same with the halo gather and return (aggregate_peers), attend and attend_backward run
    by the CUDA host code and kernels under the SIMT emulator, fp32."""
    names = ("aggregate_peers", "attend", "attend_backward", "attend_peers", "attend_peers_dst", "attend_peers_src")
    before = [emulator.CALLS[n] for n in names]
    with emulator.emulated_ops(seed=3):
        _attention_protocol(monkeypatch, torch.float32, fetch, remote_reads="once")
    calls = [emulator.CALLS[n] - b for n, b in zip(names, before, strict=True)]
    # every PE: both forwards gather then attend; the backward of each computes its rows' and its
    # halo rows' gradients, then gathers what its peers computed for its rows
    assert calls == [3 * 2 * 2, 3 * 2, 3 * 2, 0, 0, 0]


def _attention_protocol(monkeypatch, dtype, fetch="direct", remote_reads="per-edge"):
    pes, heads, c = 3, 2, 5
    g = functional.attention_graph(random_graph(150, 1500, seed=4, skew=0.5))  # directed, self-loops added
    plan = mgg.Plan(g, pes)
    plan_t = mgg.Plan(g.transpose(), bounds=plan.bounds)
    b = plan.bounds
    range_rows = [int(n) for n in np.diff(b)]
    gen = torch.Generator().manual_seed(0)
    h, a_src, a_dst = (
        torch.randn(*shape, dtype=torch.float64, generator=gen)
        for shape in ((150, heads, c), (150, heads), (150, heads))
    )
    w = torch.randn(150, heads * c, dtype=torch.float64, generator=gen)
    seeds = (11, 12)
    ref = [t.clone().requires_grad_() for t in (h, a_src, a_dst)]
    with emulator.suspended():  # the float64 reference on the CPU kernels
        ref_out = [functional.attend(*ref, g, dropout=0.5, seed=s).reshape(150, -1) for s in seeds]
        sum((o * w).sum() for o in ref_out).backward()
    h, a_src, a_dst, w = (t.to(dtype) for t in (h, a_src, a_dst, w))
    world, local, results = _FakeWorld(pes), threading.local(), {}
    monkeypatch.setattr(nvshmem.symmetric, "runtime", lambda: local.rt)

    def pe_main(pe):
        local.rt = nvshmem.Runtime(_FakeHeap(world, pe))
        lo, hi = int(b[pe]), int(b[pe + 1])
        mine = [t[lo:hi].clone().requires_grad_() for t in (h, a_src, a_dst)]
        rp, rpt = plan.rank_plan(pe, Config(4, 2, 2)), plan_t.rank_plan(pe, Config(4, 2, 2))
        table = ops.attention_table(mine[0], mine[1])
        back = (plan.halo_return(pe, Config(4, 2, 2)), [plan.halo_nodes(r).size for r in range(pes)])
        outs = [
            nvshmem.attend(table, mine[2], rp, rpt, range_rows, fetch, heads, 0.2, 0.5, s, remote_reads, back)
            for s in seeds
        ]
        sum((o * w[lo:hi]).sum() for o in outs).backward()
        results[pe] = ([o.detach() for o in outs], [t.grad for t in mine])

    run_pes(pes, pe_main, world.barrier)
    assert world.barriers == [2 * len(seeds)] * pes  # one per forward, one per backward
    tol = {} if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)
    for i, o in enumerate(ref_out):
        torch.testing.assert_close(torch.cat([results[pe][0][i] for pe in range(pes)]).double(), o.detach(), **tol)
    for k, t in enumerate(ref):
        torch.testing.assert_close(torch.cat([results[pe][1][k] for pe in range(pes)]).double(), t.grad, **tol)


class _FakeCore:
    """nvshmem.core's API as mgg uses it, for a world of one PE on the CPU, enforcing nvshmem4py's
    order: init before any symmetric allocation or barrier, tables freed before finalize, nothing
    after finalize; and mgg's: the extension attaches after init and detaches before finalize."""

    class InitStatus:
        STATUS_IS_BOOTSTRAPPED, STATUS_IS_INITIALIZED = 1, 2

    class NvshmemStream:
        def __init__(self, stream):
            self.stream = stream

    class _Uid:
        def __init__(self, data):
            self._data = data

    def __init__(self, status_after_init=2, version="3.4.5"):
        self.calls, self.state, self.live = [], "new", set()
        self.status_after_init, self.version = status_after_init, version

    def _call(self, name, *allowed):
        assert self.state in allowed, f"{name} while {self.state}"
        self.calls.append(name)

    def get_version(self):
        self.calls.append("get_version")
        return type("V", (), {"libnvshmem_version": self.version})()

    def get_unique_id(self, empty=False):
        self._call("get_unique_id", "new")
        data = np.zeros(128, np.uint8) if empty else np.arange(128, dtype=np.uint8)
        return self._Uid(data)

    def init(self, device, uid, rank, nranks, initializer_method):
        self._call("init", "new")
        assert initializer_method == "uid" and (rank, nranks) == (0, 1)
        assert np.array_equal(uid._data, np.arange(128, dtype=np.uint8))  # rank 0's id, rebuilt from its bytes
        self.state = "init"

    def init_status(self):
        return self.status_after_init if self.state != "new" else 0

    def my_pe(self):
        return 0

    def n_pes(self):
        return 1

    def tensor(self, shape, dtype):
        self._call("tensor", "attached")
        t = torch.zeros(shape, dtype=dtype)
        self.live.add(t.data_ptr())
        return t

    def get_peer_tensor(self, t, pe):
        raise AssertionError("the own PE's table is used as is, never through get_peer_tensor")

    def barrier_all(self, stream):
        assert isinstance(stream, self.NvshmemStream)
        self._call("barrier_all", "attached")

    def free_tensor(self, t):
        self._call("free_tensor", "attached")
        self.live.remove(t.data_ptr())

    def finalize(self):
        self._call("finalize", "detached")
        assert not self.live, "tables left unfreed at finalize"
        self.state = "finalized"


class _FakeLib:
    def __init__(self, core, version="3.4.5"):
        self.core, self.version = core, version

    def compiled_version(self):
        return self.version

    def attach(self):
        self.core._call("attach", "init")
        self.core.state = "attached"

    def detach(self):
        self.core._call("detach", "attached")
        self.core.state = "detached"


@pytest.fixture
def one_rank_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield None
    dist.destroy_process_group()


def test_start_use_and_shutdown_in_nvshmem4py_order(one_rank_group, monkeypatch):
    core = _FakeCore()
    lib = _FakeLib(core)
    nvshmem.check_versions(core, lib)
    monkeypatch.setattr(nvshmem.symmetric, "_runtime", None)
    monkeypatch.setattr(nvshmem.symmetric.atexit, "register", lambda fn: None)
    nvshmem.start(core, lib, device=object())
    g = random_graph(40, 300, seed=3)
    rp = mgg.Plan(g).rank_plan(0, Config(2, 1, 2))
    x = torch.randn(40, 5, dtype=torch.float64)
    for _ in range(3):  # three layers of one shape: two tables, used in turn
        out = nvshmem.aggregate(x, rp, rp, [40], "direct", False)
        torch.testing.assert_close(out, g.to_torch_sparse(torch.float64) @ x)
    nvshmem.finalize()
    assert core.calls == [
        "get_version",
        "get_unique_id",
        "get_unique_id",
        "init",
        "attach",
        "tensor",
        "tensor",
        "barrier_all",
        "barrier_all",
        "barrier_all",
        "free_tensor",
        "free_tensor",
        "detach",
        "finalize",
    ]
    nvshmem.finalize()  # a second finalize (atexit) does nothing
    assert core.calls[-1] == "finalize" and core.calls.count("finalize") == 1


def test_one_nvshmem_job_per_process(one_rank_group, monkeypatch):
    """A second start over the same ranks is the first's runtime; over other ranks (the nvshmem
    backend's world, then node-nvshmem's machine) a one-line refusal, not PEs misnumbered."""
    rt = nvshmem.Runtime(heap=None, members=(0,))
    monkeypatch.setattr(nvshmem.symmetric, "_runtime", rt)
    nvshmem.init(None)
    assert nvshmem.symmetric._runtime is rt
    monkeypatch.setattr(nvshmem.symmetric, "_runtime", nvshmem.Runtime(heap=None, members=(0, 1)))
    with pytest.raises(MggError, match=r"already runs NVSHMEM over ranks \[0, 1\], not \[0\]") as e:
        nvshmem.init(None)
    assert "\n" not in str(e.value)


def test_start_up_failures_are_one_line(one_rank_group, monkeypatch):
    with pytest.raises(MggError, match="nvshmem4py loaded NVSHMEM 3.5.0 but mgg was built with NVSHMEM 3.4.5") as e:
        nvshmem.check_versions(_FakeCore(version="3.5.0"), _FakeLib(None))
    assert "\n" not in str(e.value)
    monkeypatch.setattr(nvshmem.symmetric, "_runtime", None)
    core = _FakeCore(status_after_init=1)  # NVSHMEM swallowed a setup error: only bootstrapped
    with pytest.raises(MggError, match="only bootstrapped"):
        nvshmem.start(core, _FakeLib(core), device=object())
    assert "attach" not in core.calls


def test_single_node_defaults_keep_what_the_user_set():
    env = {"LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "4", "NVSHMEM_REMOTE_TRANSPORT": "ibrc"}
    d = nvshmem.single_node_defaults(env)
    assert "NVSHMEM_REMOTE_TRANSPORT" not in d and d["NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME"] == "lo"
    assert nvshmem.single_node_defaults({"LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "8"}) == {}


REMOTE_READS = ["per-edge", "once"]


@pytest.mark.parametrize("pes", [1, 2, 3, 4])
@pytest.mark.parametrize("deterministic", [False, True])
def test_remote_rows_read_once_forward_and_backward(monkeypatch, deterministic, pes):
    """The `once` mode (issue 34) on 1 to 4 threads as PEs, float64: each PE gathers its halo rows
    once from their owners' tables, then aggregates; the backward does the same over the
    transposed graph's plan. Outputs and gradients equal A @ x and A^T @ g (the tight oracle), and
    equal the per-edge mode's bit for bit in deterministic mode (the same sums in the same order)."""
    _remote_reads_protocol(monkeypatch, torch.float64, "direct", deterministic, pes=pes)


@pytest.mark.skipif(emulator.available() is not None, reason=str(emulator.available()))
@pytest.mark.parametrize("fetch", FETCHES)
def test_remote_rows_read_once_emulated(monkeypatch, fetch):
    """The same with each PE's aggregate_peers (the halo gather) and aggregate (its local edges,
    then its remote edges from the halo table: the overlapped path) run by the CUDA host code
    and kernels under the SIMT emulator, fp32, reading peers' rows directly or by NVSHMEM gets."""
    before = (emulator.CALLS["aggregate_peers"], emulator.CALLS["aggregate"])
    with emulator.emulated_ops(seed=5):
        _remote_reads_protocol(monkeypatch, torch.float32, fetch, False, modes=["once"])
    calls = (emulator.CALLS["aggregate_peers"] - before[0], emulator.CALLS["aggregate"] - before[1])
    # every PE, forward and backward: the gather, then its local and its remote edges (overlapped)
    assert calls == (3 * 2, 3 * 2 * 2)


def _remote_reads_protocol(monkeypatch, dtype, fetch, deterministic, modes=REMOTE_READS, pes=3):
    g = random_graph(240, 4000, seed=21, weighted=True, skew=0.6)  # directed: the transpose differs
    plan = mgg.Plan(g, pes)
    plan_t = mgg.Plan(g.transpose(), bounds=plan.bounds)
    b = plan.bounds
    range_rows = [int(n) for n in np.diff(b)]
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(240, 10, dtype=torch.float64, generator=gen)
    grad = torch.randn(240, 10, dtype=torch.float64, generator=gen)
    results = {}
    for mode in modes:
        world, local, out = _FakeWorld(pes), threading.local(), {}
        monkeypatch.setattr(nvshmem.symmetric, "runtime", lambda local=local: local.rt)

        def pe_main(pe, mode=mode, world=world, local=local, out=out):
            local.rt = nvshmem.Runtime(_FakeHeap(world, pe))
            lo, hi = int(b[pe]), int(b[pe + 1])
            mine = x[lo:hi].to(dtype).requires_grad_()
            rp, rpt = plan.rank_plan(pe, Config(4, 2, 2)), plan_t.rank_plan(pe, Config(4, 2, 2))
            y = nvshmem.aggregate(mine, rp, rpt, range_rows, fetch, deterministic, mode)
            y.backward(grad[lo:hi].to(dtype))
            out[pe] = (y.detach(), mine.grad)

        run_pes(pes, pe_main, world.barrier)
        assert world.barriers == [2] * pes  # one publish per forward and per backward
        results[mode] = [torch.cat([out[pe][i] for pe in range(pes)]) for i in (0, 1)]
        assert_matches_reference(results[mode][0], g, x.to(dtype))
        assert_matches_reference(results[mode][1], g.transpose(), grad.to(dtype))
    if deterministic and len(modes) == 2:
        for i in (0, 1):
            assert torch.equal(results["per-edge"][i], results["once"][i])


def test_remote_reads_mode_is_checked_in_one_line():
    with pytest.raises(MggError, match="remote_reads must be one of") as e:
        nvshmem.aggregate(torch.zeros(2, 2), None, None, [2], "direct", False, "twice")
    assert "\n" not in str(e.value)


class _OtherNodeHeap:
    """One PE of two whose peer is on another node: nvshmem_ptr gives None for it."""

    def __init__(self):
        self.tables = []

    def my_pe(self):
        return 0

    def tensor(self, shape, dtype):
        self.tables.append(torch.zeros(shape, dtype=dtype))
        return self.tables[-1]

    def peer(self, t, pe):
        return t if pe == 0 else None

    def barrier(self):
        raise AssertionError("the refusal comes before the barrier")


@pytest.mark.parametrize("fetch", ["direct", "get-thread", "get-warp", "get-block"])
def test_fetches_across_nodes_are_refused_in_one_line(fetch):
    """A peer not reachable by loads (another node): every fetch is refused before anything is
    written or any PE waits, in one line naming the way across nodes (the gets land rows in
    shared memory, which a network transport cannot write)."""
    heap = _OtherNodeHeap()

    class Runtime:
        def next_table(self, dim, dtype, range_rows):
            return nvshmem.symmetric.Table(heap, max(range_rows), dim, dtype, range_rows)

    rows = torch.ones(3, 4)
    with pytest.raises(MggError, match=f"fetch '{fetch}' needs every PE reachable by loads") as e:
        nvshmem.symmetric.publish(Runtime(), rows, [3, 2], fetch)
    assert "\n" not in str(e.value) and "across nodes use node-halo, halo or allgather" in str(e.value)
    assert not bool(heap.tables[0].any())  # nothing written into the symmetric table

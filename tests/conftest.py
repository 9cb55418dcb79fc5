"""Fixtures of mgg's tests, and which cases `make test` runs; helpers (generated graphs, references,
devices) are in mgg.testing."""

import os
from collections import defaultdict

import pytest

from mgg.data import bundled_planetoid_dir


def pytest_configure(config):
    """Each test process takes its share of the cores for torch's and mgg's CPU threads (OpenMP),
    and so do the processes it starts (OMP_NUM_THREADS is inherited), unless the caller set it:
    OpenMP threads spin while they wait, and two xdist workers of two threads each, beside make
    test-rest's two, on a 2-core machine took CI from 26 to 45 minutes. Tests of thread counts
    set their own."""
    worker = getattr(config, "workerinput", None)
    if worker is None and config.getoption("numprocesses", None):
        return  # xdist's controller runs no test, and its workers would inherit its share
    workers = worker["workercount"] if worker else 1
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def _generate_pyg_propagate_fused():
    """PyG generates a conv class's propagate() once, from the class's first instance, and leaves
    the fused (message_and_aggregate) branch out when that instance cannot fuse (SAGEConv with
    aggr='std', a list of aggregations, an Aggregation module). A later fusable instance given a
    sparse adjacency then raises "'message_and_aggregate' not implemented", so whether PyG's
    reference layer works would depend on the order the tests run in (make test-isa shuffles
    it). Instantiating each reference class in a fusable configuration first, before any test,
    generates the template with the branch; an instance that cannot fuse skips it at run time."""
    try:
        import torch
        from torch_geometric import nn as pyg_nn
    except ImportError:  # PyG is optional; the tests that compare with it skip
        return
    pyg_nn.SAGEConv(1, 1)
    pyg_nn.GCNConv(1, 1)
    pyg_nn.GINConv(torch.nn.Identity())
    pyg_nn.GraphConv(1, 1)


_generate_pyg_propagate_fused()


@pytest.fixture(scope="session")
def cora():
    from mgg.data import load_planetoid

    return load_planetoid(bundled_planetoid_dir(), "cora")


@pytest.fixture
def poisoned_empty():
    """torch.empty (and at::empty in the ops) fills floating-point memory with NaN for the test:
    an output element that an op never writes is NaN."""
    import torch
    import torch.utils.deterministic as det

    was, fill = torch.are_deterministic_algorithms_enabled(), det.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    det.fill_uninitialized_memory = True
    try:
        yield
    finally:
        det.fill_uninitialized_memory = fill
        torch.use_deterministic_algorithms(was)


@pytest.fixture
def device(request):
    """The device of a test parametrised by emulator.with_devices_emulated: "cpu", "cuda", or
    "emu" (CPU tensors with the mgg ops' CUDA path emulated; the test sees "cpu")."""
    if request.param != "emu":
        yield request.param
        return
    from simt import emulator

    with emulator.emulated_ops(seed=1):
        yield "cpu"


# The matrices `make test` samples: of each parametrised test in these files, every SAMPLE-th case
# from the first, and the last, run in `make test`; the cases between are marked `full`, and `make
# test-full` (and CI) runs them too. A long test that is not a matrix is marked `full` where it is
# defined. docs/testing.md lists both.
MATRICES = (
    "tests/kernels/test_emulator_aggregate.py",
    "tests/kernels/test_emulator_attention.py",
    "tests/kernels/test_emulator_extreme.py",
    "tests/kernels/test_emulator_counters.py",
    "tests/distributed/test_distributed.py",
    "tests/distributed/test_bipartite_dist.py",
    "tests/distributed/test_embedding_dist.py",
    "tests/nn/test_compile.py",
)

SAMPLE = 4


def pytest_collection_modifyitems(config, items):
    cases = defaultdict(list)
    for item in items:
        path = item.nodeid.split("::")[0]
        if path in MATRICES and hasattr(item, "callspec"):
            cases[(path, item.originalname)].append(item)
    for group in cases.values():
        for i, item in enumerate(group[:-1]):
            if i % SAMPLE:
                item.add_marker(pytest.mark.full)

"""Fixtures of mgg's tests; helpers (generated graphs, references, devices) are in mgg.testing."""

import pytest

from mgg.data import bundled_planetoid_dir


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
    from tests import emulator

    with emulator.emulated_ops(seed=1):
        yield "cpu"

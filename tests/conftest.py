"""Fixtures of mgg's tests; helpers (generated graphs, references, devices) are in mgg.testing."""

import pytest

from mgg.data import bundled_planetoid_dir


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

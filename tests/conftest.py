"""Fixtures of mgg's tests; helpers (generated graphs, references, devices) are in mgg.testing."""
import pytest

from mgg.datasets import bundled_planetoid_dir


@pytest.fixture(scope="session")
def cora():
    from mgg.io import load_planetoid

    return load_planetoid(bundled_planetoid_dir(), "cora")

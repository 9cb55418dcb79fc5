"""The top level the project's design card fixes, and what each of its folders holds: mgg/ (the
package), mgg/runtime/ (the runtime of MGG §6: the tuner), csrc/, csrc/kernels/, csrc/nvshmem/,
bench/, tests/, setup.py, CMakeLists.txt. Read from the files, not by importing, so that a folder
emptied or renamed fails here whatever the import graph says."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CARD = ("mgg", "mgg/runtime", "csrc", "csrc/kernels", "csrc/nvshmem", "bench", "tests", "setup.py", "CMakeLists.txt")


def _defines(path: Path) -> set[str]:
    """The top-level classes and functions of a Python file."""
    tree = ast.parse(path.read_text(), str(path))
    return {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}


@pytest.mark.parametrize("entry", CARD)
def test_every_entry_of_the_card_exists(entry):
    path = ROOT / entry
    assert path.is_file() if "." in entry else path.is_dir(), f"{entry}: missing"


def test_mgg_runtime_holds_the_runtime():
    """MGG §6's runtime: the search over (ps, dist, wpb), its cost and kernel models, the device's
    limits, the online tuner, its cache and the `mgg tune` command, each where the card puts it."""
    runtime = ROOT / "mgg" / "runtime"
    expected = {
        "search.py": {"MggSearch"},
        "cost.py": {"CostModel"},
        "kernel_model.py": {"predict_range", "calibrate"},
        "limits.py": {"DeviceLimits", "grid"},
        "online.py": {"OnlineTuner"},
        "config_cache.py": {"ConfigCache"},
        "cli.py": {"run_tune"},
        "hardware.py": {"GpuSpec"},
    }
    for name, names in expected.items():
        assert (runtime / name).is_file(), f"mgg/runtime/{name}: missing"
        assert names <= _defines(runtime / name), f"mgg/runtime/{name} lacks {names - _defines(runtime / name)}"
    cli = (ROOT / "mgg" / "cli.py").read_text()
    assert "from .runtime.cli import run_tune" in cli  # `mgg tune` is the runtime's


def test_no_other_home_of_the_runtime_and_no_compatibility_layer():
    """One home: no mgg/tuning/, and no module keeping never-released paths alive."""
    assert not (ROOT / "mgg" / "tuning").exists()
    assert not (ROOT / "mgg" / "_deprecated.py").exists()
    for path in (ROOT / "mgg").rglob("*.py"):
        text = path.read_text()
        alias = re.search(r"warnings\.warn\([^)]*DeprecationWarning", text, re.S)
        assert alias is None, f"{path.relative_to(ROOT)}: a deprecated alias"
        assert not re.search(r"^def __getattr__\(", text, re.M), f"{path.relative_to(ROOT)}: a module __getattr__"


def test_csrc_kernels_holds_the_kernels_and_csrc_nvshmem_the_attach():
    kernels = ROOT / "csrc" / "kernels"
    with_global = [p.name for p in kernels.glob("*.cuh") if "__global__" in p.read_text()]
    assert "aggregate_kernel.cuh" in with_global
    assert {p.name for p in kernels.glob("*.cu")} >= {"table.cu", "peers.cu"}  # the instantiations
    nvshmem = ROOT / "csrc" / "nvshmem"
    assert any("nvshmem" in p.read_text() for p in nvshmem.glob("*.cu")), "csrc/nvshmem: no NVSHMEM device code"
    # the kernels stay apart from the bindings: no torch in csrc/kernels
    for p in kernels.iterdir():
        assert "<torch/" not in p.read_text() and "<ATen/" not in p.read_text(), f"{p.name} includes torch"


def test_setup_builds_the_extension_from_csrc_and_cmake_the_native_tests():
    setup = (ROOT / "setup.py").read_text()
    assert '"mgg._C"' in setup
    for sources in ("csrc/ops/*.cpp", "csrc/kernels/*.cu", "csrc/nvshmem/*.cu"):
        assert f'glob.glob("{sources}")' in setup, f"setup.py does not build {sources}"
    cmake = (ROOT / "CMakeLists.txt").read_text()
    assert "csrc/tests/test_core.cpp" in cmake


def test_bench_and_tests_are_what_the_card_says():
    assert (ROOT / "bench" / "__main__.py").is_file() and (ROOT / "bench" / "suites").is_dir()
    assert (ROOT / "tests" / "runtime").is_dir()  # one test folder per subsystem, the runtime's included
    assert any((ROOT / "tests" / "runtime").glob("test_*.py"))

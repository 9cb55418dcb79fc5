"""The SIMT emulator's own checks (csrc/tests/simt/selftest.cpp): each fires on a kernel with the
bug it exists to catch and stays quiet on the fixed kernel. A check that cannot fail would let
the emulated kernel tests (test_emulator_aggregate.py, test_emulator_attention.py) pass on
broken kernels."""

import subprocess

import pytest

from simt import emulator

pytestmark = pytest.mark.skipif(emulator.available() is not None, reason=str(emulator.available()))

CASES = [
    "half-warp-shuffle",
    "barrier-after-return",
    "divergent-calls",
    "missing-syncwarp",
    "read-before-quiet",
    "get-never-quieted",
    "warp-call-args",
    "shared-opt-in",
    "pe-queries",
    "read-before-wait",
    "copy-never-waited",
    "copy-misaligned",
    "copy-to-global",
    "endless-loop",
    "stalled-lane",
]


def selftest(case: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(emulator.build("simt_selftest")), case], capture_output=True, text=True, env=emulator.ENV, timeout=300
    )


@pytest.mark.parametrize("case", CASES)
def test_check_fires(case):
    r = selftest(case)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"PASS {case}" in r.stdout


def test_shared_memory_past_the_launched_size_is_an_asan_error():
    """A write one element past the launched dynamic shared memory stops the run with
    AddressSanitizer's report naming the kernel's line."""
    r = selftest("shared-oob")
    assert r.returncode != 0
    assert "AddressSanitizer: use-after-poison" in r.stderr
    assert "in selftest::write_past_shared" in r.stderr and "selftest.cpp:" in r.stderr

"""Builds and runs the native C++ tests (CMakeLists.txt) of the plan executor."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed")
def test_native_core(tmp_path):
    subprocess.run(
        ["cmake", "-S", str(ROOT), "-B", str(tmp_path), "-DCMAKE_BUILD_TYPE=Release"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    subprocess.run(["cmake", "--build", str(tmp_path)], check=True, capture_output=True, timeout=1200)
    r = subprocess.run(
        ["ctest", "--test-dir", str(tmp_path), "--output-on-failure"], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stdout + r.stderr

"""Packaging: the default archs, the import-time check of the torch the extension was built for,
and the one-line refusals of the build (setup.py)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def test_default_archs_cover_a100_and_h100():
    """Installs and wheels build sm_80 (A100, MGG's GPU) and sm_90 (H100/H200) unless
    TORCH_CUDA_ARCH_LIST says otherwise (CI compiles one arch for time)."""
    archs = json.loads((ROOT / "csrc" / "build_flags.json").read_text())["cuda_archs_default"]
    listed = {a.replace("+PTX", "") for a in archs.split(";")}
    assert {"8.0", "9.0"} <= listed
    assert f"`{archs}`" in (ROOT / "README.md").read_text()  # the README states the default the build uses


def test_documented_gpu_commands_name_real_stages():
    """Every `bench/gpu_verify.sh STAGE ...` command in the READMEs and the script's own header
    names stages the script has, and the Makefile's phony targets all have rules."""
    import re

    script = (ROOT / "bench" / "gpu_verify.sh").read_text()
    stages = {
        name.strip() for pattern in re.findall(r"^    ([a-z0-9| -]+)\)", script, re.M) for name in pattern.split("|")
    }
    assert {"versions", "build", "cuda", "memcheck", "kernel"} <= stages
    for doc in ("README.md", "bench/README.md", "bench/gpu_verify.sh"):
        for command in re.findall(r"gpu_verify\.sh((?: [a-z][a-z0-9-]*)+)", (ROOT / doc).read_text()):
            assert set(command.split()) <= stages, (doc, command, stages)
    makefile = (ROOT / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*)$", makefile, re.M).group(1).split()
    assert all(re.search(rf"^{re.escape(t)}:", makefile, re.M) for t in phony), phony


def _import_with_build_record(tmp_path, torch_version: str):
    """`import mgg` from a copy of the package whose build record names torch_version."""
    pkg = tmp_path / "mgg"
    shutil.copytree(ROOT / "mgg", pkg, ignore=shutil.ignore_patterns("__pycache__", "planetoid"))
    (pkg / "_build.py").write_text(f"torch = {torch_version!r}\ncuda = None\nnvcc = None\narchs = []\nnvshmem = None\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    return subprocess.run(
        [sys.executable, "-c", "import mgg"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )


def test_an_extension_built_for_another_torch_is_one_clear_line(tmp_path):
    r = _import_with_build_record(tmp_path, "1.0.0+other")
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last == (
        f"ImportError: mgg was built for torch 1.0.0+other but torch {torch.__version__} is installed: "
        "reinstall mgg with `pip install --no-build-isolation .` in this environment"
    )


def test_the_torch_it_was_built_for_imports(tmp_path):
    r = _import_with_build_record(tmp_path, torch.__version__)
    assert r.returncode == 0, r.stderr[-2000:]


def test_build_refuses_a_cuda_major_mismatch_in_one_line(tmp_path, monkeypatch):
    """nvcc of another CUDA major than torch's: one line naming both and the fix."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mgg_setup_helpers", ROOT / "setup.py")
    src = (ROOT / "setup.py").read_text().split("\nsetup(")[0]  # the helpers, without running setup()
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(ROOT / "setup.py")
    exec(compile(src, str(ROOT / "setup.py"), "exec"), module.__dict__)
    fake = tmp_path / "cuda" / "bin"
    fake.mkdir(parents=True)
    (fake / "nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.8, V12.8.93'\n")
    (fake / "nvcc").chmod(0o755)
    try:
        module.check_cuda_versions(str(tmp_path / "cuda"), "13.0")
    except SystemExit as e:
        msg = str(e)
    else:
        raise AssertionError("no error")
    assert "\n" not in msg and "CUDA 12.8" in msg and "CUDA 13.0" in msg and "CUDA_HOME" in msg
    assert module.check_cuda_versions(str(tmp_path / "cuda"), "12.6") == "12.8"  # same major: fine


def test_the_version_is_pyproject_s():
    """mgg.version (what manifests and checkpoints record) agrees with the version pip installs."""
    import re

    from mgg.version import __version__

    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1) == __version__

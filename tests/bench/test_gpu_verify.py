"""bench/gpu_verify.sh's rehearsal: every stage of the GPU script, run with --dry-run on this CPU
machine, names tests that collect, modules that import and harness options that parse, so a move
or a renamed option is found here and not in a GPU call's minutes."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "gpu_verify.sh")


def stages() -> list[str]:
    """The stage names of the script's main loop (the helpers' own `case` labels are not stages)."""
    loop = open(SCRIPT).read().split('for s in "$@"; do')[1]
    return [s.strip() for p in re.findall(r"^    ([a-z0-9| -]+)\)", loop, re.M) for s in p.split("|")]


def rehearse(script, out, *names):
    env = dict(os.environ, PY=sys.executable, MGG_VERIFY_DIR=str(out), OUT=str(out) + "-back")
    cmd = ["bash", str(script), "--dry-run", *names]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.full  # about a minute: a pytest collection or a Python start per stage
def test_every_stage_rehearses_on_the_cpu(tmp_path):
    names = stages()
    assert {"versions", "build", "cuda", "kernel", "memcheck", "nvshmem-a", "train-dist"} <= set(names)
    r = rehearse(SCRIPT, tmp_path / "out", *names)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "REHEARSAL FAILED" not in r.stdout
    for name in ("cuda", "nvshmem-a", "nvshmem-b", "nvshmem-c", "bad-schedule"):  # their tests collect
        block = r.stdout.split(f"== {name} (")[1].split("\n== ")[0]
        assert re.search(r"\b[1-9]\d*(/\d+)? tests? collected", block), block
    assert "its options parse" in r.stdout and "module mgg imports" in r.stdout
    assert os.listdir(tmp_path) == []  # a rehearsal writes nothing


@pytest.mark.full
def test_a_stage_naming_what_is_not_there_fails_the_rehearsal(tmp_path):
    """The same script with one test file moved away and one option misspelt: both are named."""
    text = open(SCRIPT).read()
    broken = text.replace(
        "test_attend.py tests/kernels/test_cuda.py", "test_attend.py tests/kernels/test_cuda_moved.py"
    )
    broken = broken.replace("--dims 64 128 256 --dtype bfloat16", "--dimz 64 128 256 --dtype bfloat16")
    assert broken.count("test_cuda_moved") == 1 and broken.count("--dimz") == 1
    script = tmp_path / "gpu_verify.sh"
    script.write_text(broken)
    r = rehearse(script, tmp_path / "out", "cuda", "kernel-bf16")
    assert r.returncode == 1
    assert "== cuda: REHEARSAL FAILED" in r.stdout and "== kernel-bf16: REHEARSAL FAILED" in r.stdout
    assert "unrecognized arguments: --dimz" in r.stdout + r.stderr
    assert os.listdir(tmp_path) == ["gpu_verify.sh"]

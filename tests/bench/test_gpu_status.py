"""bench.gpu_status: the GPU ledger's states from git, on a small repository made here, and the
ledger of this checkout held to what git says (a kernel change fails this until the ledger is
restated)."""

import os
import shutil
import subprocess

import pytest

from bench import gpu_status

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

HEADER = "| item | commit | date | GPU | result | state |\n| --- | --- | --- | --- | --- | --- |\n"


def git(repo, *args):
    cmd = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip()


def commit(repo, path, text):
    f = repo / path
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text)
    git(repo, "add", path)
    git(repo, "commit", "-q", "-m", f"change {path}")
    return git(repo, "rev-parse", "--short", "HEAD")


@pytest.fixture
def repo(tmp_path):
    git(tmp_path, "init", "-q")
    commit(tmp_path, "csrc/kernels/k.cuh", "v1")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    return tmp_path


def ledger(repo, *lines):
    p = repo / "bench" / "results" / "GPU_STATUS.md"
    p.write_text("# ledger\n\n" + HEADER + "".join(f"| {x} | {c} | d | g | r | |\n" for x, c in lines))
    return p


def states(p):
    rows = [line.split("|") for line in p.read_text().splitlines() if line.startswith("| ") and "---" not in line]
    return [r[-2].strip() for r in rows[1:]]


def test_a_run_is_current_until_a_kernel_source_changes(repo):
    ran = git(repo, "rev-parse", "--short", "HEAD")
    p = ledger(repo, ("speed", ran), ("profile", "-"))
    assert gpu_status.main(["--ledger", str(p)]) == 0
    assert states(p) == ["current", "never run"]
    # neither the CPU test harness nor a file outside the kernels makes a GPU result stale
    commit(repo, "csrc/tests/simt/simt.h", "emulator")
    commit(repo, "README.md", "docs")
    assert gpu_status.main(["--ledger", str(p), "--check"]) == 0
    assert states(p) == ["current", "never run"]
    # a kernel or plan change does; the check sees the ledger out of date before it is restated
    (repo / "csrc" / "kernels" / "k.cuh").write_text("v2")  # not yet committed
    assert gpu_status.main(["--ledger", str(p), "--check"]) == 1
    assert states(p) == ["current", "never run"]  # --check writes nothing
    assert gpu_status.main(["--ledger", str(p)]) == 0
    assert states(p) == [gpu_status.STALE, "never run"]
    # committing it, or changing the plan too, leaves the restated ledger as it is
    git(repo, "commit", "-q", "-am", "kernel")
    commit(repo, "mgg/plan/schedule.py", "plan")
    assert gpu_status.main(["--ledger", str(p), "--check"]) == 0
    # the kernels as they were at the run: current again
    git(repo, "rm", "-q", "mgg/plan/schedule.py")
    commit(repo, "csrc/kernels/k.cuh", "v1")
    assert gpu_status.main(["--ledger", str(p), "--check"]) == 1
    gpu_status.main(["--ledger", str(p)])
    assert states(p) == ["current", "never run"]
    # the plan that builds the kernels' schedules counts as a kernel source
    commit(repo, "mgg/plan/schedule.py", "plan 2")
    gpu_status.main(["--ledger", str(p)])
    assert states(p) == [gpu_status.STALE, "never run"]


def test_a_commit_not_in_the_clone_is_unknown_and_a_malformed_ledger_is_refused(repo):
    p = ledger(repo, ("speed", "0123abc"))
    gpu_status.main(["--ledger", str(p)])
    assert states(p) == ["unknown: 0123abc is not in this clone"]
    p.write_text("| item | commit | state |\n| --- | --- | --- |\n| a | - | |\n")
    before = p.read_text()
    with pytest.raises(ValueError, match=r"lacks the columns \['date', 'GPU', 'result'\]"):
        gpu_status.main(["--ledger", str(p)])
    assert p.read_text() == before


def test_the_ledger_of_this_checkout_says_what_git_says():
    """Rerun `python -m bench.gpu_status` after a change to the kernel sources (and commit it)."""
    top = os.path.dirname(os.path.dirname(gpu_status.LEDGER))
    if subprocess.run(["git", "-C", top, "rev-parse"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    text = open(gpu_status.LEDGER).read()
    if "unknown:" in gpu_status.restate(text, top):
        pytest.skip("a shallow clone: the ledger's commits are not in it")
    assert gpu_status.restate(text, top) == text, "bench/results/GPU_STATUS.md: run python -m bench.gpu_status"
    assert "| 1a forward fp32 against cuSPARSE" in text and text.count("never run") >= 1

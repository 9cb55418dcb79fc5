"""Every Python block of README.md and docs/*.md runs as written: a page's blocks in order in one
process (as a reader pastes them one after the other), in a fresh folder, on the device
mgg.default_device() picks. A block that needs what a test machine may lack says so in its first
line, `# needs: several processes (torchrun ...)` or `# needs: a GPU`, and is left out of its page's
run (the multi-process examples run under torchrun in tests/distributed and tests/examples)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NEEDS = re.compile(r"#\s*needs:\s*(.+)")


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), re.S)


def runnable(block: str) -> bool:
    m = NEEDS.match(block.lstrip().splitlines()[0])
    if m is None:
        return True
    need = m.group(1).lower()
    return "gpu" in need and "process" not in need and torch.cuda.is_available()


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=lambda p: p.name)
def test_every_python_block_runs(page, tmp_path):
    blocks = [b for b in python_blocks(page) if runnable(b)]
    if not blocks:
        pytest.skip(f"every Python block of {page.name} needs a GPU or several processes")
    script = tmp_path / f"{page.stem}.py"
    script.write_text("\n".join(blocks))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, f"{page.name}: {r.stderr[-3000:]}"


def test_a_block_that_cannot_run_here_says_why():
    """The README's torchrun example is marked, and a marked block is left out, an unmarked one not."""
    readme = python_blocks(ROOT / "README.md")
    assert any(b.startswith("# needs: several processes") for b in readme)
    assert not runnable("# needs: several processes (torchrun --nproc-per-node=2)\nimport mgg\n")
    assert runnable("import mgg\n")

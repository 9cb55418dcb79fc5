"""The README a newcomer reads: short (at most 150 lines), and its quick start runs as written, on
the device mgg.default_device() picks."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_the_readme_stays_short():
    assert len(README.splitlines()) <= 150


def test_the_quick_start_runs_as_written(tmp_path):
    quick = README.split("## Quick start", 1)[1]
    block = re.search(r"```python\n(.*?)```", quick, re.S).group(1)
    assert "mgg.default_device()" in block and ".to(device)" in block
    script = tmp_path / "quick_start.py"
    check = "assert out.shape == (ds.x.size(0), ds.num_classes) and out.device.type == device.type"
    script.write_text(f"{block}\n{check}\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]

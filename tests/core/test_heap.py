"""mgg.heap: with the threshold fixed, a freed table of 16 MiB leaves the process's resident memory;
with glibc's own (a control, the same process run without it) it stays in the heap. Each case in a
fresh interpreter, since the setting is the process's."""

import os
import subprocess
import sys

import pytest

PROBE = """
import sys, torch
from mgg.heap import map_large_blocks
def anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
set_it = map_large_blocks() if sys.argv[1] == "set" else None
x = torch.ones(4 << 20); del x  # 16 MiB: glibc maps it, unmaps it, and raises its threshold past it
y = torch.ones(4 << 20); held = anon(); del y
print(set_it, (held - anon()) / 2**20)
"""


def _probe(mode: str) -> tuple:
    env = {k: v for k, v in os.environ.items() if k not in ("MALLOC_MMAP_THRESHOLD_", "MGG_MMAP_THRESHOLD")}
    if mode == "user":
        env["MALLOC_MMAP_THRESHOLD_"] = "131072"
    out = subprocess.run(
        [sys.executable, "-c", PROBE, "unset" if mode == "unset" else "set"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    ).stdout.split()
    return out[0], float(out[1])


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (ValueError, OSError, AttributeError):
        return False


@pytest.mark.skipif(not _glibc(), reason="glibc's malloc only")
def test_a_freed_table_leaves_the_process():
    was_set, freed = _probe("set")
    assert was_set == "True" and freed >= 15
    _, kept = _probe("unset")  # the control: glibc's dynamic threshold keeps it
    assert kept < 1
    user_set, _ = _probe("user")  # the user's own MALLOC_MMAP_THRESHOLD_ wins
    assert user_set == "False"


@pytest.mark.parametrize("value", ["4294967296", "-5", "1MiB"])
def test_a_bad_threshold_is_one_line(value, monkeypatch):
    from mgg.errors import MggError
    from mgg.heap import map_large_blocks

    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)  # the user's own would win before mgg's is read
    monkeypatch.setenv("MGG_MMAP_THRESHOLD", value)
    with pytest.raises(MggError, match="MGG_MMAP_THRESHOLD"):
        map_large_blocks()  # refused before mallopt: this process's setting left as it was

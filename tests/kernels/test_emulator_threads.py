"""Emulated ops (simt/emulator.py's emulated_ops) launched from several Python threads, as the
protocol tests run PEs: each launch must use the launching thread's `__shared__` storage and
nothing of a thread that has exited (its thread_local blocks are freed with it). Run in a child
process under glibc's malloc checks, where a write into a freed block fails the process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from simt import emulator

pytestmark = pytest.mark.skipif(emulator.available() is not None, reason=str(emulator.available()))

MALLOC_DEBUG = Path("/lib/x86_64-linux-gnu/libc_malloc_debug.so.0")

CHILD = """
import threading, torch, mgg
from simt import emulator
from mgg import Config, Plan
from mgg.testing import random_graph
g = random_graph(120, 900, seed=3, weighted=True)
plan, x = Plan(g), torch.randn(120, 8)
want = g.to_torch_sparse(torch.float64) @ x.double()
with emulator.emulated_ops(seed=4):
    for work in [lambda: mgg.aggregate(x, plan, Config(4, 2, 2))] * 3 + [lambda: None] * 3:
        t = threading.Thread(target=work)  # a new thread on a cached stack frees the last one's TLS
        t.start()
        t.join()
    for _ in range(3):  # launches from the main thread after the others exited
        out = mgg.aggregate(x, plan, Config(4, 2, 2))
assert emulator.CALLS["aggregate"] == 6
torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
print("ok")
"""


def test_launches_from_threads_that_exited():
    """Launches from threads that then exit, followed by launches from the main thread: the
    process ends cleanly with the right result (before the fix, the emulator NaN-filled every
    thread's shared array it had ever seen, freed ones included: a segfault here, and
    `munmap_chunk(): invalid pointer` at exit without the malloc checks)."""
    emulator.load_ops()  # built here, not in the child (the build's time is not the child's)
    env = dict(
        os.environ,
        MALLOC_CHECK_="3",
        MALLOC_PERTURB_="165",
        PYTHONPATH=os.pathsep.join([str(emulator.ROOT), os.environ.get("PYTHONPATH", "")]),  # simt.emulator
    )
    if MALLOC_DEBUG.exists():
        env["LD_PRELOAD"] = str(MALLOC_DEBUG)
    r = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=300, cwd=emulator.ROOT
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", f"exit {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-4000:]}"

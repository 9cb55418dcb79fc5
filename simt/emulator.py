"""The SIMT emulator (csrc/tests/simt) from the tests: builds its binaries with the host
compiler under AddressSanitizer and UndefinedBehaviorSanitizer into a cache folder (never
installed), writes cases of the real mgg plans for the runner (csrc/tests/emu), runs them and
reads the outputs back. Needs g++ and the CUDA headers (cuda_fp16.h, cuda_bf16.h,
cuda_runtime_api.h; $CUDA_HOME or /usr/local/cuda), not a GPU.

MGG_EMU_FULL=1 runs the long matrices of tests/kernels/test_emulator_*.py; MGG_EMU_CACHE moves the
build cache (default ~/.cache/mgg/emulator)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
CXX = os.environ.get("CXX", "g++")
FULL = os.environ.get("MGG_EMU_FULL", "") not in ("", "0")
# -fno-extern-tls-init: `__shared__` is thread_local under the emulator (static storage that an
# `extern __shared__` declaration can name), and g++ otherwise calls a TLS init function that a
# kernel in an anonymous namespace (peers.cu) never defines.
FLAGS = [
    "-std=c++20",
    "-O1",
    "-g1",  # line tables for the sanitizers' reports (full -g cost a third more compile time)
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=undefined",
    "-fno-omit-frame-pointer",
    "-fno-extern-tls-init",
    "-Wall",
    "-Wno-unknown-pragmas",
    f"-I{CSRC / 'tests' / 'simt'}",
    f"-I{CSRC / 'tests' / 'simt' / 'include'}",
    f"-I{CUDA_HOME / 'include'}",
]
SIMT = [
    "fiber.cpp",
    "scheduler.cpp",
    "stall.cpp",
    "runtime.cpp",
    "nvshmem.cpp",
    "async_copy.cpp",
    "counters.cpp",
    "symbols.cpp",
]
# target -> its translation units: (source, force-include simt.h)
TARGETS = {
    "simt_selftest": [(CSRC / "tests" / "simt" / f, False) for f in SIMT + ["selftest.cpp"]],
    "simt_runner": [(CSRC / "tests" / "simt" / f, False) for f in SIMT]
    + [
        (CSRC / "tests" / "emu" / f, True)
        for f in (
            "case_io.cpp",
            "sources.cpp",
            "aggregate.cpp",
            "attention.cpp",
            "node_keep.cpp",
            "runner.cpp",
            "peers_kernels.cpp",
        )
    ]
    + [(CSRC / "kernels" / f, True) for f in ("table.cu", "attention.cu", "dropout.cu")],
}
# storage name of the runner -> (torch dtype, numpy dtype of the raw bits)
STORAGE = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
ENV = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
COMPILE_TIME_LIMIT_S = 1200  # one translation unit (or the link) on a busy 2-core machine takes minutes at most


def available() -> Optional[str]:
    """Why the emulator cannot be built here, or None."""
    if shutil.which(CXX) is None:
        return f"no host compiler ({CXX})"
    if not (CUDA_HOME / "include" / "cuda_fp16.h").exists():
        return f"no CUDA headers under {CUDA_HOME}/include"
    return None


def digest_files() -> list:
    """The sources whose content names a build of the binaries (tests/kernels/test_emulator_build.py checks
    that every file the binaries include is one)."""
    files = [CSRC / "ops" / "kernel_step.h"]  # the one op header the runner includes
    for folder in ("core", "kernels", "tests/simt", "tests/emu"):
        files += sorted(p for p in (CSRC / folder).rglob("*") if p.is_file())
    return files


def _digest() -> str:
    h = hashlib.sha256(" ".join([CXX] + FLAGS).encode())
    for p in digest_files():
        h.update(str(p.relative_to(CSRC)).encode() + p.read_bytes())
    return h.hexdigest()[:16]


def build(target: str) -> Path:
    """The binary of `target` (simt_selftest, simt_runner), compiled once per source version."""
    cache = Path(os.environ.get("MGG_EMU_CACHE", Path.home() / ".cache" / "mgg" / "emulator")) / _digest()
    exe = cache / target
    if exe.exists():
        return exe
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:  # one process compiles (pytest -n 2's workers wait for it)
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not exe.exists():
            _compile(target, cache, exe)
    return exe


def _compile(target: str, cache: Path, exe: Path) -> None:
    """Compiles `target`'s translation units (the ones not in `cache` yet) and links `exe`."""

    def compile_unit(unit) -> str:
        src, shim = unit
        obj = cache / (src.parent.name + "_" + src.name + ".o")
        if not obj.exists():
            extra = ["-include", str(CSRC / "tests" / "simt" / "simt.h"), "-x", "c++"] if shim else []
            tmp = obj.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            subprocess.run(
                [CXX, *FLAGS, *extra, "-c", str(src), "-o", str(tmp)],
                check=True,
                cwd=ROOT,
                timeout=COMPILE_TIME_LIMIT_S,
            )
            tmp.rename(obj)
        return str(obj)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:  # one compiler per core
        objects = list(pool.map(compile_unit, TARGETS[target]))
    tmp = exe.with_suffix(f".{os.getpid()}.tmp")
    subprocess.run(
        [CXX, "-fsanitize=address,undefined", *objects, "-o", str(tmp)], check=True, timeout=COMPILE_TIME_LIMIT_S
    )
    tmp.rename(exe)
    _prune(cache.parent, keep=3)


def _prune(root: Path, keep: int) -> None:
    """Removes the builds of all but the `keep` most recent source versions (about 50 MB each)."""
    builds = sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in builds[keep:]:
        shutil.rmtree(old, ignore_errors=True)


# ---- cases ---------------------------------------------------------------------------------


def raw(t: torch.Tensor) -> np.ndarray:
    """A tensor's bytes (fp16/bf16 as their 16-bit patterns)."""
    t = t.detach().contiguous().cpu()
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.view(torch.int16)
    return t.numpy()


def write_case(folder: Path, values: dict, arrays: dict) -> Path:
    """A runner case: scalar values and arrays (tensors; None ones are left out)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"{k} {int(v) if isinstance(v, bool) else v}" for k, v in values.items()]
    for name, t in arrays.items():
        if t is None:
            continue
        a = raw(t)
        a.tofile(folder / f"{name}.bin")
        lines.append(f"array {name} {a.dtype} {a.size}")
    (folder / "case.txt").write_text("\n".join(lines) + "\n")
    return folder


# The runner's time limit: RUNNER_FLOOR_S plus RUNNER_S_PER_MB per megabyte of the cases' arrays (their edges
# and rows, which the emulated work grows with; the tests' runs take at most 1.4 s per MB, 3 s in all). A
# kernel in a loop that calls the emulator stops long before, at its step budget (simt.h's watchdog, which
# names it); this limit catches any other hang.
RUNNER_FLOOR_S = 120
RUNNER_S_PER_MB = 10


def runner_time_limit(folders: list) -> float:
    """Seconds the runner may take for `folders`."""
    size = sum(p.stat().st_size for f in folders for p in Path(f).glob("*.bin"))
    return RUNNER_FLOOR_S + RUNNER_S_PER_MB * size / 2**20


def run_cases(folders: list) -> list:
    """Runs the cases in one runner process; each case's status ("ok" or why not). A runner that
    ends early (a crash) or runs past runner_time_limit (then stopped) leaves the case it was
    running without a status, which says so, and the cases after it not run."""
    exe = build("simt_runner")
    limit = runner_time_limit(folders)
    try:
        r = subprocess.run([str(exe), *map(str, folders)], capture_output=True, text=True, env=ENV, timeout=limit)
        end, out, err = f"runner exit {r.returncode}", r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:  # its output as bytes
        end = f"runner stopped at its time limit of {limit:.0f} s"
        out, err = (b.decode(errors="replace") if b else "" for b in (e.stdout, e.stderr))
    status, running = [], None
    for f in folders:
        s = Path(f) / "status.txt"
        if s.exists():
            status.append(s.read_text().strip())
        elif running is None:
            running = Path(f).name
            status.append(f"no status ({end}) while running this case:\n" + out[-4000:] + err[-8000:])
        else:
            status.append(f"not run ({end} while running {running})")
    return status


def read(folder: Path, name: str, shape, dtype: torch.dtype) -> torch.Tensor:
    """An output array of a case as a tensor of `dtype`."""
    bits = torch.float32 if dtype == torch.float32 else torch.int16
    a = torch.from_numpy(np.fromfile(folder / f"{name}.bin", dtype=str(bits).removeprefix("torch.")))
    return a.view(dtype).reshape(shape)


def launch_of(folder: Path) -> dict:
    """The launch the real launcher planned (kernels::Launch)."""
    a = np.fromfile(folder / "launch.bin", dtype=np.uint8)
    bx, by, threads, tile, landing = np.frombuffer(a[:20].tobytes(), dtype=np.int32)
    return dict(
        blocks_x=int(np.uint32(bx)),
        blocks_y=int(np.uint32(by)),
        threads=int(threads),
        tile=int(tile),
        landing_rows=int(landing),
        smem=int(np.frombuffer(a[24:32].tobytes(), dtype=np.uint64)[0]),
    )


LOAD_FIELDS = ("requests", "sectors", "active_lanes", "lane_slots", "bytes")
SHARED_FIELDS = ("requests", "wavefronts", "active_lanes")
GET_FIELDS = ("calls", "bytes", "sectors")
CHAIN_FIELDS = ("warps", "loads", "most", "without_rows")


def counters_of(folder: Path) -> dict:
    """A case's memory counters (counters.txt): {"loads": {(site, region): {requests, sectors,
    active_lanes, lane_slots, bytes}}, "shared": {(site, op): {requests, wavefronts,
    active_lanes}}, "gets": {scope: {calls, bytes, sectors}}, "atomics": {(site, space):
    operations}, "chain": {warps, loads, most, without_rows}, "warp_calls": {name: count}}; site is
    file:line of the access (e.g. "kernels/aggregate_kernel.cuh:77"), region the case's array a
    load read (or "shared"), op of a shared-memory site ld, st or atom (kernels/memory.cuh's
    MGG_SHARED_*): its wavefronts per request is the bank-conflict degree, wavefronts - requests
    what Nsight Compute counts as bank conflicts. A get scope (thread, warp, block) counts NVSHMEM
    get calls, the bytes they move and the 32-byte sectors of their sources
    (csrc/tests/simt/nvshmem.cpp). An atomic space (shared: dynamic shared memory, global: any
    other) counts the threads' atomic operations. The chain: per warp, the global-load requests it
    issues before its first source-row access (a load from table, remote_table or peerN, or a
    get): the number of warps with one, the sum and the most of their chains, and the warps that
    load but read no row (csrc/tests/simt/simt.h's ChainCounts)."""
    loads, shared, gets, atomics, chain, calls = {}, {}, {}, {}, {}, {}
    for line in (Path(folder) / "counters.txt").read_text().splitlines():
        kind, *rest = line.split()
        if kind == "load":
            site, region, *numbers = rest
            loads[(site, region)] = dict(zip(LOAD_FIELDS, map(int, numbers), strict=True))
        elif kind == "shared":
            site, op, *numbers = rest
            shared[(site, op)] = dict(zip(SHARED_FIELDS, map(int, numbers), strict=True))
        elif kind == "get":
            scope, *numbers = rest
            gets[scope] = dict(zip(GET_FIELDS, map(int, numbers), strict=True))
        elif kind == "atomic":
            site, space, n = rest
            atomics[(site, space)] = int(n)
        elif kind == "chain":
            chain = dict(zip(CHAIN_FIELDS, map(int, rest), strict=True))
        elif kind == "warp_call":
            calls[rest[0]] = int(rest[1])
    return {"loads": loads, "shared": shared, "gets": gets, "atomics": atomics, "chain": chain, "warp_calls": calls}


# ---- the mgg ops on CPU tensors through the emulated kernels ---------------------------------

OPS_SOURCES = (
    [CSRC / "tests" / "simt" / f for f in SIMT]
    + [
        CSRC / "tests" / "emu" / f
        for f in (
            "torch_ops.cpp",
            "torch_attention.cpp",
            "torch_kernels_table.cpp",
            "torch_kernels_peers.cpp",
            "torch_kernels_attention.cpp",
        )
    ]
    + [CSRC / "ops" / f for f in ("checks.cpp", "plan_check.cpp", "attention_terms.cpp")]
)
EMULATED_OPS = (
    "aggregate",
    "aggregate_peers",
    "aggregate_extreme",
    "attend",
    "attend_backward",
    "attend_peers",
    "attend_peers_dst",
    "attend_peers_src",
)


def load_ops() -> None:
    """Builds (once per source version) and loads the test-only extension of csrc/tests/emu/
    torch_ops.cpp: torch.ops.mgg_emu.<op> for the ops of EMULATED_OPS, the CUDA ops' host code
    and kernels run by the emulator on CPU tensors. Without sanitizers (they would need LD_PRELOAD
    in the Python process); the runner binary keeps ASan/UBSan on the same kernels."""
    if hasattr(torch.ops.mgg_emu, "aggregate"):
        return
    from torch.utils.cpp_extension import load

    root = Path(os.environ.get("MGG_EMU_CACHE", Path.home() / ".cache" / "mgg" / "emulator")) / "torch_ops"
    h = hashlib.sha256(_digest().encode())
    for p in sorted((CSRC / "ops").rglob("*")):
        if p.is_file():
            h.update(p.read_bytes())
    folder = root / h.hexdigest()[:12]
    folder.mkdir(parents=True, exist_ok=True)
    # -Bsymbolic: the emulator's cudaGetDevice, cudaFuncSetAttribute, ... bind inside this
    # library, not to the CUDA runtime torch may have loaded globally.
    load(
        name=f"mgg_emu_{h.hexdigest()[:12]}",
        sources=[str(s) for s in OPS_SOURCES],
        extra_cflags=[
            "-O1",
            "-fno-extern-tls-init",
            "-Wno-unknown-pragmas",
            f"-I{CSRC / 'tests' / 'simt'}",
            f"-I{CSRC / 'tests' / 'simt' / 'include'}",
            f"-I{CUDA_HOME / 'include'}",
        ],
        extra_ldflags=["-Wl,-Bsymbolic"],
        build_directory=str(folder),
        is_python_module=False,
        verbose=False,
    )
    _prune(root, keep=3)


class emulated_ops:  # noqa: N801 (a context manager used as a function)
    """For the duration of a `with` block (or a fixture), the mgg ops of EMULATED_OPS on CPU
    tensors run the CUDA path (host code and kernels) under the emulator, scheduled by `seed`,
    in place of the CPU executor (so, as on CUDA, float64 is refused). The original CPU kernels
    are back when the block ends. p2p: the NVSHMEM-get fetches find every PE reachable by loads,
    as on one node (the aggregation kernels then copy rows themselves); otherwise they go
    through the emulated proxy (a get lands at nvshmem_quiet)."""

    def __init__(self, seed: int = 0, p2p: bool = False):
        self.seed, self.p2p = seed, p2p
        self.lib = None

    def __enter__(self):
        load_ops()
        torch.ops.mgg_emu.set_seed(self.seed)
        torch.ops.mgg_emu.set_p2p(self.p2p)
        self.lib = torch.library.Library("mgg", "IMPL")
        for name in EMULATED_OPS:
            self.lib.impl(name, _emulated(name), "CPU")
        ACTIVE.append(self)
        return self

    def __exit__(self, *exc):
        ACTIVE.remove(self)
        torch.ops.mgg_emu.set_p2p(False)
        self.lib._destroy()
        self.lib = None
        return False


CALLS = {name: 0 for name in EMULATED_OPS}  # emulated calls so far (a test can check its op ran emulated)


def _emulated(name: str):
    emulated = getattr(torch.ops.mgg_emu, name)

    def impl(*args):
        CALLS[name] += 1
        return emulated(*args)

    return impl


ACTIVE = []  # the emulated_ops contexts open now (tests that choose dtypes by device read it)


class suspended:  # noqa: N801 (a context manager used as a function)
    """Inside emulated_ops, the CPU kernels back for a `with` block (a float64 reference, say);
    the emulated ops return when it ends. Nothing to do outside emulated_ops."""

    def __enter__(self):
        self.active = list(ACTIVE)
        for ctx in reversed(self.active):
            ctx.__exit__(None, None, None)
        return self

    def __exit__(self, *exc):
        for ctx in self.active:
            ctx.__enter__()
        return False


def with_devices_emulated(fn):
    """mgg.testing.with_devices plus the device "emu": the test gets "cpu" with the mgg ops of
    EMULATED_OPS emulated (tests/conftest.py's `device` fixture); `emulator.ACTIVE` is then
    non-empty, so a test that picks float64 on the CPU can pick a CUDA storage type instead."""
    import pytest

    from mgg.testing import DEVICES

    params = [pytest.param(d, marks=[pytest.mark.gpu] if d == "cuda" else []) for d in DEVICES]
    params.append(pytest.param("emu", marks=pytest.mark.skipif(available() is not None, reason=str(available()))))
    return pytest.mark.parametrize("device", params, indirect=True)(fn)


def gpu_and_emulated(fn):
    """The test on "cuda" (skipped without a GPU) and "emu" (tests/conftest.py's `device`
    fixture: "cpu" with the mgg ops of EMULATED_OPS emulated)."""
    import pytest

    from mgg.testing import requires_cuda

    params = [
        pytest.param("cuda", marks=[pytest.mark.gpu, requires_cuda]),
        pytest.param("emu", marks=pytest.mark.skipif(available() is not None, reason=str(available()))),
    ]
    return pytest.mark.parametrize("device", params, indirect=True)(fn)
